#include "core/common.h"
#include "core/util.h"
#include "llm/llm_priv.h"
#include "search/rng.h"

#include <ctype.h>
#include <math.h>
#include <time.h>

int64_t llm_retry_after_ms(const char *value, int64_t now_s)
{
	char buf[128];
	size_t len;
	double secs;
	time_t t;

	if (!value)
		return -1;
	while (*value == ' ' || *value == '\t')
		value++;
	len = strlen(value);
	while (len && (value[len - 1] == ' ' || value[len - 1] == '\t'))
		len--;
	if (!len)
		return -1;
	/* delta seconds of any length: a wait as long as can be (the caller caps it) */
	if (len >= sizeof(buf) && strspn(value, "0123456789") >= len)
		return INT64_MAX / 2;
	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, value, len);
	buf[len] = '\0';
	/* delta seconds; some servers send a fraction */
	if (!kb_parse_double(buf, &secs)) {
		if (!isfinite(secs))
			return -1;
		if (secs <= 0)
			return 0;
		if (secs > 1e9)
			return INT64_MAX / 2;
		return (int64_t)ceil(secs * 1000.0);
	}
	/* an HTTP date names its day and month; curl_getdate reads other numbers oddly */
	for (len = 0; buf[len] && !isalpha((unsigned char)buf[len]); len++)
		;
	if (!buf[len])
		return -1;
	t = curl_getdate(buf, NULL);
	if (t == (time_t)-1)
		return -1;
	/* saturating: a date in the year 801508015 is a very long wait, not a negative one */
	return (int64_t)t > now_s ? kb_sat_mul_i64(kb_sat_sub_i64((int64_t)t, now_s), 1000) : 0;
}

int64_t kb_llm_backoff_ms(int attempt, const char *retry_after, int64_t base_ms, int64_t max_wait_ms,
			  uint64_t *rng)
{
	int64_t ra = llm_retry_after_ms(retry_after, kb_wall_s());
	int64_t d;

	if (max_wait_ms < 0)
		max_wait_ms = 0;
	if (ra >= 0)
		return ra < max_wait_ms ? ra : max_wait_ms;
	if (attempt < 1)
		attempt = 1;
	if (base_ms < 0)
		base_ms = 0;
	/* base * 2^(attempt-1), saturating at the cap */
	d = base_ms;
	for (int i = 1; i < attempt && d < max_wait_ms; i++)
		d = d > max_wait_ms / 2 ? max_wait_ms : d * 2;
	if (d > max_wait_ms)
		d = max_wait_ms;
	/* full jitter: uniform in [0, d], so that clients never retry in step */
	return (int64_t)(kb_rng_double(rng) * ((double)d + 1.0));
}
