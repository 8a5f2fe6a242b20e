/*
 * Response headers as both HTTP clients read them: the transport's
 * header callback and the one Retry-After reading (core/http.c), the
 * github client's reading of them, its retry policy and Link parser
 * (forge/github/policy.c) and the LLM client's backoff (llm/backoff.c).
 *
 *   byte 0-1  the HTTP status (400 + value % 200), byte 2 the attempt
 *   then      header lines, "Name: value" each
 *
 * Invariants: a retry waits between 0 and max_wait_ms; a quota wait and
 * the LLM client's backoff are never negative and the latter never above
 * its cap; Retry-After in digits is a wait, however long; a Link target
 * is what stood between '<' and '>'.
 */
#include "core/common.h"
#include "core/http.h"
#include "core/util.h"
#include "forge/github/policy.h"
#include "llm/llm.h"
#include "fuzz.h"

#define NOW_S 1764700000LL /* a fixed clock: replays give the same answer */

static void check_link(const char *link, const char *rel)
{
	char *url = gh_link_find(link, rel);

	if (url) {
		FUZZ_CHECK(*url && !strchr(url, '>') && strstr(link, url));
		gh_same_origin(url, "https://api.github.com");
	}
	free(url);
}

int kb_fuzz_http_headers(const uint8_t *data, size_t size)
{
	struct gh_policy pol = GH_POLICY_INIT;
	struct gh_outcome o = GH_OUTCOME_INIT;
	struct gh_decision d;
	struct kb_http_response resp;
	const char *p, *end, *link;
	uint64_t rng = 1;
	int attempt;
	int64_t w;

	kb_fuzz_init();
	if (size < 3)
		return 0;
	kb_http_response_init(&resp, 1 << 16);
	attempt = data[2] % 8;
	p = (const char *)data + 3;
	end = (const char *)data + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p + 1) : (size_t)(end - p);
		char *line = kb_fuzz_str((const uint8_t *)p, len);

		kb_http_response_header_cb(line, 1, len, &resp);
		free(line);
		p += len;
	}

	gh_outcome_read(&o, &resp);
	o.status = 400 + (long)(((unsigned)data[0] << 8 | data[1]) % 200);
	link = kb_http_response_header(&resp, "link");
	o.limit_message = attempt & 1;
	gh_decide(&d, &pol, &o, attempt % pol.max_attempts, NOW_S, 0.5);
	if (d.verdict == GH_RETRY)
		FUZZ_CHECK(d.wait_ms >= 0 && d.wait_ms <= pol.max_wait_ms);
	FUZZ_CHECK(gh_quota_wait_ms(o.rl_remaining, o.rl_reset, NOW_S) >= 0);
	FUZZ_CHECK(kb_http_retry_after_ms(o.retry_after, NOW_S) >= -1);
	/* delta seconds, however many digits, are never "unreadable" */
	if (o.retry_after && *o.retry_after && !o.retry_after[strspn(o.retry_after, "0123456789")])
		FUZZ_CHECK(kb_http_retry_after_ms(o.retry_after, NOW_S) >= 0);
	if (link) {
		check_link(link, "next");
		check_link(link, "last");
	}

	w = kb_llm_backoff_ms(attempt + 1, o.retry_after, 1000, 60000, &rng);
	FUZZ_CHECK(w >= 0 && w <= 60000);
	kb_http_response_release(&resp);
	return 0;
}

KB_FUZZ_ENTRY(http_headers)
