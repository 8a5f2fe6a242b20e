#include "core/common.h"
#include "cli/cli.h"
#include "cli/run_output.h"
#include "cli/run_search.h"
#include "cli/runs_db.h"
#include "core/config.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/signals.h"
#include "core/state.h"
#include "jobs/progress_file.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "report/run_report.h"
#include "templates/tune.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"

#include <getopt.h>
#include <math.h>

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot run OPERATOR [options]\n"
		"\n"
		"Turn a PyTorch operator into a verified, tuned kernel with the built-in\n"
		"templates (no LLM): analyse the operator in the harness, generate the\n"
		"template of its family (pointwise chains, row-wise reductions, matrix\n"
		"products with an epilogue), search its parameters (every point verified\n"
		"before it is timed, in one harness worker), then verify the best point again\n"
		"with every seed in a fresh process. Measurements are cached per machine and\n"
		"operator: a second run of the same operator is instant.\n"
		"\n"
		"  OPERATOR               a KernelBench .py file or a robust-kbench folder\n"
		"  -c, --config FILE      configuration (default ./config.ini, ...); [templates]\n"
		"                         max_points, exhaustive_limit, refine_rounds shape the search\n"
		"      --backend cuda|cpu default [harness] backend (auto: cuda when torch sees a gpu)\n"
		"      --out DIR          where the results go (default ./kernelbot-out/<operator name>)\n"
		"      --seeds N          trials per config of the final check (default [harness] seeds)\n"
		"      --pass forward|backward\n"
		"                         backward: the kernel gets kb_backward, which is tuned and\n"
		"                         timed (against eager autograd); its forward is verified too\n"
		"      --progress-file F  keep the progress in F too, as JSON (the daemon reads it)\n"
		"      --fresh            with [llm] models: start a new search even when one of this\n"
		"                         operator, seed and settings exists (the same seed replays\n"
		"                         its recorded model answers)\n"
		"      --seed N           with [llm] models: the search's seed (default [search] seed)\n"
		"      --job-id N         the daemon's job N (in the state dir) that this run and\n"
		"                         its search belong to (the daemon passes it)\n"
		"      --time-budget S    stop trying new points after S seconds and finish with the\n"
		"                         best verified one (its final check runs past S); the\n"
		"                         results then say the budget cut the search short\n"
		"  -h, --help             this text\n"
		"\n"
		"DIR receives kernel.cu (or kernel.cpp), kernel.json (template, point, build\n"
		"and tuning figures), evidence.json (the final verification), report.md (the\n"
		"speedup table) and binding.py (load the kernel and call it like a torch op).\n"
		"Progress goes to standard error: a bar on a terminal, plain lines otherwise.\n"
		"With --progress-file FILE it is also kept in FILE as a small JSON object\n"
		"(stage, done, total, best_speedup, candidates), rewritten atomically: the\n"
		"daemon reads it (bot/jobs/progress_file.h).\n"		"\n"
		"With models configured ([llm] models), the templates run first (a quarter of\n"
		"--time-budget) and then the LLM search, seeded with their best kernel\n"
		"(bot/search/README.md); kernel.json gets a \"search\" object, report.md a search\n"
		"section, and DIR/search.json follows the search generation by generation.\n"
		"\n"
		"Every run is listed by 'kernelbot status' with its stage and best speedup.\n"
		"\n"
		"exit: 0 a verified kernel was written, 1 none (no template for the operator,\n"
		"      or no point verified), 2 usage or environment error\n");
}

static cJSON *kernel_json(const struct kb_tune_result *res, const char *operator_path,
			  const char *operator_name, const char *kernel_file, const char *backend,
			  const char *pass)
{
	cJSON *j = cJSON_CreateObject(), *o, *t, *pts;
	const cJSON *kb = cJSON_GetObjectItemCaseSensitive(res->evidence, "kernelbot");
	const cJSON *build = cJSON_GetObjectItemCaseSensitive(kb, "build");
	const cJSON *summary = cJSON_GetObjectItemCaseSensitive(res->evidence, "summary");
	const struct kb_tune_point *best = &res->points[res->best];

	cJSON_AddStringToObject(j, "kernelbot", KB_VERSION);
	cJSON_AddStringToObject(j, "source", kernel_file);
	cJSON_AddStringToObject(j, "sha256", best->sha);
	cJSON_AddStringToObject(j, "backend", backend);
	cJSON_AddStringToObject(j, "pass", pass);
	cJSON_AddStringToObject(j, "device", res->device);
	cJSON_AddStringToObject(j, "verdict", kb_evidence_verdict(res->evidence));
	cJSON_AddItemToObject(j, "summary", summary ? cJSON_Duplicate(summary, true) : cJSON_CreateNull());
	/* the best point's figure while tuning: the pull request sets it beside the final one */
	if (best->fitness > 0) {
		o = cJSON_AddObjectToObject(j, "screening");
		cJSON_AddNumberToObject(o, "speedup_eager", round(best->fitness * 1000) / 1000);
		cJSON_AddStringToObject(o, "measure", "geometric mean over the configs, one seed, in the "
					"tuning's harness worker");
	}
	if (res->forward_evidence) {
		/* a backward run: the forward pass's own fresh check */
		const cJSON *fs = cJSON_GetObjectItemCaseSensitive(res->forward_evidence, "summary");

		o = cJSON_AddObjectToObject(j, "forward_check");
		cJSON_AddStringToObject(o, "verdict", kb_evidence_verdict(res->forward_evidence));
		cJSON_AddItemToObject(o, "summary", fs ? cJSON_Duplicate(fs, true) : cJSON_CreateNull());
	}
	o = cJSON_AddObjectToObject(j, "operator");
	cJSON_AddStringToObject(o, "path", operator_path);
	cJSON_AddStringToObject(o, "name", operator_name);
	cJSON_AddStringToObject(o, "sha256", res->op_hash);
	t = cJSON_AddObjectToObject(j, "template");
	cJSON_AddStringToObject(t, "family", res->family);
	cJSON_AddStringToObject(t, "kind", res->kind);
	cJSON_AddStringToObject(t, "point_name", best->name);
	cJSON_AddItemToObject(t, "point", cJSON_Duplicate(res->best_point, true));
	cJSON_AddBoolToObject(t, "has_backward", res->has_backward);
	cJSON_AddNumberToObject(t, "space_size", (double)res->space_size);
	cJSON_AddItemToObject(t, "space", cJSON_Duplicate(res->space, true));
	cJSON_AddItemToObject(j, "build", cJSON_IsObject(build) ? cJSON_Duplicate(build, true)
			      : cJSON_CreateNull());
	t = cJSON_AddObjectToObject(j, "tuning");
	cJSON_AddNumberToObject(t, "points_tried", (double)res->nr_points);
	cJSON_AddNumberToObject(t, "built", (double)res->built);
	cJSON_AddNumberToObject(t, "verified", (double)res->verified);
	cJSON_AddNumberToObject(t, "timed", (double)res->timed);
	cJSON_AddNumberToObject(t, "cache_hits", (double)res->cache_hits);
	cJSON_AddBoolToObject(t, "all_cached", res->all_cached);
	cJSON_AddBoolToObject(t, "final_cached", res->final_cached);
	cJSON_AddNumberToObject(t, "seconds", round(res->seconds * 100) / 100);
	pts = cJSON_AddArrayToObject(t, "points");
	for (size_t i = 0; i < res->nr_points; i++) {
		const struct kb_tune_point *p = &res->points[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddStringToObject(e, "point", p->name);
		cJSON_AddStringToObject(e, "state", kb_tune_state_name(p->state));
		if (p->state == KB_TP_VERIFIED)
			cJSON_AddNumberToObject(e, "speedup_eager", round(p->fitness * 1000) / 1000);
		if (p->reason)
			cJSON_AddStringToObject(e, "reason", p->reason);
		cJSON_AddBoolToObject(e, "cached", p->cached);
		if (p->duplicate)
			cJSON_AddBoolToObject(e, "same_source_as_earlier", true);
		cJSON_AddItemToArray(pts, e);
	}
	return j;
}

static int write_outputs(const struct kb_verifier *vf, const struct kb_tune_result *res,
			 const char *operator_path, const char *out_dir, const char *backend, const char *pass,
			 int64_t seeds)
{
	struct cli_run_output ro;
	int rc;

	cli_run_output_init(&ro, vf, res, operator_path, out_dir, backend, pass, seeds);
	ro.o.source = res->best_source.buf;
	ro.o.source_len = res->best_source.len;
	ro.o.kernel_json = kernel_json(res, operator_path, ro.name.buf, ro.kernel_file.buf, backend, pass);
	ro.o.report.evidence = res->evidence;
	cli_run_output_tuning(&ro, res);
	ro.o.binding.has_backward = res->has_backward;
	rc = kb_run_write_dir(&ro.o);
	cli_run_output_release(&ro);
	return rc;
}

/* What the command line asks for; search holds the options of the LLM search. */
struct run_args {
	const char *config_path, *backend_arg, *out_arg, *progress_path, *op;
	enum kb_backend backend;
	int64_t seeds;
	const char *pass;
	int64_t deadline_ms;
	struct cli_search_args search;
};

/* The options and the operator into a; false when the command ends here, with *rc its exit code. */
static bool parse_args(int argc, char **argv, struct run_args *a, int *rc)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "backend", required_argument, NULL, 'b' },
		{ "out", required_argument, NULL, 'o' },
		{ "seeds", required_argument, NULL, 's' },
		{ "progress-file", required_argument, NULL, 'F' },
		{ "pass", required_argument, NULL, 'p' },
		{ "time-budget", required_argument, NULL, 'T' },
		{ "fresh", no_argument, NULL, 'f' },
		{ "seed", required_argument, NULL, 'S' },
		{ "job-id", required_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *op;
	int c;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': a->config_path = optarg; break;
		case 'b': a->backend_arg = optarg; break;
		case 'o': a->out_arg = optarg; break;
		case 'F': a->progress_path = optarg; break;
		case 's':
			if (kb_parse_i64(optarg, &a->seeds) || a->seeds < 1 || a->seeds > 100) {
				*rc = cli_usage_error("run", "--seeds '%s' is not a number from 1 to 100", optarg);
				return false;
			}
			break;
		case 'p':
			if (strcmp(optarg, "forward") && strcmp(optarg, "backward")) {
				*rc = cli_usage_error("run", "unknown pass '%s' (forward or backward)", optarg);
				return false;
			}
			a->pass = optarg;
			break;
		case 'T': {
			int64_t budget_s;

			if (kb_parse_i64(optarg, &budget_s) || budget_s < 1 || budget_s > 604800) {
				*rc = cli_usage_error("run", "--time-budget '%s' is not a number of seconds from 1 to 604800", optarg);
				return false;
			}
			/* counted from here: analysis and harness start-up spend it too */
			a->deadline_ms = kb_now_ms() + budget_s * 1000;
			break;
		}
		case 'f': a->search.fresh = true; break;
		case 'S': {
			int64_t v;

			if (kb_parse_i64(optarg, &v) || v < 1) {
				*rc = cli_usage_error("run", "--seed '%s' is not a positive number", optarg);
				return false;
			}
			a->search.seed = (uint64_t)v;
			break;
		}
		case 'J':
			if (kb_parse_i64(optarg, &a->search.job_id) || a->search.job_id < 1) {
				*rc = cli_usage_error("run", "--job-id '%s' is not a positive number", optarg);
				return false;
			}
			break;
		case 'h': usage(stdout); *rc = KB_EXIT_OK; return false;
		default:
			*rc = cli_usage_error("run", "unknown option");
			return false;
		}
	}
	if (argc - optind != 1) {
		*rc = cli_usage_error("run", "expected one OPERATOR, got %d arguments", argc - optind);
		return false;
	}
	op = a->op = argv[optind];
	if (a->backend_arg && (kb_backend_parse(a->backend_arg, &a->backend) || a->backend == KB_BACKEND_AUTO)) {
		*rc = cli_usage_error("run", "unknown backend '%s' (cuda or cpu)", a->backend_arg);
		return false;
	}
	{
		struct strbuf why = STRBUF_INIT;

		if (kb_operator_check_path(op, &why)) {
			*rc = cli_usage_error("run", "%s", why.buf);
			strbuf_release(&why);
			return false;
		}
	}
	if (a->out_arg && !*a->out_arg) {
		*rc = cli_usage_error("run", "--out needs a directory");
		return false;
	}
	return true;
}

/* Without models: the templates alone; the best point's outputs into out_dir. An exit code. */
static int run_templates(struct kb_verifier *vf, const struct kb_config *cfg, const struct kb_tune_opts *to,
			 const char *out_dir)
{
	struct kb_tune_result res;
	const char *op = to->operator_path;
	int c, rc = KB_EXIT_USAGE;

	kb_tune_result_init(&res);
	c = kb_tune(vf, to, &res);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot run: interrupted\n");
		goto out;
	}
	if (c) {
		fprintf(stderr, "kernelbot run: could not tune '%s' (see the error above)\n", op);
		goto out;
	}
	switch (res.outcome) {
	case KB_TUNE_NO_TEMPLATE:
		fprintf(stderr, "kernelbot run: no built-in template for this operator: %s\n", res.why);
		rc = KB_EXIT_NO;
		goto out;
	case KB_TUNE_NONE_VERIFIED:
		fprintf(stderr, "kernelbot run: no point of the %s template verified: %s\n", res.kind, res.why);
		rc = KB_EXIT_NO;
		goto out;
	case KB_TUNE_OPERATOR_ERROR:
		fprintf(stderr, "kernelbot run: %s\n", res.why);
		goto out;
	case KB_TUNE_OK:
		break;
	}
	if (write_outputs(vf, &res, op, out_dir, kb_backend_name(to->backend), to->pass,
			  to->seeds > 0 ? to->seeds : cfg->seeds)) {
		fprintf(stderr, "kernelbot run: could not write the results to '%s'\n", out_dir);
		goto out;
	}
	printf("verified kernel for '%s': %s template (%s), point %s\n", op, res.family, res.kind,
	       res.points[res.best].name);
	kb_evidence_print_summary(res.evidence, stdout);
	printf("\n");
	kb_evidence_print_table(res.evidence, stdout);
	cli_print_headline(res.evidence, cfg->report_noise_band, "", stdout);
	printf("\ntuning: %zu of %zu points tried, %zu built, %zu timed, %zu from the cache, %.1f s%s\n",
	       res.nr_points, res.space_size, res.built, res.timed, res.cache_hits, res.seconds,
	       res.all_cached ? " (cached: nothing built or timed)" : "");
	printf("wrote %s/: kernel%s kernel.json evidence.json report.md binding.py\n", out_dir, res.ext);
	rc = KB_EXIT_OK;
out:
	kb_tune_result_release(&res);
	return rc;
}

/*
 * This run's row in the runs table (runs_db.h), for `kernelbot status`:
 * kept up to date from the progress events, ended with the exit code.
 * Recording is best effort: a state that cannot be written costs the run
 * nothing but its row.
 */
struct run_record {
	struct kb_state *st;          /* NULL: not recorded */
	int64_t id;
	struct kb_progress_state ps;  /* the best speedup so far, from the step lines */
	char stage[48];               /* the stage stored last */
	int64_t written_ms;
};

/* Store a new stage at once, a step of the same stage at most every 2 s. */
static void record_progress(const struct kb_progress *p, void *payload)
{
	struct run_record *rec = payload;
	struct strbuf line = STRBUF_INIT, stage = STRBUF_INIT;
	int64_t now = kb_now_ms();

	if (!rec->st)
		return;
	strbuf_addf(&stage, "%s", p->stage);
	if (p->total)
		strbuf_addf(&stage, " %zu/%zu", p->done, p->total);
	strbuf_addf(&line, "[%s]%s%s", stage.buf, *p->detail ? " " : "", p->detail);
	kb_progress_file_parse_line(&rec->ps, line.buf);
	if (!strcmp(rec->stage, p->stage) && now - rec->written_ms < 2000)
		goto out;
	kb_strlcpy(rec->stage, p->stage, sizeof(rec->stage));
	rec->written_ms = now;
	if (kb_runs_db_stage(rec->st, rec->id, stage.buf, rec->ps.best_speedup > 0 ? rec->ps.best_speedup : NAN)) {
		/* said once (logged); the run goes on unrecorded */
		kb_state_close(rec->st);
		rec->st = NULL;
	}
out:
	strbuf_release(&line);
	strbuf_release(&stage);
}

static void record_start(struct run_record *rec, const struct kb_config *cfg, const struct run_args *a,
			 enum kb_backend backend, const char *out_dir, struct kb_progress *pg)
{
	struct kb_run_row row = { 0 };

	memset(rec, 0, sizeof(*rec));
	if (kb_state_open(&rec->st, cfg->state_dir)) {
		log_warn("this run is not recorded for 'kernelbot status' (see the error above)");
		return;
	}
	row.job_id = a->search.job_id;
	row.operator_path = (char *)a->op;
	row.backend = (char *)kb_backend_name(backend);
	row.pass = (char *)a->pass;
	row.out_dir = (char *)out_dir;
	row.pid = getpid();
	if (kb_runs_db_start(rec->st, &row, &rec->id)) {
		kb_state_close(rec->st);
		rec->st = NULL;
		return;
	}
	pg->observe = record_progress;
	pg->observe_payload = rec;
}

static void record_end(struct run_record *rec, int rc)
{
	const char *state = "done", *why = NULL;

	if (!rec->st)
		return;
	if (rc == KB_EXIT_NO) {
		state = "failed";
		why = "no verified kernel";
	} else if (rc && kb_stop_requested()) {
		state = "cancelled";
	} else if (rc) {
		state = "failed";
		why = "error (see the run's output)";
	}
	kb_runs_db_stage(rec->st, rec->id, rec->stage[0] ? rec->stage : NULL,
			 rec->ps.best_speedup > 0 ? rec->ps.best_speedup : NAN);
	kb_runs_db_finish(rec->st, rec->id, state, why);
	kb_state_close(rec->st);
	rec->st = NULL;
}

int cmd_run(int argc, char **argv)
{
	struct run_args a = { .backend = KB_BACKEND_AUTO, .pass = "forward" };
	struct kb_config cfg;
	struct kb_verifier vf;
	struct kb_tune_opts to = { 0 };
	struct kb_progress pg;
	struct run_record rec = { 0 };
	struct strbuf out_dir = STRBUF_INIT, name = STRBUF_INIT;
	FILE *progress_fp = NULL;
	enum kb_backend backend;
	bool vf_ready = false;
	int rc = KB_EXIT_USAGE;

	if (!parse_args(argc, argv, &a, &rc))
		return rc;
	backend = a.backend;
	to.pass = a.pass;
	to.deadline_ms = a.deadline_ms;
	rc = cli_load_config(a.config_path, &cfg);
	if (rc)
		goto out;
	rc = KB_EXIT_USAGE;
	if (!a.backend_arg)
		backend = cfg.backend;
	vf_ready = true;
	if (kb_verifier_init(&vf, &cfg)) {
		fprintf(stderr, "kernelbot run: cannot run the verifier (see the error above)\n");
		goto out;
	}
	to.backend = kb_python_backend(vf.probe, backend);
	if (to.backend == KB_BACKEND_CUDA && !(vf.probe->cuda_available && vf.probe->device_count > 0)) {
		rc = cli_usage_error("run", "backend 'cuda' needs a gpu, but torch in '%s' sees none (try --backend cpu)",
				     vf.probe->python);
		goto out;
	}
	kb_operator_name(a.op, &name);
	if (a.out_arg)
		strbuf_addstr(&out_dir, a.out_arg);
	else
		strbuf_addf(&out_dir, "kernelbot-out/%s", name.buf);
	to.operator_path = a.op;
	to.seeds = a.seeds;
	if (a.progress_path) {
		/* plain lines, parsed on their way to stderr into the progress file */
		progress_fp = kb_progress_file_open(a.progress_path, stderr);
		if (!progress_fp)
			goto out;
		kb_progress_init(&pg, progress_fp, 0);
	} else {
		kb_progress_init(&pg, stderr, -1);
	}
	to.progress = &pg;
	vf.progress = &pg; /* the harness's config and seed inside each step */
	record_start(&rec, &cfg, &a, to.backend, out_dir.buf, &pg);

	/* with models configured: templates first, then the LLM search (run_search.c) */
	if (cfg.nr_llm_models > 0)
		rc = cli_run_search(&vf, &cfg, &to, out_dir.buf, &a.search);
	else
		rc = run_templates(&vf, &cfg, &to, out_dir.buf);
	kb_progress_end(&pg); /* the log forgets the bar before pg goes out of scope */
	pg.observe = NULL;
	record_end(&rec, rc);
out:
	fflush(stdout);
	if (progress_fp)
		fclose(progress_fp);
	if (vf_ready)
		kb_verifier_release(&vf);
	kb_config_release(&cfg);
	strbuf_release(&out_dir);
	strbuf_release(&name);
	return rc;
}
