#ifndef KB_LLM_POOL_H
#define KB_LLM_POOL_H
/*
 * Model calls in flight (issue 16): a search submits calls and takes their
 * replies back in the order they complete, while its own thread builds and
 * evaluates kernels. Each call runs on a thread of the pool with a client
 * (curl handle) and a state-store connection of its own, and is stored
 * (llm_calls, llm/usage.h) by that thread the moment it ends: a search
 * killed while its thread evaluates still finds every completed call in
 * the store and never asks it again.
 *
 * Limits: at most max_in_flight calls at once ([search] calls_in_flight),
 * at most [llm.NAME] max_in_flight of them to one model; a model whose
 * provider asked for a pause (a 429's retry-after, rate-limit headers
 * saying no request is left: kb_llm_reply.hold_until_ms) gets no new call
 * before the pause ends. Waiting calls start in submission order, each as
 * soon as its model may take it.
 *
 * The pool does not check budgets: the caller does before submitting,
 * counting what is in flight (kb_llm_pool_reserved). It never logs above
 * debug level; what a failure means is the caller's.
 */
#include "core/common.h"
#include "llm/llm.h"
#include "llm/usage.h"

struct kb_config;
struct kb_llm_pool;

/* A completed call, as kb_llm_pool_next hands it back. */
struct kb_llm_pool_done {
	int64_t ticket;            /* kb_llm_pool_submit's */
	void *payload;             /* the caller's, as submitted */
	size_t model;
	int rc;                    /* kb_llm_call_unchecked's: 0, KB_ETIMEOUT, KB_EBUDGET,
				    * KB_ECANCELLED, -1 (reply->status says which) */
	struct kb_llm_reply reply; /* the caller releases it */
};

/*
 * A pool for cfg's models (borrowed: cfg outlives the pool) whose threads
 * store their calls in the state store under state_dir. Threads start as
 * calls need them. 0, or -1 (logged).
 */
int kb_llm_pool_new(struct kb_llm_pool **out, const struct kb_config *cfg, const char *state_dir,
		    size_t max_in_flight);
/*
 * Calls still in flight are aborted (their transfers end at once, as
 * stopped), and the threads joined; replies not taken are dropped.
 */
void kb_llm_pool_free(struct kb_llm_pool *p);
/* kb_llm_client_set_backoff for every thread's client (tests). */
void kb_llm_pool_set_backoff(struct kb_llm_pool *p, int64_t base_ms, int64_t max_wait_ms);

/*
 * Queue a call to model (an index) of req, recorded with info. Everything
 * is copied. est is what the call may cost (kb_llm_estimate), reserved
 * until it is stored. Returns the call's ticket (> 0).
 */
int64_t kb_llm_pool_submit(struct kb_llm_pool *p, size_t model, const struct kb_llm_request *req,
			   const struct kb_llm_call_info *info, const struct kb_llm_estimate *est,
			   void *payload);

/*
 * The next completed call, in completion order, into *done: 0; KB_ETIMEOUT
 * when none completed within timeout_ms (< 0: wait as long as one is in
 * flight); KB_ENOTFOUND when no call is queued, running or waiting to be
 * taken; KB_ECANCELLED on a stop request (the calls in flight end too).
 */
int kb_llm_pool_next(struct kb_llm_pool *p, int64_t timeout_ms, struct kb_llm_pool_done *done);

/*
 * End everything in flight: running transfers stop, queued calls complete
 * at once (rc KB_ECANCELLED); kb_llm_pool_next still hands each back, so
 * the caller frees its payloads. The pool takes no new call afterwards
 * that is not aborted as well.
 */
void kb_llm_pool_abort(struct kb_llm_pool *p);

/* Calls queued or running (not those completed and waiting to be taken). */
size_t kb_llm_pool_in_flight(struct kb_llm_pool *p);

/* The estimates of the calls in flight, for budget checks. */
void kb_llm_pool_reserved(struct kb_llm_pool *p, int64_t *tokens, double *usd);

/* The most calls that were running at once so far (tests check the limits by it). */
size_t kb_llm_pool_peak(struct kb_llm_pool *p);

#endif
