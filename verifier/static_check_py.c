/*
 * The static reading of a KernelBench ModelNew file (Python): which of its
 * text is C++ (the contents of triple-quoted strings given to load_inline),
 * which is Python code, and the few Python-level rules. Nothing here runs
 * the file: it is candidate code, imported only in the runner.
 */
#include "core/common.h"
#include "core/cscan.h"
#include "core/strbuf.h"
#include "verifier/static_check.h"

/* Is line [s, e) `class ModelNew` followed by '(' or ':' (any indentation)? */
static bool class_line(const char *s, const char *e)
{
	static const char kw[] = "class", name[] = "ModelNew";

	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	if ((size_t)(e - s) < sizeof(kw) || strncmp(s, kw, sizeof(kw) - 1) ||
	    (s[sizeof(kw) - 1] != ' ' && s[sizeof(kw) - 1] != '\t'))
		return false;
	s += sizeof(kw) - 1;
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	if ((size_t)(e - s) < sizeof(name) - 1 || strncmp(s, name, sizeof(name) - 1))
		return false;
	s += sizeof(name) - 1;
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	return s < e && (*s == '(' || *s == ':');
}

/* The 1-based line of `class ModelNew` in code, or 0. */
static int modelnew_line(const char *code, size_t len)
{
	int line = 1;

	for (size_t i = 0; i < len;) {
		const char *e = memchr(code + i, '\n', len - i);
		size_t end = e ? (size_t)(e - code) : len;

		if (class_line(code + i, code + end))
			return line;
		line++;
		i = end + 1;
	}
	return 0;
}

bool kb_py_defines_modelnew(const char *text, size_t len)
{
	struct strbuf cxx = STRBUF_INIT, code = STRBUF_INIT;
	bool yes;

	/* every source's ABI is asked for (search, build): most never name it */
	if (!memmem(text, len, "ModelNew", 8))
		return false;
	kb_py_views(text, len, &cxx, &code);
	yes = modelnew_line(code.buf, code.len) > 0;
	strbuf_release(&cxx);
	strbuf_release(&code);
	return yes;
}

/* Is the word at [p, p + n) of code a whole identifier (dots allowed inside)? */
static bool whole_word(const char *code, size_t len, size_t p, size_t n)
{
	return (p == 0 || (!kb_c_ident_char(code[p - 1]) && code[p - 1] != '.')) &&
		(p + n >= len || !kb_c_ident_char(code[p + n]));
}

static int line_at(const char *s, size_t pos)
{
	int line = 1;

	for (size_t i = 0; i < pos; i++)
		line += s[i] == '\n';
	return line;
}

/* The first whole-word occurrence of word in code at or after from, or SIZE_MAX. */
static size_t find_word(const char *code, size_t len, size_t from, const char *word)
{
	size_t n = strlen(word);
	const char *p = code + from;

	while (from < len && (p = memmem(code + from, len - from, word, n))) {
		size_t at = (size_t)(p - code);

		if (whole_word(code, len, at, n))
			return at;
		from = at + 1;
	}
	return SIZE_MAX;
}

/* Names a ModelNew has no business assigning: the runner's timers and syncs. */
static const char *const patched_names[] = {
	"torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Event.elapsed_time",
	"torch.cuda.Event.record", "torch.cuda.Stream.synchronize", "torch.cuda.current_stream",
	"time.perf_counter", "time.perf_counter_ns", "time.time", "time.monotonic",
	"time.monotonic_ns", "time.process_time", NULL
};

static void check_assignments(const char *code, size_t len, size_t first, struct kb_findings *out)
{
	for (const char *const *w = patched_names; *w; w++) {
		for (size_t at = find_word(code, len, 0, *w); at != SIZE_MAX;
		     at = find_word(code, len, at + 1, *w)) {
			size_t e = at + strlen(*w);

			while (e < len && (code[e] == ' ' || code[e] == '\t'))
				e++;
			if (e < len && code[e] == '=' && (e + 1 >= len || code[e + 1] != '='))
				kb_findings_add(out, first, line_at(code, at), "timer_patching",
						"'%s' is reassigned (the runner's timing reads it)", *w);
		}
	}
	for (size_t at = find_word(code, len, 0, "setattr"); at != SIZE_MAX;
	     at = find_word(code, len, at + 1, "setattr")) {
		size_t e = at + 7;

		while (e < len && (code[e] == ' ' || code[e] == '('))
			e++;
		if (!strncmp(code + e, "torch", 5) || !strncmp(code + e, "time", 4))
			kb_findings_add(out, first, line_at(code, at), "timer_patching",
					"setattr on '%.5s' can patch the runner's timers", code + e);
	}
}

void kb_py_check(const char *text, size_t len, struct kb_findings *out)
{
	struct strbuf cxx = STRBUF_INIT, code = STRBUF_INIT;
	size_t first = out->nr;
	int cls;

	kb_py_views(text, len, &cxx, &code);
	cls = modelnew_line(code.buf, code.len);
	if (!cls)
		kb_findings_add(out, first, 1, "missing_entry",
				"no 'class ModelNew' is defined (a KernelBench candidate defines "
				"class ModelNew(nn.Module) and builds its kernels with load_inline)");
	else if (find_word(code.buf, code.len, 0, "load_inline") == SIZE_MAX &&
		 find_word(code.buf, code.len, 0, "load") == SIZE_MAX &&
		 find_word(code.buf, code.len, 0, "cpp_extension.load") == SIZE_MAX)
		kb_findings_add(out, first, cls, "torch_fallback",
				"ModelNew builds no extension (no load_inline or load from "
				"torch.utils.cpp_extension): a candidate of torch calls only is a "
				"torch fallback");
	check_assignments(code.buf, code.len, first, out);
	strbuf_release(&cxx);
	strbuf_release(&code);
}
