#ifndef KB_CLI_VERIFIER_H
#define KB_CLI_VERIFIER_H
/*
 * What the commands that run the verifier (verify, bench, run) share:
 * the -c and --backend options, the config, the backend's default and
 * the verifier's start; and for verify and bench, their common options
 * (CLI_EVAL_OPTIONS) parsed into one struct.
 */
#include "core/common.h"
#include "core/config.h"
#include "verifier/harness_client.h"

#include <getopt.h>

struct cli_verifier {
	const char *cmd;            /* "verify", "bench", "run": messages start "kernelbot CMD: " */
	const char *config_path;    /* -c FILE; NULL: the default path */
	const char *backend_arg;    /* --backend as given; NULL: [harness] backend */
	enum kb_backend backend;    /* --backend parsed, or [harness] backend once started */
	bool cfg_loaded, vf_ready;  /* what cli_verifier_release releases */
	const char *sets[32];       /* --set SECTION.KEY=VALUE, applied over the config */
	size_t nr_sets;
	struct kb_config cfg;
	struct kb_verifier vf;
};

#define CLI_VERIFIER_INIT(name) { .cmd = (name), .backend = KB_BACKEND_AUTO }

/* --backend ARG into v (cuda or cpu). 0, or KB_EXIT_USAGE after saying what was wrong. */
int cli_verifier_backend(struct cli_verifier *v);
/*
 * Load the config, default the backend to [harness] backend, start the
 * verifier. 0, or KB_EXIT_USAGE after the error was printed. Call
 * cli_verifier_release afterwards either way.
 */
int cli_verifier_start(struct cli_verifier *v);
void cli_verifier_release(struct cli_verifier *v);

/* The options verify and bench share; each command ends its table with its own and { NULL }. */
#define CLI_EVAL_OPTIONS \
	{ "config", required_argument, NULL, 'c' }, \
	{ "backend", required_argument, NULL, 'b' }, \
	{ "timeout", required_argument, NULL, 't' }, \
	{ "seeds", required_argument, NULL, 's' }, \
	{ "max-configs", required_argument, NULL, 'm' }, \
	{ "pass", required_argument, NULL, 'p' }, \
	{ "json", required_argument, NULL, 'j' }, \
	{ "fresh", no_argument, NULL, 'f' }, \
	{ "set", required_argument, NULL, 'S' }, \
	{ "stream-mode", required_argument, NULL, 'k' }, \
	{ "help", no_argument, NULL, 'h' }

struct cli_eval_args {
	struct cli_verifier v;
	struct kb_eval_opts eo;
	const char *json_path;      /* --json */
	bool fresh;                 /* --fresh: a one-off harness process, not a worker */
};

/*
 * One of CLI_EVAL_OPTIONS but --help into a. 0 when taken, 1 when opt is
 * not one of them, KB_EXIT_USAGE after printing what was wrong with arg.
 */
int cli_eval_arg(struct cli_eval_args *a, int opt, const char *arg);
/*
 * After the options: --backend parsed and every kernel checked against the
 * operator (eo.operator_path). 0, or KB_EXIT_USAGE after saying why.
 */
int cli_eval_check(struct cli_eval_args *a, const char *const *kernels, size_t n);
/*
 * cli_verifier_start, then each kernel's backend resolved (*resolved: the
 * last one's) and, without --fresh, the evaluations sent to one worker.
 * 0, or KB_EXIT_USAGE after the error was printed.
 */
int cli_eval_start(struct cli_eval_args *a, const char *const *kernels, size_t n, enum kb_backend *resolved);

#endif
