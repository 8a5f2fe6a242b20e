#include "core/common.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/strvec.h"
#include "core/util.h"
#include "forge/github/gh.h"

#include <inttypes.h>

/*
 * One GitHub call with its manners: the quota wait when the last reply
 * said the quota is spent, the gap between mutating calls, a conditional
 * GET from the ETag store, the retry policy (policy.c) and, for an App,
 * one retry with a fresh installation token after a 401.
 */

void gh_reply_init(struct gh_reply *r)
{
	memset(r, 0, sizeof(*r));
	strbuf_init(&r->body, 0);
}

void gh_reply_release(struct gh_reply *r)
{
	strbuf_release(&r->body);
	free(r->etag);
	free(r->link);
	free(r->message);
	memset(r, 0, sizeof(*r));
	strbuf_init(&r->body, 0);
}

static void reply_reset(struct gh_reply *r)
{
	gh_reply_release(r);
}

double gh_random(struct gh *gh)
{
	/* xorshift64*: jitter only, no security use */
	uint64_t x = gh->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	gh->rng = x;
	return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) / (double)(1ULL << 53);
}

int gh_sleep(struct gh *gh, int64_t ms, enum gh_wait_reason why)
{
	static const enum kb_github_wait map[] = {
		[GH_WAIT_GAP] = KB_GITHUB_WAIT_MUTATION_GAP,
		[GH_WAIT_RATE_LIMIT] = KB_GITHUB_WAIT_RATE_LIMIT,
		[GH_WAIT_BACKOFF] = KB_GITHUB_WAIT_BACKOFF,
	};

	if (ms <= 0)
		return 0;
	gh->base.stats.slept_ms += ms;
	if (gh->sleep_fn)
		return gh->sleep_fn(gh->sleep_payload, ms, map[why]);
	return kb_sleep_ms(ms);
}

void gh_add_escaped(struct strbuf *sb, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			strbuf_addch(sb, c);
		} else {
			strbuf_addch(sb, '%');
			strbuf_addch(sb, hex[c >> 4]);
			strbuf_addch(sb, hex[c & 15]);
		}
	}
}

static int build_url(struct gh *gh, struct strbuf *url, const char *path)
{
	strbuf_reset(url);
	if (path[0] == '/') {
		strbuf_addf(url, "%s%s", gh->api_url, path);
		return 0;
	}
	if (!gh_same_origin(path, gh->origin))
		return error("github: refusing to follow '%s' away from '%s'", path, gh->origin);
	strbuf_addstr(url, path);
	return 0;
}

/* "message" of a JSON error body, with the first entry of "errors". */
static char *error_message(const struct strbuf *body)
{
	cJSON *json = cJSON_ParseWithLength(body->buf, body->len);
	struct strbuf msg = STRBUF_INIT;
	const cJSON *errors;
	const char *m;

	if (!json)
		return NULL;
	m = gh_jstr(json, "message");
	if (m)
		strbuf_add(&msg, m, kb_forge_utf8_cut(m, 300));
	errors = cJSON_GetObjectItemCaseSensitive(json, "errors");
	if (cJSON_IsArray(errors) && cJSON_GetArraySize(errors) > 0) {
		const cJSON *e = cJSON_GetArrayItem(errors, 0);
		const char *em = cJSON_IsString(e) ? e->valuestring : gh_jstr(e, "message");
		const char *code = gh_jstr(e, "code");

		if (em)
			strbuf_addf(&msg, "%s%.300s", msg.len ? ": " : "", em);
		else if (code)
			strbuf_addf(&msg, "%s%.64s %.64s", msg.len ? ": " : "", code,
				    gh_jstr(e, "field") ? gh_jstr(e, "field") : "");
	}
	cJSON_Delete(json);
	if (!msg.len) {
		strbuf_release(&msg);
		return NULL;
	}
	return strbuf_detach(&msg, NULL);
}

static bool mentions_rate_limit(const struct strbuf *body)
{
	return body->len && strcasestr(body->buf, "rate limit");
}

static void build_headers(struct strvec *h, const struct strbuf *auth, const char *body,
			  const char *etag)
{
	strvec_clear(h);
	strvec_push(h, "Accept: application/vnd.github+json");
	strvec_push(h, "X-GitHub-Api-Version: 2022-11-28");
	strvec_push(h, "User-Agent: kernelbot/" KB_VERSION);
	strvec_push(h, "Expect:");
	if (auth->len)
		strvec_push(h, auth->buf);
	if (body)
		strvec_push(h, "Content-Type: application/json");
	if (etag)
		strvec_pushf(h, "If-None-Match: %s", etag);
}

static void wipe_headers(struct strvec *h)
{
	for (size_t i = 0; i < h->nr; i++)
		explicit_bzero((char *)h->v[i], strlen(h->v[i]));
	strvec_clear(h);
}

/*
 * Before a request: wait out an exhausted rate limit (a repository call)
 * and the gap between mutations. 0, -1 when the wait would be longer than
 * allowed, or what gh_sleep returned.
 */
static int wait_to_send(struct gh *gh, const struct gh_req *req, bool mutating)
{
	int64_t w;
	int rc;

	if (req->auth == GH_AUTH_REPO) {
		w = gh_quota_wait_ms(gh->rl_remaining, gh->rl_reset, kb_wall_s());
		if (w > gh->policy.max_wait_ms)
			return error("github: %s %s: rate limit exhausted for longer than allowed",
				     req->method, req->path);
		if (w) {
			log_warn("github: rate limit exhausted, waiting %" PRId64 " ms", w);
			gh->base.stats.rate_limited++;
			if ((rc = gh_sleep(gh, w, GH_WAIT_RATE_LIMIT)))
				return rc;
			gh->rl_remaining = -1;
		}
	}
	if (mutating) {
		w = gh_mutation_wait_ms(gh->last_mutation_ms, kb_now_ms(),
					gh->policy.mutation_gap_ms);
		if (w && (rc = gh_sleep(gh, w, GH_WAIT_GAP)))
			return rc;
	}
	return 0;
}

/*
 * The final reply into rep: a 304 answered from the cached entry, else
 * resp's body (taken, not copied), which the ETag cache (use_cache) keeps
 * or drops.
 */
static void take_reply(struct gh *gh, struct kb_http_response *resp, const char *url, bool use_cache,
		       const struct gh_etag_entry *cached, struct gh_reply *rep)
{
	const char *etag = kb_http_response_header(resp, "etag");
	const char *link = kb_http_response_header(resp, "link");

	rep->status = resp->status;
	rep->etag = etag ? xstrdup(etag) : NULL;
	rep->link = link ? xstrdup(link) : NULL;
	if (resp->status == 304) {
		gh->base.stats.not_modified++;
		rep->not_modified = true;
		if (cached) {
			strbuf_add(&rep->body, cached->body, cached->body_len);
			if (!rep->link && cached->link)
				rep->link = xstrdup(cached->link);
			if (!rep->etag)
				rep->etag = xstrdup(cached->etag);
		}
	} else {
		struct strbuf tmp = rep->body;

		rep->body = resp->body;
		resp->body = tmp;
		if (use_cache && resp->status == 200 && etag)
			gh_etag_put(&gh->etags, url, etag, link, rep->body.buf, rep->body.len);
		else if (use_cache)
			gh_etag_drop(&gh->etags, url);
		if (resp->status >= 400)
			rep->message = error_message(&rep->body);
	}
}

/* Could the server have carried the request out although no usable reply came? */
static bool maybe_done(const struct gh_outcome *o)
{
	return o->transport == GH_T_RETRY || (o->transport == GH_T_OK && o->status >= 500);
}

/*
 * Before a create is sent again (or given up) after a reply that may have
 * been lost: was it made? GH_FOUND; 0 when it was not (go on); -1 when
 * that cannot be told, for a retry could then make a second one.
 */
static int look_for_lost(struct gh *gh, const struct gh_req *req, const struct gh_outcome *o)
{
	int rc;

	if (!req->find || !maybe_done(o))
		return 0;
	rc = req->find(gh, req->find_payload);
	if (rc > 0) {
		log_info("github: %s %s: the reply was lost, but it was made; not sent again",
			 req->method, req->path);
		return GH_FOUND;
	}
	if (rc < 0)
		return error("github: %s %s: the reply was lost and whether it was made cannot be "
			     "told; not sent again", req->method, req->path);
	return 0;
}

int gh_send(struct gh *gh, const struct gh_req *req, struct gh_reply *rep)
{
	struct strbuf url = STRBUF_INIT, auth = STRBUF_INIT;
	struct strvec headers = STRVEC_INIT;
	struct kb_http_response resp;
	const struct gh_etag_entry *cached = NULL;
	bool mutating = gh_is_mutating(req->method);
	bool use_cache = !strcmp(req->method, "GET") && !req->if_none_match;
	bool retried_auth = false;
	int attempt = 0, rc = -1;

	reply_reset(rep);
	kb_http_response_init(&resp, gh->max_body);
	if (build_url(gh, &url, req->path))
		goto out;

	for (;;) {
		struct kb_http_request hreq = { .max_redirects = 3 };
		struct gh_outcome o = GH_OUTCOME_INIT;
		struct gh_decision d;

		if ((rc = wait_to_send(gh, req, mutating)))
			goto out;
		rc = -1;
		/* may itself call GitHub (installation token): before the cache lookup */
		if ((rc = gh_auth_header(gh, req, &auth)))
			goto out;
		rc = -1;
		cached = use_cache ? gh_etag_get(&gh->etags, url.buf) : NULL;
		build_headers(&headers, &auth, req->body,
			      req->if_none_match && *req->if_none_match ? req->if_none_match :
			      cached ? cached->etag : NULL);
		explicit_bzero(auth.buf, auth.len);
		strbuf_reset(&auth);

		hreq.method = req->method;
		hreq.url = url.buf;
		hreq.body = req->body;
		hreq.headers = &headers;
		hreq.timeout_ms = gh->timeout_ms;
		hreq.fresh_connect = req->find != NULL; /* a create: never resent by libcurl */
		gh->base.stats.requests++;
		kb_http_perform(&gh->http, &hreq, &resp);
		wipe_headers(&headers);
		if (mutating)
			gh->last_mutation_ms = kb_now_ms();
		gh_outcome_read(&o, &resp);
		if (o.transport == GH_T_OK && req->auth == GH_AUTH_REPO && o.rl_remaining >= 0) {
			gh->rl_remaining = o.rl_remaining;
			gh->rl_reset = o.rl_reset;
		}
		if (o.transport == GH_T_OK && resp.status == 401 && gh->key &&
		    req->auth == GH_AUTH_REPO && !retried_auth) {
			retried_auth = true;
			gh_auth_forget(gh, req->repo);
			continue;
		}

		o.limit_message = (resp.status == 403 || resp.status == 429) &&
				  mentions_rate_limit(&resp.body);
		gh_decide(&d, &gh->policy, &o, attempt, kb_wall_s(), gh_random(gh));
		if (d.rate_limited)
			gh->base.stats.rate_limited++;
		if (d.verdict == GH_RETRY) {
			if (o.transport == GH_T_OK)
				log_warn("github: %s %s: %ld, %s; retrying in %" PRId64 " ms",
					 req->method, req->path, resp.status, d.why, d.wait_ms);
			else
				log_warn("github: %s %s: %s (%s); retrying in %" PRId64 " ms",
					 req->method, req->path, d.why, resp.errbuf, d.wait_ms);
			gh->base.stats.retries++;
			if ((rc = gh_sleep(gh, d.wait_ms, d.reason)))
				goto out;
			if ((rc = look_for_lost(gh, req, &o)))
				goto out;
			rc = -1;
			if (d.rate_limited) /* waited for it already: no second quota wait */
				gh->rl_remaining = -1;
			attempt++;
			continue;
		}
		/* out of retries: the last attempt may still have made it */
		if (d.verdict == GH_FAIL && look_for_lost(gh, req, &o) == GH_FOUND) {
			rc = GH_FOUND;
			goto out;
		}
		if (d.verdict == GH_FAIL && o.transport != GH_T_OK) {
			error("github: %s %s: %s (%s)", req->method, req->path, d.why, resp.errbuf);
			if (o.transport == GH_T_TOOBIG)
				rc = KB_ETOOBIG;
			goto out;
		}
		if (d.verdict == GH_FAIL && (d.rate_limited || resp.status >= 500)) {
			char *m = error_message(&resp.body);

			error("github: %s %s: %ld, %s%s%s", req->method, req->path, resp.status,
			      d.why, m ? ": " : "", m ? m : "");
			free(m);
			goto out;
		}
		break;
	}

	take_reply(gh, &resp, url.buf, use_cache, cached, rep);
	rc = 0;
out:
	explicit_bzero(auth.buf, auth.len);
	strbuf_release(&auth);
	wipe_headers(&headers);
	kb_http_response_release(&resp);
	strbuf_release(&url);
	return rc;
}

int gh_reply_error(const struct gh_req *req, const struct gh_reply *rep)
{
	return error("github: %s %s: %ld %s", req->method, req->path, rep->status,
		     rep->message ? rep->message : "(no message)");
}

int gh_call(struct gh *gh, const struct gh_req *req, struct gh_reply *rep)
{
	int rc = gh_send(gh, req, rep);

	if (rc)
		return rc;
	if ((rep->status >= 200 && rep->status < 300) || rep->status == 304)
		return 0;
	if (rep->status == 404) {
		log_debug("github: %s %s: 404", req->method, req->path);
		return KB_ENOTFOUND;
	}
	return gh_reply_error(req, rep);
}

cJSON *gh_reply_json(const struct gh_req *req, const struct gh_reply *rep, int want_type)
{
	cJSON *json = cJSON_ParseWithLength(rep->body.buf, rep->body.len);

	if (!json || (want_type && !(json->type & want_type))) {
		cJSON_Delete(json);
		error("github: malformed JSON in reply to %s '%s'", req->method, req->path);
		return NULL;
	}
	return json;
}
