#ifndef KB_CLI_H
#define KB_CLI_H
/*
 * The command line: `kernelbot <command> [options]`. Each command lives in
 * its own cmd_*.c and is one row in cli_commands[] (commands.c). Every
 * command parses its own options with getopt_long, accepts --help and
 * -c FILE, and returns one of the exit codes below.
 */
#include "core/common.h"

#include <cjson/cJSON.h>

struct kb_config;

enum kb_exit {
	KB_EXIT_OK = 0,      /* done, or verified */
	KB_EXIT_NO = 1,      /* the work said no: rejected kernel, failed job */
	KB_EXIT_USAGE = 2    /* bad usage or environment */
};

struct cli_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
};

extern const struct cli_command cli_commands[];
extern const size_t cli_nr_commands;

/* Print "kernelbot CMD: message" and a hint to --help; returns KB_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) KB_PRINTF(2, 3);
/*
 * "kernelbot: unknown command 'NAME'" with the closest command when one is
 * close, then one hint: 'kernelbot --help' lists the commands. KB_EXIT_USAGE.
 */
int cli_unknown_command(const char *name);
/*
 * Load the config a command was given (-c FILE), or the default path, apply
 * its logging settings, and register its secrets. Returns 0 or KB_EXIT_USAGE
 * after the error was printed.
 */
int cli_load_config(const char *explicit_path, struct kb_config *cfg);

/*
 * The evaluation options verify and bench share: 'p' --pass, 't'
 * --timeout, 's' --seeds, 'm' --max-configs, parsed into eo. 0 when taken, 1 when opt is not
 * one of them, KB_EXIT_USAGE after printing what was wrong with arg.
 */
struct kb_eval_opts;
int cli_eval_option(const char *cmd, int opt, const char *arg, struct kb_eval_opts *eo);

/*
 * The headline policy's lines (bot/report/HEADLINE.md) after an evidence's
 * summary: the headline on the operator's own shapes, the worst config,
 * a warning for configs slower than eager beyond the noise band (floor:
 * [report] noise_band) and for a single config, and every config the
 * verifier left out with its reason. Each line starts with prefix.
 */
void cli_print_headline(const cJSON *evidence, double noise_floor, const char *prefix, FILE *fp);

int cmd_help(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_wire(int argc, char **argv);
int cmd_daemon(int argc, char **argv);
int cmd_action(int argc, char **argv);
int cmd_local(int argc, char **argv);
int cmd_operator(int argc, char **argv);

#endif
