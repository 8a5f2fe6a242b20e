#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/util.h"
#include "run/run.h"
#include "run/run_priv.h"
#include "templates/tune.h"
#include "verifier/harness_client.h"

const char *kb_run_outcome_name(enum kb_run_outcome o)
{
	switch (o) {
	case KB_RUN_VERIFIED: return "verified";
	case KB_RUN_NONE_VERIFIED: return "none verified";
	case KB_RUN_ERROR: return "error";
	case KB_RUN_INTERRUPTED: return "interrupted";
	}
	return "?";
}

void kb_run_result_init(struct kb_run_result *r)
{
	memset(r, 0, sizeof(*r));
	r->outcome = KB_RUN_ERROR;
	kb_tune_result_init(&r->tune);
	kb_search_result_init(&r->search);
}

void kb_run_result_release(struct kb_run_result *r)
{
	free(r->operator_path);
	free(r->pass);
	kb_tune_result_release(&r->tune);
	kb_search_result_release(&r->search);
	kb_run_result_init(r);
}

/* The templates' best point into o->out_dir. 0 or -1 (logged). */
static int write_outputs(const struct kb_verifier *vf, const struct kb_run_opts *o, struct kb_run_result *res)
{
	struct run_output ro;
	int rc;

	run_output_init(&ro, vf, res, o->out_dir);
	ro.o.source = res->tune.best_source.buf;
	ro.o.source_len = res->tune.best_source.len;
	ro.o.report.evidence = res->tune.evidence;
	run_output_tuning(&ro, &res->tune);
	rc = run_output_write(&ro);
	run_output_release(&ro);
	return rc;
}

/* Without models: the templates alone; the best point's outputs into o->out_dir. */
static enum kb_run_outcome run_templates(struct kb_verifier *vf, const struct kb_run_opts *o,
					 struct kb_run_result *res)
{
	struct kb_tune_opts to = {
		.operator_path = o->operator_path, .pass = res->pass, .backend = o->backend,
		.seeds = o->seeds, .progress = o->progress, .deadline_ms = o->deadline_ms,
	};
	const char *op = o->operator_path;
	int c;

	c = kb_tune(vf, &to, &res->tune);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot run: interrupted\n");
		return KB_RUN_INTERRUPTED;
	}
	if (c) {
		fprintf(stderr, "kernelbot run: could not tune '%s' (see the error above)\n", op);
		return KB_RUN_ERROR;
	}
	switch (res->tune.outcome) {
	case KB_TUNE_NO_TEMPLATE:
		fprintf(stderr, "kernelbot run: no built-in template for this operator: %s\n", res->tune.why);
		return KB_RUN_NONE_VERIFIED;
	case KB_TUNE_NONE_VERIFIED:
		fprintf(stderr, "kernelbot run: no point of the %s template verified: %s\n", res->tune.kind,
			res->tune.why);
		return KB_RUN_NONE_VERIFIED;
	case KB_TUNE_OPERATOR_ERROR:
		fprintf(stderr, "kernelbot run: %s\n", res->tune.why);
		return KB_RUN_ERROR;
	case KB_TUNE_OK:
		break;
	}
	if (write_outputs(vf, o, res)) {
		fprintf(stderr, "kernelbot run: could not write the results to '%s'\n", o->out_dir);
		return KB_RUN_ERROR;
	}
	return KB_RUN_VERIFIED;
}

enum kb_run_outcome kb_run(struct kb_verifier *vf, const struct kb_config *cfg, const struct kb_run_opts *o,
			   struct kb_run_result *res)
{
	res->operator_path = xstrdup(o->operator_path);
	res->backend = o->backend;
	res->pass = xstrdup(o->pass ? o->pass : "forward");
	res->seeds = o->seeds > 0 ? o->seeds : cfg->seeds;
	/* with models configured: templates first, then the LLM search (run_search.c) */
	if (cfg->nr_llm_models > 0)
		res->outcome = run_search(vf, cfg, o, res);
	else
		res->outcome = run_templates(vf, o, res);
	return res->outcome;
}
