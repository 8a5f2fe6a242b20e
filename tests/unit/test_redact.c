/*
 * The redactor (bot/core/redact.c): registered secrets and credential
 * shapes become "***", control characters go, invalid UTF-8 becomes '?',
 * the cap applies after redaction on a character boundary, JSON trees are
 * redacted in place (keys too). Also the state migration that removes
 * untrusted output stored by earlier versions.
 */
#include "core/common.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/state.h"
#include "core/state_priv.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <cjson/cJSON.h>

#include <setjmp.h>
#include <cmocka.h>

/* kb_redact_str with no cap, compared with want. */
static void check(const char *in, const char *want)
{
	char *out = kb_redact_str(in, 0);

	if (strcmp(out, want))
		fail_msg("redact('%s') = '%s', want '%s'", in, out, want);
	free(out);
}

static void test_registered_secrets(void **state)
{
	(void)state;
	log_add_secret("hunter2-is-my-password");
	check("pw=hunter2-is-my-password; again hunter2-is-my-password", "pw=***; again ***");
	/* a NUL or a control character inside does not hide it */
	{
		struct strbuf sb = STRBUF_INIT;

		strbuf_add(&sb, "x\0hunter2-is-my-\apassword", 25);
		kb_redact(&sb, 0);
		assert_string_equal(sb.buf, "x***");
		strbuf_release(&sb);
	}
	log_clear_secrets();
	check("pw=hunter2-is-my-password", "pw=hunter2-is-my-password");
}

static void test_token_shapes(void **state)
{
	(void)state;
	check("token ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 end", "token *** end");
	check("gho_1234567890abcdefghij ghs_ABCDEFGHIJKLMNOPQRST1 ghu_aaaaaaaaaaaaaaaaaaaa9",
	      "*** *** ***");
	check("ghr_1234567890abcdefghijKLMN", "***");
	check("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "***");
	check("OPENAI_API_KEY=sk-proj-abcDEF123456789_-xyzXYZ000", "OPENAI_API_KEY=***");
	check("key: sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv-wxyz", "key: ***");
	check("glpat-abcdefghij0123456789", "***");
	check("aws AKIAIOSFODNN7EXAMPLE and ASIAABCDEFGHIJKLMNOP.", "aws *** and ***.");
	check("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "Authorization: Bearer ***");
	check("authorization: bearer\tabcdefgh12345678", "authorization: bearer\t***");
	/* prose and code that only look alike stay */
	check("the ghp_ prefix, ghp_short, task-1234567890abcdefghijklm, disk-sk-x",
	      "the ghp_ prefix, ghp_short, task-1234567890abcdefghijklm, disk-sk-x");
	check("a bearer of news; Bearer short", "a bearer of news; Bearer short");
	check("AKIA1234 is too short; XAKIAIOSFODNN7EXAMPLE is not at a boundary",
	      "AKIA1234 is too short; XAKIAIOSFODNN7EXAMPLE is not at a boundary");
}

static void test_private_keys(void **state)
{
	(void)state;
	check("before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc+/=\n"
	      "-----END RSA PRIVATE KEY-----\nafter",
	      "before\n***\nafter");
	check("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n", "***");
	/* a tail that starts inside a key: its lines before the END go too */
	check("note: x\nMIIEpAIBAAKCAQEA\nQWERTY==\n-----END PRIVATE KEY-----\nok",
	      "note: x\n***\nok");
	/* certificates and public keys are not secrets */
	check("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
	      "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----");
}

static void test_characters(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	(void)state;
	check("a\tb\nc\r\n\033[31mred\033[0m\b\x7f", "a\tb\nc\n[31mred[0m");
	/* UTF-8 stays; C1 controls and bidi overrides go; bad bytes become '?' */
	check("caf\xc3\xa9 \xe2\x9c\x93", "caf\xc3\xa9 \xe2\x9c\x93");
	check("x\xc2\x9by", "xy");
	check("a\xe2\x80\xae" "b\xe2\x81\xa6" "c", "abc");
	check("bad \xff\xfe \xc3( \xe0\x80\x80 \xed\xa0\x80 end", "bad ?? ?( ??? ??? end");
	strbuf_add(&sb, "\xf0\x9f\x98", 3); /* a cut 4-byte sequence */
	kb_redact(&sb, 0);
	assert_string_equal(sb.buf, "???");
	strbuf_release(&sb);
}

static void test_cap(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	char *s;

	(void)state;
	s = kb_redact_str("0123456789", 8);
	assert_string_equal(s, "01234...");
	free(s);
	s = kb_redact_str("0123456789", 10);
	assert_string_equal(s, "0123456789");
	free(s);
	s = kb_redact_str(NULL, 0);
	assert_string_equal(s, "");
	free(s);
	/* on a character boundary */
	s = kb_redact_str("ab\xc3\xa9\xc3\xa9xyz", 6);
	assert_string_equal(s, "ab...");
	free(s);
	/* after redaction: a token at the cut is gone, not half kept */
	strbuf_addstr(&sb, "x ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 and more text");
	kb_redact(&sb, 12);
	assert_string_equal(sb.buf, "x *** and...");
	assert_true(sb.len <= 12);
	strbuf_release(&sb);
}

static void test_json(void **state)
{
	cJSON *j = cJSON_Parse("{\"reasons\":[{\"check\":\"load\","
			       "\"message\":\"ImportError: ghp_AbCdEfGhIjKlMnOpQrStUvWxYz01\"}],"
			       "\"params\":{\"ghs_ABCDEFGHIJKLMNOPQRST1\":7},\"n\":3,\"ok\":true,"
			       "\"long\":\"0123456789abcdef\"}");
	char *text;

	(void)state;
	assert_non_null(j);
	kb_redact_json(j, 12);
	text = cJSON_PrintUnformatted(j);
	assert_string_equal(text, "{\"reasons\":[{\"check\":\"load\",\"message\":\"ImportErr...\"}],"
			    "\"params\":{\"***\":7},\"n\":3,\"ok\":true,\"long\":\"012345678...\"}");
	free(text);
	kb_redact_json(NULL, 0);
	cJSON_Delete(j);
}

/* A database of schema 3 with untrusted output stored the old way is cleaned by migration 4. */
static void test_migration_drops_stored_output(void **state)
{
	char dir[] = "/tmp/kb-test-redact-XXXXXX";
	struct kb_state *st = NULL;
	sqlite3_stmt *stmt;
	const char *ev = "{\"verdict\":\"rejected\",\"log_tail\":\"secret\",\"operator_log\":\"/x.log\","
		"\"kernelbot\":{\"build\":{\"ok\":false,\"errors\":\"secret\"}}}";
	sqlite3 *db;
	int rc;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(kb_state_open(&st, dir), 0);
	db = kb_state_db(st);
	assert_int_equal(sqlite3_exec(db,
		"INSERT INTO searches (key, operator, backend, pass, seed, rng, started_at, updated_at)"
		" VALUES ('k', 'op.py', 'cpu', 'forward', 1, 1, 0, 0);", NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db,
		"INSERT INTO candidates (search_id, proposer, source, source_hash, backend, evidence,"
		" build_info, created_at) VALUES (1, 'llm', 's', 'h', 'cpu', ?1, ?2, 0)", -1, &stmt, NULL),
		SQLITE_OK);
	sqlite3_bind_text(stmt, 1, ev, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, "{\"ok\":false,\"errors\":\"secret\"}", -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(stmt), SQLITE_DONE);
	sqlite3_finalize(stmt);
	assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO timings (key, value, updated_at) VALUES ('t', ?1, 0)",
					    -1, &stmt, NULL), SQLITE_OK);
	sqlite3_bind_text(stmt, 1, ev, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(stmt), SQLITE_DONE);
	sqlite3_finalize(stmt);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 3", NULL, NULL, NULL), SQLITE_OK);
	kb_state_close(st);

	assert_int_equal(kb_state_open(&st, dir), 0);
	assert_true(kb_state_schema_version(st) >= 4);
	db = kb_state_db(st);
	assert_int_equal(sqlite3_prepare_v2(db,
		"SELECT (SELECT count(*) FROM candidates WHERE instr(evidence || build_info, 'secret')"
		"   OR instr(evidence, 'operator_log')),"
		" (SELECT count(*) FROM timings WHERE instr(value, 'secret')),"
		" (SELECT json_extract(evidence, '$.kernelbot.build.ok') FROM candidates)", -1, &stmt, NULL),
		SQLITE_OK);
	rc = sqlite3_step(stmt);
	assert_int_equal(rc, SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(stmt, 0), 0);
	assert_int_equal(sqlite3_column_int(stmt, 1), 0);
	assert_int_equal(sqlite3_column_int(stmt, 2), 0);  /* the rest of the evidence stays */
	assert_int_equal(sqlite3_column_type(stmt, 2), SQLITE_INTEGER);
	sqlite3_finalize(stmt);
	kb_state_close(st);
	kb_rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registered_secrets),
		cmocka_unit_test(test_token_shapes),
		cmocka_unit_test(test_private_keys),
		cmocka_unit_test(test_characters),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_migration_drops_stored_output),
	};

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
