#include "core/common.h"
#include "core/http.h"
#include "core/util.h"
#include "llm/llm_priv.h"
#include "core/rng.h"

int64_t kb_llm_backoff_ms(int attempt, const char *retry_after, int64_t base_ms, int64_t max_wait_ms,
			  uint64_t *rng)
{
	int64_t ra = kb_http_retry_after_ms(retry_after, kb_wall_s());
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
