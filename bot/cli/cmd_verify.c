#include "core/common.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"

#include <getopt.h>

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot verify OPERATOR KERNEL [options]\n"
		"\n"
		"Check a candidate kernel against a PyTorch operator: static source checks,\n"
		"a build (native kernels), then every config x seed in a fresh harness\n"
		"process with the anti-loophole checks, and by default timing.\n"
		"\n"
		"  OPERATOR               a KernelBench .py file or a robust-kbench folder\n"
		"  KERNEL                 .cu (cuda backend) or .cpp (cpu backend): native ABI\n"
		"                         (defines kb_forward, see kernelbot_abi.h) or a torch\n"
		"                         extension (PYBIND11_MODULE)\n"
		"  -c, --config FILE      configuration (default ./config.ini, ...)\n"
		"      --backend cuda|cpu default [harness] backend; auto runs a .cu kernel on\n"
		"                         cuda and a .cpp kernel on cpu\n"
		"      --timeout S        wall-clock limit of the evaluation (default [harness] timeout_s)\n"
		"      --seeds N          trials per config (default [harness] seeds)\n"
		"      --pass forward|backward\n"
		"      --json FILE        write the evidence JSON\n"
		"      --no-timing        correctness only, no speedup\n"
		"  -h, --help             this text\n"
		"\n"
		"exit: 0 verified, 1 rejected (reasons on stdout, one per line),\n"
		"      2 usage or environment error\n");
}

int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "backend", required_argument, NULL, 'b' },
		{ "timeout", required_argument, NULL, 't' },
		{ "seeds", required_argument, NULL, 's' },
		{ "pass", required_argument, NULL, 'p' },
		{ "json", required_argument, NULL, 'j' },
		{ "no-timing", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct kb_config cfg;
	struct kb_verifier vf;
	struct kb_eval_opts eo = { .mode = "verify", .pass = "forward", .timing = true };
	struct strbuf why = STRBUF_INIT;
	const char *config_path = NULL, *json_path = NULL, *backend_arg = NULL;
	enum kb_backend backend = KB_BACKEND_AUTO, resolved;
	bool cfg_loaded = false, vf_ready = false;
	cJSON *ev = NULL;
	int c, rc = KB_EXIT_USAGE;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config_path = optarg; break;
		case 'b': backend_arg = optarg; break;
		case 'j': json_path = optarg; break;
		case 'n': eo.timing = false; break;
		case 'p':
			if (strcmp(optarg, "forward") && strcmp(optarg, "backward"))
				return cli_usage_error("verify", "unknown pass '%s' (forward or backward)", optarg);
			eo.pass = optarg;
			break;
		case 't':
			if (kb_parse_i64(optarg, &eo.timeout_s) || eo.timeout_s < 1 || eo.timeout_s > 86400)
				return cli_usage_error("verify", "--timeout '%s' is not a number of seconds (1-86400)", optarg);
			break;
		case 's':
			if (kb_parse_i64(optarg, &eo.seeds) || eo.seeds < 1 || eo.seeds > 100)
				return cli_usage_error("verify", "--seeds '%s' is not a number from 1 to 100", optarg);
			break;
		case 'h': usage(stdout); return KB_EXIT_OK;
		default: return cli_usage_error("verify", "unknown option");
		}
	}
	if (argc - optind != 2)
		return cli_usage_error("verify", "expected OPERATOR and KERNEL, got %d argument%s",
				       argc - optind, argc - optind == 1 ? "" : "s");
	eo.operator_path = argv[optind];
	eo.kernel_path = argv[optind + 1];
	if (backend_arg && (kb_backend_parse(backend_arg, &backend) || backend == KB_BACKEND_AUTO))
		return cli_usage_error("verify", "unknown backend '%s' (cuda or cpu)", backend_arg);
	if (kb_verifier_check_paths(eo.operator_path, eo.kernel_path, &why)) {
		rc = cli_usage_error("verify", "%s", why.buf);
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
		fprintf(stderr, "kernelbot verify: cannot run the verifier (see the error above)\n");
		goto out;
	}
	if (kb_verifier_backend(&vf, eo.kernel_path, backend, &resolved, &why)) {
		rc = cli_usage_error("verify", "%s", why.buf);
		goto out;
	}
	eo.backend = resolved;
	c = kb_verifier_evaluate(&vf, &eo, &ev);
	if (c == KB_ECANCELLED) {
		fprintf(stderr, "kernelbot verify: interrupted\n");
		goto out;
	}
	if (c) {
		fprintf(stderr, "kernelbot verify: could not evaluate '%s' (see the error above)\n", eo.kernel_path);
		goto out;
	}
	if (json_path && kb_evidence_write(ev, json_path))
		goto out;
	kb_evidence_print_reasons(ev, stdout);
	kb_evidence_print_summary(ev, stdout);
	if (!strcmp(kb_evidence_verdict(ev), "verified"))
		rc = KB_EXIT_OK;
	else if (!strcmp(kb_evidence_verdict(ev), "rejected"))
		rc = KB_EXIT_NO;
	else
		rc = KB_EXIT_USAGE; /* "error": the operator or the harness failed, not the kernel */
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
