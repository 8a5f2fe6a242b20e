#include "core/common.h"
#include "cli/cli.h"
#include "core/log.h"
#include "core/signals.h"
#include "verifier/sandbox.h"

#include <locale.h>

int main(int argc, char **argv)
{
	const char *name;
	int rc = KB_EXIT_USAGE;

	/* before any secret is read: no process of our user may read our memory */
	if (kb_sandbox_protect_self())
		return KB_EXIT_USAGE;
	setlocale(LC_NUMERIC, "C"); /* numbers in JSON and INI always use '.' */
	if (argc < 2) {
		cmd_help(1, argv);
		return KB_EXIT_USAGE;
	}
	name = argv[1];
	if (!strcmp(name, "--version") || !strcmp(name, "-V"))
		name = "version";
	else if (!strcmp(name, "--help") || !strcmp(name, "-h"))
		name = "help";

	kb_signals_install();
	for (size_t i = 0; i < cli_nr_commands; i++)
		if (!strcmp(cli_commands[i].name, name)) {
			optind = 0; /* each command runs its own getopt_long from argv[1] */
			rc = cli_commands[i].run(argc - 1, argv + 1);
			goto out;
		}
	rc = cli_unknown_command(name);
out:
	log_close();
	log_clear_secrets();
	return rc;
}
