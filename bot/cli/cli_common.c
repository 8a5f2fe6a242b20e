#include "core/common.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "core/util.h"

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kernelbot %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'kernelbot %s --help'.\n", cmd);
	return KB_EXIT_USAGE;
}

int cli_unknown_command(const char *name)
{
	const char *best = NULL;
	size_t best_d = 3; /* only close misspellings */

	for (size_t i = 0; i < cli_nr_commands; i++) {
		size_t d = kb_edit_distance(cli_commands[i].name, name);

		/* "stat" for "status": a prefix is as good as a typo */
		if (!strncmp(cli_commands[i].name, name, strlen(name)) && strlen(name) >= 2)
			d = 1;
		if (d < best_d) {
			best_d = d;
			best = cli_commands[i].name;
		}
	}
	fprintf(stderr, "kernelbot: unknown command '%s'", name);
	if (best)
		fprintf(stderr, " (did you mean '%s'?)", best);
	fprintf(stderr, "\nTry 'kernelbot --help' for the list of commands.\n");
	return KB_EXIT_USAGE;
}

int cli_load_config(const char *explicit_path, struct kb_config *cfg)
{
	const char *path = kb_config_default_path(explicit_path);

	if (explicit_path && !path) {
		fprintf(stderr, "kernelbot: config file '%s' does not exist\n", explicit_path);
		kb_config_init(cfg);
		return KB_EXIT_USAGE;
	}
	if (!path) {
		kb_config_init(cfg);
		return 0;
	}
	if (kb_config_load(cfg, path))
		return KB_EXIT_USAGE;
	if (log_open(cfg->log_file))
		return KB_EXIT_USAGE;
	log_set_level(cfg->log_level);
	/* on every start, in every command: what running unconfined costs */
	if (!cfg->sandbox_enabled)
		log_warn("the sandbox is off ([sandbox] enabled = false in %s): candidate kernels "
			 "and operator files run with this user's rights and can read its secrets",
			 cfg->source ? cfg->source : path);
	return 0;
}
