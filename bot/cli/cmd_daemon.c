#include "core/common.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "core/util.h"
#include "daemon/daemon.h"

#include <getopt.h>

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot daemon [-c FILE] [--cycles N] [--until-idle]\n"
		"\n"
		"Watch the repositories of [bot] repositories (polling with ETags every\n"
		"poll_interval_s) and, with webhook_listen set, signed webhook deliveries.\n"
		"A pull request labelled [bot] label by someone with write access becomes\n"
		"one job per operator; each job runs `kernelbot run` as a child process and\n"
		"opens a pull request with the kernel, its binding and its evidence, while\n"
		"a progress comment on the labelled pull request is edited in place.\n"
		"A comment '/kernelbot stop' or removing the label cancels; '/kernelbot run'\n"
		"re-runs on the current head.\n"
		"\n"
		"  -c, --config FILE   configuration (default ./config.ini, /etc/kernelbot/config.ini)\n"
		"      --cycles N      exit after N poll cycles (tests, benchmarks)\n"
		"      --until-idle    exit once a poll cycle ran and no job is queued or running\n"
		"  -h, --help          this text\n"
		"\n"
		"Signals: SIGHUP reloads the config file (a bad file keeps the running one);\n"
		"SIGTERM or SIGINT stops the search children and exits 0: running jobs resume\n"
		"at the next start, without a second pull request or comment.\n"
		"\n"
		"exit: 0 stopped, 2 usage or environment error\n");
}

int cmd_daemon(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "cycles", required_argument, NULL, 'n' },
		{ "until-idle", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct kb_daemon_opts dopts;
	struct kb_config cfg;
	const char *config_path = NULL;
	int c, rc;

	memset(&dopts, 0, sizeof(dopts));
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'n':
			if (kb_parse_i64(optarg, &dopts.cycles) || dopts.cycles < 1)
				return cli_usage_error("daemon", "--cycles '%s' is not a positive number",
						       optarg);
			break;
		case 'i':
			dopts.until_idle = true;
			break;
		case 'h':
			usage(stdout);
			return KB_EXIT_OK;
		default:
			return cli_usage_error("daemon", "unknown option");
		}
	}
	if (optind != argc)
		return cli_usage_error("daemon", "unexpected argument '%s'", argv[optind]);
	rc = cli_load_config(config_path, &cfg);
	if (rc) {
		kb_config_release(&cfg);
		return rc;
	}
	dopts.config_path = kb_config_default_path(config_path);
	rc = kb_daemon_run(&cfg, &dopts) ? KB_EXIT_USAGE : KB_EXIT_OK;
	kb_config_release(&cfg);
	return rc;
}
