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
		"usage: kernelbot bench OPERATOR KERNEL [options]\n"
		"\n"
		"Time a candidate kernel against torch eager and torch.compile, after the\n"
		"same correctness checks as 'kernelbot verify', and print the speedup table:\n"
		"config | eager ms | compile ms | kernel ms | speedup (vs eager / vs compile)\n"
		"| roofline share (bandwidth or FLOP rate, whichever is higher), and the\n"
		"geometric mean over configs, then the headline (the speedup on the operator's\n"
		"own shapes), the worst config, configs slower than eager beyond the noise band\n"
		"and the configs the verifier left out (bot/report/HEADLINE.md).\n"
		"\n"
		"  OPERATOR               a KernelBench .py file or a robust-kbench folder\n"
		"  KERNEL                 .cu (cuda backend) or .cpp (cpu backend)\n"
		"  -c, --config FILE      configuration (default ./config.ini, ...)\n"
		"      --backend cuda|cpu default [harness] backend; auto follows the kernel\n"
		"      --timeout S        wall-clock limit of the evaluation\n"
		"      --seeds N          correctness trials per config\n"
		"      --max-configs N    configs checked and timed (default [harness] max_configs)\n"
		"      --pass forward|backward\n"
		"      --json FILE        write the evidence JSON\n"
		"      --fresh            run the harness as a one-off process, not as a worker\n"
		"  -h, --help             this text\n"
		"\n"
		"exit: 0 verified and timed, 1 rejected (reasons on stdout, one per line),\n"
		"      2 usage or environment error\n");
}

int cmd_bench(int argc, char **argv)
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct kb_config cfg;
	struct kb_verifier vf;
	struct kb_progress pg;
	struct kb_eval_opts eo = { .mode = "bench", .pass = "forward", .timing = true };
	struct strbuf why = STRBUF_INIT;
	const char *config_path = NULL, *json_path = NULL, *backend_arg = NULL;
	enum kb_backend backend = KB_BACKEND_AUTO, resolved;
	bool cfg_loaded = false, vf_ready = false, fresh = false;
	cJSON *ev = NULL;
	int c, rc = KB_EXIT_USAGE;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config_path = optarg; break;
		case 'b': backend_arg = optarg; break;
		case 'j': json_path = optarg; break;
		case 'f': fresh = true; break;
		case 'p': case 't': case 's': case 'm':
			if (cli_eval_option("bench", c, optarg, &eo))
				return KB_EXIT_USAGE;
			break;
		case 'h': usage(stdout); return KB_EXIT_OK;
		default: return cli_usage_error("bench", "unknown option");
		}
	}
	if (argc - optind != 2)
		return cli_usage_error("bench", "expected OPERATOR and KERNEL, got %d argument%s",
				       argc - optind, argc - optind == 1 ? "" : "s");
	eo.operator_path = argv[optind];
	eo.kernel_path = argv[optind + 1];
	if (backend_arg && (kb_backend_parse(backend_arg, &backend) || backend == KB_BACKEND_AUTO))
		return cli_usage_error("bench", "unknown backend '%s' (cuda or cpu)", backend_arg);
	if (kb_verifier_check_paths(eo.operator_path, eo.kernel_path, &why)) {
		rc = cli_usage_error("bench", "%s", why.buf);
		strbuf_release(&why);
		return rc;
	}

	rc = cli_load_config(config_path, &cfg);
	cfg_loaded = true;
	if (rc)
		goto out;
	rc = KB_EXIT_USAGE;
	if (!backend_arg)
		backend = cfg.backend;
	vf_ready = true;
	if (kb_verifier_init(&vf, &cfg)) {
		fprintf(stderr, "kernelbot bench: cannot run the verifier (see the error above)\n");
		goto out;
	}
	if (kb_verifier_backend(&vf, eo.kernel_path, backend, &resolved, &why)) {
		rc = cli_usage_error("bench", "%s", why.buf);
		goto out;
	}
	eo.backend = resolved;
	/* a worker started now loads torch while the kernel compiles */
	if (!fresh)
		kb_verifier_use_worker(&vf);
	/* a bar on a terminal, plain lines and a heartbeat in a log */
	kb_progress_init(&pg, stderr, -1);
	vf.progress = &pg;
	kb_progress_stage(&pg, "bench", 1);
	c = kb_verifier_evaluate(&vf, &eo, &ev);
	kb_progress_end(&pg);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot bench: interrupted\n");
		goto out;
	}
	if (c) {
		fprintf(stderr, "kernelbot bench: could not evaluate '%s' (see the error above)\n", eo.kernel_path);
		goto out;
	}
	if (json_path && kb_evidence_write(ev, json_path))
		goto out;
	kb_evidence_print_reasons(ev, stdout);
	kb_evidence_print_summary(ev, stdout);
	if (!strcmp(kb_evidence_verdict(ev), "verified")) {
		printf("\n");
		kb_evidence_print_table(ev, stdout);
		cli_print_headline(ev, cfg.report_noise_band, "", stdout);
		rc = KB_EXIT_OK;
	} else if (!strcmp(kb_evidence_verdict(ev), "rejected")) {
		cli_print_headline(ev, cfg.report_noise_band, "", stdout);
		rc = KB_EXIT_NO;
	} else {
		rc = KB_EXIT_USAGE;
	}
out:
	fflush(stdout);
	cJSON_Delete(ev);
	if (vf_ready)
		kb_verifier_release(&vf);
	if (cfg_loaded)
		kb_config_release(&cfg);
	strbuf_release(&why);
	return rc;
}
