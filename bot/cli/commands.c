#include "core/common.h"
#include "cli/cli.h"

/* The dispatch table: later commands (verify, bench, run, daemon, action) add a row. */
const struct cli_command cli_commands[] = {
	{ "help", "show commands, or one command's help", cmd_help },
	{ "version", "print the version", cmd_version },
	{ "config", "check and print the configuration (config check)", cmd_config },
	{ "status", "list jobs and their state", cmd_status },
	{ "verify", "check a kernel against an operator (exit 0 verified, 1 rejected)", cmd_verify },
	{ "bench", "time a kernel against torch eager and torch.compile", cmd_bench },
	{ "run", "tune a built-in template kernel for an operator (exit 0 verified kernel written)", cmd_run },
	{ "wire", "wire a run's kernel into a repository's module: ops.py, the patch, the wiring check", cmd_wire },
	{ "daemon", "watch repositories (polling, webhooks) and run labelled pull requests' jobs", cmd_daemon },
	{ "action", "run the job of a GitHub Actions pull_request event (writes step outputs)", cmd_action },
	{ "local", "act on the local forge as a maintainer (demo, tests)", cmd_local },
	{ "operator", "write a .kernelbot.ini [operator NAME] section's module as a KernelBench operator file", cmd_operator },
};
const size_t cli_nr_commands = ARRAY_SIZE(cli_commands);
