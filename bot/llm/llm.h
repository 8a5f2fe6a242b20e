#ifndef KB_LLM_H
#define KB_LLM_H
/*
 * LLM clients (issue 6): OpenAI-compatible chat completions (hosted APIs,
 * vLLM, llama.cpp, ...) and the Anthropic Messages API, over libcurl and
 * cJSON. No streaming. The search (bot/search) is the only caller; the
 * verifier never sees an LLM.
 *
 * Models come from the config (core/config.h: cfg->llm_models, filled from
 *
 *     [llm]
 *     models = NAME[:WEIGHT], ...
 *     [llm.NAME]
 *     provider = openai | anthropic
 *     base_url = ...      model = ...      api_key = ${VAR}
 *     temperature, reasoning_effort, max_tokens, prices, weight
 *
 * ). An ensemble is the weighted list: kb_llm_pick draws a model by weight
 * from a caller-held RNG state, so a seeded search picks the same models.
 *
 * One kb_llm_chat is one logical call: it retries 429 and 5xx (honouring
 * retry-after, else exponential backoff with jitter, up to [llm]
 * max_retries) and transport timeouts ([llm] timeout_s per attempt), caps
 * the response body, and parses the provider's reply shape. The API key
 * goes in a header only (Authorization: Bearer for openai, x-api-key +
 * anthropic-version for anthropic); it is registered with the log's
 * redaction and never appears in a message, a reply or the store.
 */
#include "core/common.h"
#include "core/strbuf.h"

struct kb_config;
struct kb_llm_model_cfg;

enum kb_llm_provider { KB_LLM_OPENAI, KB_LLM_ANTHROPIC };

/* "openai" / "anthropic"; parse returns -1 (nothing logged) for other names. */
const char *kb_llm_provider_name(enum kb_llm_provider p);
int kb_llm_provider_parse(const char *name, enum kb_llm_provider *out);

struct kb_llm_message {
	const char *role;       /* "system", "user" or "assistant" */
	const char *content;
};

struct kb_llm_request {
	const struct kb_llm_message *messages;
	size_t nr_messages;     /* a leading "system" message becomes anthropic's "system" field */
	double temperature;     /* NAN: the model's configured one */
	int64_t max_tokens;     /* 0: the model's configured one */
	const char *purpose;    /* "translate", "mutate", "verify-numerics", ...: logs and the store */
	int64_t deadline_ms;    /* kb_now_ms()'s clock: no attempt or wait past it (a time
				 * budget; KB_EBUDGET when it ends the call); 0: none */
	const int *abort;       /* NULL, or another thread ends the call (KB_ECANCELLED)
				 * by making *abort non-zero (llm/pool.h) */
};

/* How a call ended (kb_llm_reply.status, also stored in llm_calls.status). */
enum kb_llm_status {
	KB_LLM_OK,
	KB_LLM_RATE_LIMITED,    /* 429 after every retry */
	KB_LLM_SERVER_ERROR,    /* 5xx after every retry */
	KB_LLM_TIMEOUT,         /* every attempt timed out */
	KB_LLM_HTTP_ERROR,      /* another 4xx (bad key, bad model, ...): not retried */
	KB_LLM_MALFORMED,       /* 2xx but not the provider's reply shape */
	KB_LLM_EMPTY,           /* a reply with no text */
	KB_LLM_TRANSPORT        /* connection refused, DNS, TLS: retried like 5xx */
};

/* "ok", "rate_limited", "server_error", "timeout", "http_error", "malformed", "empty", "transport" */
const char *kb_llm_status_name(enum kb_llm_status s);

struct kb_llm_reply {
	enum kb_llm_status status;
	struct strbuf text;     /* the assistant's text (all text blocks joined) */
	struct strbuf error;    /* status != OK: one line naming what failed (no secrets) */
	int http_status;        /* of the last attempt; 0 when none answered */
	int attempts;
	int64_t prompt_tokens, completion_tokens; /* from the reply's usage; 0 when absent */
	double cost_usd;        /* tokens x the model's prices */
	int64_t latency_ms;     /* all attempts, backoff included */
	int64_t hold_until_ms;  /* kb_now_ms()'s clock: the provider asked for no request to
				 * this model before then (a 429's retry-after, or no
				 * requests left in its rate window); 0: none */
	char model[128];        /* the model that answered (config name) */
};

void kb_llm_reply_init(struct kb_llm_reply *r);
void kb_llm_reply_release(struct kb_llm_reply *r);

struct kb_llm_client;

/*
 * A client for every model in cfg->llm_models (borrowed: cfg must outlive
 * it). KB_ENOTFOUND (nothing logged) when no model is configured; -1
 * (logged) when curl cannot be set up.
 */
int kb_llm_client_new(struct kb_llm_client **out, const struct kb_config *cfg);
void kb_llm_client_free(struct kb_llm_client *c);

/*
 * Backoff between attempts without retry-after: base_ms * 2^(attempt-1)
 * with full jitter, every wait (retry-after too) capped at max_wait_ms.
 * Defaults 1000 and 60000; tests shorten them.
 */
void kb_llm_client_set_backoff(struct kb_llm_client *c, int64_t base_ms, int64_t max_wait_ms);

size_t kb_llm_nr_models(const struct kb_llm_client *c);
const struct kb_llm_model_cfg *kb_llm_model(const struct kb_llm_client *c, size_t i);
/* Index of the model named name ([llm.NAME]), or -1. */
long kb_llm_find_model(const struct kb_llm_client *c, const char *name);

/* A model index drawn by weight; *rng is a splitmix64 state (core/rng.h) advanced once. */
size_t kb_llm_pick(const struct kb_llm_client *c, uint64_t *rng);

/*
 * One call to model i. Returns 0 when reply->status is OK, else
 * KB_ETIMEOUT (timeout), KB_ECANCELLED (a stop request during a retry
 * wait or a transfer), -1 for every other failure; reply->status and
 * reply->error say which, and usage/cost are filled as far as known.
 * Nothing is logged above debug level: the caller decides what a failure
 * means (the search records it and moves on).
 */
int kb_llm_chat(struct kb_llm_client *c, size_t i, const struct kb_llm_request *req,
		struct kb_llm_reply *reply);

/* USD for the tokens at m's prices (per million tokens). */
double kb_llm_cost(const struct kb_llm_model_cfg *m, int64_t prompt_tokens, int64_t completion_tokens);

/* --- pieces exposed for tests --- */

struct kb_http_response;
/*
 * How long the provider's rate-limit headers ask for no new request to the
 * model: the window's reset when x-ratelimit-remaining-requests (openai) or
 * anthropic-ratelimit-requests-remaining is 0; 0 otherwise (ratelimit.c).
 */
int64_t kb_llm_rate_hold_ms(const struct kb_http_response *r, int64_t now_ms);

/* The request body for provider p (model from m). The caller frees it. */
char *kb_llm_request_json(enum kb_llm_provider p, const struct kb_llm_model_cfg *m,
			  const struct kb_llm_request *req);
/*
 * Parse a 2xx body of provider p into reply (text, usage). 0, or -1 with
 * reply->status MALFORMED / EMPTY and reply->error set.
 */
int kb_llm_parse_reply(enum kb_llm_provider p, const char *body, size_t len,
		       struct kb_llm_reply *reply);
/*
 * Milliseconds to wait before retry number attempt (1-based) after an
 * answer with http_status and the retry-after header value (NULL: none;
 * seconds or an HTTP date): retry-after when given (capped at
 * max_wait_ms), else base_ms * 2^(attempt-1) with full jitter from *rng,
 * capped at max_wait_ms. max_wait_ms (60 s by default,
 * kb_llm_client_set_backoff) is the cap on every wait: an absurd
 * retry-after ("2 Oct 801508015", 10^17 seconds) waits exactly that long.
 */
int64_t kb_llm_backoff_ms(int attempt, const char *retry_after, int64_t base_ms, int64_t max_wait_ms,
			  uint64_t *rng);

#endif
