/*
 * A repository's .kernelbot.ini (jobs/repo_config.c): untrusted, so
 * whatever it holds, what comes out is bounded by the daemon's config and
 * every operator path stays inside the repository.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "jobs/jobs.h"
#include "jobs/modop.h"
#include "jobs/repo_operators.h"
#include "fuzz.h"

/* No "." or ".." segment, not absolute, not empty: checked on "/path/" as a whole. */
static bool inside_repo(const char *p)
{
	struct strbuf sb = STRBUF_INIT;
	bool ok;

	strbuf_addf(&sb, "/%s/", p);
	ok = *p && *p != '/' && !strstr(sb.buf, "/../") && !strstr(sb.buf, "/./");
	strbuf_release(&sb);
	return ok;
}

/* An [operator NAME] section that is run: inside the repository, within its caps, and made into a file. */
static void check_operator(const struct kb_repo_operator *op)
{
	struct kb_modop m = KB_MODOP_INIT;
	struct kb_modop_origin o = { .op = op, .head = "" };
	struct strbuf out = STRBUF_INIT;

	if (op->bad)
		return;
	FUZZ_CHECK(op->path && op->target && inside_repo(op->path));
	FUZZ_CHECK(op->nr_forms <= KB_OPSEC_MAX_FORMS && op->nr_sizes <= KB_OPSEC_MAX_SIZES);
	FUZZ_CHECK(op->needs_inputs == (!op->nr_forms && !op->tests.nr));
	for (size_t f = 0; f < op->nr_forms; f++) {
		FUZZ_CHECK(op->forms[f].nr <= KB_OPSEC_MAX_ARGS);
		for (size_t a = 0; a < op->forms[f].nr; a++)
			for (size_t d = 0; d < op->forms[f].args[a].rank; d++) {
				const struct kb_op_dim *dim = &op->forms[f].args[a].dims[d];

				FUZZ_CHECK(dim->sym[0] || (dim->value >= 1 && dim->value <= KB_OPSEC_MAX_DIM));
			}
	}
	if (!kb_modop_from_section(&m, op)) {
		FUZZ_CHECK(m.nr_sets >= 1 && m.nr_sets <= KB_OPSEC_MAX_SETS);
		kb_modop_symbolize(&m, NULL);
		kb_modop_render(&out, &m, &o);
		FUZZ_CHECK(strlen(out.buf) == out.len);
	}
	kb_modop_release(&m);
	strbuf_release(&out);
}

int kb_fuzz_repo_config(const uint8_t *data, size_t size)
{
	static struct kb_config cfg;
	static bool have_cfg;
	char *text = kb_fuzz_str(data, size);
	struct kb_repo_config rc;
	struct strbuf why = STRBUF_INIT;

	kb_fuzz_init();
	if (!have_cfg) {
		kb_config_init(&cfg);
		have_cfg = true;
	}
	if (!kb_repo_config_parse(&rc, text, &cfg, &why)) {
		FUZZ_CHECK(rc.budget_s >= 0 && rc.budget_s <= cfg.bot_max_time_budget_s);
		FUZZ_CHECK(rc.max_configs >= 0 && rc.max_configs <= cfg.max_configs);
		FUZZ_CHECK(rc.atol >= 0 && rc.atol <= cfg.atol_fp32);
		FUZZ_CHECK(rc.rtol >= 0 && rc.rtol <= cfg.rtol_fp32);
		FUZZ_CHECK(!rc.nr_paths || (rc.paths && !rc.paths[rc.nr_paths]));
		for (size_t i = 0; i < rc.nr_paths; i++) {
			FUZZ_CHECK(inside_repo(rc.paths[i]));
			for (const char *q = rc.paths[i]; *q; q++)
				FUZZ_CHECK((unsigned char)*q >= 0x20 && *q != 0x7f && *q != '\\');
		}
		for (size_t i = 0; i < rc.nr_ops; i++)
			check_operator(&rc.ops[i]);
		kb_repo_config_release(&rc);
	}
	strbuf_release(&why);
	free(text);
	return 0;
}

KB_FUZZ_ENTRY(repo_config)
