/*
 * The pure parts of the job loop and the daemon: webhook signatures
 * (GitHub's test vector, tampering, constant-time path), the fields taken
 * from webhook payloads (the octokit fixtures), delivery de-duplication
 * in a real store, .kernelbot.ini bounded by the daemon's config,
 * operator slugs, and the progress file fed by kb_progress's plain lines.
 * The whole flow runs end to end in tests/python/test_bot_e2e.py.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/state.h"
#include "core/state_priv.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "daemon/webhook.h"
#include "jobs/jobs.h"
#include "jobs/progress_file.h"

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

#include <cjson/cJSON.h>

static void test_signature(void **state)
{
	const char *good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
	const char *upper = "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17";
	const char *secret = "It's a Secret to Everybody";

	assert_true(kb_webhook_signature_ok(secret, "Hello, World!", 13, good));
	assert_true(kb_webhook_signature_ok(secret, "Hello, World!", 13, upper));
	/* one byte of the body, of the secret or of the digest changed */
	assert_false(kb_webhook_signature_ok(secret, "Hello, World?", 13, good));
	assert_false(kb_webhook_signature_ok("It's a Secret to Everybodz", "Hello, World!", 13, good));
	assert_false(kb_webhook_signature_ok(secret, "Hello, World!", 13,
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e18"));
	/* malformed headers, no secret */
	assert_false(kb_webhook_signature_ok(secret, "Hello, World!", 13, NULL));
	assert_false(kb_webhook_signature_ok(secret, "Hello, World!", 13, "sha1=757107ea"));
	assert_false(kb_webhook_signature_ok(secret, "Hello, World!", 13, good + 1));
	assert_false(kb_webhook_signature_ok(secret, "Hello, World!", 13,
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1"));
	assert_false(kb_webhook_signature_ok(secret, "Hello, World!", 13,
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1g"));
	assert_false(kb_webhook_signature_ok("", "Hello, World!", 13, good));
}

static char *fixture(const char *name)
{
	struct strbuf path = STRBUF_INIT, data = STRBUF_INIT;
	const char *top = getenv("KB_TOP"), *dir = getenv("KB_GITHUB_FIXTURES");

	if (dir && *dir)
		strbuf_addf(&path, "%s/webhooks/%s", dir, name);
	else
		strbuf_addf(&path, "%s/../shared/github-fixtures/webhooks/%s", top ? top : ".", name);
	if (strbuf_read_file(&data, path.buf, 0)) {
		strbuf_release(&path);
		strbuf_release(&data);
		return NULL;
	}
	strbuf_release(&path);
	return strbuf_detach(&data, NULL);
}

static cJSON *extract(const char *event, const char *body, int *rc)
{
	struct strbuf out = STRBUF_INIT;
	cJSON *j = NULL;

	*rc = kb_webhook_extract(&out, event, body, strlen(body));
	if (!*rc)
		j = cJSON_Parse(out.buf);
	strbuf_release(&out);
	return j;
}

static const char *js(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_extract_fixtures(void **state)
{
	char *labeled = fixture("pull_request.labeled.json");
	char *unlabeled = fixture("pull_request.unlabeled.json");
	char *sync = fixture("pull_request.synchronize.json");
	char *comment = fixture("issue_comment.created.with-installation.json");
	cJSON *j;
	int rc;

	if (!labeled || !unlabeled || !sync || !comment) {
		free(labeled);
		free(unlabeled);
		free(sync);
		free(comment);
		KB_SKIP("the GitHub webhook fixtures under tests/sim are missing");
	}
	j = extract("pull_request", labeled, &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(js(j, "event"), "pull_request");
	assert_string_equal(js(j, "action"), "labeled");
	assert_non_null(js(j, "repo"));
	assert_non_null(js(j, "label"));
	assert_non_null(js(j, "sender"));
	assert_int_equal(strlen(js(j, "head_sha")), 40);
	assert_true(cJSON_GetObjectItemCaseSensitive(j, "number")->valuedouble > 0);
	cJSON_Delete(j);

	j = extract("pull_request", unlabeled, &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(js(j, "action"), "unlabeled");
	cJSON_Delete(j);

	/* a push: the bot never re-runs on one */
	j = extract("pull_request", sync, &rc);
	assert_int_equal(rc, KB_ENOTFOUND);
	assert_null(j);

	/* the fixture's comment is no command; the same payload with one is */
	j = extract("issue_comment", comment, &rc);
	assert_int_equal(rc, KB_ENOTFOUND);
	{
		cJSON *p = cJSON_Parse(comment), *c = cJSON_GetObjectItemCaseSensitive(p, "comment");
		cJSON *issue = cJSON_GetObjectItemCaseSensitive(p, "issue");
		char *text;

		cJSON_ReplaceItemInObject(c, "body", cJSON_CreateString("  /kernelbot stop\r\nplease"));
		if (!cJSON_GetObjectItemCaseSensitive(issue, "pull_request"))
			cJSON_AddItemToObject(issue, "pull_request", cJSON_CreateObject());
		text = cJSON_PrintUnformatted(p);
		j = extract("issue_comment", text, &rc);
		assert_int_equal(rc, 0);
		assert_string_equal(js(j, "command"), "stop");
		/* the comment's id: a command polled as well is acted on once */
		assert_true(cJSON_GetObjectItemCaseSensitive(j, "comment_id")->valuedouble ==
			    cJSON_GetObjectItemCaseSensitive(c, "id")->valuedouble);
		cJSON_Delete(j);
		free(text);
		cJSON_ReplaceItemInObject(c, "body", cJSON_CreateString("/kernelbot run"));
		text = cJSON_PrintUnformatted(p);
		j = extract("issue_comment", text, &rc);
		assert_int_equal(rc, 0);
		assert_string_equal(js(j, "command"), "run");
		cJSON_Delete(j);
		free(text);
		cJSON_ReplaceItemInObject(c, "body", cJSON_CreateString("/kernelbotrun"));
		text = cJSON_PrintUnformatted(p);
		j = extract("issue_comment", text, &rc);
		assert_int_equal(rc, KB_ENOTFOUND);
		free(text);
		/* a comment on a plain issue is never a command */
		cJSON_DeleteItemFromObject(issue, "pull_request");
		cJSON_ReplaceItemInObject(c, "body", cJSON_CreateString("/kernelbot run"));
		text = cJSON_PrintUnformatted(p);
		j = extract("issue_comment", text, &rc);
		assert_int_equal(rc, KB_ENOTFOUND);
		free(text);
		cJSON_Delete(p);
	}
	/* junk and payloads missing what the event must carry */
	j = extract("pull_request", "not json", &rc);
	assert_int_equal(rc, -1);
	j = extract("pull_request", "{\"action\": \"labeled\", \"label\": {\"name\": \"x\"}}", &rc);
	assert_int_equal(rc, -1);
	j = extract("push", "{}", &rc);
	assert_int_equal(rc, KB_ENOTFOUND);
	free(labeled);
	free(unlabeled);
	free(sync);
	free(comment);
}

/*
 * Numbers the daemon reads back as int64_t (issue 13's fuzzing): a pull
 * request number that is not a whole number in [1, 2^53] is no number,
 * an id that is not one is left out.
 */
static void test_extract_numbers(void **state)
{
	static const char *const bad[] = { "1e300", "-3", "0", "7.5", "9007199254740994" };
	struct strbuf body = STRBUF_INIT;
	cJSON *j;
	int rc;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		strbuf_reset(&body);
		strbuf_addf(&body, "{\"action\":\"labeled\",\"pull_request\":{\"number\":%s,"
			    "\"head\":{\"sha\":\"abc\"}},\"label\":{\"name\":\"optimize-kernel\"},"
			    "\"repository\":{\"full_name\":\"acme/ops\"}}", bad[i]);
		j = extract("pull_request", body.buf, &rc);
		assert_int_equal(rc, -1);
		assert_null(j);
	}
	j = extract("issue_comment",
		    "{\"action\":\"created\",\"issue\":{\"number\":7,\"pull_request\":{}},"
		    "\"comment\":{\"id\":-0.5,\"body\":\"/kernelbot run\"},\"installation\":{\"id\":1e19},"
		    "\"repository\":{\"full_name\":\"acme/ops\"}}", &rc);
	assert_int_equal(rc, 0);
	assert_true(cJSON_GetObjectItemCaseSensitive(j, "number")->valuedouble == 7);
	assert_null(cJSON_GetObjectItemCaseSensitive(j, "comment_id"));
	assert_null(cJSON_GetObjectItemCaseSensitive(j, "installation_id"));
	cJSON_Delete(j);
	strbuf_release(&body);
}

static void test_delivery_dedup(void **state)
{
	char dir[] = "/tmp/kb-test-jobs-XXXXXX";
	struct kb_state *st;
	struct strbuf payload = STRBUF_INIT;
	int64_t id, n = -1;
	sqlite3_stmt *stmt;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(kb_state_open(&st, dir), 0);
	assert_int_equal(kb_webhook_store(st, "d-1", "pull_request", "{\"a\": 1}"), 0);
	assert_int_equal(kb_webhook_store(st, "d-1", "pull_request", "{\"a\": 1}"), KB_EEXISTS);
	assert_int_equal(kb_webhook_store(st, "d-2", "push", NULL), 0);
	assert_int_equal(kb_webhook_next(st, &id, &payload), 0);
	assert_string_equal(payload.buf, "{\"a\":1}");
	assert_int_equal(kb_webhook_done(st, id), 0);
	strbuf_reset(&payload);
	assert_int_equal(kb_webhook_next(st, &id, &payload), KB_ENOTFOUND);
	assert_int_equal(sqlite3_prepare_v2(kb_state_db(st), "SELECT count(*) FROM webhook_deliveries",
					    -1, &stmt, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
	n = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	assert_int_equal(n, 2);

	/* a comment is one command: by webhook, then by poll (or the other way), once */
	strbuf_reset(&payload);
	kb_webhook_comment_key(&payload, "Acme/Ops", 77);
	assert_string_equal(payload.buf, "comment:acme/ops:77");
	assert_int_equal(kb_webhook_store(st, "uuid-1", "issue_comment",
					  "{\"repo\": \"acme/ops\", \"comment_id\": 77}"), 0);
	assert_int_equal(kb_webhook_store(st, payload.buf, "issue_comment",
					  "{\"repo\": \"acme/ops\", \"comment_id\": 77}"), KB_EEXISTS);
	assert_int_equal(kb_webhook_store(st, "comment:acme/ops:78", "issue_comment",
					  "{\"repo\": \"ACME/ops\", \"comment_id\": 78}"), 0);
	assert_int_equal(kb_webhook_store(st, "uuid-2", "issue_comment",
					  "{\"repo\": \"acme/ops\", \"comment_id\": 78}"), KB_EEXISTS);
	/* the refused delivery left nothing behind: a retry of it is still new */
	assert_int_equal(kb_webhook_store(st, "uuid-2", "ping", NULL), 0);
	for (int k = 0; k < 2; k++) {
		strbuf_reset(&payload);
		assert_int_equal(kb_webhook_next(st, &id, &payload), 0);
		assert_non_null(strstr(payload.buf, k ? "78" : "77"));
		assert_int_equal(kb_webhook_done(st, id), 0);
	}
	strbuf_reset(&payload);
	assert_int_equal(kb_webhook_next(st, &id, &payload), KB_ENOTFOUND);
	strbuf_release(&payload);
	kb_state_close(st);
	assert_int_equal(kb_rm_rf(dir), 0);
}

static void test_parse_command(void **state)
{
	assert_string_equal(kb_jobs_parse_command("/kernelbot stop"), "stop");
	assert_string_equal(kb_jobs_parse_command("\n\t /kernelbot  run please\r\n"), "run");
	assert_string_equal(kb_jobs_parse_command("/kernelbot stop\nthanks"), "stop");
	assert_null(kb_jobs_parse_command("/kernelbotstop"));
	assert_null(kb_jobs_parse_command("/kernelbot stopp"));
	assert_null(kb_jobs_parse_command("please /kernelbot run"));
	assert_null(kb_jobs_parse_command("> /kernelbot run"));
	assert_null(kb_jobs_parse_command("/kernelbot"));
	assert_null(kb_jobs_parse_command(""));
	assert_null(kb_jobs_parse_command(NULL));
}

static void test_repo_config(void **state)
{
	struct kb_config cfg;
	struct kb_repo_config rc;
	struct strbuf why = STRBUF_INIT;

	kb_config_init(&cfg);
	cfg.bot_max_time_budget_s = 600;
	assert_int_equal(kb_repo_config_parse(&rc,
		"[operators]\npaths = ops/relu.py , tasks/softmax/, ../etc/passwd, /abs\n"
		"[kernelbot]\nbudget_s = 99999\natol = 0.5\nrtol = 1e-6\nmax_configs = 1000\n"
		"colour = blue\n", &cfg, &why), 0);
	assert_int_equal(rc.nr_paths, 2);
	assert_string_equal(rc.paths[0], "ops/relu.py");
	assert_string_equal(rc.paths[1], "tasks/softmax");
	assert_null(rc.paths[2]);
	assert_int_equal(rc.budget_s, 600);               /* clamped to the daemon's */
	assert_true(rc.atol == cfg.atol_fp32);            /* never looser */
	assert_true(rc.rtol == 1e-6);                     /* tighter is fine */
	assert_int_equal(rc.max_configs, cfg.max_configs);
	assert_non_null(strstr(why.buf, "'../etc/passwd'"));
	assert_non_null(strstr(why.buf, "'/abs'"));
	assert_non_null(strstr(why.buf, "budget_s"));
	assert_non_null(strstr(why.buf, "unknown key 'colour'"));
	kb_repo_config_release(&rc);
	strbuf_reset(&why);
	/* the error bound: lower (stricter) or off is fine, above the bot's is clamped */
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\nerror_factor = 4\n", &cfg, &why), 0);
	assert_true(rc.error_factor_set && rc.error_factor == 4.0);
	kb_repo_config_release(&rc);
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\nerror_factor = 0\n", &cfg, &why), 0);
	assert_true(rc.error_factor_set && rc.error_factor == 0.0);
	kb_repo_config_release(&rc);
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\nerror_factor = 1000\n", &cfg, &why), 0);
	assert_true(rc.error_factor_set && rc.error_factor == cfg.error_factor);
	assert_non_null(strstr(why.buf, "error_factor: 1000 is looser"));
	kb_repo_config_release(&rc);
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\nerror_factor = -1\n", &cfg, &why), 0);
	assert_false(rc.error_factor_set);
	assert_non_null(strstr(why.buf, "error_factor: '-1'"));
	kb_repo_config_release(&rc);
	strbuf_reset(&why);
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\nbudget_s = soon\n", &cfg, &why), 0);
	assert_int_equal(rc.budget_s, 0);
	assert_int_equal(rc.nr_paths, 0);
	assert_non_null(strstr(why.buf, "'soon'"));
	assert_int_equal(rc.passes, KB_PASSES_AUTO);
	kb_repo_config_release(&rc);
	/* passes: forward alone, or both (either order, blanks); anything else is said and ignored */
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\npasses = forward\n", &cfg, &why), 0);
	assert_int_equal(rc.passes, KB_PASSES_FORWARD);
	kb_repo_config_release(&rc);
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\npasses = backward , forward\n", &cfg, &why), 0);
	assert_int_equal(rc.passes, KB_PASSES_BOTH);
	kb_repo_config_release(&rc);
	strbuf_reset(&why);
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\npasses = backward\n", &cfg, &why), 0);
	assert_int_equal(rc.passes, KB_PASSES_AUTO);
	assert_non_null(strstr(why.buf, "passes: 'backward' is not"));
	kb_repo_config_release(&rc);
	strbuf_reset(&why);
	assert_int_equal(kb_repo_config_parse(&rc, "[kernelbot]\npasses = forward,sideways\n", &cfg, &why), 0);
	assert_int_equal(rc.passes, KB_PASSES_AUTO);
	assert_non_null(strstr(why.buf, "'forward,sideways'"));
	kb_repo_config_release(&rc);
	strbuf_release(&why);
	kb_config_release(&cfg);
}

static void test_slug(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	kb_jobs_operator_slug(&sb, "ops/relu.py");
	assert_string_equal(sb.buf, "relu");
	kb_jobs_operator_slug(&sb, "tasks/Soft Max/");
	assert_string_equal(sb.buf, "soft-max");
	kb_jobs_operator_slug(&sb, "kb_linear_gelu.py");
	assert_string_equal(sb.buf, "kb_linear_gelu");
	kb_jobs_operator_slug(&sb, ".");
	assert_string_equal(sb.buf, "op");
	kb_jobs_operator_slug(&sb, "a/..$$..py");
	assert_string_equal(sb.buf, "op");
	strbuf_release(&sb);
}

static void test_progress_lines(void **state)
{
	struct kb_progress_state s;
	struct strbuf json = STRBUF_INIT;
	cJSON *j;

	memset(&s, 0, sizeof(s));
	kb_progress_file_parse_line(&s, "[analyse]");
	assert_string_equal(s.stage, "analyse");
	kb_progress_file_parse_line(&s, "family pointwise (pointwise): a note");
	assert_string_equal(s.stage, "analyse");
	kb_progress_file_parse_line(&s, "[verify 1/2] grain=32768 simd=1: verified");
	kb_progress_file_parse_line(&s, "[verify 2/2] grain=262144 simd=0: rejected: output mismatch");
	assert_string_equal(s.stage, "verify");
	assert_int_equal(s.done, 2);
	assert_int_equal(s.total, 2);
	assert_int_equal(s.candidates, 2);
	kb_progress_file_parse_line(&s, "[time 0/2]");
	assert_int_equal(s.done, 0);
	kb_progress_file_parse_line(&s, "[time 1/2] grain=32768 simd=1: 0.63x");
	kb_progress_file_parse_line(&s, "[time 2/2] grain=262144 simd=0: 2.30x");
	kb_progress_file_parse_line(&s, "[time 2/2] weird: 1e999x");
	assert_true(s.best_speedup > 2.29 && s.best_speedup < 2.31);
	kb_progress_file_parse_line(&s, "[final check] verified");
	assert_string_equal(s.stage, "final check");
	kb_progress_file_json(&json, &s);
	j = cJSON_Parse(json.buf);
	assert_non_null(j);
	assert_string_equal(js(j, "stage"), "final check");
	assert_true(cJSON_GetObjectItemCaseSensitive(j, "best_speedup")->valuedouble > 2.29);
	assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(j, "candidates")->valuedouble, 2);
	cJSON_Delete(j);
	strbuf_release(&json);
}

static void test_progress_file_stream(void **state)
{
	char dir[] = "/tmp/kb-test-pf-XXXXXX", path[64];
	struct strbuf data = STRBUF_INIT;
	FILE *fp;
	cJSON *j;

	assert_non_null(mkdtemp(dir));
	xsnprintf(path, sizeof(path), "%s/p.json", dir);
	fp = kb_progress_file_open(path, NULL);
	assert_non_null(fp);
	/* the file exists from the start */
	assert_int_equal(strbuf_read_file(&data, path, 0), 0);
	assert_non_null(strstr(data.buf, "\"start\""));
	fputs("[time 1/4] a: 1.5", fp);
	fputs("0x\n[time 2/4] b: 1.2x\n", fp);
	assert_int_equal(fclose(fp), 0);
	strbuf_reset(&data);
	assert_int_equal(strbuf_read_file(&data, path, 0), 0);
	j = cJSON_Parse(data.buf);
	assert_non_null(j);
	assert_string_equal(js(j, "stage"), "time");
	assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(j, "done")->valuedouble, 2);
	assert_true(cJSON_GetObjectItemCaseSensitive(j, "best_speedup")->valuedouble == 1.5);
	cJSON_Delete(j);
	strbuf_release(&data);
	assert_int_equal(kb_rm_rf(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_signature),
		cmocka_unit_test(test_extract_fixtures),
		cmocka_unit_test(test_extract_numbers),
		cmocka_unit_test(test_delivery_dedup),
		cmocka_unit_test(test_parse_command),
		cmocka_unit_test(test_repo_config),
		cmocka_unit_test(test_slug),
		cmocka_unit_test(test_progress_lines),
		cmocka_unit_test(test_progress_file_stream),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
