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
		"  KERNEL                 .cu (cuda backend) or .cpp (cpu backend), or a KernelBench\n"
		"                         .py with class ModelNew (load_inline)\n"
		"  -c, --config FILE      configuration (default ./config.ini, ...)\n"
		"      --backend cuda|cpu default [harness] backend; auto follows the kernel\n"
		"      --timeout S        limit of the candidate's own stages (the baselines' measurement,\n"
		"                         cached per operator and device, is not counted)\n"
		"      --seeds N          correctness trials per config\n"
		"      --max-configs N    configs checked and timed (default [harness] max_configs)\n"
		"      --set SECTION.KEY=VALUE  one measurement or tolerance setting over the config,\n"
		"                         as a pull request's Reproduce command pins them: bench.warmup,\n"
		"                         bench.min_time_ms, bench.max_reps, bench.l2_flush, bench.baselines,\n"
		"                         harness.atol_fp32 (and rtol, fp16, bf16), harness.error_factor\n"
		"      --stream-mode strict|kernelbench  strict (default, the bot's): the kernel\n"
		"                         gets a non-blocking stream and must keep to it; kernelbench:\n"
		"                         KernelBench's semantics (legacy default stream, a device-wide\n"
		"                         sync after every call, stream checks off), said in the evidence\n"
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
	static const struct option opts[] = { CLI_EVAL_OPTIONS, { NULL, 0, NULL, 0 } };
	struct cli_eval_args a = {
		.v = CLI_VERIFIER_INIT("bench"),
		.eo = { .mode = "bench", .pass = "forward", .timing = true },
	};
	struct kb_progress pg;
	enum kb_backend resolved = KB_BACKEND_AUTO;
	cJSON *ev = NULL;
	int c, rc = KB_EXIT_USAGE;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return KB_EXIT_OK;
		}
		rc = cli_eval_arg(&a, c, optarg);
		if (rc == 1)
			return cli_usage_error("bench", "unknown option");
		if (rc)
			return rc;
	}
	if (argc - optind != 2)
		return cli_usage_error("bench", "expected OPERATOR and KERNEL, got %d argument%s",
				       argc - optind, argc - optind == 1 ? "" : "s");
	a.eo.operator_path = argv[optind];
	a.eo.kernel_path = argv[optind + 1];
	rc = cli_eval_check(&a, &a.eo.kernel_path, 1);
	if (rc)
		return rc;

	rc = cli_eval_start(&a, &a.eo.kernel_path, 1, &resolved);
	if (rc)
		goto out;
	rc = KB_EXIT_USAGE;
	a.eo.backend = resolved;
	/* a bar on a terminal, plain lines and a heartbeat in a log */
	kb_progress_init(&pg, stderr, -1);
	a.v.vf.progress = &pg;
	kb_progress_stage(&pg, "bench", 1);
	c = kb_verifier_evaluate(&a.v.vf, &a.eo, &ev);
	kb_progress_end(&pg);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot bench: interrupted\n");
		goto out;
	}
	if (c) {
		fprintf(stderr, "kernelbot bench: could not evaluate '%s' (see the error above)\n", a.eo.kernel_path);
		goto out;
	}
	if (a.json_path && kb_evidence_write(ev, a.json_path))
		goto out;
	kb_evidence_print_reasons(ev, stdout);
	kb_evidence_print_summary(ev, stdout);
	if (!strcmp(kb_evidence_verdict(ev), "verified")) {
		printf("\n");
		kb_evidence_print_table(ev, stdout);
		cli_print_headline(ev, a.v.cfg.report_noise_band, "", stdout);
		rc = KB_EXIT_OK;
	} else if (!strcmp(kb_evidence_verdict(ev), "rejected")) {
		cli_print_headline(ev, a.v.cfg.report_noise_band, "", stdout);
		rc = KB_EXIT_NO;
	} else {
		rc = KB_EXIT_USAGE;
	}
out:
	fflush(stdout);
	cJSON_Delete(ev);
	cli_verifier_release(&a.v);
	return rc;
}
