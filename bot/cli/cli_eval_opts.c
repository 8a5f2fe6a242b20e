#include "core/common.h"
#include "cli/cli.h"
#include "core/util.h"
#include "verifier/harness_client.h"

int cli_eval_option(const char *cmd, int opt, const char *arg, struct kb_eval_opts *eo)
{
	switch (opt) {
	case 'p':
		if (strcmp(arg, "forward") && strcmp(arg, "backward"))
			return cli_usage_error(cmd, "unknown pass '%s' (forward or backward)", arg);
		eo->pass = arg;
		return 0;
	case 't':
		if (kb_parse_i64(arg, &eo->timeout_s) || eo->timeout_s < 1 || eo->timeout_s > 86400)
			return cli_usage_error(cmd, "--timeout '%s' is not a number of seconds (1-86400)", arg);
		return 0;
	case 's':
		if (kb_parse_i64(arg, &eo->seeds) || eo->seeds < 1 || eo->seeds > 100)
			return cli_usage_error(cmd, "--seeds '%s' is not a number from 1 to 100", arg);
		return 0;
	case 'm':
		/* the same seeds and number of configs give a pull request's table again */
		if (kb_parse_i64(arg, &eo->max_configs) || eo->max_configs < 1 || eo->max_configs > 256)
			return cli_usage_error(cmd, "--max-configs '%s' is not a number from 1 to 256", arg);
		return 0;
	case 'k':
		/* KernelBench's semantics on request only: the bot stays strict */
		if (strcmp(arg, "strict") && strcmp(arg, "kernelbench"))
			return cli_usage_error(cmd, "unknown --stream-mode '%s' (strict or kernelbench)", arg);
		eo->stream_mode = arg;
		return 0;
	default:
		return 1;
	}
}
