/* strbuf, strvec, logging with redaction, and the util helpers. */
#include "core/budget.h"
#include "core/common.h"
#include "core/cscan.h"
#include "core/hash.h"
#include "core/http.h"
#include "core/json.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/signals.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"

#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>

static char tmpdir[64];

static int setup(void **state)
{
	kb_strlcpy(tmpdir, "/tmp/kb-test-core-XXXXXX", sizeof(tmpdir));
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

static int teardown(void **state)
{
	log_open(NULL);
	log_clear_secrets();
	kb_rm_rf(tmpdir);
	return 0;
}

static void test_strbuf_basic(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	char *s;
	size_t len;

	assert_string_equal(sb.buf, "");
	strbuf_addstr(&sb, "hello");
	strbuf_addch(&sb, ' ');
	strbuf_addf(&sb, "%d-%s", 42, "x");
	assert_string_equal(sb.buf, "hello 42-x");
	assert_int_equal(sb.len, 10);
	strbuf_setlen(&sb, 5);
	assert_string_equal(sb.buf, "hello");
	for (int i = 0; i < 10000; i++)
		strbuf_addch(&sb, 'a' + i % 26);
	assert_int_equal(sb.len, 10005);
	assert_int_equal(strlen(sb.buf), 10005);
	s = strbuf_detach(&sb, &len);
	assert_int_equal(len, 10005);
	assert_string_equal(sb.buf, ""); /* usable again after detach */
	free(s);
	s = strbuf_detach(&sb, NULL); /* never NULL, even when empty */
	assert_non_null(s);
	assert_string_equal(s, "");
	free(s);
	strbuf_release(&sb);
}

static void test_strbuf_cap(void **state)
{
	struct strbuf sb;

	strbuf_init_capped(&sb, 8);
	assert_int_equal(strbuf_addstr(&sb, "12345"), 0);
	assert_int_equal(strbuf_addstr(&sb, "6789"), KB_ETOOBIG);
	assert_string_equal(sb.buf, "12345"); /* nothing appended on failure */
	assert_int_equal(strbuf_addf(&sb, "%s", "abcd"), KB_ETOOBIG);
	assert_int_equal(strbuf_addstr(&sb, "678"), 0);
	assert_int_equal(sb.len, 8);
	strbuf_release(&sb);
}

static void test_strbuf_trim_replace_json(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addstr(&sb, " \t a b \n");
	strbuf_trim(&sb);
	assert_string_equal(sb.buf, "a b");
	strbuf_reset(&sb);
	strbuf_addstr(&sb, "tok tok-tok");
	assert_int_equal(strbuf_replace_all(&sb, "tok", "***"), 3);
	assert_string_equal(sb.buf, "*** ***-***");
	strbuf_reset(&sb);
	strbuf_add_json_escaped(&sb, "a\"b\\c\nd\x01");
	assert_string_equal(sb.buf, "a\\\"b\\\\c\\nd\\u0001");
	strbuf_release(&sb);
}

static void test_strbuf_read_file(void **state)
{
	struct strbuf sb = STRBUF_INIT, path = STRBUF_INIT;

	strbuf_addf(&path, "%s/f", tmpdir);
	assert_int_equal(kb_write_file_atomic(path.buf, "0123456789", 10), 0);
	assert_int_equal(strbuf_read_file(&sb, path.buf, 0), 0);
	assert_string_equal(sb.buf, "0123456789");
	strbuf_reset(&sb);
	assert_int_equal(strbuf_read_file(&sb, path.buf, 4), KB_ETOOBIG);
	strbuf_reset(&sb);
	strbuf_addstr(&path, ".missing");
	assert_int_equal(strbuf_read_file(&sb, path.buf, 0), -1);
	strbuf_release(&sb);
	strbuf_release(&path);
}

static void test_strvec(void **state)
{
	struct strvec sv = STRVEC_INIT;

	assert_null(sv.v[0]);
	strvec_pushl(&sv, "a", "b", NULL);
	strvec_pushf(&sv, "%s=%d", "n", 3);
	for (int i = 0; i < 100; i++)
		strvec_push(&sv, "x");
	assert_int_equal(sv.nr, 103);
	assert_string_equal(sv.v[2], "n=3");
	assert_null(sv.v[103]);
	strvec_clear(&sv);
	assert_int_equal(sv.nr, 0);
	assert_null(sv.v[0]);
}

static void read_log(struct strbuf *out, const char *path)
{
	strbuf_reset(out);
	assert_int_equal(strbuf_read_file(out, path, 0), 0);
}

static void test_log_levels_and_redaction(void **state)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;

	strbuf_addf(&path, "%s/log", tmpdir);
	assert_int_equal(log_open(path.buf), 0);
	log_set_level(KB_LOG_INFO);
	log_debug("hidden %d", 1);
	log_info("shown\nwith newline");
	log_add_secret("ghp_SECRETTOKEN123");
	log_add_secret("abc"); /* too short to redact safely: ignored */
	log_warn("token is ghp_SECRETTOKEN123 and again ghp_SECRETTOKEN123");
	error("could not open '%s'", "x");
	read_log(&text, path.buf);
	assert_null(strstr(text.buf, "hidden"));
	assert_non_null(strstr(text.buf, "info  shown with newline\n"));
	assert_null(strstr(text.buf, "ghp_SECRETTOKEN123"));
	assert_non_null(strstr(text.buf, "token is *** and again ***"));
	assert_non_null(strstr(text.buf, "error could not open 'x'"));
	/* every line starts with an ISO-8601 UTC timestamp */
	assert_true(text.len > 21 && text.buf[4] == '-' && text.buf[10] == 'T' && text.buf[19] == 'Z');
	{
		enum kb_log_level lv;

		assert_int_equal(log_parse_level("WARN", &lv), 0);
		assert_int_equal(lv, KB_LOG_WARN);
		assert_int_equal(log_parse_level("loud", &lv), -1);
	}
	log_open(NULL);
	strbuf_release(&path);
	strbuf_release(&text);
}

static void count_observed(const struct kb_progress *p, void *payload)
{
	(*(int *)payload)++;
}

/*
 * A log line while a bar is drawn on the terminal: the bar is cleared
 * first and drawn again below the line, so no line holds both.
 */
static void test_progress_log_lines_keep_the_bar_whole(void **state)
{
	struct kb_progress p;
	struct strbuf text = STRBUF_INIT, path = STRBUF_INIT;
	int saved = dup(2), fd, observed = 0;
	const char *hello, *line_start;

	strbuf_addf(&path, "%s/tty", tmpdir);
	fd = open(path.buf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(saved >= 0 && fd >= 0);
	fflush(stderr);
	assert_int_equal(dup2(fd, 2), 2);
	log_open(NULL);
	kb_progress_init(&p, stderr, 1);
	p.width = 100;
	p.observe = count_observed;
	p.observe_payload = &observed;
	kb_progress_stage(&p, "verify", 2);
	log_info("state: created 'x'");
	kb_progress_step(&p, 1, "k1.cpp");
	kb_progress_end(&p);
	log_info("after the end");
	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	close(fd);

	read_log(&text, path.buf);
	hello = strstr(text.buf, "info  state: created 'x'\n");
	assert_non_null(hello);
	line_start = hello;
	while (line_start > text.buf && line_start[-1] != '\n' && line_start[-1] != 'K')
		line_start--;
	/* the log line starts right after the bar was erased ("\r\033[K") */
	assert_true(line_start - text.buf >= 4 && !strncmp(line_start - 4, "\r\033[K", 4));
	assert_null(memmem(text.buf, (size_t)(hello - text.buf), "\n", 1)); /* the bar was on this line */
	/* drawn again right below it, then the step */
	assert_non_null(strstr(hello, "\n\r\033[K[....................] verify 0/2"));
	assert_non_null(strstr(hello, "\r\033[K[##########..........] verify 1/2  k1.cpp"));
	/* after kb_progress_end the log writes plainly: no bar comes back */
	hello = strstr(text.buf, "info  after the end\n");
	assert_non_null(hello);
	assert_null(strstr(hello, "verify"));
	assert_int_equal(observed, 2); /* the stage and the step */
	strbuf_release(&text);
	strbuf_release(&path);
}

/* Plain lines (a log): a step that runs long gets a heartbeat note, not a step line. */
static void test_progress_heartbeat(void **state)
{
	struct kb_progress p;
	struct strbuf text = STRBUF_INIT, path = STRBUF_INIT;
	FILE *fp;

	strbuf_addf(&path, "%s/plain", tmpdir);
	fp = fopen(path.buf, "w");
	assert_non_null(fp);
	kb_progress_init(&p, fp, 0);
	kb_progress_activity(&p, "nothing before a stage");
	kb_progress_stage(&p, "verify", 3);
	kb_progress_activity(&p, "k.cpp: %s, config %d, seed %d", "trial", 1, 0);
	/* as if the step had run for 31 s without a line */
	p.line_ms -= 31000;
	p.step_ms -= 31000;
	kb_progress_activity(&p, "k.cpp: %s, config %d, seed %d", "trial", 2, 1);
	kb_progress_tick(&p); /* just printed: nothing more */
	kb_progress_step(&p, 1, "k.cpp");
	kb_progress_tick(&p);
	fclose(fp);
	read_log(&text, path.buf);
	assert_string_equal(text.buf, "[verify 0/3]\n"
			    "... verify 0/3 still running after 31 s: k.cpp: trial, config 2, seed 1\n"
			    "[verify 1/3] k.cpp\n");
	strbuf_release(&text);
	strbuf_release(&path);
}

static void test_util_parse_and_fs(void **state)
{
	struct strbuf p = STRBUF_INIT;
	int64_t i;
	double d;

	assert_int_equal(kb_parse_i64("123", &i), 0);
	assert_int_equal(i, 123);
	assert_int_equal(kb_parse_i64("12x", &i), -1);
	assert_int_equal(kb_parse_i64("", &i), -1);
	assert_int_equal(kb_parse_i64("99999999999999999999", &i), -1);
	assert_int_equal(kb_parse_double("1e-4", &d), 0);
	assert_true(d == 1e-4);
	assert_int_equal(kb_parse_double("nan", &d), -1);
	strbuf_addf(&p, "%s/a/b/c", tmpdir);
	assert_int_equal(kb_mkdir_p(p.buf, 0755), 0);
	assert_true(kb_is_dir(p.buf));
	assert_int_equal(kb_mkdir_p(p.buf, 0755), 0); /* idempotent */
	strbuf_addstr(&p, "/file");
	assert_int_equal(kb_write_file_atomic(p.buf, "x", 1), 0);
	assert_true(kb_is_file(p.buf));
	strbuf_reset(&p);
	strbuf_addf(&p, "%s/a", tmpdir);
	assert_int_equal(kb_rm_rf(p.buf), 0);
	assert_false(kb_is_dir(p.buf));
	{
		char small[4];

		assert_int_equal(kb_strlcpy(small, "abcdef", sizeof(small)), 6);
		assert_string_equal(small, "abc");
	}
	strbuf_release(&p);
}

/* Figures from outside never overflow: clamped to the type's ends, NaN is 0. */
static void test_util_saturating(void **state)
{
	assert_true(kb_sat_mul_i64(200376420520689575LL, 1000) == INT64_MAX);
	assert_true(kb_sat_mul_i64(-200376420520689575LL, 1000) == INT64_MIN);
	assert_true(kb_sat_mul_i64(-3, -4) == 12);
	assert_true(kb_sat_add_i64(INT64_MAX - 1, 5) == INT64_MAX);
	assert_true(kb_sat_add_i64(INT64_MIN + 1, -5) == INT64_MIN);
	assert_true(kb_sat_add_i64(40, 2) == 42);
	assert_true(kb_sat_sub_i64(INT64_MAX, -1) == INT64_MAX);
	assert_true(kb_sat_sub_i64(1764700000, INT64_MIN) == INT64_MAX);
	assert_true(kb_sat_sub_i64(INT64_MIN, 1) == INT64_MIN);
	assert_true(kb_sat_sub_i64(50, 8) == 42);

	assert_int_equal(kb_int_from_double(116360220765.0), INT_MAX);
	assert_int_equal(kb_int_from_double(-1e300), INT_MIN);
	assert_int_equal(kb_int_from_double(INFINITY), INT_MAX);
	assert_int_equal(kb_int_from_double(NAN), 0);
	assert_int_equal(kb_int_from_double(-7.9), -7);
	assert_int_equal(kb_int_from_double(2147483646.5), 2147483646);
	assert_true(kb_i64_from_double(9223372036854775808.0) == INT64_MAX);
	assert_true(kb_i64_from_double(-1e300) == INT64_MIN);
	assert_true(kb_i64_from_double(NAN) == 0);
	assert_true(kb_i64_from_double(9007199254740993.0) == 9007199254740992LL);
}

static void test_signals_flags(void **state)
{
	kb_signals_install();
	assert_false(kb_stop_requested());
	raise(SIGTERM);
	assert_true(kb_stop_requested());
	assert_int_equal(kb_stop_signal(), SIGTERM);
	kb_reset_stop();
	assert_false(kb_reload_requested());
	raise(SIGHUP);
	assert_true(kb_reload_requested());
	assert_false(kb_reload_requested()); /* consumed */
	raise(SIGPIPE); /* ignored: must not kill the test */
	assert_false(kb_stop_requested());
}

static void test_hash(void **state)
{
	static const char abc_sha[] =
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	struct kb_sha256 h;
	char hex[65], path[] = "/tmp/kb-test-hash-XXXXXX";
	int fd;

	kb_sha256_hex("abc", 3, hex);
	assert_string_equal(hex, abc_sha);
	/* fed in pieces: the same digest */
	kb_sha256_init(&h);
	kb_sha256_update(&h, "a", 1);
	kb_sha256_update(&h, "bc", 2);
	kb_sha256_final_hex(&h, hex);
	assert_string_equal(hex, abc_sha);
	assert_null(h.ctx);
	kb_sha256_release(&h); /* a no-op after final */
	kb_sha256_init(&h);
	kb_sha256_release(&h); /* an abandoned digest frees its context */
	assert_null(h.ctx);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(kb_write_all(fd, "abc", 3), 0);
	close(fd);
	assert_int_equal(kb_sha256_file(path, hex), 0);
	assert_string_equal(hex, abc_sha);
	unlink(path);
	assert_int_equal(kb_sha256_file(path, hex), -1);
	/* FNV-1a reference values */
	assert_true(kb_fnv1a64_str(KB_FNV1A64_INIT, "") == 0xcbf29ce484222325ULL);
	assert_true(kb_fnv1a64_str(KB_FNV1A64_INIT, "a") == 0xaf63dc4c8601ec8cULL);
	assert_true(kb_fnv1a64(kb_fnv1a64_str(KB_FNV1A64_INIT, "a"), "b", 1) ==
		    kb_fnv1a64_str(KB_FNV1A64_INIT, "ab"));
	assert_true(kb_fnv1a32("a", 1) == 0xe40c292cu);
}

static void test_rng(void **state)
{
	uint64_t a = 42, b = 42, c = 7;

	/* the same seed draws the same numbers, and the state is the caller's */
	for (int i = 0; i < 100; i++) {
		double d = kb_rng_double(&a);

		assert_true(d >= 0 && d < 1);
		assert_true(d == kb_rng_double(&b));
		assert_true(kb_rng_below(&c, 10) < 10);
	}
	assert_true(a == b);
	assert_int_equal(kb_rng_below(&c, 0), 0);
	/* splitmix64's first output for seed 0 */
	a = 0;
	assert_true(kb_rng_u64(&a) == 0xe220a8397b1dcdafULL);
}

static void test_json(void **state)
{
	cJSON *o = cJSON_Parse("{\"s\":\"x\",\"n\":2.5,\"big\":1e300,\"t\":true}");

	assert_non_null(o);
	assert_string_equal(kb_json_str(o, "s"), "x");
	assert_null(kb_json_str(o, "n"));
	assert_null(kb_json_str(o, "missing"));
	assert_null(kb_json_str(NULL, "s"));
	assert_true(kb_json_num(o, "n", 0) == 2.5);
	assert_true(kb_json_num(o, "s", -1) == -1);
	assert_true(isnan(kb_json_num(o, "t", NAN)));
	assert_true(kb_json_num(NULL, "n", 3) == 3);
	assert_int_equal(kb_json_i64(o, "n", 0), 2);
	assert_true(kb_json_i64(o, "big", 0) == INT64_MAX); /* saturates */
	assert_int_equal(kb_json_i64(o, "s", -5), -5);
	cJSON_Delete(o);
}

static size_t http_header_line(struct kb_http_response *r, const char *line)
{
	char *copy = xstrdup(line);
	size_t n = kb_http_response_header_cb(copy, 1, strlen(copy), r);

	free(copy);
	return n;
}

static void test_http_headers(void **state)
{
	struct kb_http_response r;
	struct strbuf body = STRBUF_INIT;
	bool too_big = false;
	char *big;

	assert_true(kb_http_is_status_line("HTTP/1.1 200 OK\r\n", 17));
	assert_false(kb_http_is_status_line("HTTP", 4));
	kb_http_response_init(&r, 0);
	assert_int_equal(http_header_line(&r, "Retry-After: \t 12 \r\n"), 20);
	assert_string_equal(kb_http_response_header(&r, "retry-after"), "12");
	assert_null(kb_http_response_header(&r, "retry"));
	http_header_line(&r, "no colon\r\n");
	assert_null(kb_http_response_header(&r, "no colon"));
	http_header_line(&r, "ETag:\r\n");
	assert_string_equal(kb_http_response_header(&r, "etag"), "");
	/* the last of a repeated header counts; a new response forgets them all */
	http_header_line(&r, "retry-after: 3\r\n");
	assert_string_equal(kb_http_response_header(&r, "Retry-After"), "3");
	http_header_line(&r, "HTTP/1.1 200 OK\r\n");
	assert_null(kb_http_response_header(&r, "retry-after"));
	assert_int_equal(r.headers.nr, 0);
	/* headers are capped like a body: curl is told to stop */
	big = xmalloc(200 * 1024);
	memset(big, 'a', 200 * 1024 - 1);
	big[200 * 1024 - 1] = '\0';
	big[1] = ':';
	assert_int_equal(http_header_line(&r, big), 200 * 1024 - 1);
	assert_false(r.too_big);
	assert_int_equal(http_header_line(&r, big), 0);
	assert_true(r.too_big);
	free(big);
	kb_http_response_reset(&r);
	assert_false(r.too_big);
	assert_int_equal(r.headers.nr, 0);
	kb_http_response_release(&r);

	assert_int_equal(kb_http_classify(CURLE_OK, false), KB_HTTP_OK);
	assert_int_equal(kb_http_classify(CURLE_ABORTED_BY_CALLBACK, false), KB_HTTP_STOPPED);
	assert_int_equal(kb_http_classify(CURLE_WRITE_ERROR, true), KB_HTTP_TOOBIG);
	assert_int_equal(kb_http_classify(CURLE_WRITE_ERROR, false), KB_HTTP_OTHER);
	assert_int_equal(kb_http_classify(CURLE_FILESIZE_EXCEEDED, false), KB_HTTP_TOOBIG);
	assert_int_equal(kb_http_classify(CURLE_OPERATION_TIMEDOUT, false), KB_HTTP_TIMEOUT);
	assert_int_equal(kb_http_classify(CURLE_COULDNT_CONNECT, false), KB_HTTP_NETWORK);
	assert_int_equal(kb_http_classify(CURLE_URL_MALFORMAT, false), KB_HTTP_SETUP);
	assert_int_equal(kb_http_connect_timeout_ms(3000), 3000);
	assert_int_equal(kb_http_connect_timeout_ms(60000), 10000);

	strbuf_init_capped(&body, 4);
	assert_int_equal(kb_http_body_add(&body, &too_big, "abc", 3), 3);
	assert_false(too_big);
	assert_int_equal(kb_http_body_add(&body, &too_big, "de", 2), 0);
	assert_true(too_big);
	assert_string_equal(body.buf, "abc");
	strbuf_release(&body);
}

static void test_http_retry_after(void **state)
{
	char digits[300];

	assert_int_equal(kb_http_retry_after_ms(NULL, 0), -1);
	assert_int_equal(kb_http_retry_after_ms("", 0), -1);
	assert_int_equal(kb_http_retry_after_ms("soon", 0), -1);
	assert_int_equal(kb_http_retry_after_ms(" 7 ", 0), 7000);
	assert_int_equal(kb_http_retry_after_ms("0.25", 0), 250);
	assert_int_equal(kb_http_retry_after_ms("-4", 0), 0);
	/* a date: from now, 0 when past; absurd ones saturate, never negative */
	assert_int_equal(kb_http_retry_after_ms("Thu, 01 Jan 1970 00:16:50 GMT", 1000), 10000);
	assert_int_equal(kb_http_retry_after_ms("Thu, 01 Jan 1970 00:16:50 GMT", 2000), 0);
	assert_true(kb_http_retry_after_ms("2 Oct 801508015", 1764700000) >= INT64_MAX / 2);
	assert_true(kb_http_retry_after_ms("200376420520689575", 0) >= INT64_MAX / 2);
	memset(digits, '9', sizeof(digits) - 1);
	digits[sizeof(digits) - 1] = '\0';
	assert_true(kb_http_retry_after_ms(digits, 0) >= INT64_MAX / 2);
	/* a rate-limit reset: until then plus a second, saturating */
	assert_int_equal(kb_http_until_reset_ms(1010, 1000), 11000);
	assert_int_equal(kb_http_until_reset_ms(900, 1000), 1000);
	assert_true(kb_http_until_reset_ms(INT64_MAX, -5) == INT64_MAX);
}

static void test_cscan(void **state)
{
	static const char raw[] = "a = R\"x(\" u8R\"(\" xR\"\" \"";
	static const char num[] = "n = 1'000; c = 'a'";

	assert_true(kb_c_ident_char('_') && kb_c_ident_char('z') && kb_c_ident_char('9'));
	assert_false(kb_c_ident_char('-'));
	assert_true(kb_c_raw_string_at(raw, 5));            /* R" */
	assert_true(kb_c_raw_string_at(raw, strchr(raw, 'u') - raw + 3)); /* u8R" */
	assert_false(kb_c_raw_string_at(raw, strstr(raw, "xR") - raw + 2)); /* xR" is a name */
	assert_false(kb_c_raw_string_at(raw, strlen(raw) - 1));
	assert_true(kb_c_digit_separator_at(num, 5));
	assert_false(kb_c_digit_separator_at(num, strstr(num, "'a") - num));
}

/* The budget lets a unit start only when it and the final check's reserve fit. */
static void test_budget(void **state)
{
	struct kb_budget b;

	(void)state;
	kb_budget_init(&b, 0, 1, 5, 2);
	assert_true(kb_budget_may_start(&b, INT64_MAX - 1, 1000)); /* no budget */

	/* one final check of 4 seeds after screening with 2: 2 x 1.5 = 3 items */
	kb_budget_init(&b, 100000, 1, 4, 2);
	assert_int_equal(kb_budget_estimate_ms(&b, 4), 0);
	assert_int_equal(kb_budget_reserve_ms(&b), 0);
	assert_true(kb_budget_may_start(&b, 99999, 4));    /* nothing measured yet */
	assert_false(kb_budget_may_start(&b, 100000, 1));  /* the deadline passed */
	kb_budget_spent(&b, 20000, 2);                     /* 10 s an item */
	kb_budget_spent(&b, -5, 1);                        /* ignored */
	kb_budget_spent(&b, 5, 0);                         /* ignored */
	assert_int_equal(kb_budget_estimate_ms(&b, 3), 30000);
	assert_int_equal(kb_budget_reserve_ms(&b), 30000);
	/* 2 items (20 s) + the final check (30 s) = 50 s */
	assert_true(kb_budget_may_start(&b, 50000, 2));
	assert_false(kb_budget_may_start(&b, 50001, 2));
	/* n = 0: only the reserve */
	assert_true(kb_budget_may_start(&b, 70000, 0));
	assert_false(kb_budget_may_start(&b, 70001, 0));
	/* huge figures saturate instead of wrapping into "it fits" */
	kb_budget_spent(&b, INT64_MAX, 1);
	assert_false(kb_budget_may_start(&b, 0, SIZE_MAX));

	/* the same seeds: the fresh process alone, 1.5 items */
	kb_budget_init(&b, 100000, 1, 2, 2);
	kb_budget_spent(&b, 10000, 1);
	assert_int_equal(kb_budget_reserve_ms(&b), 15000);
}

/* A reserve of several final checks: units stop early enough for all of
 * them, and the tries after a failed check go on while one more fits. */
static void test_budget_final_tries(void **state)
{
	struct kb_budget b;

	(void)state;
	kb_budget_init(&b, 0, 3, 4, 2);
	assert_true(kb_budget_may_check(&b, INT64_MAX - 1, 2)); /* no budget */

	/* three checks of 4 seeds after screening with 2: 3 items each */
	kb_budget_init(&b, 100000, 3, 4, 2);
	assert_int_equal(kb_budget_check_ms(&b), 0);
	assert_true(kb_budget_may_check(&b, 99999, 1));     /* nothing measured yet */
	assert_false(kb_budget_may_check(&b, 100000, 1));   /* the deadline passed */
	kb_budget_spent(&b, 10000, 1);                      /* 10 s an item */
	assert_int_equal(kb_budget_check_ms(&b), 30000);
	assert_int_equal(kb_budget_reserve_ms(&b), 90000);  /* room for three tries */
	assert_true(kb_budget_may_start(&b, 0, 1));
	assert_false(kb_budget_may_start(&b, 1, 1));
	/* the walk: a try fits while its check does */
	assert_true(kb_budget_may_check(&b, 40000, 2));
	assert_false(kb_budget_may_check(&b, 40001, 2));
	assert_true(kb_budget_may_check(&b, 70000, 1));
	assert_false(kb_budget_may_check(&b, 70001, 1));
	kb_budget_spent(&b, INT64_MAX, 1);
	assert_false(kb_budget_may_check(&b, 0, 1000));     /* saturates */

	/* a short span: the reserve held to a third of it, never below one try */
	kb_budget_init(&b, 100000, 3, 4, 2);
	kb_budget_cap_reserve(&b, 150000, 1);
	kb_budget_spent(&b, 10000, 1);                      /* a check: 30 s, three: 90 s */
	assert_int_equal(kb_budget_reserve_ms(&b), 51000);  /* 0.34 x 150 s */
	assert_true(kb_budget_may_start(&b, 39000, 1));     /* 10 s + 51 s by 100 s */
	assert_false(kb_budget_may_start(&b, 39001, 1));
	assert_int_equal(kb_budget_check_ms(&b), 30000);    /* the walk's tries: unchanged */
	kb_budget_cap_reserve(&b, 60000, 1);
	assert_int_equal(kb_budget_reserve_ms(&b), 30000);  /* floor: one check */
	kb_budget_cap_reserve(&b, 60000, 2);
	assert_int_equal(kb_budget_reserve_ms(&b), 60000);  /* backward: a try is two checks */
	kb_budget_cap_reserve(&b, 1000000, 1);
	assert_int_equal(kb_budget_reserve_ms(&b), 90000);  /* a long span: all three */
}

static void test_sleep_stop_aware(void **state)
{
	int64_t t0 = kb_now_ms();

	kb_reset_stop();
	assert_int_equal(kb_sleep_ms(0), 0);
	assert_int_equal(kb_sleep_ms(20), 0);
	assert_true(kb_now_ms() - t0 >= 20);
	kb_request_stop(SIGTERM);
	t0 = kb_now_ms();
	assert_int_equal(kb_sleep_ms(60000), KB_ECANCELLED);
	assert_true(kb_now_ms() - t0 < 1000);
	kb_reset_stop();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strbuf_basic),
		cmocka_unit_test(test_strbuf_cap),
		cmocka_unit_test(test_strbuf_trim_replace_json),
		cmocka_unit_test(test_strbuf_read_file),
		cmocka_unit_test(test_strvec),
		cmocka_unit_test(test_log_levels_and_redaction),
		cmocka_unit_test(test_progress_log_lines_keep_the_bar_whole),
		cmocka_unit_test(test_progress_heartbeat),
		cmocka_unit_test(test_util_parse_and_fs),
		cmocka_unit_test(test_util_saturating),
		cmocka_unit_test(test_signals_flags),
		cmocka_unit_test(test_hash),
		cmocka_unit_test(test_rng),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_http_headers),
		cmocka_unit_test(test_http_retry_after),
		cmocka_unit_test(test_cscan),
		cmocka_unit_test(test_sleep_stop_aware),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_budget_final_tries),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
