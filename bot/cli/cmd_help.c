#include "core/common.h"
#include "cli/cli.h"

static void print_overview(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot <command> [options]\n"
		"       kernelbot --version | --help\n"
		"\n"
		"kernelbot turns labelled PyTorch operators into verified, faster CUDA kernels.\n"
		"\n"
		"commands:\n");
	for (size_t i = 0; i < cli_nr_commands; i++)
		fprintf(fp, "  %-10s %s\n", cli_commands[i].name, cli_commands[i].summary);
	fprintf(fp,
		"\n"
		"Every command takes --help and -c FILE (default ./config.ini, then\n"
		"/etc/kernelbot/config.ini, then built-in defaults).\n"
		"\n"
		"exit codes: 0 ok, 1 the work said no (rejected, failed), 2 usage or environment error\n");
}

int cmd_help(int argc, char **argv)
{
	/* `kernelbot help CMD` is `kernelbot CMD --help` */
	if (argc > 1 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h")) {
		for (size_t i = 0; i < cli_nr_commands; i++)
			if (!strcmp(argv[1], cli_commands[i].name) && strcmp(argv[1], "help")) {
				char *sub[] = { argv[1], (char *)"--help", NULL };

				return cli_commands[i].run(2, sub);
			}
		return cli_unknown_command(argv[1]);
	}
	print_overview(stdout);
	return KB_EXIT_OK;
}

int cmd_version(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: kernelbot version\n\nPrint the version and exit.\n");
		return KB_EXIT_OK;
	}
	printf("kernelbot %s\n", KB_VERSION);
	return KB_EXIT_OK;
}
