/* strbuf, strvec, logging with redaction, and the util helpers. */
#include "core/common.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"

#include <setjmp.h>
#include <cmocka.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strbuf_basic),
		cmocka_unit_test(test_strbuf_cap),
		cmocka_unit_test(test_strbuf_trim_replace_json),
		cmocka_unit_test(test_strbuf_read_file),
		cmocka_unit_test(test_strvec),
		cmocka_unit_test(test_log_levels_and_redaction),
		cmocka_unit_test(test_util_parse_and_fs),
		cmocka_unit_test(test_util_saturating),
		cmocka_unit_test(test_signals_flags),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
