#include "core/common.h"
#include "cli/cli.h"
#include "cli/cli_verifier.h"
#include "cli/runs_db.h"
#include "core/config.h"
#include "core/json.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/signals.h"
#include "core/state.h"
#include "jobs/progress_file.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "report/run_report.h"
#include "run/run.h"
#include "templates/tune.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"
#include "verifier/python_env.h"

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
		"      --time-budget S    end within S seconds (the first chunk of points always runs):\n"
		"                         new points, candidates and model calls start only while they\n"
		"                         and the final checks held in reserve fit (the search holds\n"
		"                         three: the best and the next should it fail); the search's\n"
		"                         model calls, builds and harness calls end by then, its final\n"
		"                         checks within a minute of S; the results then say the budget\n"
		"                         cut the search short\n"
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

/* What the command line asks for; search holds the options of the LLM search. */
struct run_args {
	const char *config_path, *backend_arg, *out_arg, *progress_path, *op;
	enum kb_backend backend;
	int64_t seeds;
	const char *pass;
	int64_t deadline_ms;
	struct {
		bool fresh;             /* --fresh: a new search, even when one with the same key exists */
		uint64_t seed;          /* --seed N; 0: [search] seed, else from the operator's hash */
		int64_t job_id;         /* --job-id N: the daemon's job this search belongs to; 0: none */
	} search;
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

/* The outcome as the command's exit code. */
static int exit_code(enum kb_run_outcome o)
{
	switch (o) {
	case KB_RUN_VERIFIED: return KB_EXIT_OK;
	case KB_RUN_NONE_VERIFIED: return KB_EXIT_NO;
	case KB_RUN_ERROR: case KB_RUN_INTERRUPTED: break;
	}
	return KB_EXIT_USAGE;
}

/* The search's figures, verifiers and archive grid (standard output). */
static void print_search_summary(const struct kb_search_result *r)
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

/* What a run found, on standard output: the kernel, its evidence, how it was found, the files. */
static void print_result(const struct kb_run_result *res, const struct kb_config *cfg, const char *out_dir)
{
	const struct kb_tune_result *t = &res->tune;
	const struct kb_search_result *s = &res->search;
	const char *op = res->operator_path;
	const cJSON *ev = res->searched ? s->evidence : t->evidence;

	if (res->outcome != KB_RUN_VERIFIED) {
		if (res->searched && res->outcome == KB_RUN_NONE_VERIFIED)
			print_search_summary(s);
		return;
	}
	if (res->searched)
		printf("verified kernel for '%s': llm search, candidate %lld (%s%s%s)\n", op,
		       (long long)s->best_candidate_id, s->best_proposer, s->best_model ? " by " : "",
		       s->best_model ? s->best_model : "");
	else
		printf("verified kernel for '%s': %s template (%s), point %s\n", op, t->family, t->kind,
		       t->points[t->best].name);
	kb_evidence_print_summary(ev, stdout);
	printf("\n");
	kb_evidence_print_table(ev, stdout);
	cli_print_headline(ev, cfg->report_noise_band, "", stdout);
	if (res->searched) {
		printf("\n");
		print_search_summary(s);
		printf("wrote %s/: kernel%s kernel.json evidence.json report.md binding.py search.json\n", out_dir,
		       res->backend == KB_BACKEND_CUDA ? ".cu" : ".cpp");
		return;
	}
	printf("\ntuning: %zu of %zu points tried, %zu built, %zu timed, %zu from the cache, %.1f s%s\n",
	       t->nr_points, t->space_size, t->built, t->timed, t->cache_hits, t->seconds,
	       t->all_cached ? " (cached: nothing built or timed)" : "");
	printf("wrote %s/: kernel%s kernel.json evidence.json report.md binding.py\n", out_dir, t->ext);
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

/* The pipeline's options from the command line's; strings point into a and out_dir. */
static void run_opts(struct kb_run_opts *o, const struct run_args *a, enum kb_backend backend,
		     const char *out_dir, struct kb_progress *pg)
{
	o->operator_path = a->op;
	o->out_dir = out_dir;
	o->pass = a->pass;
	o->backend = backend;
	o->seeds = a->seeds;
	o->deadline_ms = a->deadline_ms;
	o->progress = pg;
	o->fresh = a->search.fresh;
	o->seed = a->search.seed;
	o->job_id = a->search.job_id;
}

int cmd_run(int argc, char **argv)
{
	struct run_args a = { .backend = KB_BACKEND_AUTO, .pass = "forward" };
	struct cli_verifier v = CLI_VERIFIER_INIT("run");
	struct kb_run_opts ro = { 0 };
	struct kb_run_result res;
	struct kb_progress pg;
	struct run_record rec = { 0 };
	struct strbuf out_dir = STRBUF_INIT, name = STRBUF_INIT;
	FILE *progress_fp = NULL;
	enum kb_backend backend;
	int rc = KB_EXIT_USAGE;

	kb_run_result_init(&res);
	if (!parse_args(argc, argv, &a, &rc))
		goto out;
	v.config_path = a.config_path;
	v.backend_arg = a.backend_arg;
	v.backend = a.backend;
	rc = cli_verifier_start(&v);
	if (rc)
		goto out;
	rc = KB_EXIT_USAGE;
	backend = kb_python_backend(v.vf.probe, v.backend);
	if (backend == KB_BACKEND_CUDA && !(v.vf.probe->cuda_available && v.vf.probe->device_count > 0)) {
		rc = cli_usage_error("run", "backend 'cuda' needs a gpu, but torch in '%s' sees none (try --backend cpu)",
				     v.vf.probe->python);
		goto out;
	}
	kb_operator_name(a.op, &name);
	if (a.out_arg)
		strbuf_addstr(&out_dir, a.out_arg);
	else
		strbuf_addf(&out_dir, "kernelbot-out/%s", name.buf);
	if (a.progress_path) {
		/* plain lines, parsed on their way to stderr into the progress file */
		progress_fp = kb_progress_file_open(a.progress_path, stderr);
		if (!progress_fp)
			goto out;
		kb_progress_init(&pg, progress_fp, 0);
	} else {
		kb_progress_init(&pg, stderr, -1);
	}
	v.vf.progress = &pg; /* the harness's config and seed inside each step */
	record_start(&rec, &v.cfg, &a, backend, out_dir.buf, &pg);

	run_opts(&ro, &a, backend, out_dir.buf, &pg);
	kb_run(&v.vf, &v.cfg, &ro, &res);
	print_result(&res, &v.cfg, out_dir.buf);
	rc = exit_code(res.outcome);
	kb_progress_end(&pg); /* the log forgets the bar before pg goes out of scope */
	pg.observe = NULL;
	record_end(&rec, rc);
out:
	fflush(stdout);
	if (progress_fp)
		fclose(progress_fp);
	cli_verifier_release(&v);
	kb_run_result_release(&res);
	strbuf_release(&out_dir);
	strbuf_release(&name);
	return rc;
}
