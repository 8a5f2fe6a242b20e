#include "core/common.h"
#include "cli/cli.h"
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
		"                         extension (PYBIND11_MODULE)\n"
		"  -c, --config FILE      configuration (default ./config.ini, ...)\n"
		"      --backend cuda|cpu default [harness] backend; auto runs a .cu kernel on\n"
		"                         cuda and a .cpp kernel on cpu\n"
		"      --timeout S        wall-clock limit of each evaluation (default [harness] timeout_s)\n"
		"      --seeds N          trials per config (default [harness] seeds)\n"
		"      --max-configs N    configs checked (default [harness] max_configs)\n"
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
					    "correctness_s", "timing_s" };
	static const char *const names[] = { "static", "build", "harness", "load",
					     "correctness", "timing" };
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
		{ "config", required_argument, NULL, 'c' },
		{ "backend", required_argument, NULL, 'b' },
		{ "timeout", required_argument, NULL, 't' },
		{ "seeds", required_argument, NULL, 's' },
		{ "max-configs", required_argument, NULL, 'm' },
		{ "pass", required_argument, NULL, 'p' },
		{ "json", required_argument, NULL, 'j' },
		{ "fresh", no_argument, NULL, 'f' },
		{ "no-timing", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct kb_config cfg;
	struct kb_verifier vf;
	struct kb_eval_opts eo = { .mode = "verify", .pass = "forward", .timing = true };
	struct strbuf why = STRBUF_INIT;
	struct run run = { 0 };
	struct kb_progress pg;
	const char *config_path = NULL, *json_path = NULL, *backend_arg = NULL;
	enum kb_backend backend = KB_BACKEND_AUTO, resolved;
	bool cfg_loaded = false, vf_ready = false, fresh = false;
	cJSON **evs = NULL;
	int c, rc = KB_EXIT_USAGE;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config_path = optarg; break;
		case 'b': backend_arg = optarg; break;
		case 'j': json_path = optarg; break;
		case 'f': fresh = true; break;
		case 'n': eo.timing = false; break;
		case 'p': case 't': case 's': case 'm':
			if (cli_eval_option("verify", c, optarg, &eo))
				return KB_EXIT_USAGE;
			break;
		case 'h': usage(stdout); return KB_EXIT_OK;
		default: return cli_usage_error("verify", "unknown option");
		}
	}
	if (argc - optind < 2)
		return cli_usage_error("verify", "expected OPERATOR and at least one KERNEL, got %d argument%s",
				       argc - optind, argc - optind == 1 ? "" : "s");
	eo.operator_path = argv[optind];
	run.kernels = (const char *const *)argv + optind + 1;
	run.n = (size_t)(argc - optind - 1);
	eo.kernel_path = run.kernels[0];
	if (backend_arg && (kb_backend_parse(backend_arg, &backend) || backend == KB_BACKEND_AUTO))
		return cli_usage_error("verify", "unknown backend '%s' (cuda or cpu)", backend_arg);
	for (size_t i = 0; i < run.n; i++)
		if (kb_verifier_check_paths(eo.operator_path, run.kernels[i], &why)) {
			rc = cli_usage_error("verify", "%s", why.buf);
			strbuf_release(&why);
			return rc;
		}
	run.json = xcalloc(run.n, sizeof(*run.json));
	evs = xcalloc(run.n, sizeof(*evs));
	if (json_path && (rc = json_paths(json_path, &run)))
		goto out;

	rc = cli_load_config(config_path, &cfg);
	cfg_loaded = true;
	if (rc)
		goto out;
	rc = KB_EXIT_USAGE;
	run.noise_floor = cfg.report_noise_band;
	if (!backend_arg)
		backend = cfg.backend;
	vf_ready = true;
	if (kb_verifier_init(&vf, &cfg)) {
		fprintf(stderr, "kernelbot verify: cannot run the verifier (see the error above)\n");
		goto out;
	}
	for (size_t i = 0; i < run.n; i++)
		if (kb_verifier_backend(&vf, run.kernels[i], backend, &resolved, &why)) {
			rc = cli_usage_error("verify", "%s", why.buf);
			goto out;
		}
	/* one kernel: its backend as resolved; several: each resolves its own */
	eo.backend = run.n == 1 ? resolved : backend;
	if (!fresh)
		kb_verifier_use_worker(&vf);
	/* a bar on a terminal, plain lines and a heartbeat in a log */
	kb_progress_init(&pg, stderr, -1);
	run.pg = vf.progress = &pg;
	kb_progress_stage(&pg, "verify", run.n);
	c = kb_verifier_evaluate_many(&vf, &eo, run.kernels, run.n, evs, on_done, &run);
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
	if (vf_ready)
		kb_verifier_release(&vf);
	if (cfg_loaded)
		kb_config_release(&cfg);
	strbuf_release(&why);
	return rc;
}
