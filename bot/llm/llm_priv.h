#ifndef KB_LLM_PRIV_H
#define KB_LLM_PRIV_H
/*
 * Between the files of bot/llm: the two providers' request and reply
 * shapes (openai.c, anthropic.c) and the small rules they share (llm.c,
 * backoff.c). The transfer itself is core/http.h's.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "llm/llm.h"

#include <cjson/cJSON.h>

/* --- the providers --- */

char *llm_openai_request_json(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req);
int llm_openai_parse(const char *body, size_t len, struct kb_llm_reply *reply);
char *llm_anthropic_request_json(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req);
int llm_anthropic_parse(const char *body, size_t len, struct kb_llm_reply *reply);

/* Request headers (Content-Type, auth, version) for model m. */
void llm_request_headers(const struct kb_llm_model_cfg *m, struct strvec *headers);
/* base_url without trailing '/', then "/chat/completions" or "/messages". */
void llm_request_url(const struct kb_llm_model_cfg *m, struct strbuf *url);

/* --- shared rules (llm.c) --- */

/* The request's temperature, else the model's; NAN: send none. */
double llm_temperature(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req);
/* The request's max_tokens, else the model's (the answer, thinking excluded). */
int64_t llm_max_tokens(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req);
/* Anthropic thinking budget for a reasoning_effort: low/medium/high; 0 for "". */
int64_t llm_thinking_budget(const char *effort);

/*
 * The provider's error text from an error body ({"error": {"message",
 * "type"}} in both shapes), one line, at most ~300 bytes; else the body's
 * start. Appended to out.
 */
void llm_add_error_body(struct strbuf *out, const char *body, size_t len);
/* Append s as one line: control characters become spaces, at most max bytes (UTF-8 safe). */
void llm_add_one_line(struct strbuf *out, const char *s, size_t len, size_t max);

/* A non-negative integer member of obj ("usage" counts); 0 when absent or bad. */
int64_t llm_json_count(const cJSON *obj, const char *name);
/* True when sb holds only blanks. */
bool llm_is_blank(const struct strbuf *sb);
/*
 * The end of a reply's parse, both shapes: a blank text is KB_LLM_EMPTY
 * ("empty reply (<name> '<why>')", why being the provider's stop or finish
 * reason, may be NULL) and -1; else KB_LLM_OK and 0.
 */
int llm_reply_settle(struct kb_llm_reply *reply, const char *name, const cJSON *why);

#endif
