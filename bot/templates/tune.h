#ifndef KB_TUNE_H
#define KB_TUNE_H
/*
 * The autotuner of the built-in templates (issue 4): from an operator to
 * its best verified template instance.
 *
 *  1. describe the operator in the harness (its "analysis"), unless cached;
 *  2. kb_template_new for the analysis' family (none: no template);
 *  3. search the template's parameter space (struct kb_search): every
 *     point when the space is small, else a deterministic sample and then
 *     coordinate search around the best point, never more than
 *     [templates] max_points points;
 *  4. each point is rendered (points that render the same source are one
 *     candidate), statically checked, built (all in parallel), verified
 *     (KB_TUNE_SEEDS seeds) and only when verified timed, all in one
 *     persistent harness worker; fitness is the geometric-mean speedup
 *     over eager across configs;
 *  5. the best point is verified again, with the full seeds and timing, in
 *     a fresh harness process: that is the verdict reported. Should it fail
 *     there, the next best is tried.
 *
 * Measurements are cached in the state store's timings table, per device
 * model, operator content, backend, template kind, point and source (plus
 * the settings that change a verdict), so a second run of the same
 * operator on the same machine builds and times nothing. Each is stored
 * the moment it is made (a verification before its point's timing too),
 * so a killed run, run again, evaluates no finished step twice.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "verifier/operator_hash.h"

#include <cjson/cJSON.h>

struct kb_progress;
struct kb_verifier;

/* Seeds per config while tuning; the final check uses the full seeds. */
#define KB_TUNE_SEEDS 2

/* --- the search strategy (pure) --- */

struct kb_search {
	size_t nr;              /* parameters */
	size_t *radix;          /* values per parameter */
	size_t total;           /* points in the space */
	size_t max_points, exhaustive_limit, refine_rounds;
	uint64_t rng;           /* splitmix64 state */
	bool exhaustive;
	size_t round;           /* batches handed out so far */
	size_t *seen;           /* every proposed point, in order */
	size_t nr_seen, alloc_seen;
	size_t *set;            /* open-addressing set of seen + 1 (0: empty) */
	size_t set_size;
	/* optional: a point's canonical number (the one rendering the same
	 * source, kb_template_point_canonical); only those are proposed */
	size_t (*canon)(void *ctx, size_t index);
	void *canon_ctx;
};

/*
 * A search over a space with nr parameters of radix[i] values each (the
 * first value of each is its default). Points are mixed-radix indices,
 * the first parameter slowest (as kb_template_point_at). 0, or -1 when
 * the space is empty or its size overflows (logged).
 */
int kb_search_init(struct kb_search *s, const size_t *radix, size_t nr, size_t max_points,
		   size_t exhaustive_limit, size_t refine_rounds, uint64_t seed);
void kb_search_release(struct kb_search *s);

/*
 * The next batch of points to evaluate into batch (room for max_points),
 * returning how many; 0 when the search is over. The first batch is the
 * whole space when it has at most min(exhaustive_limit, max_points)
 * points, else the default point and a seeded sample (half of max_points
 * when refinement follows). Each later batch, up to refine_rounds of them,
 * holds the not yet proposed neighbours of best (each parameter one value
 * up or down) while max_points allows; best is the index of the best
 * point measured so far, SIZE_MAX when none verified (the search stops).
 */
size_t kb_search_next(struct kb_search *s, size_t best, size_t *batch);

/* index -> one value index per parameter, and back. */
void kb_search_digits(const struct kb_search *s, size_t index, size_t *digits);
size_t kb_search_index(const struct kb_search *s, const size_t *digits);

/* --- cache keys --- */

/*
 * The timings-table key of one point's measurement:
 * "tune/1|DEVICE|OPHASH|BACKEND|PASS|KIND|POINT|SRCHASH|SETTINGS".
 */
void kb_tune_point_key(struct strbuf *out, const char *device, const char *op_hash,
		       const char *backend, const char *pass, const char *kind, const char *point,
		       const char *src_hash, const char *settings);
/*
 * A point verified while tuning (SEEDS seeds per config) and not yet timed:
 * its kb_tune_point_key followed by "|checked|SEEDS". A batch is verified
 * first, then timed; a run killed in between finds this and times the
 * point without verifying it again.
 */
void kb_tune_checked_key(struct strbuf *out, const char *device, const char *op_hash,
			 const char *backend, const char *pass, const char *kind, const char *point,
			 const char *src_hash, int64_t seeds, const char *settings);
/* A source's final verdict: "tune-final/1|DEVICE|OPHASH|BACKEND|PASS|SRCHASH|SEEDS|SETTINGS". */
void kb_tune_final_key(struct strbuf *out, const char *device, const char *op_hash,
		       const char *backend, const char *pass, const char *src_hash, int64_t seeds,
		       const char *settings);
/*
 * A kernel's final verdict for eo (mode, pass, seeds, timing set) in a
 * fresh harness process: the verdict cached in st under key when there is
 * one (*cached set); else source is written to kernel_path (its folder
 * made), vf's persistent worker is set aside for the run (it is for
 * throughput, the verdict comes from a clean process), and the verdict is
 * cached unless it is an error or a timeout. Used by the tuner and by the
 * LLM search for their best kernels. 0 with *evidence set, or -1.
 */
/*
 * One final check of the kernel the caller has in mind, for pass, timed or
 * not: 0 with *evidence (and *cached), or -1 / KB_ECANCELLED.
 */
typedef int (*kb_final_check_fn)(void *ctx, const char *pass, bool timing, cJSON **evidence,
				 bool *cached);

/*
 * The final check of a kernel for pass, timed; a backward kernel ships its
 * forward too, so that is checked untimed as well and, when it fails,
 * decides: *evidence is then a copy of the forward's and *fwd_failed set.
 * *forward: the forward's evidence (backward and verified only, else
 * NULL; the caller owns both). *cached: every check came from the cache.
 * 0, or the first non-zero return of check.
 */
int kb_final_check_pass(kb_final_check_fn check, void *ctx, const char *pass, cJSON **evidence,
			cJSON **forward, bool *cached, bool *fwd_failed);

struct kb_verifier;
struct kb_state;
struct kb_eval_opts;
int kb_tune_fresh_verdict(struct kb_verifier *vf, struct kb_state *st, const char *key,
			  const char *source, const char *kernel_path, struct kb_eval_opts *eo,
			  cJSON **evidence, bool *cached);
/* The describe result: "describe/1|DEVICE|OPHASH|BACKEND|PASS|TORCH|KBVERSION". */
void kb_tune_describe_key(struct strbuf *out, const char *device, const char *op_hash,
			  const char *backend, const char *pass, const char *torch_version);
/*
 * 16 hex characters over what changes a verdict or a timing besides the
 * kernel: configs, tolerances, timing settings, baselines.
 */
void kb_tune_settings_hash(const struct kb_config *cfg, char out[17]);

/* kb_operator_hash: the operator's content hash (verifier/operator_hash.h). */

/* The device model: the GPU's name from the probe (cuda), else the CPU's from /proc/cpuinfo. */
void kb_tune_device_name(const struct kb_verifier *vf, enum kb_backend backend, struct strbuf *out);

/* timings table: the value stored under key (the caller frees it), NULL when absent. */
struct kb_state;
cJSON *kb_timings_get(struct kb_state *st, const char *key);
int kb_timings_put(struct kb_state *st, const char *key, const cJSON *value);

/* --- tuning --- */

enum kb_tune_state {
	KB_TP_STATIC,       /* static check finding */
	KB_TP_BUILD,        /* did not compile */
	KB_TP_REJECTED,     /* the harness rejected it */
	KB_TP_ERROR,        /* the harness or the operator failed */
	KB_TP_VERIFIED      /* verified and timed */
};

/* "static", "build", "rejected", "error", "verified" */
const char *kb_tune_state_name(enum kb_tune_state s);

struct kb_tune_point {
	size_t index;           /* in the space */
	char *name;             /* "threads=256 vec=4" */
	char sha[65];           /* of the rendered source */
	enum kb_tune_state state;
	char *reason;           /* the first reason when not verified */
	double fitness;         /* geomean speedup over eager; 0 when not timed */
	double speedup_compile; /* geomean over torch.compile; NAN when none */
	double build_s;         /* compile seconds */
	bool cached;            /* measured by an earlier run */
	bool duplicate;         /* renders the source of an earlier point */
};

enum kb_tune_outcome {
	KB_TUNE_OK,             /* a verified best point */
	KB_TUNE_NO_TEMPLATE,    /* family none, or an op the templates lack: why */
	KB_TUNE_NONE_VERIFIED,  /* no point passed: why */
	KB_TUNE_OPERATOR_ERROR  /* the reference itself failed in the harness: why */
};

struct kb_tune_opts {
	const char *operator_path;
	const char *pass;       /* "forward" (NULL) or "backward": then the template gets a
				 * kb_backward, tuned on the backward pass, and the
				 * best point's forward is verified too */
	enum kb_backend backend; /* cuda or cpu, resolved */
	int64_t seeds;          /* the final check's; 0: [harness] seeds */
	struct kb_progress *progress; /* may be NULL */
	/*
	 * kb_now_ms() after which no new point is evaluated (0: none). The
	 * search goes on in chunks of [build] jobs points; once the deadline
	 * has passed and a point has verified, it stops, and the best point
	 * so far gets its final check (which runs past the deadline: the
	 * caller leaves time for it) with res->cut_short set. Before any
	 * point has verified the search goes on: there is nothing to finish
	 * with yet.
	 */
	int64_t deadline_ms;
};

struct kb_tune_result {
	enum kb_tune_outcome outcome;
	char *why;              /* outcome != OK */
	char *device;
	char op_hash[65];
	cJSON *describe;        /* the describe result (environment, configs, analysis) */
	const cJSON *analysis;  /* inside describe */
	char *family, *kind, *ext;
	bool has_backward;
	size_t space_size;
	cJSON *space;           /* [{"name", "values": [...]}] */
	struct kb_tune_point *points;   /* in the order evaluated */
	size_t nr_points, alloc_points;
	size_t built, verified, timed, cache_hits;
	long best;              /* index into points, -1: none */
	cJSON *best_point;      /* {"param": value, ...} */
	struct strbuf best_source;
	cJSON *evidence;        /* the final check (fresh process) */
	cJSON *forward_evidence; /* pass backward: the forward pass checked too (fresh, no timing) */
	bool final_cached;      /* the final evidence came from the cache */
	bool all_cached;        /* nothing was built or timed */
	bool cut_short;         /* the deadline stopped the search before it ran its course */
	double seconds;         /* wall time of kb_tune */
};

void kb_tune_result_init(struct kb_tune_result *r);
void kb_tune_result_release(struct kb_tune_result *r);

/*
 * Tune o->operator_path on o->backend with vf (initialised; its worker is
 * used for throughput and stopped before the final check). Returns 0 with
 * res->outcome set, -1 on an environment error (logged), KB_ECANCELLED
 * on a stop request.
 */
int kb_tune(struct kb_verifier *vf, const struct kb_tune_opts *o, struct kb_tune_result *res);

#endif
