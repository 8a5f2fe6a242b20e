/*
 * A pull request's model code and what its tests recorded (issue 17):
 * the static finder of nn.Module classes (jobs/pymodules.c) over any
 * text, and the recorder's JSON (jobs/modop_record.c), untrusted output
 * of the repository's tests, made into an operator file
 * (jobs/modop_render.c). Input: byte 0 chooses (even: Python source, odd:
 * a record), the rest is the text.
 *
 * Invariants: every class or function found lies on the source's lines,
 * its body ends at or after its line, and is found again by its name; a
 * record makes at most the sets asked for, every size in [1, 2^31], and
 * an operator file that names no byte the record held outside its
 * literals (no NUL, every line a comment, code or blank).
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "jobs/jobs.h"
#include "jobs/modop.h"
#include "jobs/pymodules.h"
#include "jobs/repo_operators.h"
#include "fuzz.h"

static void scan(const char *text, size_t len)
{
	struct kb_pyops ops = KB_PYOPS_INIT;
	struct strbuf sig = STRBUF_INIT;
	size_t lines = 1;

	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';
	kb_pyops_scan(&ops, text, len);
	for (size_t i = 0; i < ops.nr; i++) {
		const struct kb_pyop *op = &ops.v[i];

		FUZZ_CHECK(op->name && *op->name);
		FUZZ_CHECK(op->line >= 1 && (size_t)op->line <= lines);
		FUZZ_CHECK(op->end_line >= op->line && (size_t)op->end_line <= lines);
		FUZZ_CHECK(op->forward_line >= 0 && (size_t)op->forward_line <= lines);
		FUZZ_CHECK(kb_pyops_find(&ops, op->name) != NULL);
		kb_pyop_signature(&sig, op, false);
		kb_pyop_signature(&sig, op, true);
	}
	kb_pyops_release(&ops);
	strbuf_release(&sig);
}

static void record(const char *text, size_t len, const struct kb_repo_operator *op)
{
	struct kb_modop m = KB_MODOP_INIT;
	struct strbuf why = STRBUF_INIT, out = STRBUF_INIT;
	struct kb_modop_origin o = { .op = op, .head = "" };

	if (!kb_modop_from_record(&m, text, len, 4, op, &why)) {
		FUZZ_CHECK(m.nr_sets >= 1 && m.nr_sets <= 4 && m.nr_forms == m.nr_sets);
		for (size_t f = 0; f < m.nr_forms; f++)
			for (size_t a = 0; a < m.forms[f].inputs.nr; a++)
				for (size_t d = 0; d < m.forms[f].inputs.args[a].rank; d++) {
					int64_t v = m.forms[f].inputs.args[a].dims[d].value;

					FUZZ_CHECK(v >= 1 && v <= KB_OPSEC_MAX_DIM);
				}
		kb_modop_symbolize(&m, NULL);
		kb_modop_render(&out, &m, &o);
		FUZZ_CHECK(strlen(out.buf) == out.len);
		for (size_t i = 0; i < out.len; i++)
			FUZZ_CHECK(out.buf[i] == '\n' || (unsigned char)out.buf[i] >= 0x20);
	}
	kb_modop_release(&m);
	strbuf_release(&why);
	strbuf_release(&out);
}

int kb_fuzz_module_ops(const uint8_t *data, size_t size)
{
	static struct kb_config cfg;
	static struct kb_repo_config rc;
	static bool have_rc;
	char *text;

	kb_fuzz_init();
	if (!have_rc) {
		struct strbuf why = STRBUF_INIT;

		kb_config_init(&cfg);
		kb_repo_config_parse(&rc, "[operator m]\nmodule = pkg/m.py:M\ntests = tests/t.py\n", &cfg, &why);
		strbuf_release(&why);
		have_rc = true;
	}
	if (!size)
		return 0;
	text = kb_fuzz_str(data + 1, size - 1);
	if (data[0] % 2)
		record(text, size - 1, &rc.ops[0]);
	else
		scan(text, strlen(text));
	free(text);
	return 0;
}

KB_FUZZ_ENTRY(module_ops)
