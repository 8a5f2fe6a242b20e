#include "core/common.h"
#include "core/json.h"
#include "cli/run_search.h"
#include "cli/run_output.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/state.h"
#include "core/strvec.h"
#include "core/util.h"
#include "llm/llm.h"

#include <inttypes.h>
#include "report/markdown.h"
#include "report/run_report.h"
#include "search/search.h"
#include "templates/tune.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"

#include <math.h>

/* The templates get this share of a time budget; the search the rest. */
#define TEMPLATE_SHARE 0.25

static cJSON *dup_or_null(const cJSON *v)
{
	return v ? cJSON_Duplicate(v, true) : cJSON_CreateNull();
}

/* What the templates did, for kernel.json. */
static cJSON *templates_json(const struct kb_tune_result *t)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "outcome", t->outcome == KB_TUNE_OK ? "verified" :
				t->outcome == KB_TUNE_NO_TEMPLATE ? "no template" : "none verified");
	if (t->why)
		cJSON_AddStringToObject(o, "why", t->why);
	if (t->outcome == KB_TUNE_OK) {
		cJSON_AddStringToObject(o, "family", t->family);
		cJSON_AddStringToObject(o, "kind", t->kind);
		cJSON_AddStringToObject(o, "point_name", t->points[t->best].name);
		cJSON_AddItemToObject(o, "point", dup_or_null(t->best_point));
		cJSON_AddNumberToObject(o, "speedup_eager", round(t->points[t->best].fitness * 1000) / 1000);
	}
	cJSON_AddNumberToObject(o, "points_tried", (double)t->nr_points);
	cJSON_AddNumberToObject(o, "seconds", round(t->seconds * 100) / 100);
	cJSON_AddBoolToObject(o, "cut_short", t->cut_short);
	return o;
}

/*
 * The kernel's figure while the search ran (what the review comments
 * showed), for the pull request to set beside the final re-check's
 * (bot/report/HEADLINE.md); null when the search kept none.
 */
static cJSON *screening_json(const struct kb_tune_result *t, const struct kb_search_result *r)
{
	const cJSON *best = cJSON_GetObjectItemCaseSensitive(r->summary, "best");
	double s = kb_json_num(best, "speedup", NAN);
	cJSON *o;

	if (r->best_proposer && !strcmp(r->best_proposer, "template") && t->outcome == KB_TUNE_OK)
		s = t->points[t->best].fitness;
	if (!isfinite(s) || !(s > 0))
		return cJSON_CreateNull();
	o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "speedup_eager", round(s * 1000) / 1000);
	cJSON_AddStringToObject(o, "measure", "geometric mean over the configs, one seed, in the "
				"search's harness worker");
	return o;
}

static cJSON *kernel_json(const struct kb_tune_result *t, const struct kb_search_result *r,
			  const char *operator_path, const char *operator_name, const char *kernel_file,
			  const char *backend, const char *pass)
{
	cJSON *j = cJSON_CreateObject(), *o;
	const cJSON *kb = cJSON_GetObjectItemCaseSensitive(r->evidence, "kernelbot");
	const cJSON *build = cJSON_GetObjectItemCaseSensitive(kb, "build");

	cJSON_AddStringToObject(j, "kernelbot", KB_VERSION);
	cJSON_AddStringToObject(j, "source", kernel_file);
	cJSON_AddStringToObject(j, "sha256", r->best_sha);
	cJSON_AddStringToObject(j, "backend", backend);
	cJSON_AddStringToObject(j, "pass", pass);
	cJSON_AddStringToObject(j, "device", t->device ? t->device : "");
	cJSON_AddStringToObject(j, "verdict", kb_evidence_verdict(r->evidence));
	cJSON_AddItemToObject(j, "summary", dup_or_null(cJSON_GetObjectItemCaseSensitive(r->evidence, "summary")));
	cJSON_AddStringToObject(j, "proposer", r->best_proposer ? r->best_proposer : "?");
	cJSON_AddItemToObject(j, "screening", screening_json(t, r));
	o = cJSON_AddObjectToObject(j, "operator");
	cJSON_AddStringToObject(o, "path", operator_path);
	cJSON_AddStringToObject(o, "name", operator_name);
	cJSON_AddStringToObject(o, "sha256", t->op_hash);
	cJSON_AddItemToObject(j, "build", cJSON_IsObject(build) ? cJSON_Duplicate(build, true) : cJSON_CreateNull());
	cJSON_AddItemToObject(j, "templates", templates_json(t));
	cJSON_AddItemToObject(j, "search", dup_or_null(r->summary));
	return j;
}

static int write_outputs(const struct kb_verifier *vf, const struct kb_tune_result *t,
			 const struct kb_search_result *r, const char *operator_path, const char *out_dir,
			 const char *backend, const char *pass, int64_t seeds)
{
	const cJSON *verdicts = cJSON_GetObjectItemCaseSensitive(r->summary, "verdicts");
	const cJSON *nc = cJSON_GetObjectItemCaseSensitive(r->summary, "candidates");
	const cJSON *nv = cJSON_GetObjectItemCaseSensitive(verdicts, "verified");
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(r->summary, "wall_s");
	bool template_won = r->best_proposer && !strcmp(r->best_proposer, "template") && t->outcome == KB_TUNE_OK;
	struct cli_run_output ro;
	struct kb_run_tuning *tu = &ro.o.report.tuning;
	struct strbuf found_by = STRBUF_INIT, search_md = STRBUF_INIT;
	int rc;

	cli_run_output_init(&ro, vf, t, operator_path, out_dir, backend, pass, seeds);
	ro.o.source = r->best_source.buf;
	ro.o.source_len = r->best_source.len;
	ro.o.kernel_json = kernel_json(t, r, operator_path, ro.name.buf, ro.kernel_file.buf, backend, pass);
	ro.o.report.evidence = r->evidence;
	if (template_won) {
		cli_run_output_tuning(&ro, t);
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
	ro.o.binding.has_backward = !strcmp(pass, "backward");
	rc = kb_run_write_dir(&ro.o);
	cli_run_output_release(&ro);
	strbuf_release(&found_by);
	strbuf_release(&search_md);
	return rc;
}

static void print_summary(const struct kb_search_result *r)
{
	const cJSON *s = r->summary;
	const cJSON *llm = cJSON_GetObjectItemCaseSensitive(s, "llm");
	const cJSON *vf = cJSON_GetObjectItemCaseSensitive(s, "verifiers");
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(vf, "precision");
	const cJSON *rc = cJSON_GetObjectItemCaseSensitive(vf, "recall");
	const char *grid = kb_json_str(s, "archive_grid");

#define N(o, k) (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, k)) ? \
		 cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble : 0)
	printf("search %lld%s: %.0f candidates, %.0f verified, %.0f generations, %.0f model calls "
	       "(%.0f tokens, $%.4f), %.1f s\n", (long long)r->search_id,
	       r->cached ? " (finished earlier)" : r->resumed ? " (resumed)" : "", N(s, "candidates"),
	       N(s, "verified"), N(s, "generations"), N(llm, "calls"),
	       N(llm, "prompt_tokens") + N(llm, "completion_tokens"), N(llm, "cost_usd"), N(s, "wall_s"));
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vf, "enabled"))) {
		printf("llm verifiers: precision ");
		if (cJSON_IsNumber(p))
			printf("%.2f", p->valuedouble);
		else
			printf("n/a");
		printf(", recall ");
		if (cJSON_IsNumber(rc))
			printf("%.2f", rc->valuedouble);
		else
			printf("n/a");
		printf(" (tp %.0f, fp %.0f, fn %.0f, tn %.0f)\n", N(vf, "tp"), N(vf, "fp"), N(vf, "fn"), N(vf, "tn"));
	}
#undef N
	if (r->cut_short)
		printf("cut short: %s\n", r->cut_short);
	if (grid)
		printf("\n%s%s", grid, grid[0] && grid[strlen(grid) - 1] == '\n' ? "" : "\n");
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
 * search, and kb_tune describes the operator. -1 with a message when the
 * search cannot follow.
 */
static int run_templates(struct kb_verifier *vf, const struct kb_tune_opts *to, struct kb_tune_result *tres)
{
	struct kb_tune_opts topts = *to;
	int c;

	if (to->deadline_ms) {
		int64_t left = to->deadline_ms - kb_now_ms();

		topts.deadline_ms = kb_now_ms() + (int64_t)((double)(left > 0 ? left : 0) * TEMPLATE_SHARE);
	}
	c = kb_tune(vf, &topts, tres);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot run: interrupted\n");
		return -1;
	}
	if (c) {
		fprintf(stderr, "kernelbot run: could not analyse '%s' (see the error above)\n", to->operator_path);
		return -1;
	}
	if (tres->outcome == KB_TUNE_OPERATOR_ERROR || !tres->describe) {
		fprintf(stderr, "kernelbot run: %s\n", tres->why ? tres->why : "the operator could not be described");
		return -1;
	}
	return 0;
}

int cli_run_search(struct kb_verifier *vf, const struct kb_config *cfg, const struct kb_tune_opts *to,
		   const char *out_dir, const struct cli_search_args *args)
{
	struct kb_tune_result tres;
	struct kb_search_result sres;
	struct kb_search_opts so = { 0 };
	struct kb_search_seed seed = { 0 };
	struct kb_state *st = NULL;
	struct kb_llm_client *llm = NULL;
	struct strbuf label = STRBUF_INIT, status = STRBUF_INIT;
	const char *op = to->operator_path, *pass = to->pass ? to->pass : "forward";
	int c, rc = KB_EXIT_USAGE;

	kb_tune_result_init(&tres);
	kb_search_result_init(&sres);
	/* before the templates' minutes: a bad --job-id must not cost them */
	if (kb_state_open(&st, cfg->state_dir))
		goto out;
	if (args && args->job_id > 0 && check_job(st, cfg, args->job_id))
		goto out;
	if (run_templates(vf, to, &tres))
		goto out;
	if (tres.outcome == KB_TUNE_OK) {
		strbuf_addf(&label, "%s template (%s), point %s", tres.family, tres.kind, tres.points[tres.best].name);
		seed.source = tres.best_source.buf;
		seed.label = label.buf;
		seed.fitness = tres.points[tres.best].fitness;
		seed.evidence = tres.evidence;
		so.seeds = &seed;
		so.nr_seeds = 1;
	} else {
		kb_progress_note(to->progress, "templates: %s", tres.why ? tres.why : "none apply");
	}

	if (kb_mkdir_p(out_dir, 0755)) {
		error_errno("could not create the output directory '%s'", out_dir);
		goto out;
	}
	strbuf_addf(&status, "%s/search.json", out_dir);
	c = kb_llm_client_new(&llm, cfg);
	if (c) {
		fprintf(stderr, "kernelbot run: could not set up the models of [llm] (see the error above)\n");
		goto out;
	}
	so.operator_path = op;
	so.pass = pass;
	so.backend = to->backend;
	so.describe = tres.describe;
	so.seed = args ? args->seed : 0;
	so.fresh = args && args->fresh;
	so.job_id = args ? args->job_id : 0;
	so.deadline_ms = to->deadline_ms;
	so.final_seeds = to->seeds;
	so.status_path = status.buf;
	so.progress = to->progress;
	c = kb_search_run(vf, st, llm, &so, &sres);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot run: interrupted (the search resumes when run again)\n");
		goto out;
	}
	if (c) {
		fprintf(stderr, "kernelbot run: the search of '%s' failed (see the error above); run again to resume it\n", op);
		goto out;
	}
	if (sres.outcome != KB_SEARCH_OK) {
		fprintf(stderr, "kernelbot run: no verified kernel for '%s': %s\n", op, sres.why ? sres.why : "");
		print_summary(&sres);
		rc = KB_EXIT_NO;
		goto out;
	}
	if (write_outputs(vf, &tres, &sres, op, out_dir, kb_backend_name(to->backend), pass,
			  to->seeds > 0 ? to->seeds : cfg->seeds)) {
		fprintf(stderr, "kernelbot run: could not write the results to '%s'\n", out_dir);
		goto out;
	}
	printf("verified kernel for '%s': llm search, candidate %lld (%s%s%s)\n", op, (long long)sres.best_candidate_id,
	       sres.best_proposer, sres.best_model ? " by " : "", sres.best_model ? sres.best_model : "");
	kb_evidence_print_summary(sres.evidence, stdout);
	printf("\n");
	kb_evidence_print_table(sres.evidence, stdout);
	cli_print_headline(sres.evidence, cfg->report_noise_band, "", stdout);
	printf("\n");
	print_summary(&sres);
	printf("wrote %s/: kernel%s kernel.json evidence.json report.md binding.py search.json\n", out_dir,
	       to->backend == KB_BACKEND_CUDA ? ".cu" : ".cpp");
	rc = KB_EXIT_OK;
out:
	fflush(stdout);
	kb_llm_client_free(llm);
	kb_state_close(st);
	kb_tune_result_release(&tres);
	kb_search_result_release(&sres);
	strbuf_release(&label);
	strbuf_release(&status);
	return rc;
}
