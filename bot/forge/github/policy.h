#ifndef KB_GH_POLICY_H
#define KB_GH_POLICY_H
/*
 * The github client's decisions, as pure functions of what a response
 * said, so that the unit tests cover them without a server:
 *
 *  - Link header parsing (pagination follows rel="next", never builds URLs);
 *  - what to do after an attempt: done, retry after a wait, or fail:
 *      403/429 rate limited: the Retry-After wait if given (read by
 *      kb_http_retry_after_ms, core/http.h); else, when
 *      x-ratelimit-remaining is 0, until x-ratelimit-reset (+1 s); else
 *      (a secondary limit without retry-after) at least
 *      secondary_min_ms, doubling per attempt, with jitter;
 *      a plain 403 (no limit signal) fails at once;
 *      5xx, timeouts and connection errors: exponential backoff with
 *      jitter; other 4xx and an over-cap body fail at once;
 *      a wait longer than max_wait_ms, or max_attempts used, fails;
 *      max_wait_ms (65 min by default) is the cap on any single wait:
 *      seconds from a header become milliseconds with saturating
 *      arithmetic (core/http.h), so an absurd value (Retry-After: 200376420520689575,
 *      an x-ratelimit-reset in the year 10^10) is a wait over the cap,
 *      which fails, never a negative wait and an immediate retry;
 *  - the spacing of mutating requests (secondary limits).
 */
#include "core/common.h"
#include "core/http.h"

struct gh_policy {
	int max_attempts;          /* tries per request, the first included */
	int64_t base_backoff_ms;   /* 5xx/timeouts: base * 2^attempt ... */
	int64_t max_backoff_ms;    /* ... capped here */
	int64_t secondary_min_ms;  /* secondary limit without retry-after */
	int64_t max_wait_ms;       /* a longer wait fails instead */
	int64_t mutation_gap_ms;   /* between mutating requests */
};
#define GH_POLICY_INIT { 5, 1000, 30000, 60000, 65 * 60 * 1000, 1000 }

/* How the transfer itself went. */
enum gh_transport {
	GH_T_OK,       /* a complete HTTP response */
	GH_T_RETRY,    /* timeout, connection refused/reset, partial transfer */
	GH_T_TOOBIG,   /* the body passed the cap */
	GH_T_FATAL     /* anything else (bad URL, TLS setup, ...) */
};

/* What one attempt produced, as far as the policy cares. */
struct gh_outcome {
	enum gh_transport transport;
	long status;               /* HTTP status when transport is GH_T_OK */
	const char *retry_after;   /* header value, NULL: absent */
	int64_t rl_remaining;      /* x-ratelimit-remaining, -1: absent */
	int64_t rl_reset;          /* x-ratelimit-reset (epoch s), -1: absent */
	bool limit_message;        /* the body's message mentions a rate limit */
};
#define GH_OUTCOME_INIT { GH_T_OK, 0, NULL, -1, -1, false }

/*
 * What one exchange said (core/http.h), as far as the policy cares: how
 * the transfer went, the status, Retry-After and the x-ratelimit-remaining
 * and -reset headers (-1 when absent or not an integer). limit_message is
 * left as it was (it needs the body's JSON). The strings point into resp.
 */
void gh_outcome_read(struct gh_outcome *o, const struct kb_http_response *resp);

enum gh_verdict { GH_DONE, GH_RETRY, GH_FAIL };

/* Mirrors enum kb_github_wait (github.h). */
enum gh_wait_reason { GH_WAIT_GAP, GH_WAIT_RATE_LIMIT, GH_WAIT_BACKOFF };

struct gh_decision {
	enum gh_verdict verdict;
	int64_t wait_ms;           /* GH_RETRY: sleep this long first */
	enum gh_wait_reason reason;
	bool rate_limited;         /* the response was a rate limit (retry or not) */
	const char *why;           /* short text for a log line or error */
};

/*
 * Decide after attempt number attempt (0 for the first) at wall time
 * now_s; jitter is a uniform draw from [0, 1).
 */
void gh_decide(struct gh_decision *out, const struct gh_policy *p, const struct gh_outcome *o,
	       int attempt, int64_t now_s, double jitter);

/*
 * Backoff before retry number attempt+1: d = min(max, base * 2^attempt),
 * the wait is uniform in [d/2, d) ("equal jitter"), so retries never
 * bunch up and never come quicker than half the schedule.
 */
int64_t gh_backoff_ms(const struct gh_policy *p, int attempt, double jitter);


/* Milliseconds to wait before a mutating request, the last one having started at last_ms (0: none). */
int64_t gh_mutation_wait_ms(int64_t last_ms, int64_t now_ms, int64_t gap_ms);
/*
 * Milliseconds to wait before any request when the last response said the
 * quota is spent (remaining 0 until reset, plus a second); 0 otherwise.
 * Saturates at INT64_MAX: the caller refuses waits over max_wait_ms.
 */
int64_t gh_quota_wait_ms(int64_t remaining, int64_t reset_s, int64_t now_s);

/* POST, PATCH, PUT, DELETE. */
bool gh_is_mutating(const char *method);

/*
 * The target of the first link with rel="<rel>" in a Link header value, as
 * a new string; NULL when there is none or the value is malformed.
 */
char *gh_link_find(const char *link, const char *rel);

/* True when url starts with origin ("scheme://host[:port]") followed by '/', '?' or its end. */
bool gh_same_origin(const char *url, const char *origin);

#endif
