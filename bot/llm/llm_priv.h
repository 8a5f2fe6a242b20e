#ifndef KB_LLM_PRIV_H
#define KB_LLM_PRIV_H
/*
 * Between the files of bot/llm: one HTTP attempt (http.c), the two
 * providers' request and reply shapes (openai.c, anthropic.c) and the
 * small rules they share (llm.c, backoff.c).
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "llm/llm.h"

#include <curl/curl.h>
#include <cjson/cJSON.h>

/* --- http.c: one POST, no retries, no policy --- */

struct llm_http_resp {
	CURLcode rc;           /* CURLE_OK: a complete response (any status) */
	long status;
	struct strbuf body;    /* capped */
	bool too_big;          /* the body passed the cap */
	char *retry_after;     /* the header's value, NULL: absent */
	char errbuf[CURL_ERROR_SIZE]; /* curl's reason when rc is not OK */
};

void llm_http_resp_init(struct llm_http_resp *r, size_t max_body);
void llm_http_resp_release(struct llm_http_resp *r);

/*
 * POST body to url with headers ("Name: value"; wiped from curl's copy
 * afterwards: they hold the key) on easy handle curl, driven by multi.
 * Fills r (reset first). The transfer ends early with
 * CURLE_ABORTED_BY_CALLBACK on a stop request. Nothing is logged.
 */
void llm_http_post(CURLM *multi, CURL *curl, const char *url, const struct strvec *headers, const char *body,
		   int64_t timeout_ms, struct llm_http_resp *r);

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
