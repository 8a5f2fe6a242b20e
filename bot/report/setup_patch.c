#include "core/common.h"
#include "core/strvec.h"
#include "core/util.h"
#include "report/module_patch.h"
#include "report/module_patch_priv.h"

/*
 * kb_setup_patch (module_patch.h): the kernels join a setup.py's own torch
 * extensions, so that the repository's build compiles them ahead of time.
 * Only the clean case is edited: the extension class imported by name from
 * torch.utils.cpp_extension and ext_modules given as a list literal.
 */

static bool ident_byte(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

size_t kb_pyview_word(const struct kb_pylines *pl, size_t from, const char *word, bool dotted)
{
	const char *c = pl->code.buf, *p = c + from;
	size_t n = strlen(word);

	while (from <= pl->code.len && (p = memmem(p, pl->code.len - (size_t)(p - c), word, n))) {
		bool before = p > c && (ident_byte(p[-1]) || (!dotted && p[-1] == '.'));

		if (!before && !ident_byte(p[n]))
			return (size_t)(p - c);
		p += n;
	}
	return SIZE_MAX;
}

void kb_patch_head(struct patch_insert *ins, const char *code, const char *text, size_t open, size_t close,
		   const char *const *elems, size_t nr)
{
	size_t k, line;

	for (k = open + 1; k < close && strchr(" \t\\", code[k]); k++)
		;
	if (k < close && strchr("\r\n", code[k])) {
		/* one element a line: new lines at the bracket's head, in the next element's indentation */
		for (line = k; text[line] != '\n'; line++)
			;
		ins->at = ++line;
		for (k = line; k < close && strchr(" \t", text[k]); k++)
			;
		for (size_t i = 0; i < nr; i++)
			strbuf_addf(&ins->text, "%.*s%s,%s", (int)(k - line), text + line, elems[i],
				    line >= 2 && text[line - 2] == '\r' ? "\r\n" : "\n");
	} else {
		/* a one-line bracket: the new elements first, on that line */
		ins->at = open + 1;
		for (size_t i = 0; i < nr; i++)
			strbuf_addf(&ins->text, "%s%s", elems[i], i + 1 < nr || k < close ? ", " : "");
	}
}

void kb_patch_apply(struct strbuf *out, const char *text, size_t len, struct patch_insert *ins, size_t nr)
{
	size_t from = 0;

	strbuf_reset(out);
	for (size_t i = 0; i < nr; i++) {
		strbuf_add(out, text + from, ins[i].at - from);
		strbuf_add(out, ins[i].text.buf, ins[i].text.len);
		from = ins[i].at;
	}
	strbuf_add(out, text + from, len - from);
}

/* Is cls imported by name from torch.utils.cpp_extension (a from-import at any level)? */
static bool imports_class(const struct kb_pylines *pl, const char *cls)
{
	for (size_t i = 0; i < pl->nr; i++) {
		const struct kb_pyline *l = &pl->v[i];
		const char *c = pl->code.buf + l->code;
		size_t n = l->body_end - l->code;

		if (kb_pyline_starts(pl, l, "from") && memmem(c, n, "torch.utils.cpp_extension", 25) &&
		    kb_pyview_word(pl, l->code, cls, false) < l->body_end)
			return true;
	}
	return false;
}

/* The '[' of `ext_modules = [` or `ext_modules=[`, or SIZE_MAX. */
static size_t ext_list(const struct kb_pylines *pl)
{
	const char *c = pl->code.buf;
	size_t k = kb_pyview_word(pl, 0, "ext_modules", false);

	if (k == SIZE_MAX)
		return SIZE_MAX;
	k += 11;
	while (k < pl->code.len && strchr(" \t", c[k]))
		k++;
	if (k >= pl->code.len || c[k] != '=' || (k + 1 < pl->code.len && c[k + 1] == '='))
		return SIZE_MAX;
	for (k++; k < pl->code.len && strchr(" \t\r\n\\", c[k]); k++)
		;
	return k < pl->code.len && c[k] == '[' ? k : SIZE_MAX;
}

/* One extension element: CUDAExtension("pkg.sub._kernel", ["dir/sub/kernel.cu"], ...). */
static void element(struct strbuf *out, const struct kb_build_ext *e, const char *cls, const char *kernel)
{
	const char *slash = strrchr(kernel, '/');
	int sub = slash ? (int)(slash - kernel) : 0;
	bool cuda = !strcmp(e->backend, "cuda");

	strbuf_addf(out, "%s(\"%s%s%.*s._kernel\", [\"%s/%s\"], include_dirs=[\"%s/include\"]", cls,
		    e->package, sub ? "." : "", sub, kernel, e->dir, kernel, e->dir);
	if (cuda) {
		strbuf_addstr(out, ", extra_compile_args={\"nvcc\": [\"-O3\"]}");
	} else {
		strbuf_addstr(out, ", extra_compile_args=[\"-O3\", \"-fopenmp\"], extra_link_args=[\"-fopenmp\"]");
	}
	if (e->nr_libraries) {
		strbuf_addstr(out, ", libraries=[");
		for (size_t i = 0; i < e->nr_libraries; i++)
			strbuf_addf(out, "%s\"%s\"", i ? ", " : "", e->libraries[i]);
		strbuf_addch(out, ']');
	}
	strbuf_addch(out, ')');
}

int kb_setup_patch(struct strbuf *out, const char *text, size_t len, const struct kb_build_ext *e,
		   struct strbuf *why)
{
	const char *cls = !strcmp(e->backend, "cuda") ? "CUDAExtension" : "CppExtension";
	struct patch_insert ins = { 0, false, STRBUF_INIT };
	struct strvec elems = STRVEC_INIT;
	struct kb_pylines pl;
	size_t open, close;
	int rc = KB_ENOTSUPPORTED;

	kb_pylines_init(&pl, text, len);
	strbuf_reset(out);
	if (!imports_class(&pl, cls)) {
		strbuf_addf(why, "setup.py does not import %s from torch.utils.cpp_extension", cls);
		goto out;
	}
	open = ext_list(&pl);
	close = open == SIZE_MAX ? SIZE_MAX : kb_pyview_match(&pl, open, pl.code.len);
	if (close == SIZE_MAX) {
		strbuf_addstr(why, "setup.py passes no list literal as ext_modules");
		goto out;
	}
	if (memmem(text + open, close - open, "._kernel", 8) &&
	    memmem(text + open, close - open, e->dir, strlen(e->dir))) {
		strbuf_addf(why, "setup.py builds %s already", e->dir);
		goto out;
	}
	for (size_t i = 0; i < e->nr_kernels; i++) {
		struct strbuf el = STRBUF_INIT;

		element(&el, e, cls, e->kernels[i]);
		strvec_push(&elems, el.buf);
		strbuf_release(&el);
	}
	kb_patch_head(&ins, pl.code.buf, text, open, close, (const char *const *)elems.v, elems.nr);
	kb_patch_apply(out, text, len, &ins, 1);
	rc = 0;
out:
	strbuf_release(&ins.text);
	strvec_clear(&elems);
	kb_pylines_release(&pl);
	return rc;
}
