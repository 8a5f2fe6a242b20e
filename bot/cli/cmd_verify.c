#include "core/common.h"
#include "cli/cli.h"
#include "cli/cli_verifier.h"
#include "core/config.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"

#include <getopt.h>

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot verify OPERATOR KERNEL [KERNEL...] [options]\n"
		"\n"
		"Check candidate kernels against a PyTorch operator: static source checks,\n"
		"builds (native kernels, in parallel), then every config x seed in the harness\n"
		"with the anti-loophole checks, and by default timing. The kernels are\n"
		"evaluated one after another in one long-lived harness worker (restarted\n"
		"after a crash or a timeout), or each in a fresh process with --fresh.\n"
		"\n"
		"  OPERATOR               a KernelBench .py file or a robust-kbench folder\n"
		"  KERNEL                 .cu (cuda backend) or .cpp (cpu backend): native ABI\n"
		"                         (defines kb_forward, see kernelbot_abi.h) or a torch\n"
		"                         extension (PYBIND11_MODULE); or KernelBench's format,\n"
		"                         a .py with class ModelNew building its kernels with\n"
		"                         load_inline (forward only; backend by its sources)\n"
		"  -c, --config FILE      configuration (default ./config.ini, ...)\n"
		"      --backend cuda|cpu default [harness] backend; auto runs a .cu kernel on\n"
		"                         cuda and a .cpp kernel on cpu\n"
		"      --timeout S        limit of each candidate's own stages, baselines not counted\n"
		"                         (default [harness] timeout_s)\n"
		"      --seeds N          trials per config (default [harness] seeds)\n"
		"      --max-configs N    configs checked (default [harness] max_configs)\n"
		"      --set SECTION.KEY=VALUE  one measurement or tolerance setting over the config,\n"
		"                         as a pull request's Reproduce command pins them: bench.warmup,\n"
		"                         bench.min_time_ms, bench.max_reps, bench.l2_flush, bench.baselines,\n"
		"                         harness.atol_fp32 (and rtol, fp16, bf16), harness.error_factor\n"
		"      --stream-mode strict|kernelbench  strict (default, the bot's): the kernel\n"
		"                         gets a non-blocking stream and must keep to it; kernelbench:\n"
		"                         KernelBench's semantics (legacy default stream, a device-wide\n"
		"                         sync after every call, stream checks off), said in the evidence\n"
		"      --pass forward|backward\n"
		"      --json PATH        write the evidence JSON: to the file PATH for one\n"
		"                         kernel, else (several kernels, or PATH a directory or\n"
		"                         ending in '/') to PATH/<kernel file name>.json\n"
		"      --fresh            a fresh harness process per kernel (no worker)\n"
		"      --no-timing        correctness only, no speedup\n"
		"  -h, --help             this text\n"
		"\n"
		"One kernel: the reasons, one per line (\"rejected: CHECK: message\"), then\n"
		"the summary and the headline's lines (bot/report/HEADLINE.md: the speedup on the\n"
		"operator's own shapes, the worst config, a warning when the kernel is slower\n"
		"than eager on some config, the configs left out). Several: \"verified KERNEL\"\n"
		"or \"KERNEL: rejected: ...\" lines and an indented summary per kernel, then one\n"
		"line with the counts.\n"
		"\n"
		"exit: 0 all verified, 1 some rejected, 2 usage or environment error\n");
}

static bool ends_with_slash(const char *s)
{
	size_t n = strlen(s);

	return n && s[n - 1] == '/';
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

/* What the evaluations of one invocation share. */
struct run {
	const char *const *kernels;
	char **json;            /* per kernel, NULL: none */
	size_t n;
	int verified, rejected, errors;
	bool write_failed;
	double noise_floor;     /* [report] noise_band */
	struct kb_progress *pg;  /* on standard error */
	size_t done;
};

/* "static 0.00 s, build 0.15 s, harness 2.10 s (load ..., correctness ..., timing ...)" */
static void print_stages(const cJSON *ev, const char *prefix, FILE *fp)
{
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(ev, "stages");
	static const char *const keys[] = { "static_s", "build_s", "harness_s", "load_s",
					    "correctness_s", "timing_s", "baseline_s" };
	static const char *const names[] = { "static", "build", "harness", "load",
					     "correctness", "timing", "of which baselines" };
	bool any = false;

	if (!cJSON_IsObject(st))
		return;
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, keys[i]);

		if (!cJSON_IsNumber(v))
			continue;
		fprintf(fp, any ? ", " : "%stime: ", prefix);
		fprintf(fp, "%s %.2f s", names[i], v->valuedouble);
		any = true;
	}
	if (any)
		fprintf(fp, "\n");
}

/* Print fp's text with every line prefixed, skipping lines that start with skip. */
static void print_prefixed(const char *text, const char *prefix, const char *skip, FILE *fp)
{
	const char *p = text;

	while (p && *p) {
		const char *end = strchrnul(p, '\n');

		if (!skip || strncmp(p, skip, strlen(skip)))
			fprintf(fp, "%s%.*s\n", prefix, (int)(end - p), p);
		p = *end ? end + 1 : NULL;
	}
}

static void on_done(size_t i, const char *kernel, const cJSON *ev, void *payload)
{
	struct run *r = payload;
	const char *verdict = kb_evidence_verdict(ev);

	if (r->json[i] && kb_evidence_write(ev, r->json[i]))
		r->write_failed = true;
	if (!strcmp(verdict, "verified"))
		r->verified++;
	else if (!strcmp(verdict, "rejected"))
		r->rejected++;
	else
		r->errors++; /* "error": the operator or the harness failed, not the kernel */

	/* the bar makes way for the results on standard output */
	kb_progress_end(r->pg);
	if (r->n == 1) {
		kb_evidence_print_reasons(ev, stdout);
		kb_evidence_print_summary(ev, stdout);
		cli_print_headline(ev, r->noise_floor, "", stdout);
		print_stages(ev, "", stdout);
	} else {
		char *buf = NULL;
		size_t len = 0;
		FILE *mem = open_memstream(&buf, &len);
		struct strbuf prefix = STRBUF_INIT;

		if (!mem)
			die("out of memory");
		if (!strcmp(verdict, "verified")) {
			printf("verified %s\n", kernel);
		} else {
			kb_evidence_print_reasons(ev, mem);
			if (!strcmp(verdict, "error"))
				fprintf(mem, "error: the operator or the harness failed\n");
		}
		fclose(mem);
		strbuf_addf(&prefix, "%s: ", kernel);
		print_prefixed(buf, prefix.buf, NULL, stdout);
		free(buf);
		buf = NULL;
		mem = open_memstream(&buf, &len);
		if (!mem)
			die("out of memory");
		kb_evidence_print_summary(ev, mem);
		cli_print_headline(ev, r->noise_floor, "", mem);
		print_stages(ev, "", mem);
		fclose(mem);
		print_prefixed(buf, "  ", "verdict: ", stdout);
		free(buf);
		strbuf_release(&prefix);
	}
	fflush(stdout);
	r->done++;
	if (r->done < r->n)
		kb_progress_step(r->pg, r->done, kernel);
}

/* The counts line (several kernels) and the exit code of the whole run. */
static int run_outcome(const struct run *r)
{
	if (r->n > 1)
		printf("summary: %d verified, %d rejected, %d error%s of %zu kernels\n", r->verified,
		       r->rejected, r->errors, r->errors == 1 ? "" : "s", r->n);
	if (r->write_failed || r->errors)
		return KB_EXIT_USAGE;
	return r->rejected ? KB_EXIT_NO : KB_EXIT_OK;
}

/* Evidence paths: one file, or DIR/<kernel file name>.json each. 0 or a usage error. */
static int json_paths(const char *json, struct run *r)
{
	bool dir = r->n > 1 || ends_with_slash(json) || kb_is_dir(json);
	struct strbuf sb = STRBUF_INIT;

	if (!dir) {
		r->json[0] = xstrdup(json);
		return 0;
	}
	for (size_t i = 0; i < r->n; i++) {
		for (size_t j = 0; j < i; j++)
			if (!strcmp(base_name(r->kernels[i]), base_name(r->kernels[j])))
				return cli_usage_error("verify", "kernels '%s' and '%s' would both write '%s.json' in '%s'",
						       r->kernels[j], r->kernels[i],
						       base_name(r->kernels[i]), json);
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s%s%s.json", json, ends_with_slash(json) ? "" : "/",
			    base_name(r->kernels[i]));
		r->json[i] = strbuf_detach(&sb, NULL);
	}
	if (kb_mkdir_p(json, 0755)) {
		fprintf(stderr, "kernelbot verify: could not create the evidence directory '%s'\n", json);
		return KB_EXIT_USAGE;
	}
	return 0;
}

int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_EVAL_OPTIONS,
		{ "no-timing", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_eval_args a = {
		.v = CLI_VERIFIER_INIT("verify"),
		.eo = { .mode = "verify", .pass = "forward", .timing = true },
	};
	struct run run = { 0 };
	struct kb_progress pg;
	enum kb_backend resolved = KB_BACKEND_AUTO;
	cJSON **evs = NULL;
	int c, rc = KB_EXIT_USAGE;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return KB_EXIT_OK;
		}
		if (c == 'n') {
			a.eo.timing = false;
			continue;
		}
		rc = cli_eval_arg(&a, c, optarg);
		if (rc == 1)
			return cli_usage_error("verify", "unknown option");
		if (rc)
			return rc;
	}
	if (argc - optind < 2)
		return cli_usage_error("verify", "expected OPERATOR and at least one KERNEL, got %d argument%s",
				       argc - optind, argc - optind == 1 ? "" : "s");
	a.eo.operator_path = argv[optind];
	run.kernels = (const char *const *)argv + optind + 1;
	run.n = (size_t)(argc - optind - 1);
	a.eo.kernel_path = run.kernels[0];
	rc = cli_eval_check(&a, run.kernels, run.n);
	if (rc)
		return rc;
	run.json = xcalloc(run.n, sizeof(*run.json));
	evs = xcalloc(run.n, sizeof(*evs));
	if (a.json_path && (rc = json_paths(a.json_path, &run)))
		goto out;

	rc = cli_eval_start(&a, run.kernels, run.n, &resolved);
	if (rc)
		goto out;
	rc = KB_EXIT_USAGE;
	run.noise_floor = a.v.cfg.report_noise_band;
	/* one kernel: its backend as resolved; several: each resolves its own */
	a.eo.backend = run.n == 1 ? resolved : a.v.backend;
	/* a bar on a terminal, plain lines and a heartbeat in a log */
	kb_progress_init(&pg, stderr, -1);
	run.pg = a.v.vf.progress = &pg;
	kb_progress_stage(&pg, "verify", run.n);
	c = kb_verifier_evaluate_many(&a.v.vf, &a.eo, run.kernels, run.n, evs, on_done, &run);
	kb_progress_end(&pg);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot verify: interrupted\n");
		goto out;
	}
	if (c) {
		fprintf(stderr, "kernelbot verify: could not evaluate the kernels (see the error above)\n");
		goto out;
	}
	rc = run_outcome(&run);
out:
	fflush(stdout);
	if (evs)
		for (size_t i = 0; i < run.n; i++)
			cJSON_Delete(evs[i]);
	free(evs);
	if (run.json)
		for (size_t i = 0; i < run.n; i++)
			free(run.json[i]);
	free(run.json);
	cli_verifier_release(&a.v);
	return rc;
}
