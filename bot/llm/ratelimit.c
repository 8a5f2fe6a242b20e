#include "core/common.h"
#include "core/http.h"
#include "core/util.h"
#include "llm/llm.h"

#include <ctype.h>
#include <math.h>
#include <time.h>

/*
 * The providers' request-rate headers: when an answer says no request is
 * left in the current window, every call to that model waits for the
 * window's reset (llm/pool.h holds the model), instead of each call
 * finding out by a 429 of its own.
 *
 *   openai:    x-ratelimit-remaining-requests: 0
 *              x-ratelimit-reset-requests: 1s | 6m0s | 20ms | 1h2m3.5s
 *   anthropic: anthropic-ratelimit-requests-remaining: 0
 *              anthropic-ratelimit-requests-reset: 2026-12-03T22:10:00Z (RFC 3339)
 */

/* OpenAI's duration ("6m0s", "20ms", "1.5s"): milliseconds, or -1. */
static int64_t duration_ms(const char *v)
{
	double total = 0;
	bool any = false;

	while (*v == ' ')
		v++;
	while (*v && *v != ' ') {
		char *end;
		double x = strtod(v, &end);

		if (end == v || !isfinite(x) || x < 0)
			return -1;
		v = end;
		if (!strncmp(v, "ms", 2)) {
			total += x;
			v += 2;
		} else if (*v == 'h') {
			total += x * 3600e3;
			v++;
		} else if (*v == 'm') {
			total += x * 60e3;
			v++;
		} else if (*v == 's') {
			total += x * 1e3;
			v++;
		} else {
			return -1;
		}
		any = true;
	}
	if (!any || total > 86400e3)
		return any ? 86400000 : -1;
	return (int64_t)ceil(total);
}

/* An RFC 3339 time ("2026-12-03T22:10:00Z", "...00.5+01:00"): ms from now_ms, or -1. */
static int64_t rfc3339_ms(const char *v, int64_t now_ms)
{
	struct tm tm;
	int y, mo, d, h, mi, sec, n = 0, off = 0;
	const char *p;
	time_t t;

	if (sscanf(v, " %4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 || !n)
		return -1;
	p = v + n;
	if (*p == '.')
		for (p++; isdigit((unsigned char)*p); p++)
			;
	if (*p == '+' || *p == '-') {
		int oh, om;

		if (sscanf(p + 1, "%2d:%2d", &oh, &om) != 2)
			return -1;
		off = (*p == '-' ? -1 : 1) * (oh * 3600 + om * 60);
	} else if (*p != 'Z' && *p != 'z') {
		return -1;
	}
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	t -= off;
	return (int64_t)t * 1000 > now_ms ? (int64_t)t * 1000 - now_ms : 0;
}

int64_t kb_llm_rate_hold_ms(const struct kb_http_response *r, int64_t now_ms)
{
	const char *rem, *reset;

	if (r->error != KB_HTTP_OK)
		return 0;
	rem = kb_http_response_header(r, "x-ratelimit-remaining-requests");
	reset = kb_http_response_header(r, "x-ratelimit-reset-requests");
	if (rem && reset && !strcmp(rem, "0"))
		return duration_ms(reset) > 0 ? duration_ms(reset) : 0;
	rem = kb_http_response_header(r, "anthropic-ratelimit-requests-remaining");
	reset = kb_http_response_header(r, "anthropic-ratelimit-requests-reset");
	if (rem && reset && !strcmp(rem, "0"))
		return rfc3339_ms(reset, now_ms) > 0 ? rfc3339_ms(reset, now_ms) : 0;
	return 0;
}
