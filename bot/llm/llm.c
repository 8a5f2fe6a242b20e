#include "core/common.h"
#include "core/http.h"
#include "core/config.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/util.h"
#include "llm/llm_priv.h"
#include "core/rng.h"

#include <inttypes.h>
#include <math.h>

/*
 * The client: the model table from the config, one reused curl handle,
 * and kb_llm_chat's retry loop. The providers' shapes are in openai.c and
 * anthropic.c, the transfer in core/http.c, the waits in backoff.c.
 */

/* config.c parses provider names in this order (the enum's values). */
_Static_assert(KB_LLM_OPENAI == 0 && KB_LLM_ANTHROPIC == 1, "provider order");

#define DEFAULT_BACKOFF_BASE_MS 1000
#define DEFAULT_BACKOFF_MAX_MS 60000
#define ERROR_TEXT_MAX 300

struct kb_llm_client {
	const struct kb_config *cfg;
	struct kb_http_client http; /* keeps the connections between calls */
	uint64_t rng;             /* backoff jitter only: not the search's stream */
	int64_t backoff_base_ms, backoff_max_ms;
};

static const char *const provider_names[] = { "openai", "anthropic" };

const char *kb_llm_provider_name(enum kb_llm_provider p)
{
	return (unsigned)p < ARRAY_SIZE(provider_names) ? provider_names[p] : "?";
}

int kb_llm_provider_parse(const char *name, enum kb_llm_provider *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(provider_names); i++)
		if (name && !strcmp(name, provider_names[i])) {
			*out = (enum kb_llm_provider)i;
			return 0;
		}
	return -1;
}

static const char *const status_names[] = {
	[KB_LLM_OK] = "ok",
	[KB_LLM_RATE_LIMITED] = "rate_limited",
	[KB_LLM_SERVER_ERROR] = "server_error",
	[KB_LLM_TIMEOUT] = "timeout",
	[KB_LLM_HTTP_ERROR] = "http_error",
	[KB_LLM_MALFORMED] = "malformed",
	[KB_LLM_EMPTY] = "empty",
	[KB_LLM_TRANSPORT] = "transport",
};

const char *kb_llm_status_name(enum kb_llm_status s)
{
	return (unsigned)s < ARRAY_SIZE(status_names) ? status_names[s] : "?";
}

void kb_llm_reply_init(struct kb_llm_reply *r)
{
	memset(r, 0, sizeof(*r));
	strbuf_init(&r->text, 0);
	strbuf_init(&r->error, 0);
	r->status = KB_LLM_OK;
}

void kb_llm_reply_release(struct kb_llm_reply *r)
{
	strbuf_release(&r->text);
	strbuf_release(&r->error);
	kb_llm_reply_init(r);
}

/* --- shared rules --- */

double llm_temperature(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req)
{
	return isnan(req->temperature) ? m->temperature : req->temperature;
}

int64_t llm_max_tokens(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req)
{
	return req->max_tokens > 0 ? req->max_tokens : m->max_tokens > 0 ? m->max_tokens : 8192;
}

int64_t llm_thinking_budget(const char *effort)
{
	if (!effort || !*effort)
		return 0;
	if (!strcmp(effort, "low"))
		return 1024; /* the API's least */
	if (!strcmp(effort, "medium"))
		return 4096;
	if (!strcmp(effort, "high"))
		return 16384;
	return 0;
}

int64_t llm_json_count(const cJSON *obj, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

	return cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 9e15 ?
	       (int64_t)v->valuedouble : 0;
}

bool llm_is_blank(const struct strbuf *sb)
{
	for (size_t i = 0; i < sb->len; i++)
		if (sb->buf[i] != ' ' && sb->buf[i] != '\t' && sb->buf[i] != '\n' && sb->buf[i] != '\r')
			return false;
	return true;
}

int llm_reply_settle(struct kb_llm_reply *reply, const char *name, const cJSON *why)
{
	if (!llm_is_blank(&reply->text)) {
		reply->status = KB_LLM_OK;
		return 0;
	}
	strbuf_reset(&reply->text);
	reply->status = KB_LLM_EMPTY;
	strbuf_reset(&reply->error);
	strbuf_addstr(&reply->error, "empty reply");
	if (cJSON_IsString(why)) {
		strbuf_addf(&reply->error, " (%s '", name);
		llm_add_one_line(&reply->error, why->valuestring, strlen(why->valuestring), 40);
		strbuf_addstr(&reply->error, "')");
	}
	return -1;
}

void llm_add_one_line(struct strbuf *out, const char *s, size_t len, size_t max)
{
	bool space = false;

	if (len > max) {
		len = max;
		/* do not cut a UTF-8 sequence */
		while (len && ((unsigned char)s[len] & 0xc0) == 0x80)
			len--;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f) {
			if (!space && out->len)
				strbuf_addch(out, ' ');
			space = true;
			continue;
		}
		space = c == ' ';
		strbuf_addch(out, c);
	}
}

void llm_add_error_body(struct strbuf *out, const char *body, size_t len)
{
	cJSON *json = cJSON_ParseWithLength(body, len);
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(json, "error");
	const cJSON *msg = NULL, *type = NULL;

	if (cJSON_IsObject(err)) {
		msg = cJSON_GetObjectItemCaseSensitive(err, "message");
		type = cJSON_GetObjectItemCaseSensitive(err, "type");
	} else if (cJSON_IsString(err)) {
		msg = err; /* some servers: {"error": "text"} */
	}
	if (cJSON_IsString(msg) && *msg->valuestring) {
		llm_add_one_line(out, msg->valuestring, strlen(msg->valuestring), ERROR_TEXT_MAX);
		if (cJSON_IsString(type) && *type->valuestring) {
			strbuf_addstr(out, " (");
			llm_add_one_line(out, type->valuestring, strlen(type->valuestring), 60);
			strbuf_addch(out, ')');
		}
	} else if (len) {
		llm_add_one_line(out, body, len, ERROR_TEXT_MAX / 2);
	} else {
		strbuf_addstr(out, "(empty body)");
	}
	cJSON_Delete(json);
}

void llm_request_headers(const struct kb_llm_model_cfg *m, struct strvec *h)
{
	strvec_push(h, "Content-Type: application/json");
	strvec_push(h, "Accept: application/json");
	strvec_push(h, "User-Agent: kernelbot/" KB_VERSION);
	strvec_push(h, "Expect:");
	if (m->provider == KB_LLM_ANTHROPIC) {
		strvec_push(h, "anthropic-version: 2023-06-01");
		if (m->api_key && *m->api_key)
			strvec_pushf(h, "x-api-key: %s", m->api_key);
	} else if (m->api_key && *m->api_key) {
		strvec_pushf(h, "Authorization: Bearer %s", m->api_key);
	}
}

void llm_request_url(const struct kb_llm_model_cfg *m, struct strbuf *url)
{
	size_t len = strlen(m->base_url);

	while (len && m->base_url[len - 1] == '/')
		len--;
	strbuf_add(url, m->base_url, len);
	strbuf_addstr(url, m->provider == KB_LLM_ANTHROPIC ? "/messages" : "/chat/completions");
}

/* --- pieces exposed for tests --- */

char *kb_llm_request_json(enum kb_llm_provider p, const struct kb_llm_model_cfg *m,
			  const struct kb_llm_request *req)
{
	return p == KB_LLM_ANTHROPIC ? llm_anthropic_request_json(m, req)
				     : llm_openai_request_json(m, req);
}

int kb_llm_parse_reply(enum kb_llm_provider p, const char *body, size_t len,
		       struct kb_llm_reply *reply)
{
	return p == KB_LLM_ANTHROPIC ? llm_anthropic_parse(body, len, reply)
				     : llm_openai_parse(body, len, reply);
}

double kb_llm_cost(const struct kb_llm_model_cfg *m, int64_t prompt_tokens,
		   int64_t completion_tokens)
{
	return ((double)prompt_tokens * m->price_in_per_mtok +
		(double)completion_tokens * m->price_out_per_mtok) / 1e6;
}

/* --- the client --- */

int kb_llm_client_new(struct kb_llm_client **out, const struct kb_config *cfg)
{
	struct kb_llm_client *c;

	*out = NULL;
	if (!cfg->nr_llm_models)
		return KB_ENOTFOUND;
	c = xcalloc(1, sizeof(*c));
	c->cfg = cfg;
	if (kb_http_client_init(&c->http)) {
		kb_llm_client_free(c);
		return -1;
	}
	c->rng = (uint64_t)kb_now_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c;
	c->backoff_base_ms = DEFAULT_BACKOFF_BASE_MS;
	c->backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	*out = c;
	return 0;
}

void kb_llm_client_free(struct kb_llm_client *c)
{
	if (!c)
		return;
	kb_http_client_release(&c->http);
	free(c);
}

void kb_llm_client_set_backoff(struct kb_llm_client *c, int64_t base_ms, int64_t max_wait_ms)
{
	c->backoff_base_ms = base_ms < 0 ? 0 : base_ms;
	c->backoff_max_ms = max_wait_ms < 0 ? 0 : max_wait_ms;
}

size_t kb_llm_nr_models(const struct kb_llm_client *c)
{
	return c->cfg->nr_llm_models;
}

const struct kb_llm_model_cfg *kb_llm_model(const struct kb_llm_client *c, size_t i)
{
	return i < c->cfg->nr_llm_models ? &c->cfg->llm_models[i] : NULL;
}

long kb_llm_find_model(const struct kb_llm_client *c, const char *name)
{
	for (size_t i = 0; name && i < c->cfg->nr_llm_models; i++)
		if (!strcmp(c->cfg->llm_models[i].name, name))
			return (long)i;
	return -1;
}

size_t kb_llm_pick(const struct kb_llm_client *c, uint64_t *rng)
{
	const struct kb_llm_model_cfg *m = c->cfg->llm_models;
	size_t n = c->cfg->nr_llm_models, last = 0;
	double total = 0, r, u = kb_rng_double(rng);

	for (size_t i = 0; i < n; i++)
		if (m[i].weight > 0)
			total += m[i].weight;
	if (total <= 0)
		return 0;
	r = u * total;
	for (size_t i = 0; i < n; i++) {
		if (m[i].weight <= 0)
			continue;
		if (r < m[i].weight)
			return i;
		r -= m[i].weight;
		last = i;
	}
	return last; /* rounding at the top end */
}

enum verdict { DONE, RETRY, CANCELLED };

/* What one attempt means; sets reply->status and a one-line error. */
static enum verdict judge(const struct kb_llm_model_cfg *m, const struct kb_http_response *r,
			  int64_t timeout_ms, struct kb_llm_reply *reply)
{
	strbuf_reset(&reply->error);
	reply->http_status = r->error == KB_HTTP_OK ? (int)r->status : 0;
	if (r->error == KB_HTTP_STOPPED) {
		reply->status = KB_LLM_TRANSPORT;
		strbuf_addstr(&reply->error, "stopped on request during the transfer");
		return CANCELLED;
	}
	if (r->error == KB_HTTP_TOOBIG) {
		reply->status = KB_LLM_MALFORMED;
		strbuf_addf(&reply->error, "response body larger than %zu KiB ([llm] max_response_kb)",
			    r->body.cap / 1024);
		return DONE;
	}
	if (r->error == KB_HTTP_TIMEOUT) {
		reply->status = KB_LLM_TIMEOUT;
		strbuf_addf(&reply->error, "no answer within %" PRId64 " s ([llm] timeout_s)",
			    timeout_ms / 1000);
		return RETRY;
	}
	if (r->error != KB_HTTP_OK) {
		reply->status = KB_LLM_TRANSPORT;
		strbuf_addstr(&reply->error, "transfer failed: ");
		llm_add_one_line(&reply->error, r->errbuf, strlen(r->errbuf), ERROR_TEXT_MAX);
		/* one that another attempt cannot mend is final */
		return r->error == KB_HTTP_SETUP ? DONE : RETRY;
	}
	if (r->status >= 200 && r->status < 300) {
		/* a bad or empty answer is the model's: asking again costs as much */
		kb_llm_parse_reply((enum kb_llm_provider)m->provider, r->body.buf, r->body.len, reply);
		return DONE;
	}
	strbuf_addf(&reply->error, "http %ld: ", r->status);
	llm_add_error_body(&reply->error, r->body.buf, r->body.len);
	if (r->status == 429) {
		reply->status = KB_LLM_RATE_LIMITED;
		return RETRY;
	}
	if (r->status == 408) {
		reply->status = KB_LLM_TIMEOUT;
		return RETRY;
	}
	if (r->status >= 500) {
		reply->status = KB_LLM_SERVER_ERROR;
		return RETRY;
	}
	reply->status = KB_LLM_HTTP_ERROR;
	return DONE;
}

/* The request's deadline ended the call: a timeout, named as the budget's. */
static int budget_ran_out(struct kb_llm_reply *reply, bool tried)
{
	if (!tried || reply->status != KB_LLM_OK)
		reply->status = KB_LLM_TIMEOUT;
	strbuf_reset(&reply->error);
	strbuf_addstr(&reply->error, tried ? "the time budget ran out during the call"
					   : "the time budget ran out before the call");
	return KB_EBUDGET;
}

/* "llm 'NAME' (MODEL): WHAT[ after N attempts]", without the key. */
static void finish_error(const struct kb_llm_model_cfg *m, struct kb_llm_reply *reply)
{
	struct strbuf sb = STRBUF_INIT;

	if (reply->status == KB_LLM_OK) {
		strbuf_reset(&reply->error);
		return;
	}
	strbuf_addf(&sb, "llm '%s' (%s %s): %s", m->name,
		    kb_llm_provider_name((enum kb_llm_provider)m->provider), m->model,
		    reply->error.len ? reply->error.buf : kb_llm_status_name(reply->status));
	if (reply->attempts > 1)
		strbuf_addf(&sb, " (after %d attempts)", reply->attempts);
	if (m->api_key && *m->api_key)
		strbuf_replace_all(&sb, m->api_key, "***");
	log_redact(&sb);
	strbuf_release(&reply->error);
	reply->error = sb;
}

/* The provider's ask for no new request to this model (a 429's retry-after, its rate headers). */
static void note_hold(const struct kb_llm_client *c, const struct kb_http_response *resp,
		      struct kb_llm_reply *reply)
{
	int64_t now = kb_now_ms(), ms = kb_llm_rate_hold_ms(resp, now);

	if (resp->error == KB_HTTP_OK && resp->status == 429) {
		int64_t ra = kb_http_retry_after_ms(kb_http_response_header(resp, "retry-after"), kb_wall_s());

		if (ra > ms)
			ms = ra;
	}
	if (ms > c->backoff_max_ms)
		ms = c->backoff_max_ms;
	if (ms > 0 && now + ms > reply->hold_until_ms)
		reply->hold_until_ms = now + ms;
}

/* Sleep ms before a retry: 0, or 1 on a stop request or an abort (llm/pool.h). */
static int wait_to_retry(int64_t ms, const int *abort)
{
	while (ms > 0) {
		int64_t step = abort && ms > 100 ? 100 : ms;

		if (kb_sleep_ms(step))
			return 1;
		if (abort && __atomic_load_n(abort, __ATOMIC_RELAXED))
			return 1;
		ms -= step;
	}
	return 0;
}

int kb_llm_chat(struct kb_llm_client *c, size_t i, const struct kb_llm_request *req,
		struct kb_llm_reply *reply)
{
	const struct kb_config *cfg = c->cfg;
	const struct kb_llm_model_cfg *m;
	struct strbuf url = STRBUF_INIT;
	struct strvec headers = STRVEC_INIT;
	struct kb_http_response resp;
	struct kb_http_request hreq = { .method = "POST", .stop_aware = true };
	int64_t start = kb_now_ms(), timeout_ms = cfg->llm_timeout_s * 1000;
	int max_attempts = 1 + (int)cfg->llm_max_retries;
	char *body = NULL;
	int rc = -1;

	kb_llm_reply_release(reply);
	kb_http_response_init(&resp, (size_t)cfg->llm_max_response_kb * 1024);
	if (i >= cfg->nr_llm_models) {
		reply->status = KB_LLM_HTTP_ERROR;
		strbuf_addf(&reply->error, "llm: no model number %zu (%zu configured)", i,
			    cfg->nr_llm_models);
		goto out;
	}
	m = &cfg->llm_models[i];
	kb_strlcpy(reply->model, m->name, sizeof(reply->model));
	body = kb_llm_request_json((enum kb_llm_provider)m->provider, m, req);
	llm_request_url(m, &url);
	llm_request_headers(m, &headers);
	/* a POST is not replayed across a redirect: an API never sends one */
	hreq.url = url.buf;
	hreq.headers = &headers;
	hreq.body = body;
	hreq.timeout_ms = timeout_ms;
	hreq.abort = req->abort;

	for (int attempt = 1;; attempt++) {
		enum verdict v;
		int64_t w, left = req->deadline_ms ? req->deadline_ms - kb_now_ms() : INT64_MAX;

		if (left <= 0) {
			rc = budget_ran_out(reply, attempt > 1);
			break;
		}
		/* the attempt ends by the deadline: a hung provider cannot outlast the budget */
		hreq.timeout_ms = timeout_ms < left ? timeout_ms : left;
		if (kb_stop_requested()) {
			reply->status = KB_LLM_TRANSPORT;
			strbuf_reset(&reply->error);
			strbuf_addstr(&reply->error, "stopped on request");
			rc = KB_ECANCELLED;
			break;
		}
		reply->attempts = attempt;
		kb_http_perform(&c->http, &hreq, &resp);
		v = judge(m, &resp, timeout_ms, reply);
		if (v == CANCELLED) {
			rc = KB_ECANCELLED;
			break;
		}
		note_hold(c, &resp, reply);
		if (reply->status == KB_LLM_TIMEOUT && hreq.timeout_ms < timeout_ms) {
			rc = budget_ran_out(reply, true);
			break;
		}
		if (v == DONE || attempt >= max_attempts)
			break;
		w = kb_llm_backoff_ms(attempt, kb_http_response_header(&resp, "retry-after"),
				      c->backoff_base_ms, c->backoff_max_ms, &c->rng);
		log_debug("llm '%s': attempt %d: %s (%s); retrying in %" PRId64 " ms", m->name,
			  attempt, kb_llm_status_name(reply->status), reply->error.buf, w);
		if (req->deadline_ms && kb_now_ms() + w >= req->deadline_ms) {
			rc = budget_ran_out(reply, true);
			break;
		}
		if (wait_to_retry(w, req->abort)) {
			strbuf_addstr(&reply->error, "; stopped on request while waiting to retry");
			rc = KB_ECANCELLED;
			break;
		}
	}
	reply->cost_usd = kb_llm_cost(m, reply->prompt_tokens, reply->completion_tokens);
	finish_error(m, reply);
	if (rc == KB_ECANCELLED || rc == KB_EBUDGET)
		goto out;
	if (reply->status == KB_LLM_OK)
		rc = 0;
	else if (reply->status == KB_LLM_TIMEOUT)
		rc = KB_ETIMEOUT;
	log_debug("llm '%s': %s, %d attempt(s), %" PRId64 "+%" PRId64 " tokens", m->name,
		  kb_llm_status_name(reply->status), reply->attempts, reply->prompt_tokens,
		  reply->completion_tokens);
out:
	reply->latency_ms = kb_now_ms() - start;
	for (size_t k = 0; k < headers.nr; k++)
		explicit_bzero((char *)headers.v[k], strlen(headers.v[k]));
	strvec_clear(&headers);
	strbuf_release(&url);
	kb_http_response_release(&resp);
	free(body);
	return rc;
}
