/*
 * The static check of a candidate kernel (verifier/static_check.c), the
 * first thing that reads a model's code: the source as written, then the
 * kernel's own lines out of preprocessor output and the backstop scan of
 * them. Input: byte 0 the ABI (0 detect, 1 native, 2 torch-ext), then
 * source %% preprocessed text (line markers '# N "file"' pick the lines).
 *
 * Invariants: findings are in line order, on lines the source has; the
 * kernel's own text has exactly the source's line count.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "verifier/static_check.h"
#include "fuzz.h"

#include <cjson/cJSON.h>

#define OWN_DIR "/tmp/kb-build-fuzz"

static size_t count_lines(const char *s, size_t len)
{
	size_t n = 1;

	for (size_t i = 0; i < len; i++)
		n += s[i] == '\n';
	return n;
}

static void check_findings(const struct kb_findings *f, size_t from, size_t lines)
{
	cJSON *json = kb_findings_to_json(f);

	for (size_t i = from; i < f->nr; i++) {
		FUZZ_CHECK(f->v[i].line >= 1 && (size_t)f->v[i].line <= lines);
		FUZZ_CHECK(f->v[i].rule && f->v[i].message);
		if (i > from)
			FUZZ_CHECK(f->v[i - 1].line <= f->v[i].line);
	}
	FUZZ_CHECK(cJSON_IsArray(json) && (size_t)cJSON_GetArraySize(json) == f->nr);
	cJSON_Delete(json);
}

int kb_fuzz_static_check(const uint8_t *data, size_t size)
{
	static const enum kb_kernel_abi abis[] = { KB_ABI_UNKNOWN, KB_ABI_NATIVE, KB_ABI_TORCH_EXT };
	struct kb_findings f = KB_FINDINGS_INIT;
	struct strbuf own = STRBUF_INIT;
	struct kb_fuzz_parts p;
	size_t lines, newlines = 0, before;
	int n;

	kb_fuzz_init();
	if (!size)
		return 0;
	kb_fuzz_split(&p, data + 1, size - 1, 2);
	lines = count_lines(p.v[0], p.len[0]);
	kb_source_abi(p.v[0], p.len[0]);
	n = kb_static_check(p.v[0], p.len[0], abis[data[0] % 3], &f);
	FUZZ_CHECK(n >= 0 && (size_t)n == f.nr);
	check_findings(&f, 0, lines);

	kb_preprocessed_own_text(p.v[1], p.len[1], OWN_DIR, lines, &own);
	for (size_t i = 0; i < own.len; i++)
		newlines += own.buf[i] == '\n';
	FUZZ_CHECK(newlines == lines - 1);
	before = f.nr;
	kb_static_check_expanded(p.v[0], p.len[0], own.buf, own.len, &f);
	check_findings(&f, before, lines);

	kb_findings_release(&f);
	strbuf_release(&own);
	kb_fuzz_parts_release(&p);
	return 0;
}

KB_FUZZ_ENTRY(static_check)
