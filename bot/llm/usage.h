#ifndef KB_LLM_USAGE_H
#define KB_LLM_USAGE_H
/*
 * LLM calls in the state store (llm_calls, schema v3): each call's
 * tokens, cost, latency, status and response, so that
 *
 *  - a call whose call_key already has an ok response is answered from
 *    the store (no HTTP, no budget): a resumed or replayed search gets the
 *    same answers;
 *  - budgets are checked before a call: per search ([search]
 *    job_budget_usd / job_budget_tokens) and over the last 24 hours of
 *    every call ([llm] daily_budget_usd / daily_budget_tokens).
 *
 * Tokens of a budget are prompt + completion tokens. Each function is one
 * statement (or a few reads) and joins a transaction the caller holds.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "llm/llm.h"

struct kb_state;
struct kb_config;

/* What a call is, for the store. */
struct kb_llm_call_info {
	int64_t search_id;        /* 0: none */
	int64_t job_id;           /* 0: none */
	const char *call_key;     /* NULL: never replayed */
	const char *purpose;      /* NULL: the request's purpose */
	const char *request_hash; /* NULL: none (see kb_llm_request_hash) */
};

/*
 * Store one finished call (any status): the reply's model, tokens, cost,
 * latency and status; the text when ok, else the error line.
 * *id_out (may be NULL) gets the row id.
 */
int kb_llm_usage_record(struct kb_state *st, const struct kb_llm_call_info *info,
			const struct kb_llm_reply *reply, int64_t *id_out);

/*
 * Replay: the latest ok response stored under call_key into reply
 * (released first): status OK, text, model, tokens, cost; latency,
 * attempts and http_status 0. KB_ENOTFOUND (nothing logged) when there is
 * none.
 */
int kb_llm_usage_lookup(struct kb_state *st, const char *call_key, struct kb_llm_reply *reply);

struct kb_llm_usage {
	int64_t calls;
	int64_t failed;         /* calls whose status is not "ok" */
	int64_t prompt_tokens, completion_tokens;
	double cost_usd;
};

/* Totals of one search's calls. */
int kb_llm_usage_search(struct kb_state *st, int64_t search_id, struct kb_llm_usage *out);
/* Totals of every call made after now_s - 86400. */
int kb_llm_usage_daily(struct kb_state *st, int64_t now_s, struct kb_llm_usage *out);

/* The limits; 0 means none. */
struct kb_llm_budget {
	double job_usd;           /* per search */
	int64_t job_tokens;
	double daily_usd;         /* all calls, last 24 h */
	int64_t daily_tokens;
};

/* The budget of cfg: [search] job_budget_*, [llm] daily_budget_*. */
void kb_llm_budget_from_config(struct kb_llm_budget *b, const struct kb_config *cfg);

/* What a call may cost at most, before it is made. */
struct kb_llm_estimate {
	int64_t prompt_tokens;    /* characters / 4, rounded up */
	int64_t completion_tokens; /* max_tokens (+ the thinking budget) */
	double cost_usd;          /* at m's prices */
};

void kb_llm_estimate(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req,
		     struct kb_llm_estimate *out);

/*
 * 0 when the call fits every budget: spent + estimate <= limit. Else
 * KB_EBUDGET (nothing logged) with why set to one sentence naming the
 * budget and the figures, e.g. "the job token budget would be exceeded:
 * 118000 used + 9000 estimated > 125000". search_id 0 skips the job
 * budget. -1 (logged) on a store error.
 */
int kb_llm_budget_check(struct kb_state *st, const struct kb_llm_budget *b, int64_t search_id,
			const struct kb_llm_estimate *est, struct strbuf *why);

/* sha256 (hex) of the provider, the model id and the request body: out has 65 bytes. */
void kb_llm_request_hash(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req,
			 char out[65]);

/*
 * The whole manner of one recorded call to model i:
 *   1. info->call_key has an ok response in the store: it, returns 0;
 *   2. the estimate does not fit budget (NULL: no budget): KB_EBUDGET,
 *      reply->error says which (nothing stored, nothing logged);
 *   3. kb_llm_chat, then the call is stored whatever its outcome.
 * Returns kb_llm_chat's result, or -1 (logged) when storing failed.
 */
int kb_llm_call(struct kb_llm_client *c, struct kb_state *st, size_t i,
		const struct kb_llm_request *req, const struct kb_llm_call_info *info,
		const struct kb_llm_budget *budget, struct kb_llm_reply *reply);
/* Step 3 alone (the pool's threads: llm/pool.h; the caller checked 1 and 2). */
int kb_llm_call_unchecked(struct kb_llm_client *c, struct kb_state *st, size_t i,
			  const struct kb_llm_request *req, const struct kb_llm_call_info *info,
			  struct kb_llm_reply *reply);


#endif
