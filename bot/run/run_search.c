#include "core/common.h"
#include "core/json.h"
#include "core/config.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/state.h"
#include "core/util.h"
#include "llm/llm.h"
#include "report/markdown.h"
#include "run/run_priv.h"
#include "search/search.h"
#include "templates/tune.h"
#include "verifier/harness_client.h"

#include <inttypes.h>

/*
 * kb_run with models configured ([llm] models): the built-in templates
 * first, where they apply (kb_tune, a quarter of the time budget), then
 * the LLM search (search/search.h) seeded with their best. The output
 * folder gets what the templates' path writes, kernel.json a "search"
 * object and report.md a search section; out_dir/search.json is rewritten
 * after every generation while the search runs.
 */

/* The templates get this share of a time budget; the search the rest. */
#define TEMPLATE_SHARE 0.25

/* The search's kernel into o->out_dir. 0 or -1 (logged). */
static int write_outputs(const struct kb_verifier *vf, const struct kb_run_opts *o, struct kb_run_result *res)
{
	const struct kb_tune_result *t = &res->tune;
	const struct kb_search_result *r = &res->search;
	const cJSON *verdicts = cJSON_GetObjectItemCaseSensitive(r->summary, "verdicts");
	const cJSON *nc = cJSON_GetObjectItemCaseSensitive(r->summary, "candidates");
	const cJSON *nv = cJSON_GetObjectItemCaseSensitive(verdicts, "verified");
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(r->summary, "wall_s");
	bool template_won = r->best_proposer && !strcmp(r->best_proposer, "template") && t->outcome == KB_TUNE_OK;
	struct run_output ro;
	struct kb_run_tuning *tu = &ro.o.report.tuning;
	struct strbuf found_by = STRBUF_INIT, search_md = STRBUF_INIT;
	int rc;

	run_output_init(&ro, vf, res, o->out_dir);
	ro.o.source = r->best_source.buf;
	ro.o.source_len = r->best_source.len;
	ro.o.report.evidence = r->evidence;
	if (template_won) {
		run_output_tuning(&ro, t);
	} else {
		strbuf_addf(&found_by, "Found by the LLM search: candidate %lld (", (long long)r->best_candidate_id);
		kb_md_escape(&found_by, r->best_proposer ? r->best_proposer : "?");
		if (r->best_model) {
			strbuf_addstr(&found_by, " by ");
			kb_md_code(&found_by, r->best_model, false);
		}
		strbuf_addstr(&found_by, ")");
		ro.o.report.found_by_md = found_by.buf;
		tu->tried = cJSON_IsNumber(nc) ? (size_t)nc->valuedouble : 0;
		tu->verified = cJSON_IsNumber(nv) ? (size_t)nv->valuedouble : 0;
		tu->seconds = cJSON_IsNumber(ws) ? ws->valuedouble : 0;
	}
	kb_search_report_markdown(&search_md, r->summary);
	ro.o.report.extra_md = search_md.buf;
	rc = run_output_write(&ro);
	run_output_release(&ro);
	strbuf_release(&found_by);
	strbuf_release(&search_md);
	return rc;
}

/* The search row refers to the job: it must be in this store. */
static int check_job(struct kb_state *st, const struct kb_config *cfg, int64_t job_id)
{
	struct kb_job job = { 0 };
	int c = kb_state_job_get(st, job_id, &job);

	kb_job_release(&job);
	if (c == KB_ENOTFOUND) {
		fprintf(stderr, "kernelbot run: --job-id %" PRId64 ": no such job in the state dir '%s'\n",
			job_id, cfg->state_dir);
		return -1;
	}
	return c ? -1 : 0;
}

/*
 * The templates first, with their share of the time: their best seeds the
 * search, and kb_tune describes the operator. KB_RUN_VERIFIED when the
 * search can follow (whatever the templates found), else why not (said).
 */
static enum kb_run_outcome run_templates(struct kb_verifier *vf, const struct kb_run_opts *o,
					 struct kb_tune_result *tres, const char *pass)
{
	struct kb_tune_opts topts = {
		.operator_path = o->operator_path, .pass = pass, .backend = o->backend,
		.seeds = o->seeds, .progress = o->progress, .deadline_ms = o->deadline_ms,
	};
	int c;

	if (o->deadline_ms) {
		int64_t left = o->deadline_ms - kb_now_ms();

		topts.deadline_ms = kb_now_ms() + (int64_t)((double)(left > 0 ? left : 0) * TEMPLATE_SHARE);
	}
	c = kb_tune(vf, &topts, tres);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot run: interrupted\n");
		return KB_RUN_INTERRUPTED;
	}
	if (c) {
		fprintf(stderr, "kernelbot run: could not analyse '%s' (see the error above)\n", o->operator_path);
		return KB_RUN_ERROR;
	}
	if (tres->outcome == KB_TUNE_OPERATOR_ERROR || !tres->describe) {
		fprintf(stderr, "kernelbot run: %s\n", tres->why ? tres->why : "the operator could not be described");
		return KB_RUN_ERROR;
	}
	return KB_RUN_VERIFIED;
}

/* The search's options from the run's; strings point into o, res and status. */
static void search_opts(struct kb_search_opts *so, const struct kb_run_opts *o, const struct kb_run_result *res,
			const char *status_path)
{
	so->operator_path = o->operator_path;
	so->pass = res->pass;
	so->backend = o->backend;
	so->describe = res->tune.describe;
	so->seed = o->seed;
	so->fresh = o->fresh;
	so->job_id = o->job_id;
	so->deadline_ms = o->deadline_ms;
	so->final_seeds = o->seeds;
	so->status_path = status_path;
	so->progress = o->progress;
}

enum kb_run_outcome run_search(struct kb_verifier *vf, const struct kb_config *cfg, const struct kb_run_opts *o,
			       struct kb_run_result *res)
{
	struct kb_tune_result *tres = &res->tune;
	struct kb_search_result *sres = &res->search;
	struct kb_search_opts so = { 0 };
	struct kb_search_seed seed = { 0 };
	struct kb_state *st = NULL;
	struct kb_llm_client *llm = NULL;
	struct strbuf label = STRBUF_INIT, status = STRBUF_INIT;
	const char *op = o->operator_path;
	enum kb_run_outcome rc = KB_RUN_ERROR;
	int c;

	/* before the templates' minutes: a bad --job-id must not cost them */
	if (kb_state_open(&st, cfg->state_dir))
		goto out;
	if (o->job_id > 0 && check_job(st, cfg, o->job_id))
		goto out;
	rc = run_templates(vf, o, tres, res->pass);
	if (rc != KB_RUN_VERIFIED)
		goto out;
	rc = KB_RUN_ERROR;
	if (tres->outcome == KB_TUNE_OK) {
		strbuf_addf(&label, "%s template (%s), point %s", tres->family, tres->kind,
			    tres->points[tres->best].name);
		seed.source = tres->best_source.buf;
		seed.label = label.buf;
		seed.fitness = tres->points[tres->best].fitness;
		seed.evidence = tres->evidence;
		so.seeds = &seed;
		so.nr_seeds = 1;
	} else {
		kb_progress_note(o->progress, "templates: %s", tres->why ? tres->why : "none apply");
	}

	if (kb_mkdir_p(o->out_dir, 0755)) {
		error_errno("could not create the output directory '%s'", o->out_dir);
		goto out;
	}
	strbuf_addf(&status, "%s/search.json", o->out_dir);
	c = kb_llm_client_new(&llm, cfg);
	if (c) {
		fprintf(stderr, "kernelbot run: could not set up the models of [llm] (see the error above)\n");
		goto out;
	}
	search_opts(&so, o, res, status.buf);
	c = kb_search_run(vf, st, llm, &so, sres);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot run: interrupted (the search resumes when run again)\n");
		rc = KB_RUN_INTERRUPTED;
		goto out;
	}
	if (c) {
		fprintf(stderr, "kernelbot run: the search of '%s' failed (see the error above); run again to resume it\n", op);
		goto out;
	}
	res->searched = true;
	if (sres->outcome != KB_SEARCH_OK) {
		fprintf(stderr, "kernelbot run: no verified kernel for '%s': %s\n", op, sres->why ? sres->why : "");
		rc = KB_RUN_NONE_VERIFIED;
		goto out;
	}
	if (write_outputs(vf, o, res)) {
		fprintf(stderr, "kernelbot run: could not write the results to '%s'\n", o->out_dir);
		goto out;
	}
	rc = KB_RUN_VERIFIED;
out:
	kb_llm_client_free(llm);
	kb_state_close(st);
	strbuf_release(&label);
	strbuf_release(&status);
	return rc;
}
