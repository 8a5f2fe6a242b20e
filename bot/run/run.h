#ifndef KB_RUN_H
#define KB_RUN_H
/*
 * The pipeline for one operator, as a library call: describe it in the
 * harness, tune the built-in templates (templates/tune.h), with [llm]
 * models search (search/search.h) seeded with the templates' best, check
 * the best kernel again in a fresh process, and write the output folder
 * (report/run_report.h lists its files; kernel.json is written by
 * run/kernel_json.h, its format in bot/run/KERNEL_JSON.md).
 *
 * `kernelbot run` (cli/cmd_run.c) is a command line over kb_run: it sets
 * up the verifier, the progress and the runs table, and maps the outcome
 * to an exit code. The job loop starts that command as a child (for
 * isolation) and reads the folder back through run/kernel_json.h.
 */
#include "core/common.h"
#include "core/config.h"
#include "search/search.h"
#include "templates/tune.h"

struct kb_verifier;
struct kb_progress;

enum kb_run_outcome {
	KB_RUN_VERIFIED,        /* a verified kernel and its files are in out_dir */
	KB_RUN_NONE_VERIFIED,   /* no template applies, or no point or candidate verified */
	KB_RUN_ERROR,           /* environment, operator, store or output error (said on stderr) */
	KB_RUN_INTERRUPTED      /* a stop request (a search resumes when run again) */
};

/* "verified", "none verified", "error", "interrupted" */
const char *kb_run_outcome_name(enum kb_run_outcome o);

struct kb_run_opts {
	const char *operator_path;   /* a KernelBench .py file or a robust-kbench folder */
	const char *out_dir;         /* created when missing; an earlier run's files are replaced */
	const char *pass;            /* "forward" (NULL) or "backward" */
	enum kb_backend backend;     /* cuda or cpu, resolved */
	int64_t seeds;               /* trials per config of the final check; 0: [harness] seeds */
	int64_t deadline_ms;         /* kb_now_ms() after which no new point is tried; 0: none */
	struct kb_progress *progress; /* may be NULL */
	/* the LLM search (used only with [llm] models) */
	bool fresh;                  /* a new search even when one with the same key exists */
	uint64_t seed;               /* 0: [search] seed, else from the operator's hash */
	int64_t job_id;              /* the daemon's job the search belongs to; 0: none */
};

/*
 * What one run produced: the outcome and, behind it, everything
 * kernel.json records (run/kernel_json.h writes it from this struct and
 * nothing else). Owns every member.
 */
struct kb_run_result {
	enum kb_run_outcome outcome;
	char *operator_path;
	enum kb_backend backend;       /* cuda or cpu */
	char *pass;                    /* "forward" or "backward" */
	int64_t seeds;                 /* of the final check, resolved */
	/* the templates' run (always made: it describes the operator) */
	struct kb_tune_result tune;
	/* the LLM search's, when searched (kernel.json then has "search") */
	bool searched;
	struct kb_search_result search;
};

void kb_run_result_init(struct kb_run_result *r);
void kb_run_result_release(struct kb_run_result *r);

/*
 * Run the pipeline for o->operator_path with vf (initialised, its progress
 * set by the caller) and cfg (with [llm] models: templates first, with a
 * quarter of the time budget, then the search). res (initialised) gets
 * the outcome and every figure; with KB_RUN_VERIFIED out_dir holds the
 * kernel and its files. Failures are said on stderr. Returns res->outcome.
 */
enum kb_run_outcome kb_run(struct kb_verifier *vf, const struct kb_config *cfg, const struct kb_run_opts *o,
			   struct kb_run_result *res);

#endif
