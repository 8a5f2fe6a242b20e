#ifndef KB_FUZZ_H
#define KB_FUZZ_H
/*
 * libFuzzer targets for the parsers that take outside input (README.md
 * here). Each fuzz_<name>.c defines kb_fuzz_<name>(data, size) and ends
 * with KB_FUZZ_ENTRY(<name>), libFuzzer's entry point when `make fuzz`
 * builds it with clang (-DKB_LIBFUZZER). The ordinary gcc build links
 * every target into tests/unit/test_fuzz_regressions.c instead, which
 * replays corpus/<name>/ and regressions/<name>/ in `make test`.
 *
 * A target fails by crashing: a sanitizer report, or FUZZ_CHECK on an
 * invariant the code under test promises (a wait is never negative, a
 * marker lies inside its body, ...), so that a replay without sanitizers
 * still fails on a logic bug.
 */
#include "core/common.h"

/* Every target, for the replay test: X(name) per fuzz_<name>.c. */
#define KB_FUZZ_TARGETS(X) \
	X(config) \
	X(repo_config) \
	X(webhook_signature) \
	X(webhook_event) \
	X(github_rest) \
	X(http_headers) \
	X(llm_reply) \
	X(extract_kernel) \
	X(evidence) \
	X(kernel_json) \
	X(pr_marker) \
	X(slash_command) \
	X(static_check) \
	X(module_ops)

#define KB_FUZZ_DECLARE(name) int kb_fuzz_##name(const uint8_t *data, size_t size);
KB_FUZZ_TARGETS(KB_FUZZ_DECLARE)

#ifdef KB_LIBFUZZER
#define KB_FUZZ_ENTRY(name) \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) \
	{ \
		return kb_fuzz_##name(data, size); \
	}
#else
#define KB_FUZZ_ENTRY(name)
#endif

/* An invariant of the code under test: says which (and the input replayed) and aborts. */
#define FUZZ_CHECK(cond) \
	do { \
		if (!(cond)) \
			kb_fuzz_fail(__FILE__, __LINE__, #cond); \
	} while (0)
_Noreturn void kb_fuzz_fail(const char *file, int line, const char *what);
/* The input being replayed (the replay test sets it), for kb_fuzz_fail's message. */
extern const char *kb_fuzz_current;

/* Once per process: logging off (errors are the expected answer to junk). */
void kb_fuzz_init(void);

/*
 * Multi-part inputs: parts are separated by a line "%%" ("\n%%\n"). Each
 * part is a NUL-terminated copy (ASan sees a read past its end); parts
 * the input does not have are "" (len 0).
 */
#define KB_FUZZ_SEP "\n%%\n"
#define KB_FUZZ_MAX_PARTS 16
struct kb_fuzz_parts {
	char *v[KB_FUZZ_MAX_PARTS];
	size_t len[KB_FUZZ_MAX_PARTS];
	size_t nr;  /* parts present in the input */
};
/* Split data into at most max parts (the last one takes the rest). */
void kb_fuzz_split(struct kb_fuzz_parts *p, const uint8_t *data, size_t size, size_t max);
void kb_fuzz_parts_release(struct kb_fuzz_parts *p);

/* A NUL-terminated copy of data (free it). */
char *kb_fuzz_str(const uint8_t *data, size_t size);
/* A private scratch directory for this process, removed at exit. */
const char *kb_fuzz_dir(void);
/* Write dir/name (dies on failure); the path into path (reset first). */
struct strbuf;
void kb_fuzz_write(struct strbuf *path, const char *dir, const char *name, const char *data,
		   size_t len);
/* /dev/null for printers, opened once. */
FILE *kb_fuzz_null(void);

#endif
