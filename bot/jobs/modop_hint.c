/*
 * The lines a maintainer pastes into .kernelbot.ini for a module that has
 * no shapes yet (modop.h, kb_modop_hint). The values are placeholders
 * made from the signatures: every required __init__ parameter becomes a
 * size (8 for the ones named like heads, groups or layers, else 1024),
 * every required forward argument a float32 tensor of a batch B by the
 * first of those sizes. The result parses as it is, so a maintainer who
 * only fixes the numbers has a working section.
 */
#include "core/common.h"
#include "core/util.h"
#include "jobs/modop.h"

#include <ctype.h>

#define MAX_COMMENT 150

static bool hyper_name(const char *s)
{
	static const char *const words[] = { "head", "group", "layer", "block", "expert", "top" };

	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (strstr(s, words[i]))
			return true;
	return false;
}

/* A size's name for parameter p: its name in capitals, else N<i>. */
static void size_name(struct strbuf *out, const char *p, size_t i, const struct strvec *taken)
{
	strbuf_reset(out);
	for (const char *c = p; *c; c++)
		strbuf_addch(out, toupper((unsigned char)*c));
	if (!kb_repo_size_name_ok(out->buf, out->len) || !strcmp(out->buf, "B")) {
		strbuf_reset(out);
		strbuf_addf(out, "N%zu", i);
	}
	for (size_t k = 0; k < taken->nr; k++)
		if (!strcmp(taken->v[k], out->buf)) {
			strbuf_addf(out, "_%zu", i);
			break;
		}
}

static void section_name(struct strbuf *out, const char *name, const struct kb_pyop *op)
{
	strbuf_reset(out);
	if (name) {
		strbuf_addstr(out, name);
		return;
	}
	for (const char *c = op->name; *c && out->len < 48; c++)
		strbuf_addch(out, isalnum((unsigned char)*c) ? tolower((unsigned char)*c) : '_');
}

/* "; signature: FusedMLP(dim, hidden=64) and forward(x)", capped to a line inih reads whole. */
static void signature_comment(struct strbuf *out, const struct kb_pyop *op)
{
	struct strbuf sig = STRBUF_INIT, line = STRBUF_INIT;

	strbuf_addstr(&line, "; placeholders from ");
	if (!op->is_function) {
		kb_pyop_signature(&sig, op, true);
		strbuf_addf(&line, "%s%s and forward", op->name, sig.buf);
	} else {
		strbuf_addstr(&line, op->name);
	}
	kb_pyop_signature(&sig, op, false);
	strbuf_addstr(&line, sig.buf);
	for (size_t i = 0; i < line.len; i++)
		if ((unsigned char)line.buf[i] < 0x20)
			line.buf[i] = ' ';
	if (line.len > MAX_COMMENT) {
		strbuf_setlen(&line, MAX_COMMENT - 3);
		strbuf_addstr(&line, "...");
	}
	strbuf_addf(out, "%s\n; edit them to the sizes and dtypes your model runs at\n", line.buf);
	strbuf_release(&sig);
	strbuf_release(&line);
}

void kb_modop_hint(struct strbuf *out, const char *name, const char *path, const struct kb_pyop *op)
{
	struct strbuf sec = STRBUF_INIT, sz = STRBUF_INIT, pname = STRBUF_INIT;
	struct strvec sizes = STRVEC_INIT, values = STRVEC_INIT;
	const char *last = "N";
	bool required;
	int kind;
	size_t n = 0;

	section_name(&sec, name, op);
	strbuf_addf(out, "[operator %s]\n%s = %s:%s\n", sec.buf, op->is_function ? "function" : "module",
		    path, op->name);
	signature_comment(out, op);
	strvec_push(&sizes, "B");
	strvec_push(&values, "8");
	for (size_t i = 0; !op->is_function && i < op->init_params.nr; i++) {
		kb_pyparam_name(&pname, op->init_params.v[i], &required, &kind);
		if (!required || !pname.len)
			continue;
		size_name(&sz, pname.buf, sizes.nr, &sizes);
		strbuf_addf(out, "%s%s=%s", n++ ? ", " : "init = ", pname.buf, sz.buf);
		strvec_push(&sizes, sz.buf);
		strvec_push(&values, hyper_name(pname.buf) ? "8" : "1024");
	}
	if (n)
		strbuf_addch(out, '\n');
	if (sizes.nr > 1)
		last = sizes.v[1];
	else {
		strvec_push(&sizes, "N");
		strvec_push(&values, "1024");
	}
	n = 0;
	for (size_t i = 0; i < op->params.nr; i++) {
		kb_pyparam_name(&pname, op->params.v[i], &required, &kind);
		if (kind == 1 || kind == 2)
			break; /* *args and keyword-only ones: not given by position */
		if (required)
			strbuf_addf(out, "%sfloat32[B,%s]", n++ ? ", " : "inputs = ", last);
	}
	if (!n)
		strbuf_addf(out, "inputs = float32[B,%s]", last);
	strbuf_addstr(out, "\nsizes = ");
	for (size_t i = 0; i < sizes.nr; i++)
		strbuf_addf(out, "%s%s=%s", i ? ", " : "", sizes.v[i], values.v[i]);
	strbuf_addstr(out, "\n; or, instead of inputs and sizes, record them from your tests:\n"
		      "; tests = tests/test_x.py::test_y\n");
	strbuf_release(&sec);
	strbuf_release(&sz);
	strbuf_release(&pname);
	strvec_clear(&sizes);
	strvec_clear(&values);
}
