#ifndef KB_SEARCH_PRIV_H
#define KB_SEARCH_PRIV_H
/*
 * What the search's files share (search.c the loop, search_llm.c model
 * calls and prompt text, search_eval.c candidates and their evaluation,
 * llm_verifiers.c the soft verifiers, tune_llm.c the tuning of
 * templatized kernels,
 * search_status.c the summary). Not for use outside bot/search.
 */
#include "core/common.h"
#include "core/budget.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "llm/llm.h"
#include "llm/usage.h"
#include "search/archive.h"
#include "search/metaprompt.h"
#include "search/search.h"
#include "search/search_db.h"
#include "search/search_prompts.h"
#include "search/extract.h"
#include "templates/tune.h"

struct kb_verifier;
struct kb_llm_pool;

/* A best-so-far point of the history. */
struct srch_hist {
	double t_s, best;
	int64_t candidate_id;
};

/* The prompt template files, loaded once. */
enum srch_tmpl {
	T_TRANSLATE, T_REPAIR, T_MUTATE, T_CROSSOVER, T_VERIFY_COMPILE, T_VERIFY_NUMERICS,
	T_VERIFY_MEMORY, T_META, T_TEMPLATIZE, T_INSPIRATION, T_RULES, T_EXAMPLE,
	T_STRATEGIES, T_PITFALLS, T_ANALYSIS, T_NR
};

/* The recent failure diagnoses a meta-prompt rewrite sees. */
#define SRCH_MAX_DIAGNOSES 24

/* A templatized LLM kernel and what is left of its parameter space (tune_llm.c). */
struct srch_tune_base {
	int64_t base_id, g;
	double base_fit;                 /* the base's speedup: the fittest base is tuned first */
	char *code, *key, *model;        /* the rewrite with kb-tune lines, its call key, its model */
	struct kb_tparams tp;
	struct kb_search ks;
	size_t *points, nr_points, at;   /* kb_search_next's batch, and the next point of it */
	size_t best_index;               /* SIZE_MAX: none verified yet */
	size_t fresh;                    /* points that were not a kernel the search held already */
	double best_fit;
};

/* The tuning done in the model's waits (tune_llm.c). */
struct srch_tuner {
	struct srch_tune_base *q;        /* bases with points left */
	size_t nr, alloc;
	int64_t *asked;                  /* bases whose templatize call this run made or replayed */
	size_t nr_asked, alloc_asked;
	double best;                     /* the fittest verified point (0: none) */
	size_t points;                   /* points this run evaluated */
};

struct srch {
	struct kb_verifier *vf;
	const struct kb_config *cfg;
	struct kb_state *st;
	struct kb_llm_client *llm;
	const struct kb_search_opts *o;
	struct kb_search_result *res;
	struct kb_progress *pg;
	struct kb_llm_budget budget;

	/* identity */
	struct kb_search_row row;      /* id, key, generation (completed), rng, best, wall_s */
	char call_base[17];
	char op_hash[65], settings[17];
	uint64_t seed;
	const char *backend, *pass, *ext;
	char *device;
	size_t nr_islands;
	int64_t generations;           /* of evolution */
	struct strbuf work;            /* <state_dir>/search/<id>: kernel files */

	/* prompt material */
	struct strbuf tmpl[T_NR];
	struct kb_prompt_vars base;    /* operator, configs, ABI, example, rules, device, ... */

	/* what the search knows */
	struct kb_archive archive;
	struct kb_prompt *prompts;
	size_t nr_prompts, alloc_prompts;
	struct kb_search_cand **cands; /* every candidate of the search, in id order */
	size_t nr_cands, alloc_cands;
	struct srch_hist *hist;
	size_t nr_hist, alloc_hist, hist_stored;
	double best_fitness;           /* the archive's best (0: none); a tune point's is tuner.best */
	int64_t best_id;               /* the best so far, archived or tuned */
	struct strvec diagnoses;       /* recent failures, for meta-prompt rewrites */
	int64_t diag_ids[SRCH_MAX_DIAGNOSES]; /* their search_diagnoses rows (0: not stored) */
	uint64_t diag_pushed;          /* diagnoses ever pushed: which ones a rewrite saw */

	/* this run */
	int64_t t0_ms;
	double wall_before;            /* wall_s of earlier runs of this search */
	int64_t generation;            /* the generation being worked on */
	char *cut_short;
	struct kb_budget clock;    /* the time budget: may a batch still be evaluated */
	struct kb_llm_pool *pool;      /* the generations' model calls in flight (llm/pool.h) */
	/*
	 * While the flow runs (search_flow.c): idle takes the replies that
	 * complete while the harness judges a batch (kb_eval_opts.idle, with
	 * flow); flow_waits says whether replies so taken left the flow
	 * something to do (candidates ready, a generation to move on).
	 */
	void (*idle)(void *flow);
	bool (*flow_waits)(void *flow);
	void *flow;
	size_t evaluated, replayed, asked, failed_calls;
	struct srch_tuner tuner;
};

/* What a slot asks for. */
enum srch_kind { K_TRANSLATE, K_MUTATE, K_CROSSOVER };

/* A slot's plan: kind, parents, prompt; drawn from an rng of (seed, g, island, slot) only. */
struct srch_plan {
	enum srch_kind kind;
	struct kb_search_cand *parent, *second;
	struct kb_prompt *prompt;
	int64_t insp[16];
	size_t nr_insp;
};

/* One proposal of a generation, planned and rendered, for the flow (search_flow.c). */
struct srch_flow_spec {
	int64_t g, island, slot;
	enum srch_kind kind;
	int64_t parent_id, second_id, prompt_id;
	struct strbuf prompt;
};

/* A generation's meta-prompt rewrite, asked as its last call (srch_meta_prompt). */
struct srch_meta {
	bool due;
	size_t model, parent;            /* the aux model; the prompt rewritten (index) */
	size_t seen;                     /* the diagnoses shown */
	uint64_t seen_mark;              /* s->diag_pushed then */
};

/* --- search.c --- */

/*
 * Generation g planned: its stage name ("translate", "evolve G/N", the
 * progress stage begun) and its proposals, every slot's prompt rendered;
 * the kind of a slot asked before (a kill, a replay) stays. 0 or -1.
 */
int srch_generation_plan(struct srch *s, int64_t g, struct srch_flow_spec **specs, size_t *n,
			 struct strbuf *stage);
/* After generation g: the island bests migrate when [search] migration_interval says so. */
void srch_generation_migrate(struct srch *s, int64_t g);
/* After generation g: m->due when a meta-prompt rewrite is due (prompt: its request, the aux model's). 0 or -1. */
int srch_meta_prompt(struct srch *s, int64_t g, struct srch_meta *m, struct strbuf *prompt);
/* Its answer (NULL: the call failed): a new prompt, and the diagnoses it saw dropped. */
void srch_meta_take(struct srch *s, const struct srch_meta *m, const struct kb_llm_reply *reply);
/* Store generation g's archive, prompts, history and counters together: g is done. 0 or -1. */
int srch_commit(struct srch *s, int64_t g);

/* "translate", "mutate", "crossover". */
const char *srch_kind_name(enum srch_kind k);
/* A failed candidate's repair prompt. 0 or -1 (logged). */
int srch_repair_prompt(struct srch *s, const struct kb_search_cand *c, struct strbuf *prompt);

/* Seconds this search has run, earlier runs included. */
double srch_wall_s(const struct srch *s);
/* The final check's seeds: --seeds, else [harness] seeds. */
int64_t srch_final_seeds(const struct srch *s);
/*
 * Where proposing and screening must end: the deadline less the final
 * checks' reserve (at least 1), 0 without a time budget. Model calls,
 * builds and harness calls take it as their own deadline.
 */
int64_t srch_work_deadline_ms(const struct srch *s);
/* Stop proposing from now on, for why (the first reason is kept). */
void srch_cut_short(struct srch *s, const char *fmt, ...) KB_PRINTF(2, 3);
/* The candidate with id, NULL when unknown. */
struct kb_search_cand *srch_cand(const struct srch *s, int64_t id);
/* The prompt with id, NULL when unknown. */
struct kb_prompt *srch_prompt(const struct srch *s, int64_t id);
/*
 * Remember a failure line (about candidate_id, 0: none) for the next
 * meta-prompt rewrite; stored (search_diagnoses) and marked pending at the
 * generation's commit, so a resumed search has it too.
 */
void srch_diagnose(struct srch *s, int64_t candidate_id, const char *fmt, ...) KB_PRINTF(3, 4);
/* Take back the diagnoses an earlier run made about candidate_id (decided then, skipped now). */
void srch_diagnoses_restore(struct srch *s, int64_t candidate_id);

/* --- search_llm.c --- */

/* An rng state that depends only on the seed and text (so on a call key, not on the run). */
uint64_t srch_rng_for(const struct srch *s, const char *text);

/*
 * One recorded model call under the key g/island/slot/purpose/attempt
 * with prompt as the user message; model is an index, or SIZE_MAX to
 * draw one from the key. Returns 0 with reply OK (replayed or new), 1 when
 * the call failed (recorded; the slot moves on), KB_EBUDGET when a budget
 * or the deadline stops it (the search is cut short), KB_ECANCELLED, -1
 * on a store error. key (may be NULL) receives the call key. The call
 * goes through s->pool (nothing else in flight), and tune points run
 * while it is awaited.
 */
int srch_ask(struct srch *s, int64_t g, int64_t island, int64_t slot, const char *purpose,
	     int64_t attempt, size_t model, const char *prompt, struct kb_llm_reply *reply,
	     struct strbuf *key);

/*
 * srch_ask in two halves, for calls that go to s->pool. begin does
 * everything before the call: 0 with *reply when the store answers it
 * (replayed), 1 when it replays a failure, KB_EBUDGET / KB_ECANCELLED / -1
 * as srch_ask; SRCH_ASKED when the call went to the pool with payload
 * (*ticket); model as srch_ask's. end takes the pool's outcome (kb_llm_pool_done.rc, reply):
 * 0 ok, 1 failed (the slot moves on), KB_EBUDGET, KB_ECANCELLED, -1.
 */
#define SRCH_ASKED 2
int srch_ask_begin(struct srch *s, int64_t g, int64_t island, int64_t slot, const char *purpose,
		   int64_t attempt, size_t model, const char *prompt, struct kb_llm_reply *reply,
		   struct strbuf *key, void *payload, int64_t *ticket);
int srch_ask_end(struct srch *s, const char *purpose, const char *key, int call_rc,
		 struct kb_llm_reply *reply);
/* After an error or a stop: every call in s->pool ended and taken back (its payload freed with free_payload). */
void srch_pool_abort(struct srch *s, void (*free_payload)(void *));

/* Render template t with the base variables plus v. 0, or -1 (logged). */
int srch_render(struct srch *s, enum srch_tmpl t, const struct kb_prompt_vars *v, struct strbuf *out);

/* Prompt material: the base variables from the operator, describe, ABI and templates. 0 or -1. */
int srch_context_init(struct srch *s);
/* "1.23x" or "not timed". */
void srch_fmt_speedup(double x, struct strbuf *out);
/* "memory 2, compute 1, parallelism 1" of a cell (-1: "unknown"). */
void srch_fmt_behavior(int cell, struct strbuf *out);
/* A candidate's evidence as text for a prompt: per-config speedups, roofline shares. */
void srch_evidence_text(const struct kb_search_cand *c, struct strbuf *out);
/* nvcc's resource figures of a candidate ("" when none). */
void srch_resources_text(const struct srch *s, const struct kb_search_cand *c, struct strbuf *out);
/* Profiler-style hints from the evidence and the resources, one per line ("" when none). */
void srch_hints_text(const struct srch *s, const struct kb_search_cand *c, struct strbuf *out);
/*
 * What went wrong with a failed candidate, for a repair prompt (redacted,
 * core/redact.h: compiler and harness text); failure_kind gets a short phrase.
 */
void srch_failure_text(const struct kb_search_cand *c, struct strbuf *out, struct strbuf *failure_kind);
/* The kernel code of a reply into out; 0, or -1 with why (nothing logged). */
int srch_extract(const char *reply, struct strbuf *out, struct strbuf *why);

/* --- search_eval.c --- */

/* A new candidate (not registered) with the search's backend. */
struct kb_search_cand *srch_cand_new(const struct srch *s, const char *proposer, const char *source,
				     int64_t g, int64_t island, int64_t slot, int64_t round);

/*
 * Register a proposed candidate: a new source is stored (pending) and
 * returned in *out; a source the search already holds under the same
 * call key (a resumed run) returns that candidate; one held under
 * another key is a duplicate: *out NULL. c is consumed. 0 or -1.
 */
int srch_register(struct srch *s, struct kb_search_cand *c, struct kb_search_cand **out);

/* The best speedup so far: the archive's or a tune point's (0: none). */
double srch_best_so_far(const struct srch *s);
/* The most fit verified candidate not in skip (ids; may be NULL), with proposer filter (NULL: any); NULL: none. */
struct kb_search_cand *srch_best(const struct srch *s, const int64_t *skip, size_t nr_skip,
				 bool llm_only);

/*
 * A candidate's way to the archive, in pieces, for the flow. static: the
 * static checks of a pending candidate, *rejected when they reject it
 * (stored, noted). screen_llm: the soft verifiers' outcome applied
 * (filtered, or audited), *run when c goes to the harness. run_batch: the time budget,
 * then evaluate to_run (pending, screened) and offer every one of batch.
 * 0, -1, KB_ECANCELLED.
 */
int srch_screen_static(struct srch *s, struct kb_search_cand *c, bool *rejected);
int srch_screen_llm(struct srch *s, struct kb_search_cand *c, bool pass, bool *run);
int srch_run_batch(struct srch *s, struct kb_search_cand **to_run, size_t m, struct kb_search_cand **batch,
		   size_t n, const char *stage);
/*
 * Tune points (proposer "tune", pending): the static checks, then the
 * harness, n at once. Never offered to the archive: a point is its base
 * with other constants, and the tuning runs in the model's waits, so the
 * archive, the islands and the prompts' credit stay those of the order of
 * completions. A point fitter than anything so far is confirmed as a new
 * best is. 0, -1, KB_ECANCELLED.
 */
int srch_run_points(struct srch *s, struct kb_search_cand **points, size_t n);
/* A proposer whose kernels come from the models ("template" and "tune" are not). */
bool srch_is_llm_proposer(const char *proposer);
/* A reply's kernel registered as a candidate (*out NULL: no kernel, or a duplicate). 0 or -1. */
int srch_reply_cand(struct srch *s, const char *proposer, const struct kb_llm_reply *reply, const char *key,
		    const struct kb_search_cand *like, struct kb_search_cand **out);

/* --- search_flow.c --- */

/*
 * Generations first..last (0: translation) as one flow: each one's
 * proposals, their LLM verifiers, evaluations and repairs, with up to
 * [search] calls_in_flight model calls in flight while the harness
 * evaluates what came back (in completion order). The next generation is
 * planned once the current one's proposals are judged (its repairs may
 * still run), so the calls in flight do not drain at each generation's
 * end; each is committed when everything it asked is done. 0, -1,
 * KB_ECANCELLED; a budget ends it early with s->cut_short set.
 */
int srch_flow_generations(struct srch *s, int64_t first, int64_t last);
void srch_flow_specs_free(struct srch_flow_spec *specs, size_t n);

/* --- llm_verifiers.c --- */

/* Verifier k's prompt for c and its purpose ("verify-NAME"). 0 or -1. */
int srch_verify_prompt(struct srch *s, const struct kb_search_cand *c, int k, struct strbuf *prompt,
		       struct strbuf *purpose);
/* Verifier k's answer (rc as srch_ask's: 0, 1 failed, KB_EBUDGET) into all; *answered, *pass updated. */
void srch_verify_note(cJSON *all, int k, int rc, const struct kb_llm_reply *reply, int *answered, bool *pass);
/* The verdicts of all into c->verifiers ("pass" only when one answered). all is taken. */
void srch_verify_finish(struct kb_search_cand *c, cJSON *all, int answered, bool pass);

/* --- tune_llm.c --- */

/*
 * KernelFoundry's template parameter tuning, run while the search waits
 * on its models: an LLM elite of the archive (the fittest first) goes
 * back to a model with the request to mark its tunable constants
 * (`// kb-tune NAME: V1 V2`, extract.h), and its parameter space is then
 * tuned a point at a time whenever the harness would idle
 * (srch_flow_generations), and to its end after the last generation
 * (srch_template_step).
 *
 * wanted: when tuning is on, the archive's fittest LLM elite whose
 * rewrite this run has not asked yet (NULL: none); asked one a
 * generation. prompt: the rewrite's request for base, and its call's
 * place (g, island, slot, round of the base: the same key in a resumed
 * run and in a replay); base is marked asked. take: the reply for base,
 * its space queued (a reply without usable parameters is noted). 0 or -1.
 */
struct kb_search_cand *srch_tune_wanted(struct srch *s);
int srch_tune_prompt(struct srch *s, const struct kb_search_cand *base, struct strbuf *prompt);
int srch_tune_take(struct srch *s, const struct kb_search_cand *base, const char *key,
		   const struct kb_llm_reply *reply);
/* Points left, no cut, and time in the budget for one more evaluation. */
bool srch_tune_ready(struct srch *s);
/* Evaluate the next point not decided yet (a batch of them: one per harness worker). 0, -1, KB_ECANCELLED. */
int srch_tune_step(struct srch *s);
/*
 * The pool's next completed call, as kb_llm_pool_next with no timeout,
 * tune steps running while none has completed and points are left (the
 * replies that complete during a step's harness run are taken by s->idle
 * meanwhile). KB_ETIMEOUT when replies so taken left the flow work
 * (s->flow_waits). A step's -1 or KB_ECANCELLED is returned as is (the
 * calls in flight go on; the caller ends them).
 */
struct kb_llm_pool_done;
int srch_tune_await(struct srch *s, struct kb_llm_pool_done *done);
/* After the last generation: the best LLM kernel templatized (asked now if no call did) and every queued space tuned. */
int srch_template_step(struct srch *s, int64_t g);
void srch_tuner_release(struct srch *s);

/* --- search_status.c --- */

/* kernel.json's "search" object for the search so far. */
cJSON *srch_summary(struct srch *s, bool final);
/* Rewrite o->status_path (atomic) with summary, NULL: the running summary; nothing when unset. */
void srch_write_status(struct srch *s, const cJSON *summary);

#endif
