#include "core/common.h"
#include "verifier/sandbox.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/util.h"

#include <getopt.h>

static void usage_config(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot config check [-c FILE] [--quiet]\n"
		"\n"
		"subcommands:\n"
		"  check   load the configuration, report the first error (file, line,\n"
		"          key) or print the effective configuration, secrets as ***\n"
		"\n"
		"Run 'kernelbot config check --help' for its options.\n");
}

static void usage_check(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot config check [-c FILE] [--quiet]\n"
		"\n"
		"Load the configuration and print it as INI (every key, its effective\n"
		"value, secrets as ***), then try the sandbox ([sandbox]) on this\n"
		"machine. The file is FILE, else ./config.ini, else\n"
		"/etc/kernelbot/config.ini, else the built-in defaults. Exits 2 when\n"
		"the file is invalid or the sandbox does not work here.\n"
		"\n"
		"options:\n"
		"  -c, --config FILE  the config file to check\n"
		"  -q, --quiet        print nothing on success, only the exit status\n"
		"  -h, --help         show this help\n"
		"\n"
		"exit codes: 0 valid, 2 invalid (the error names file, line and key)\n");
}

/* getopt_long runs with opterr = 0: name the bad option ourselves. */
static int bad_option(const char *cmd, char **argv, int opt)
{
	if (opt == ':')
		return cli_usage_error(cmd, "option '%s' needs an argument", argv[optind - 1]);
	if (optopt)
		return cli_usage_error(cmd, "unknown option '-%c'", optopt);
	return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
}

/* Whether untrusted code can be contained here: a line on stdout, or an
 * error naming the cause and the setting. 0, or -1 when it cannot. */
static int check_sandbox(const struct kb_config *cfg, bool quiet)
{
	struct kb_sandbox sb;
	struct strbuf why = STRBUF_INIT;
	int rc = -1;

	kb_sandbox_init(&sb);
	if (kb_sandbox_setup(&sb, cfg))
		goto out;
	if (kb_sandbox_probe(&sb, &why)) {
		error("the sandbox does not work on this machine: %s", why.buf);
		goto out;
	}
	if (!quiet && sb.enabled)
		printf("# sandbox: works (%s, seccomp %s)\n", sb.bwrap, sb.seccomp ? "on" : "off");
	else if (!quiet)
		printf("# sandbox: off: untrusted code runs with this user's rights\n");
	rc = 0;
out:
	strbuf_release(&why);
	kb_sandbox_release(&sb);
	return rc;
}

static int config_check(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct kb_config cfg;
	const char *file = NULL;
	bool quiet = false;
	int opt, rc;

	optind = 0;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":c:qh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			file = optarg;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			usage_check(stdout);
			return KB_EXIT_OK;
		default:
			return bad_option("config check", argv, opt);
		}
	}
	if (optind < argc)
		return cli_usage_error("config check", "unexpected argument '%s'", argv[optind]);

	rc = cli_load_config(file, &cfg);
	if (!rc && !quiet)
		kb_config_print(&cfg, stdout);
	if (!rc && check_sandbox(&cfg, quiet))
		rc = -1;
	kb_config_release(&cfg);
	return rc ? KB_EXIT_USAGE : KB_EXIT_OK;
}

int cmd_config(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int opt;

	/* '+': stop at the subcommand, whose options are its own */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			usage_config(stdout);
			return KB_EXIT_OK;
		default:
			return bad_option("config", argv, opt);
		}
	}
	if (optind >= argc)
		return cli_usage_error("config", "a subcommand is required (check)");
	if (!strcmp(argv[optind], "check"))
		return config_check(argc - optind, argv + optind);
	return cli_usage_error("config", "unknown subcommand '%s'", argv[optind]);
}
