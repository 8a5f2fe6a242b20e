#include "core/common.h"
#include "core/http.h"
#include "core/util.h"
#include "forge/github/policy.h"

static enum gh_transport transport_of(enum kb_http_error e)
{
	switch (e) {
	case KB_HTTP_OK:
		return GH_T_OK;
	case KB_HTTP_TIMEOUT:
	case KB_HTTP_NETWORK:
		return GH_T_RETRY;
	case KB_HTTP_TOOBIG:
		return GH_T_TOOBIG;
	default:
		return GH_T_FATAL;
	}
}

/* A header's integer value; -1 when absent or not one. */
static int64_t int_header(const struct kb_http_response *resp, const char *name)
{
	const char *v = kb_http_response_header(resp, name);
	int64_t n;

	if (!v || kb_parse_i64(v, &n))
		return -1;
	return n;
}

void gh_outcome_read(struct gh_outcome *o, const struct kb_http_response *resp)
{
	o->transport = transport_of(resp->error);
	o->status = resp->status;
	o->retry_after = kb_http_response_header(resp, "retry-after");
	o->rl_remaining = int_header(resp, "x-ratelimit-remaining");
	o->rl_reset = int_header(resp, "x-ratelimit-reset");
}

static int64_t clamp_mul2(int64_t base, int n, int64_t cap)
{
	int64_t d = base;

	for (int i = 0; i < n && d < cap; i++)
		d = d > INT64_MAX / 2 ? INT64_MAX : d * 2;
	return d < cap ? d : cap;
}

int64_t gh_backoff_ms(const struct gh_policy *p, int attempt, double jitter)
{
	int64_t d = clamp_mul2(p->base_backoff_ms, attempt < 0 ? 0 : attempt, p->max_backoff_ms);

	if (jitter < 0)
		jitter = 0;
	if (jitter >= 1)
		jitter = 0.999999;
	return d / 2 + (int64_t)((double)(d - d / 2) * jitter);
}

static bool is_limit_status(long status)
{
	return status == 403 || status == 429;
}

void gh_decide(struct gh_decision *out, const struct gh_policy *p, const struct gh_outcome *o,
	       int attempt, int64_t now_s, double jitter)
{
	int64_t wait = -1;
	bool last = attempt + 1 >= p->max_attempts;

	memset(out, 0, sizeof(*out));
	out->verdict = GH_FAIL;
	switch (o->transport) {
	case GH_T_OK:
		break;
	case GH_T_RETRY:
		out->why = "timeout or connection failure";
		out->reason = GH_WAIT_BACKOFF;
		wait = gh_backoff_ms(p, attempt, jitter);
		goto decide;
	case GH_T_TOOBIG:
		out->why = "response body over the size cap";
		return;
	default:
		out->why = "transfer failed";
		return;
	}

	if (o->status < 400) {
		out->verdict = GH_DONE;
		return;
	}
	if (is_limit_status(o->status)) {
		int64_t ra = kb_http_retry_after_ms(o->retry_after, now_s);

		out->reason = GH_WAIT_RATE_LIMIT;
		if (ra >= 0) {
			out->rate_limited = true;
			out->why = "rate limited (retry-after)";
			wait = ra;
		} else if (o->rl_remaining == 0 && o->rl_reset >= 0) {
			out->rate_limited = true;
			out->why = "rate limit exhausted until reset";
			/* saturating: a reset in the year 10^10 is over any max_wait_ms */
			wait = kb_http_until_reset_ms(o->rl_reset, now_s);
		} else if (o->status == 429 || o->limit_message) {
			int64_t d = clamp_mul2(p->secondary_min_ms, attempt, p->max_wait_ms);

			out->rate_limited = true;
			out->why = "secondary rate limit";
			if (jitter < 0 || jitter >= 1)
				jitter = 0;
			wait = kb_sat_add_i64(d, (int64_t)((double)(d / 2) * jitter));
		} else {
			out->why = "forbidden";
			return;
		}
		goto decide;
	}
	if (o->status >= 500) {
		out->why = "server error";
		out->reason = GH_WAIT_BACKOFF;
		wait = gh_backoff_ms(p, attempt, jitter);
		goto decide;
	}
	out->why = "request refused";
	return;

decide:
	if (last) {
		out->why = out->rate_limited ? "still rate limited after every retry" :
					       "failed after every retry";
		return;
	}
	if (wait > p->max_wait_ms) {
		out->why = "rate limit wait longer than allowed";
		return;
	}
	out->verdict = GH_RETRY;
	out->wait_ms = wait;
}

int64_t gh_mutation_wait_ms(int64_t last_ms, int64_t now_ms, int64_t gap_ms)
{
	if (last_ms <= 0 || now_ms - last_ms >= gap_ms)
		return 0;
	if (now_ms < last_ms) /* a clock that went back: wait the whole gap */
		return gap_ms;
	return gap_ms - (now_ms - last_ms);
}

int64_t gh_quota_wait_ms(int64_t remaining, int64_t reset_s, int64_t now_s)
{
	if (remaining != 0 || reset_s < 0 || reset_s < now_s)
		return 0;
	return kb_http_until_reset_ms(reset_s, now_s);
}

bool gh_is_mutating(const char *method)
{
	return !strcmp(method, "POST") || !strcmp(method, "PATCH") || !strcmp(method, "PUT") ||
	       !strcmp(method, "DELETE");
}

static const char *skip_ws(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* True when the rel value (quoted or not, already cut out) lists rel. */
static bool rel_matches(const char *v, size_t len, const char *rel)
{
	size_t rlen = strlen(rel), i = 0;

	while (i < len) {
		size_t start;

		while (i < len && v[i] == ' ')
			i++;
		start = i;
		while (i < len && v[i] != ' ')
			i++;
		if (i - start == rlen && !strncasecmp(v + start, rel, rlen))
			return true;
	}
	return false;
}

char *gh_link_find(const char *link, const char *rel)
{
	const char *p = link;

	if (!link)
		return NULL;
	for (;;) {
		const char *url, *url_end;
		bool match = false;

		p = skip_ws(p);
		while (*p == ',' || *p == ' ')
			p++;
		if (!*p)
			return NULL;
		if (*p != '<')
			return NULL;
		url = ++p;
		url_end = strchr(url, '>');
		if (!url_end)
			return NULL;
		p = url_end + 1;
		/* parameters up to the next ',' outside quotes */
		while (*p && *p != ',') {
			const char *name, *val;
			size_t nlen, vlen;

			p = skip_ws(p);
			if (*p != ';')
				return NULL;
			p = skip_ws(p + 1);
			name = p;
			while (*p && *p != '=' && *p != ';' && *p != ',' && *p != ' ')
				p++;
			nlen = (size_t)(p - name);
			p = skip_ws(p);
			if (*p != '=') {
				continue; /* a parameter without value */
			}
			p = skip_ws(p + 1);
			if (*p == '"') {
				val = ++p;
				while (*p && *p != '"')
					p++;
				if (!*p)
					return NULL;
				vlen = (size_t)(p - val);
				p++;
			} else {
				val = p;
				while (*p && *p != ';' && *p != ',' && *p != ' ')
					p++;
				vlen = (size_t)(p - val);
			}
			if (nlen == 3 && !strncasecmp(name, "rel", 3) && rel_matches(val, vlen, rel))
				match = true;
			p = skip_ws(p);
		}
		if (match && url_end > url)
			return xstrndup(url, (size_t)(url_end - url));
	}
}

bool gh_same_origin(const char *url, const char *origin)
{
	size_t n = strlen(origin);

	if (strncasecmp(url, origin, n))
		return false;
	return url[n] == '\0' || url[n] == '/' || url[n] == '?';
}
