/*
 * The github client's decisions without a server: Link parsing, the
 * rate-limit / retry verdicts given headers, the backoff schedule and its
 * jitter bounds, mutation spacing, the JWT (signature checked with the
 * public key), the body cap and header parsing of the curl callbacks, the
 * ETag store and installation-token renewal.
 */
#include "core/common.h"
#include "core/http.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "forge/github/gh.h"
#include "forge/github/jwt.h"
#include "forge/github/policy.h"

#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <openssl/err.h>
#include <openssl/pem.h>

/* --- Link --- */

static const char *const fixture_link =
	"<https://api.github.com/repositories/1000/issues?per_page=3&page=1>; rel=\"prev\", "
	"<https://api.github.com/repositories/1000/issues?per_page=3&page=3>; rel=\"next\", "
	"<https://api.github.com/repositories/1000/issues?per_page=3&page=5>; rel=\"last\", "
	"<https://api.github.com/repositories/1000/issues?per_page=3&page=1>; rel=\"first\"";

static void check_link(const char *link, const char *rel, const char *want)
{
	char *got = gh_link_find(link, rel);

	if (!want) {
		if (got)
			fail_msg("rel '%s' in '%s': got '%s', want none", rel, link ? link : "(null)",
				 got);
		return;
	}
	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void test_link_fixture(void **state)
{
	check_link(fixture_link, "next",
		   "https://api.github.com/repositories/1000/issues?per_page=3&page=3");
	check_link(fixture_link, "last",
		   "https://api.github.com/repositories/1000/issues?per_page=3&page=5");
	check_link(fixture_link, "prev",
		   "https://api.github.com/repositories/1000/issues?per_page=3&page=1");
	check_link(fixture_link, "first",
		   "https://api.github.com/repositories/1000/issues?per_page=3&page=1");
	/* the last page has no next */
	check_link("<https://x/a?page=4>; rel=\"prev\", <https://x/a?page=1>; rel=\"first\"",
		   "next", NULL);
	check_link(NULL, "next", NULL);
	check_link("", "next", NULL);
}

static void test_link_variants(void **state)
{
	/* unquoted rel, odd spacing, case, several rel values, extra parameters */
	check_link("<https://x/2>;rel=next", "next", "https://x/2");
	check_link("  <https://x/2> ;  REL = \"Next\"  ", "next", "https://x/2");
	check_link("<https://x/9>; rel=\"next last\"", "last", "https://x/9");
	check_link("<https://x/9>; rel=\"next last\"", "next", "https://x/9");
	check_link("<https://x/1>; title=\"a, b; c\"; rel=\"prev\", <https://x/3>; rel=\"next\"",
		   "next", "https://x/3");
	check_link("<https://x/1>; rel=\"nextish\"", "next", NULL);
	/* malformed: no brackets, unterminated URL or quote */
	check_link("https://x/2; rel=\"next\"", "next", NULL);
	check_link("<https://x/2; rel=\"next\"", "next", NULL);
	check_link("<https://x/2>; rel=\"next", "next", NULL);
	check_link("<>; rel=\"next\"", "next", NULL);
}

static void test_same_origin(void **state)
{
	assert_true(gh_same_origin("https://api.github.com/repos/a/b", "https://api.github.com"));
	assert_true(gh_same_origin("http://127.0.0.1:8080?x", "http://127.0.0.1:8080"));
	assert_true(gh_same_origin("http://127.0.0.1:8080", "http://127.0.0.1:8080"));
	assert_false(gh_same_origin("https://api.github.com.evil.io/x", "https://api.github.com"));
	assert_false(gh_same_origin("http://127.0.0.1:80800/x", "http://127.0.0.1:8080"));
	assert_false(gh_same_origin("http://api.github.com/x", "https://api.github.com"));
}

/* --- verdicts --- */

static const struct gh_policy P = GH_POLICY_INIT;

static struct gh_decision decide(const struct gh_outcome *o, int attempt, int64_t now,
				 double jitter)
{
	struct gh_decision d;

	gh_decide(&d, &P, o, attempt, now, jitter);
	return d;
}

static void test_decide_success_and_plain_errors(void **state)
{
	struct gh_outcome o = GH_OUTCOME_INIT;
	struct gh_decision d;
	static const long done[] = { 200, 201, 204, 304 };
	static const long fail[] = { 400, 401, 404, 409, 410, 422 };

	for (size_t i = 0; i < ARRAY_SIZE(done); i++) {
		o.status = done[i];
		assert_int_equal(decide(&o, 0, 1000, 0.5).verdict, GH_DONE);
	}
	for (size_t i = 0; i < ARRAY_SIZE(fail); i++) {
		o.status = fail[i];
		d = decide(&o, 0, 1000, 0.5);
		assert_int_equal(d.verdict, GH_FAIL);
		assert_false(d.rate_limited);
	}
	/* a 403 with no limit signal is "forbidden": never retried */
	o.status = 403;
	o.rl_remaining = 4000;
	o.rl_reset = 2000;
	d = decide(&o, 0, 1000, 0.5);
	assert_int_equal(d.verdict, GH_FAIL);
	assert_false(d.rate_limited);
}

static void test_decide_retry_after(void **state)
{
	struct gh_outcome o = GH_OUTCOME_INIT;
	struct gh_decision d;

	o.status = 403;
	o.retry_after = "7";
	o.rl_remaining = 0;       /* retry-after wins over the reset time */
	o.rl_reset = 1000 + 900;
	o.limit_message = true;
	d = decide(&o, 0, 1000, 0.99);
	assert_int_equal(d.verdict, GH_RETRY);
	assert_int_equal(d.wait_ms, 7000);
	assert_true(d.rate_limited);
	assert_int_equal(d.reason, GH_WAIT_RATE_LIMIT);

	o.status = 429;
	o.retry_after = " 0";
	assert_int_equal(decide(&o, 2, 1000, 0.1).wait_ms, 0);

	/* an HTTP date: seconds from now */
	o.retry_after = "Thu, 01 Jan 1970 00:16:50 GMT"; /* 1010 */
	d = decide(&o, 0, 1000, 0.1);
	assert_int_equal(d.verdict, GH_RETRY);
	assert_int_equal(d.wait_ms, 10000);
	assert_int_equal(kb_http_retry_after_ms("Thu, 01 Jan 1970 00:16:50 GMT", 2000), 0);
	assert_int_equal(kb_http_retry_after_ms("soon", 1000), -1);
	assert_int_equal(kb_http_retry_after_ms(NULL, 1000), -1);
}

static void test_decide_primary_reset(void **state)
{
	struct gh_outcome o = GH_OUTCOME_INIT;
	struct gh_decision d;

	o.status = 403;
	o.rl_remaining = 0;
	o.rl_reset = 1000 + 30;
	d = decide(&o, 0, 1000, 0.7);
	assert_int_equal(d.verdict, GH_RETRY);
	assert_int_equal(d.wait_ms, 31000); /* until reset, plus a second */
	assert_true(d.rate_limited);
	/* a reset already past: a second */
	o.rl_reset = 990;
	assert_int_equal(decide(&o, 0, 1000, 0.7).wait_ms, 1000);
	/* a reset beyond max_wait: give up rather than hang */
	o.rl_reset = 1000 + P.max_wait_ms / 1000 + 10;
	d = decide(&o, 0, 1000, 0.7);
	assert_int_equal(d.verdict, GH_FAIL);
	assert_true(d.rate_limited);
	/* 429 with remaining 0 behaves the same */
	o.status = 429;
	o.rl_reset = 1005;
	assert_int_equal(decide(&o, 0, 1000, 0.7).wait_ms, 6000);
}

static void test_decide_secondary(void **state)
{
	struct gh_outcome o = GH_OUTCOME_INIT;
	struct gh_decision d;

	/* the message marks it; remaining is not 0 */
	o.status = 403;
	o.limit_message = true;
	o.rl_remaining = 4000;
	for (int attempt = 0; attempt < 3; attempt++) {
		int64_t floor = P.secondary_min_ms << attempt;

		for (double j = 0; j < 1; j += 0.125) {
			d = decide(&o, attempt, 1000, j);
			assert_int_equal(d.verdict, GH_RETRY);
			assert_true(d.rate_limited);
			assert_true(d.wait_ms >= floor);       /* at least a minute, doubling */
			assert_true(d.wait_ms < floor + floor / 2);
		}
	}
	/* a 429 needs no message */
	o.status = 429;
	o.limit_message = false;
	o.rl_remaining = -1;
	d = decide(&o, 0, 1000, 0);
	assert_int_equal(d.verdict, GH_RETRY);
	assert_int_equal(d.wait_ms, P.secondary_min_ms);
	/* out of attempts */
	d = decide(&o, P.max_attempts - 1, 1000, 0);
	assert_int_equal(d.verdict, GH_FAIL);
	assert_true(d.rate_limited);
}

static void test_decide_5xx_and_transport(void **state)
{
	struct gh_outcome o = GH_OUTCOME_INIT;
	struct gh_decision d;
	static const long retried[] = { 500, 502, 503, 504 };

	for (size_t i = 0; i < ARRAY_SIZE(retried); i++) {
		o.status = retried[i];
		d = decide(&o, 1, 1000, 0.5);
		assert_int_equal(d.verdict, GH_RETRY);
		assert_int_equal(d.reason, GH_WAIT_BACKOFF);
		assert_int_equal(d.wait_ms, gh_backoff_ms(&P, 1, 0.5));
		assert_false(d.rate_limited);
		assert_int_equal(decide(&o, P.max_attempts - 1, 1000, 0.5).verdict, GH_FAIL);
	}
	o.status = 0;
	o.transport = GH_T_RETRY; /* a timeout, a refused or reset connection */
	d = decide(&o, 0, 1000, 0);
	assert_int_equal(d.verdict, GH_RETRY);
	assert_int_equal(d.wait_ms, P.base_backoff_ms / 2);
	assert_int_equal(decide(&o, P.max_attempts - 1, 1000, 0).verdict, GH_FAIL);
	o.transport = GH_T_TOOBIG;
	assert_int_equal(decide(&o, 0, 1000, 0).verdict, GH_FAIL);
	o.transport = GH_T_FATAL;
	assert_int_equal(decide(&o, 0, 1000, 0).verdict, GH_FAIL);
}

/*
 * Absurd header values (issue 13's fuzzing): seconds x 1000 saturates, so
 * the wait is over max_wait_ms and the request fails; before, it wrapped
 * to a negative wait and an immediate retry.
 */
static void test_decide_overflow(void **state)
{
	struct gh_outcome o = GH_OUTCOME_INIT;
	struct gh_decision d;

	o.status = 429;
	o.retry_after = "200376420520689575";
	d = decide(&o, 0, 1764700000, 0.5);
	assert_int_equal(d.verdict, GH_FAIL);
	assert_true(d.rate_limited);
	/* delta seconds past int64 are as long as can be, not unreadable */
	assert_true(kb_http_retry_after_ms("40075284104137915000752841041379150", 1000) >= INT64_MAX / 2);
	o.retry_after = "40075284104137915000752841041379150";
	assert_int_equal(decide(&o, 0, 1764700000, 0.5).verdict, GH_FAIL);

	o.status = 403;
	o.retry_after = NULL;
	o.rl_remaining = 0;
	o.rl_reset = INT64_MAX;
	d = decide(&o, 0, 1764700000, 0.5);
	assert_int_equal(d.verdict, GH_FAIL);
	assert_true(d.rate_limited);
	o.rl_reset = 9223372035058469414LL;
	assert_int_equal(decide(&o, 0, 1764700000, 0.5).verdict, GH_FAIL);

	/* the quota wait before the next request: the client refuses it */
	assert_true(gh_quota_wait_ms(0, INT64_MAX, 1764700000) == INT64_MAX);
	assert_true(gh_quota_wait_ms(0, 9223372035058469414LL, 1764700000) > P.max_wait_ms);
	assert_int_equal(gh_quota_wait_ms(0, 1764700030, 1764700000), 31000);
}

static void test_backoff_schedule(void **state)
{
	int64_t prev_lo = 0;

	for (int a = 0; a < 12; a++) {
		int64_t d = P.base_backoff_ms << a;
		int64_t lo, hi;

		if (d > P.max_backoff_ms)
			d = P.max_backoff_ms;
		lo = gh_backoff_ms(&P, a, 0);
		hi = gh_backoff_ms(&P, a, 0.999999);
		assert_int_equal(lo, d / 2);
		assert_true(hi <= d && hi >= d - 1);
		assert_true(lo >= prev_lo); /* never shrinks */
		prev_lo = lo;
		/* uniform draws stay inside [d/2, d] and spread over it */
		srand48(a + 1);
		{
			int64_t min = INT64_MAX, max = 0;

			for (int i = 0; i < 2000; i++) {
				int64_t w = gh_backoff_ms(&P, a, drand48());

				assert_true(w >= d / 2 && w <= d);
				min = w < min ? w : min;
				max = w > max ? w : max;
			}
			assert_true(max - min > (d / 2) * 8 / 10);
		}
	}
	/* out-of-range jitter is clamped, huge attempts do not overflow */
	assert_int_equal(gh_backoff_ms(&P, 3, -5), (P.base_backoff_ms << 3) / 2);
	assert_true(gh_backoff_ms(&P, 200, 7) <= P.max_backoff_ms);
	assert_true(gh_backoff_ms(&P, 200, 0.5) >= P.max_backoff_ms / 2);
}

static void test_mutation_spacing(void **state)
{
	assert_int_equal(gh_mutation_wait_ms(0, 5000, 1000), 0);       /* first one */
	assert_int_equal(gh_mutation_wait_ms(5000, 5300, 1000), 700);
	assert_int_equal(gh_mutation_wait_ms(5000, 6000, 1000), 0);
	assert_int_equal(gh_mutation_wait_ms(5000, 9000, 1000), 0);
	assert_int_equal(gh_mutation_wait_ms(5000, 4000, 1000), 1000); /* clock went back */
	assert_true(gh_is_mutating("POST") && gh_is_mutating("PATCH") && gh_is_mutating("PUT") &&
		    gh_is_mutating("DELETE"));
	assert_false(gh_is_mutating("GET"));
	/* a spent quota makes every request wait for the reset */
	assert_int_equal(gh_quota_wait_ms(0, 1030, 1000), 31000);
	assert_int_equal(gh_quota_wait_ms(1, 1030, 1000), 0);
	assert_int_equal(gh_quota_wait_ms(-1, -1, 1000), 0);
	assert_int_equal(gh_quota_wait_ms(0, 900, 1000), 0);
}

/* --- JWT --- */

struct keys {
	char dir[64];
	char priv[96];
	char pub[96];
	EVP_PKEY *key;
};

static int keys_setup(void **state)
{
	struct keys *k = xcalloc(1, sizeof(*k));
	FILE *fp;

	kb_strlcpy(k->dir, "/tmp/kb-test-jwt-XXXXXX", sizeof(k->dir));
	if (!mkdtemp(k->dir))
		return -1;
	xsnprintf(k->priv, sizeof(k->priv), "%s/app.pem", k->dir);
	xsnprintf(k->pub, sizeof(k->pub), "%s/app.pub", k->dir);
	k->key = EVP_RSA_gen(2048);
	if (!k->key)
		return -1;
	fp = fopen(k->priv, "w");
	PEM_write_PrivateKey(fp, k->key, NULL, NULL, 0, NULL, NULL);
	fclose(fp);
	fp = fopen(k->pub, "w");
	PEM_write_PUBKEY(fp, k->key);
	fclose(fp);
	*state = k;
	return 0;
}

static int keys_teardown(void **state)
{
	struct keys *k = *state;

	EVP_PKEY_free(k->key);
	kb_rm_rf(k->dir);
	free(k);
	return 0;
}

static size_t b64url_decode(const char *s, size_t len, unsigned char *out)
{
	size_t n = 0;
	uint32_t acc = 0;
	int bits = 0;

	for (size_t i = 0; i < len; i++) {
		const char *tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
		const char *p = strchr(tbl, s[i]);

		assert_non_null(p);
		acc = acc << 6 | (uint32_t)(p - tbl);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (unsigned char)(acc >> bits & 0xFF);
		}
	}
	return n;
}

static void test_base64url(void **state)
{
	static const struct { const char *in, *out; } v[] = {
		{ "", "" }, { "f", "Zg" }, { "fo", "Zm8" }, { "foo", "Zm9v" },
		{ "foob", "Zm9vYg" }, { "fooba", "Zm9vYmE" }, { "foobar", "Zm9vYmFy" },
		{ "\xfb\xff\xbf", "-_-_" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
		struct strbuf sb = STRBUF_INIT;

		gh_base64url(&sb, v[i].in, strlen(v[i].in));
		assert_string_equal(sb.buf, v[i].out);
		strbuf_release(&sb);
	}
}

static void test_jwt_signed_and_verifiable(void **state)
{
	struct keys *k = *state;
	struct strbuf jwt = STRBUF_INIT;
	EVP_PKEY *key = NULL, *pub;
	EVP_MD_CTX *ctx;
	FILE *fp;
	char *dot1, *dot2;
	unsigned char buf[1024];
	size_t n;
	cJSON *j;
	const int64_t now = 1700000000;

	assert_int_equal(gh_jwt_load_key(&key, k->priv), 0);
	assert_int_equal(gh_jwt_sign(&jwt, key, "12345", now), 0);
	dot1 = strchr(jwt.buf, '.');
	assert_non_null(dot1);
	dot2 = strchr(dot1 + 1, '.');
	assert_non_null(dot2);
	assert_null(strchr(dot2 + 1, '.'));
	assert_null(strpbrk(jwt.buf, "+/="));

	n = b64url_decode(jwt.buf, (size_t)(dot1 - jwt.buf), buf);
	j = cJSON_ParseWithLength((char *)buf, n);
	assert_non_null(j);
	assert_string_equal(cJSON_GetObjectItem(j, "alg")->valuestring, "RS256");
	assert_string_equal(cJSON_GetObjectItem(j, "typ")->valuestring, "JWT");
	cJSON_Delete(j);

	n = b64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), buf);
	j = cJSON_ParseWithLength((char *)buf, n);
	assert_non_null(j);
	assert_int_equal((int64_t)cJSON_GetObjectItem(j, "iat")->valuedouble, now - 60);
	assert_int_equal((int64_t)cJSON_GetObjectItem(j, "exp")->valuedouble, now + 540);
	assert_true((int64_t)cJSON_GetObjectItem(j, "exp")->valuedouble - now <= 600);
	assert_string_equal(cJSON_GetObjectItem(j, "iss")->valuestring, "12345");
	cJSON_Delete(j);

	/* the signature verifies with the public key alone ... */
	fp = fopen(k->pub, "r");
	pub = PEM_read_PUBKEY(fp, NULL, NULL, NULL);
	fclose(fp);
	assert_non_null(pub);
	n = b64url_decode(dot2 + 1, strlen(dot2 + 1), buf);
	assert_int_equal(n, 256);
	ctx = EVP_MD_CTX_new();
	assert_int_equal(EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, pub), 1);
	assert_int_equal(EVP_DigestVerify(ctx, buf, n, (unsigned char *)jwt.buf,
					  (size_t)(dot2 - jwt.buf)), 1);
	EVP_MD_CTX_free(ctx);
	/* ... and fails for changed claims */
	jwt.buf[dot1 - jwt.buf + 3] ^= 1;
	ctx = EVP_MD_CTX_new();
	assert_int_equal(EVP_DigestVerifyInit(ctx, NULL, EVP_sha256(), NULL, pub), 1);
	assert_int_not_equal(EVP_DigestVerify(ctx, buf, n, (unsigned char *)jwt.buf,
					      (size_t)(dot2 - jwt.buf)), 1);
	EVP_MD_CTX_free(ctx);
	ERR_clear_error();

	EVP_PKEY_free(pub);
	EVP_PKEY_free(key);
	strbuf_release(&jwt);
}

static void test_jwt_bad_keys(void **state)
{
	struct keys *k = *state;
	struct strbuf path = STRBUF_INIT;
	EVP_PKEY *key = (EVP_PKEY *)&path, *ec;
	FILE *fp;

	log_set_level(KB_LOG_OFF);
	assert_int_equal(gh_jwt_load_key(&key, "/nonexistent/app.pem"), -1);
	assert_null(key);
	strbuf_addf(&path, "%s/garbage.pem", k->dir);
	assert_int_equal(kb_write_file_atomic(path.buf, "not a key\n", 10), 0);
	assert_int_equal(gh_jwt_load_key(&key, path.buf), -1);
	/* a public key is not a private key */
	assert_int_equal(gh_jwt_load_key(&key, k->pub), -1);
	/* an EC key cannot sign RS256 */
	ec = EVP_EC_gen("P-256");
	assert_non_null(ec);
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/ec.pem", k->dir);
	fp = fopen(path.buf, "w");
	PEM_write_PrivateKey(fp, ec, NULL, NULL, 0, NULL, NULL);
	fclose(fp);
	assert_int_equal(gh_jwt_load_key(&key, path.buf), -1);
	assert_null(key);
	EVP_PKEY_free(ec);
	log_set_level(KB_LOG_INFO);
	strbuf_release(&path);
}

/* --- curl callbacks: body cap, headers --- */

static size_t feed_header(struct kb_http_response *r, const char *line)
{
	char *copy = xstrdup(line);
	size_t n = kb_http_response_header_cb(copy, 1, strlen(copy), r);

	free(copy);
	return n;
}

static void test_body_cap(void **state)
{
	struct kb_http_response r;
	char chunk[600];

	memset(chunk, 'x', sizeof(chunk));
	kb_http_response_init(&r, 1024);
	assert_int_equal(kb_http_response_body_cb(chunk, 1, 600, &r), 600);
	assert_false(r.too_big);
	/* the chunk that would pass the cap is refused whole: curl then stops */
	assert_int_equal(kb_http_response_body_cb(chunk, 2, 300, &r), 0);
	assert_true(r.too_big);
	assert_int_equal(r.body.len, 600);
	/* exactly at the cap is fine */
	kb_http_response_reset(&r);
	assert_false(r.too_big);
	assert_int_equal(kb_http_response_body_cb(chunk, 1, 600, &r), 600);
	assert_int_equal(kb_http_response_body_cb(chunk, 1, 424, &r), 424);
	assert_int_equal(r.body.len, 1024);
	assert_int_equal(kb_http_response_body_cb(chunk, 1, 1, &r), 0);
	kb_http_response_release(&r);
}

static void test_header_parsing(void **state)
{
	struct kb_http_response r;
	struct gh_outcome o = GH_OUTCOME_INIT;

	kb_http_response_init(&r, 0);
	/* a redirect's headers are forgotten when the next response starts */
	feed_header(&r, "HTTP/1.1 301 Moved Permanently\r\n");
	feed_header(&r, "ETag: \"old\"\r\n");
	feed_header(&r, "HTTP/1.1 200 OK\r\n");
	assert_null(kb_http_response_header(&r, "etag"));
	feed_header(&r, "ETag:   W/\"abc\"  \r\n");
	feed_header(&r, "link: <https://x/2>; rel=\"next\"\r\n");
	feed_header(&r, "X-RateLimit-Remaining: 0\r\n");
	feed_header(&r, "x-ratelimit-reset: 1700000000\r\n");
	feed_header(&r, "Retry-After: 30\r\n");
	feed_header(&r, "X-RateLimit-Limit: 5000\r\n");
	feed_header(&r, "Content-Type: application/json\r\n");
	feed_header(&r, "\r\n");
	gh_outcome_read(&o, &r);
	assert_string_equal(kb_http_response_header(&r, "etag"), "W/\"abc\"");
	assert_string_equal(kb_http_response_header(&r, "link"), "<https://x/2>; rel=\"next\"");
	assert_string_equal(o.retry_after, "30");
	assert_int_equal(o.rl_remaining, 0);
	assert_int_equal(o.rl_reset, 1700000000);
	feed_header(&r, "x-ratelimit-remaining: lots\r\n");
	gh_outcome_read(&o, &r);
	assert_int_equal(o.rl_remaining, -1);
	kb_http_response_release(&r);
}

/* --- ETag store, token renewal, timestamps --- */

static void test_etag_store(void **state)
{
	struct gh_etag_cache c;
	const struct gh_etag_entry *e;
	char url[32];

	gh_etag_cache_init(&c, 3, 100);
	gh_etag_put(&c, "u1", "\"e1\"", "<l>; rel=\"next\"", "[1]", 3);
	e = gh_etag_get(&c, "u1");
	assert_non_null(e);
	assert_string_equal(e->etag, "\"e1\"");
	assert_string_equal(e->body, "[1]");
	assert_string_equal(e->link, "<l>; rel=\"next\"");
	gh_etag_put(&c, "u1", "\"e2\"", NULL, "[22]", 4); /* replaced, not added */
	assert_int_equal(c.nr, 1);
	assert_string_equal(gh_etag_get(&c, "u1")->etag, "\"e2\"");
	/* no ETag: nothing to revalidate, not stored (and the old entry goes) */
	gh_etag_put(&c, "u1", NULL, NULL, "[]", 2);
	assert_null(gh_etag_get(&c, "u1"));
	/* entry cap: oldest evicted */
	for (int i = 0; i < 5; i++) {
		xsnprintf(url, sizeof(url), "u%d", i);
		gh_etag_put(&c, url, "\"t\"", NULL, "0123456789", 10);
	}
	assert_int_equal(c.nr, 3);
	assert_null(gh_etag_get(&c, "u0"));
	assert_non_null(gh_etag_get(&c, "u4"));
	/* byte cap */
	gh_etag_put(&c, "big", "\"b\"", NULL, "0123456789012345678901234567890123456789"
		    "01234567890123456789012345678901234567890123456789012345", 96);
	assert_true(c.bytes <= 100);
	assert_non_null(gh_etag_get(&c, "big"));
	{
		char huge[101];

		memset(huge, 'h', sizeof(huge));
		gh_etag_put(&c, "huge", "\"h\"", NULL, huge, sizeof(huge)); /* over the cap */
		assert_null(gh_etag_get(&c, "huge"));
		assert_non_null(gh_etag_get(&c, "big"));
	}
	gh_etag_cache_release(&c);
}

static void test_token_renewal(void **state)
{
	int64_t t;

	assert_false(gh_token_needs_renewal(10000, 10000 - 3600));
	assert_false(gh_token_needs_renewal(10000, 10000 - 301));
	assert_true(gh_token_needs_renewal(10000, 10000 - 300)); /* five minutes before */
	assert_true(gh_token_needs_renewal(10000, 10001));
	assert_int_equal(gh_parse_time("2016-07-11T22:14:10Z", &t), 0);
	assert_int_equal(t, 1468275250);
	assert_int_equal(gh_parse_time("2016-07-11T22:14:10.123Z", &t), 0);
	assert_int_equal(t, 1468275250);
	assert_int_equal(gh_parse_time("2016-07-11T22:14:10+00:00", &t), 0);
	assert_int_equal(gh_parse_time("2016-07-11 22:14:10", &t), -1);
	assert_int_equal(gh_parse_time("2016-07-11T22:14:10+02:00", &t), -1);
	assert_int_equal(gh_parse_time(NULL, &t), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_link_fixture),
		cmocka_unit_test(test_link_variants),
		cmocka_unit_test(test_same_origin),
		cmocka_unit_test(test_decide_success_and_plain_errors),
		cmocka_unit_test(test_decide_retry_after),
		cmocka_unit_test(test_decide_primary_reset),
		cmocka_unit_test(test_decide_secondary),
		cmocka_unit_test(test_decide_5xx_and_transport),
		cmocka_unit_test(test_decide_overflow),
		cmocka_unit_test(test_backoff_schedule),
		cmocka_unit_test(test_mutation_spacing),
		cmocka_unit_test(test_base64url),
		cmocka_unit_test_setup_teardown(test_jwt_signed_and_verifiable, keys_setup,
						keys_teardown),
		cmocka_unit_test_setup_teardown(test_jwt_bad_keys, keys_setup, keys_teardown),
		cmocka_unit_test(test_body_cap),
		cmocka_unit_test(test_header_parsing),
		cmocka_unit_test(test_etag_store),
		cmocka_unit_test(test_token_renewal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
