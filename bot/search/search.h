#ifndef KB_SEARCH_H
#define KB_SEARCH_H
/*
 * The LLM search (issue 6): from an operator to its best verified kernel
 * by translation, repair, filtering and MAP-Elites evolution, every step
 * stored so that a killed search resumes where it stood and a search run
 * again from its seed replays its recorded model answers.
 *
 *   translate  [search] initial first kernels from the operator's source,
 *              configs, the ABI header and a worked example, spread over
 *              the islands; the seed kernels (the templates' best) enter
 *              the archive first
 *   repair     a failed candidate (build error, static finding, harness
 *              rejection) goes back with the trimmed error or the
 *              harness's reasons, up to [search] repair_rounds times
 *   filter     static checks, then the three LLM verifiers (compile,
 *              numerics, memory; [search] llm_verifiers), before any
 *              build; a [search] verifier_audit share of what they reject
 *              is evaluated anyway, to measure their precision
 *   evaluate   builds in parallel, then the persistent harness worker:
 *              KB_TUNE_SEEDS seeds, timed against eager when verified;
 *              fitness = geometric-mean speedup of verified kernels only;
 *              a kernel that would become the best is verified again
 *              with the final check's seeds before it is archived
 *   evolve     per generation, per island, [search] per_generation
 *              children: mutation of a parent (kb_archive_select) with
 *              inspirations, or crossover of two elites; the parent's
 *              evidence, compiler resources and hints in the prompt;
 *              duplicates (kb_source_hash) dropped before any build;
 *              ring migration; meta-prompt rewrites by the aux model
 *   templates  the best LLM kernel rewritten with `// kb-tune` parameters
 *              and tuned with the built-in autotuner's search strategy
 *   final      the best kernel verified again with the full seeds and
 *              timing in a fresh harness process (the reported verdict);
 *              if it fails there, the next best, and so on while the time
 *              budget allows (templates/final_check.h)
 *
 * Persistence and keys: search_db.h. Budgets (money, tokens, daily) are
 * checked before every call (llm/usage.h), the deadline before every
 * call and batch, and it bounds every model call, build and harness call
 * too: when one runs out the search stops proposing and ends with the
 * best so far, "cut short". A failed model call is recorded and
 * the slot moves on; the search never fails because of a model.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"

#include <cjson/cJSON.h>

struct kb_verifier;
struct kb_state;
struct kb_llm_client;
struct kb_progress;

/* A kernel known before the search: the built-in templates' best. */
struct kb_search_seed {
	const char *source;
	const char *label;         /* "softmax template, threads=256 rows=4" */
	double fitness;            /* geomean speedup over eager while tuning */
	const cJSON *evidence;     /* its fresh-process final check, NULL: none */
};

struct kb_search_opts {
	const char *operator_path;
	const char *pass;          /* "forward" (NULL) or "backward" */
	enum kb_backend backend;   /* resolved: cuda or cpu */
	const cJSON *describe;     /* the harness's describe result (kb_tune_result.describe) */
	uint64_t seed;             /* 0: [search] seed, else derived from the operator's hash */
	int64_t deadline_ms;       /* on kb_now_ms()'s clock; 0: none */
	int64_t final_seeds;       /* 0: [harness] seeds */
	int64_t job_id;            /* 0: none */
	bool fresh;                /* a new search even when one with this key exists */
	const struct kb_search_seed *seeds;
	size_t nr_seeds;
	const char *status_path;   /* search.json, rewritten after each generation; NULL: none */
	struct kb_progress *progress; /* may be NULL */
};

enum kb_search_outcome {
	KB_SEARCH_OK,              /* a verified best kernel */
	KB_SEARCH_NONE_VERIFIED    /* nothing passed the final check: why */
};

struct kb_search_result {
	enum kb_search_outcome outcome;
	char *why;
	int64_t search_id;
	bool resumed;              /* continued a search found running in the store */
	bool cached;               /* the search had finished earlier: nothing ran */
	char *cut_short;           /* NULL, or why it stopped proposing early */
	int64_t best_candidate_id;
	char *best_proposer;       /* template, translate, repair, mutate, crossover, tune */
	char *best_model;          /* NULL for template and tune kernels */
	struct strbuf best_source;
	char best_sha[65];         /* SHA-256 of best_source's bytes */
	cJSON *evidence;           /* the final check's */
	cJSON *summary;            /* kernel.json's "search" object (search_status.c) */
	double seconds;            /* this run's wall time */
};

void kb_search_result_init(struct kb_search_result *r);
void kb_search_result_release(struct kb_search_result *r);

/*
 * Run (or resume, or return the finished) search of o->operator_path.
 * vf is initialised (its worker is used and stopped before the final
 * check); llm has at least one model; st is the open store. Returns 0
 * with res->outcome set, -1 on an environment or store error (logged),
 * KB_ECANCELLED on a stop request (the search stays resumable).
 */
int kb_search_run(struct kb_verifier *vf, struct kb_state *st, struct kb_llm_client *llm,
		  const struct kb_search_opts *o, struct kb_search_result *res);

/* report.md's search section (figures, archive grid, verifier precision and recall) from summary. */
void kb_search_report_markdown(struct strbuf *out, const cJSON *summary);

#endif
