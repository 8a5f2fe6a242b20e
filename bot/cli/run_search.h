#ifndef KB_CLI_RUN_SEARCH_H
#define KB_CLI_RUN_SEARCH_H
/*
 * `kernelbot run` with models configured ([llm] models): the built-in
 * templates first, where they apply (kb_tune, a quarter of the time
 * budget), then the LLM search (search/search.h) seeded with their best.
 * The output directory gets what the template path writes (kernel.cu or
 * .cpp, kernel.json, evidence.json, report.md, binding.py), kernel.json
 * a "search" object and report.md a search section; DIR/search.json is
 * rewritten after every generation while the search runs.
 */
#include "core/common.h"

struct kb_config;
struct kb_verifier;
struct kb_tune_opts;

struct cli_search_args {
	bool fresh;             /* --fresh: a new search, even when one with the same key exists */
	uint64_t seed;          /* --seed N; 0: [search] seed, else from the operator's hash */
	int64_t job_id;         /* --job-id N: the daemon's job this search belongs to; 0: none */
};

/*
 * Run the templates and the search for to->operator_path (to: as cmd_run
 * filled it: backend resolved, pass, final seeds, deadline, progress).
 * Returns KB_EXIT_OK (a verified kernel was written), KB_EXIT_NO (none
 * verified) or KB_EXIT_USAGE (environment error, interrupted).
 */
int cli_run_search(struct kb_verifier *vf, const struct kb_config *cfg, const struct kb_tune_opts *to,
		   const char *out_dir, const struct cli_search_args *args);

#endif
