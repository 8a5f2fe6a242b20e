/*
 * bot/llm: request and reply shapes of both providers, backoff, model
 * picking, usage recording and budgets on a real SQLite file, and the
 * whole client against the LLM simulator (tests/sim/llm_sim.py, started
 * here on a loopback port): both protocols, a bad key, 429 with
 * retry-after, 5xx, timeouts, malformed and empty replies, a body over
 * the cap, a connection refused, a stop request during a retry wait, and
 * replay from the store.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/http.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/state_priv.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "llm/llm.h"
#include "llm/llm_priv.h"
#include "llm/usage.h"
#include "llm/pool.h"
#include "core/rng.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>
#include <cjson/cJSON.h>

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

#define SIM_KEY "sk-sim-test-key-0123456789"
#define BAD_KEY "sk-wrong-key-abcdefghijk"

static char tmpdir[] = "/tmp/kb-test-llm.XXXXXX";
static struct child_process sim = CHILD_PROCESS_INIT;
static bool sim_up;
static int sim_port;

static void assert_contains(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("expected '%s' in:\n%s", needle, hay);
}

static void assert_not_contains(const char *hay, const char *needle)
{
	if (strstr(hay, needle))
		fail_msg("did not expect '%s' in:\n%s", needle, hay);
}

/* A model for the pure tests. */
static struct kb_llm_model_cfg model(int provider)
{
	struct kb_llm_model_cfg m;

	memset(&m, 0, sizeof(m));
	m.name = (char *)"m";
	m.provider = provider;
	m.base_url = (char *)"http://127.0.0.1:9/v1";
	m.model = (char *)"test-model";
	m.api_key = (char *)"";
	m.weight = 1;
	m.temperature = NAN;
	m.reasoning_effort = (char *)"";
	m.max_tokens = 8192;
	return m;
}

static cJSON *request(enum kb_llm_provider p, const struct kb_llm_model_cfg *m,
		      const struct kb_llm_request *req)
{
	char *s = kb_llm_request_json(p, m, req);
	cJSON *j = cJSON_Parse(s);

	assert_non_null(j);
	free(s);
	return j;
}

static const cJSON *get(const cJSON *j, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(j, name);
}

static double num(const cJSON *j, const char *name)
{
	const cJSON *v = get(j, name);

	if (!cJSON_IsNumber(v))
		fail_msg("'%s' is not a number", name);
	return v->valuedouble;
}

static const char *str(const cJSON *j, const char *name)
{
	const cJSON *v = get(j, name);

	if (!cJSON_IsString(v))
		fail_msg("'%s' is not a string", name);
	return v->valuestring;
}

/* --- request shapes --- */

static void test_names(void **state)
{
	enum kb_llm_provider p;

	assert_string_equal(kb_llm_provider_name(KB_LLM_OPENAI), "openai");
	assert_string_equal(kb_llm_provider_name(KB_LLM_ANTHROPIC), "anthropic");
	assert_int_equal(kb_llm_provider_parse("anthropic", &p), 0);
	assert_int_equal(p, KB_LLM_ANTHROPIC);
	assert_int_equal(kb_llm_provider_parse("openai", &p), 0);
	assert_int_equal(p, KB_LLM_OPENAI);
	assert_int_equal(kb_llm_provider_parse("azure", &p), -1);
	assert_int_equal(kb_llm_provider_parse(NULL, &p), -1);
	assert_string_equal(kb_llm_status_name(KB_LLM_OK), "ok");
	assert_string_equal(kb_llm_status_name(KB_LLM_RATE_LIMITED), "rate_limited");
	assert_string_equal(kb_llm_status_name(KB_LLM_SERVER_ERROR), "server_error");
	assert_string_equal(kb_llm_status_name(KB_LLM_TIMEOUT), "timeout");
	assert_string_equal(kb_llm_status_name(KB_LLM_HTTP_ERROR), "http_error");
	assert_string_equal(kb_llm_status_name(KB_LLM_MALFORMED), "malformed");
	assert_string_equal(kb_llm_status_name(KB_LLM_EMPTY), "empty");
	assert_string_equal(kb_llm_status_name(KB_LLM_TRANSPORT), "transport");
}

static const struct kb_llm_message chat[] = {
	{ "system", "you write CUDA" },
	{ "user", "translate \"relu\"\nplease" },
	{ "assistant", "```cuda\n...\n```" },
	{ "user", "faster" },
};

static void test_openai_request(void **state)
{
	struct kb_llm_model_cfg m = model(KB_LLM_OPENAI);
	struct kb_llm_request req = { chat, ARRAY_SIZE(chat), NAN, 0, "translate", 0, NULL };
	const cJSON *msgs, *msg;
	cJSON *j;

	/* no temperature anywhere: none sent; the model's max_tokens */
	j = request(KB_LLM_OPENAI, &m, &req);
	assert_string_equal(str(j, "model"), "test-model");
	assert_null(get(j, "temperature"));
	assert_true(num(j, "max_tokens") == 8192);
	assert_null(get(j, "max_completion_tokens"));
	assert_null(get(j, "reasoning_effort"));
	msgs = get(j, "messages");
	assert_int_equal(cJSON_GetArraySize(msgs), 4);
	/* the system message stays a message, in place */
	msg = cJSON_GetArrayItem(msgs, 0);
	assert_string_equal(str(msg, "role"), "system");
	assert_string_equal(str(msg, "content"), "you write CUDA");
	msg = cJSON_GetArrayItem(msgs, 1);
	assert_string_equal(str(msg, "role"), "user");
	assert_string_equal(str(msg, "content"), "translate \"relu\"\nplease");
	assert_string_equal(str(cJSON_GetArrayItem(msgs, 3), "content"), "faster");
	cJSON_Delete(j);

	/* the model's temperature; the request's wins */
	m.temperature = 0.7;
	j = request(KB_LLM_OPENAI, &m, &req);
	assert_true(num(j, "temperature") == 0.7);
	cJSON_Delete(j);
	req.temperature = 0;
	req.max_tokens = 123;
	j = request(KB_LLM_OPENAI, &m, &req);
	assert_true(num(j, "temperature") == 0);
	assert_true(num(j, "max_tokens") == 123);
	cJSON_Delete(j);

	/* a reasoning model: reasoning_effort and max_completion_tokens */
	m.reasoning_effort = (char *)"high";
	j = request(KB_LLM_OPENAI, &m, &req);
	assert_string_equal(str(j, "reasoning_effort"), "high");
	assert_true(num(j, "max_completion_tokens") == 123);
	assert_null(get(j, "max_tokens"));
	cJSON_Delete(j);
}

static void test_anthropic_request(void **state)
{
	static const struct kb_llm_message two_systems[] = {
		{ "system", "rule one" },
		{ "system", "rule two" },
		{ "user", "hi" },
	};
	struct kb_llm_model_cfg m = model(KB_LLM_ANTHROPIC);
	struct kb_llm_request req = { chat, ARRAY_SIZE(chat), NAN, 0, "mutate", 0, NULL };
	const cJSON *msgs, *th;
	cJSON *j;

	j = request(KB_LLM_ANTHROPIC, &m, &req);
	assert_string_equal(str(j, "model"), "test-model");
	/* the system message is the top-level field, not a message */
	assert_string_equal(str(j, "system"), "you write CUDA");
	msgs = get(j, "messages");
	assert_int_equal(cJSON_GetArraySize(msgs), 3);
	assert_string_equal(str(cJSON_GetArrayItem(msgs, 0), "role"), "user");
	assert_string_equal(str(cJSON_GetArrayItem(msgs, 1), "role"), "assistant");
	assert_string_equal(str(cJSON_GetArrayItem(msgs, 2), "content"), "faster");
	assert_true(num(j, "max_tokens") == 8192); /* required by the API */
	assert_null(get(j, "temperature"));
	assert_null(get(j, "thinking"));
	cJSON_Delete(j);

	req.messages = two_systems;
	req.nr_messages = ARRAY_SIZE(two_systems);
	req.temperature = 0.3;
	j = request(KB_LLM_ANTHROPIC, &m, &req);
	assert_string_equal(str(j, "system"), "rule one\n\nrule two");
	assert_int_equal(cJSON_GetArraySize(get(j, "messages")), 1);
	assert_true(num(j, "temperature") == 0.3);
	cJSON_Delete(j);

	/* no system message: no system field */
	req.messages = chat + 1;
	req.nr_messages = 1;
	j = request(KB_LLM_ANTHROPIC, &m, &req);
	assert_null(get(j, "system"));
	cJSON_Delete(j);

	/* thinking: a budget on top of max_tokens, no temperature */
	m.reasoning_effort = (char *)"medium";
	m.temperature = 0.2;
	req.max_tokens = 1000;
	j = request(KB_LLM_ANTHROPIC, &m, &req);
	th = get(j, "thinking");
	assert_non_null(th);
	assert_string_equal(str(th, "type"), "enabled");
	assert_true(num(th, "budget_tokens") == 4096);
	assert_true(num(j, "max_tokens") == 1000 + 4096);
	assert_null(get(j, "temperature"));
	cJSON_Delete(j);
	m.reasoning_effort = (char *)"low";
	j = request(KB_LLM_ANTHROPIC, &m, &req);
	assert_true(num(get(j, "thinking"), "budget_tokens") == 1024);
	cJSON_Delete(j);
	m.reasoning_effort = (char *)"high";
	j = request(KB_LLM_ANTHROPIC, &m, &req);
	assert_true(num(get(j, "thinking"), "budget_tokens") == 16384);
	cJSON_Delete(j);
}

/* --- reply shapes --- */

static int parse(enum kb_llm_provider p, const char *body, struct kb_llm_reply *r)
{
	return kb_llm_parse_reply(p, body, strlen(body), r);
}

static void test_parse_openai(void **state)
{
	struct kb_llm_reply r;

	kb_llm_reply_init(&r);
	assert_int_equal(parse(KB_LLM_OPENAI,
		"{\"id\":\"x\",\"object\":\"chat.completion\",\"model\":\"m\",\"choices\":[{\"index\":0,"
		"\"message\":{\"role\":\"assistant\",\"content\":\"```cuda\\nk\\n```\"},"
		"\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34,"
		"\"total_tokens\":46}}", &r), 0);
	assert_int_equal(r.status, KB_LLM_OK);
	assert_string_equal(r.text.buf, "```cuda\nk\n```");
	assert_int_equal(r.prompt_tokens, 12);
	assert_int_equal(r.completion_tokens, 34);

	/* content parts; no usage */
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_OPENAI,
		"{\"choices\":[{\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
		"{\"type\":\"image_url\"},{\"type\":\"text\",\"text\":\"b\"}]}}]}", &r), 0);
	assert_string_equal(r.text.buf, "ab");
	assert_int_equal(r.prompt_tokens, 0);

	/* empty: null content, blank content, no choices; usage still counted */
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_OPENAI,
		"{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":null},"
		"\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}",
		&r), -1);
	assert_int_equal(r.status, KB_LLM_EMPTY);
	assert_string_equal(r.error.buf, "empty reply (finish_reason 'length')");
	assert_int_equal(r.completion_tokens, 9);
	assert_int_equal(r.text.len, 0);
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_OPENAI,
		"{\"choices\":[{\"message\":{\"content\":\" \\n\\t\"}}]}", &r), -1);
	assert_int_equal(r.status, KB_LLM_EMPTY);
	assert_int_equal(r.text.len, 0);
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_OPENAI, "{\"choices\":[]}", &r), -1);
	assert_int_equal(r.status, KB_LLM_EMPTY);

	/* malformed */
	static const char *const bad[] = {
		"{not json", "", "[1,2]", "{\"choices\":{}}", "{\"object\":\"chat.completion\"}",
		"{\"choices\":[{\"text\":\"legacy\"}]}", "{\"choices\":[{\"message\":{\"content\":7}}]}",
		"{\"choices\":[\"x\"]}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		kb_llm_reply_release(&r);
		if (parse(KB_LLM_OPENAI, bad[i], &r) != -1 || r.status != KB_LLM_MALFORMED)
			fail_msg("'%s' was not malformed (status %d)", bad[i], r.status);
		assert_contains(r.error.buf, "malformed reply: ");
		assert_int_equal(r.text.len, 0);
	}
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_OPENAI,
		"{\"error\":{\"message\":\"overloaded\\nnow\",\"type\":\"server_error\"}}", &r), -1);
	assert_int_equal(r.status, KB_LLM_MALFORMED);
	assert_contains(r.error.buf, "overloaded now (server_error)");
	kb_llm_reply_release(&r);
}

static void test_parse_anthropic(void **state)
{
	struct kb_llm_reply r;

	kb_llm_reply_init(&r);
	/* thinking blocks skipped, text blocks joined */
	assert_int_equal(parse(KB_LLM_ANTHROPIC,
		"{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\","
		"\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
		"{\"type\":\"redacted_thinking\",\"data\":\"x\"},"
		"{\"type\":\"text\",\"text\":\"part one \"},{\"type\":\"text\",\"text\":\"part two\"}],"
		"\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":100,\"output_tokens\":50,"
		"\"cache_read_input_tokens\":7}}", &r), 0);
	assert_int_equal(r.status, KB_LLM_OK);
	assert_string_equal(r.text.buf, "part one part two");
	assert_int_equal(r.prompt_tokens, 107);
	assert_int_equal(r.completion_tokens, 50);

	/* only thinking: empty, with the stop reason */
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_ANTHROPIC,
		"{\"type\":\"message\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"...\"}],"
		"\"stop_reason\":\"max_tokens\",\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}",
		&r), -1);
	assert_int_equal(r.status, KB_LLM_EMPTY);
	assert_string_equal(r.error.buf, "empty reply (stop_reason 'max_tokens')");
	assert_int_equal(r.completion_tokens, 4);
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_ANTHROPIC, "{\"type\":\"message\",\"content\":[]}", &r), -1);
	assert_int_equal(r.status, KB_LLM_EMPTY);

	static const char *const bad[] = {
		"{not json", "\"text\"", "{\"type\":\"message\"}", "{\"content\":\"text\"}",
		"{\"content\":[{\"text\":\"no type\"}]}", "{\"content\":[{\"type\":\"text\"}]}",
		"{\"content\":[{\"type\":\"text\",\"text\":\"ok\"},{\"type\":\"text\",\"text\":null}]}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		kb_llm_reply_release(&r);
		if (parse(KB_LLM_ANTHROPIC, bad[i], &r) != -1 || r.status != KB_LLM_MALFORMED)
			fail_msg("'%s' was not malformed (status %d)", bad[i], r.status);
		assert_int_equal(r.text.len, 0);
	}
	kb_llm_reply_release(&r);
	assert_int_equal(parse(KB_LLM_ANTHROPIC, "{\"type\":\"error\",\"error\":{\"type\":"
		"\"overloaded_error\",\"message\":\"Overloaded\"}}", &r), -1);
	assert_int_equal(r.status, KB_LLM_MALFORMED);
	assert_contains(r.error.buf, "Overloaded (overloaded_error)");
	kb_llm_reply_release(&r);
}

/* --- backoff --- */

static void test_backoff(void **state)
{
	uint64_t rng = 42, a, b;
	char date[64];
	time_t t;
	struct tm tm;
	int64_t w, lo = INT64_MAX, hi = -1;

	/* retry-after in seconds (a fraction too), capped */
	assert_int_equal(kb_llm_backoff_ms(1, "3", 100, 60000, &rng), 3000);
	assert_int_equal(kb_llm_backoff_ms(5, " 2 ", 100, 60000, &rng), 2000);
	assert_int_equal(kb_llm_backoff_ms(1, "0.25", 100, 60000, &rng), 250);
	assert_int_equal(kb_llm_backoff_ms(1, "0", 100, 60000, &rng), 0);
	assert_int_equal(kb_llm_backoff_ms(1, "-4", 100, 60000, &rng), 0);
	assert_int_equal(kb_llm_backoff_ms(1, "3600", 100, 60000, &rng), 60000);
	/* an HTTP date: the time until it; a past one: now */
	t = time(NULL) + 10;
	gmtime_r(&t, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	w = kb_llm_backoff_ms(1, date, 100, 60000, &rng);
	if (w < 8000 || w > 10000)
		fail_msg("retry-after '%s' gave %lld ms", date, (long long)w);
	assert_int_equal(kb_llm_backoff_ms(1, "Wed, 21 Oct 2015 07:28:00 GMT", 100, 60000, &rng), 0);

	/* unreadable or absent: exponential with full jitter, from the RNG */
	a = b = 7;
	assert_int_equal(kb_llm_backoff_ms(3, NULL, 100, 60000, &a),
			 kb_llm_backoff_ms(3, "soon", 100, 60000, &b));
	assert_true(a == b && a != 7); /* advanced, the same way */
	for (int attempt = 1; attempt <= 6; attempt++) {
		int64_t cap = 100LL << (attempt - 1);

		lo = INT64_MAX;
		hi = -1;
		for (int i = 0; i < 400; i++) {
			w = kb_llm_backoff_ms(attempt, NULL, 100, 60000, &rng);
			lo = w < lo ? w : lo;
			hi = w > hi ? w : hi;
		}
		if (lo < 0 || hi > cap || lo > cap / 10 || hi < cap * 9 / 10)
			fail_msg("attempt %d: waits in [%lld, %lld], want spread over [0, %lld]", attempt,
				 (long long)lo, (long long)hi, (long long)cap);
	}
	/* capped, and no overflow for absurd attempt numbers */
	for (int i = 0; i < 200; i++) {
		w = kb_llm_backoff_ms(1000, NULL, 1000, 5000, &rng);
		assert_true(w >= 0 && w <= 5000);
		hi = w > hi ? w : hi;
	}
	assert_true(hi > 4000);
	assert_int_equal(kb_llm_backoff_ms(3, NULL, 0, 5000, &rng), 0);
}

/*
 * Absurd Retry-After values (issue 13's fuzzing): seconds x 1000
 * saturates instead of wrapping (to a negative wait, or a wrong one), and
 * the wait is the cap.
 */
static void test_backoff_overflow(void **state)
{
	static const char *const absurd[] = {
		"2 Oct 801508015",
		"Sun, 06 Nov 400000000 08:49:37 GMT", /* wrapped to a negative wait */
		"200376420520689575",
		"40075284104137915000752841041379150",
	};
	char digits[300];
	uint64_t rng = 9;

	for (size_t i = 0; i < ARRAY_SIZE(absurd); i++) {
		int64_t ra = kb_http_retry_after_ms(absurd[i], 1764700000);

		if (ra < INT64_MAX / 2)
			fail_msg("retry-after '%s' gave %lld ms", absurd[i], (long long)ra);
		assert_int_equal(kb_llm_backoff_ms(1, absurd[i], 100, 60000, &rng), 60000);
	}
	/* delta seconds longer than any buffer: still a wait, not "unreadable" */
	memset(digits, '9', sizeof(digits) - 1);
	digits[sizeof(digits) - 1] = '\0';
	assert_true(kb_http_retry_after_ms(digits, 1764700000) >= INT64_MAX / 2);
	assert_int_equal(kb_llm_backoff_ms(1, digits, 100, 60000, &rng), 60000);
	/* and no overflow in the jitter for the largest cap */
	assert_true(kb_llm_backoff_ms(70, NULL, 1000, INT64_MAX, &rng) >= 0);
}

/* --- the client without a network --- */

static void test_pick(void **state)
{
	struct kb_config cfg;
	struct kb_llm_model_cfg models[3];
	struct kb_llm_client *c;
	size_t count[3] = { 0 };
	uint64_t rng = 1234, shadow = 1234;

	kb_config_init(&cfg);
	assert_int_equal(kb_llm_client_new(&c, &cfg), KB_ENOTFOUND);
	assert_null(c);

	models[0] = model(KB_LLM_OPENAI);
	models[0].name = (char *)"a";
	models[0].weight = 3;
	models[1] = model(KB_LLM_ANTHROPIC);
	models[1].name = (char *)"b";
	models[1].weight = 1;
	models[2] = model(KB_LLM_OPENAI);
	models[2].name = (char *)"aux";
	models[2].weight = 0;
	cfg.llm_models = models;
	cfg.nr_llm_models = 3;
	assert_int_equal(kb_llm_client_new(&c, &cfg), 0);
	assert_int_equal(kb_llm_nr_models(c), 3);
	assert_ptr_equal(kb_llm_model(c, 1), &models[1]);
	assert_null(kb_llm_model(c, 3));
	assert_int_equal(kb_llm_find_model(c, "b"), 1);
	assert_int_equal(kb_llm_find_model(c, "aux"), 2);
	assert_int_equal(kb_llm_find_model(c, "nope"), -1);
	for (int i = 0; i < 4000; i++) {
		size_t k = kb_llm_pick(c, &rng);

		assert_true(k < 3);
		count[k]++;
		kb_rng_u64(&shadow); /* one draw per pick */
		assert_true(rng == shadow);
	}
	assert_int_equal(count[2], 0); /* weight 0: never drawn */
	if (count[0] < 2800 || count[0] > 3200)
		fail_msg("weights 3:1 drew %zu:%zu", count[0], count[1]);
	/* the same seed, the same models */
	rng = 99;
	shadow = 99;
	for (int i = 0; i < 50; i++)
		assert_int_equal(kb_llm_pick(c, &rng), kb_llm_pick(c, &shadow));
	kb_llm_client_free(c);
	kb_llm_client_free(NULL);
	cfg.llm_models = NULL;
	cfg.nr_llm_models = 0;
	kb_config_release(&cfg);
}

static void test_cost_estimate(void **state)
{
	struct kb_llm_model_cfg m = model(KB_LLM_OPENAI);
	static const struct kb_llm_message msgs[] = { { "system", "12345" }, { "user", "1234" } };
	struct kb_llm_request req = { msgs, 2, NAN, 0, "x", 0, NULL };
	struct kb_llm_estimate est;

	m.price_in_per_mtok = 2;
	m.price_out_per_mtok = 10;
	assert_true(fabs(kb_llm_cost(&m, 1000000, 0) - 2) < 1e-12);
	assert_true(fabs(kb_llm_cost(&m, 500, 1000) - (0.001 + 0.01)) < 1e-12);
	kb_llm_estimate(&m, &req, &est);
	assert_int_equal(est.prompt_tokens, 3); /* 9 characters / 4, rounded up */
	assert_int_equal(est.completion_tokens, 8192);
	assert_true(fabs(est.cost_usd - kb_llm_cost(&m, 3, 8192)) < 1e-12);
	req.max_tokens = 100;
	kb_llm_estimate(&m, &req, &est);
	assert_int_equal(est.completion_tokens, 100);
	/* anthropic thinking tokens are completion tokens too */
	m.provider = KB_LLM_ANTHROPIC;
	m.reasoning_effort = (char *)"low";
	kb_llm_estimate(&m, &req, &est);
	assert_int_equal(est.completion_tokens, 100 + 1024);
}

static void test_request_hash(void **state)
{
	struct kb_llm_model_cfg m = model(KB_LLM_OPENAI);
	struct kb_llm_message msgs[] = { { "user", "a" } };
	struct kb_llm_request req = { msgs, 1, NAN, 0, "x", 0, NULL };
	char h1[65], h2[65], h3[65];

	kb_llm_request_hash(&m, &req, h1);
	kb_llm_request_hash(&m, &req, h2);
	assert_int_equal(strlen(h1), 64);
	assert_string_equal(h1, h2);
	msgs[0].content = "b";
	kb_llm_request_hash(&m, &req, h3);
	assert_string_not_equal(h1, h3);
	msgs[0].content = "a";
	m.provider = KB_LLM_ANTHROPIC;
	kb_llm_request_hash(&m, &req, h3);
	assert_string_not_equal(h1, h3);
}

/* --- usage in the store --- */

static struct kb_state *open_store(const char *name)
{
	struct strbuf dir = STRBUF_INIT;
	struct kb_state *st;

	strbuf_addf(&dir, "%s/%s", tmpdir, name);
	assert_int_equal(kb_state_open(&st, dir.buf), 0);
	strbuf_release(&dir);
	return st;
}

static int64_t add_search(struct kb_state *st, const char *key)
{
	struct strbuf sql = STRBUF_INIT;

	strbuf_addf(&sql, "INSERT INTO searches (key, operator, backend, pass, seed, rng, started_at,"
		    " updated_at) VALUES ('%s', 'op.py', 'cpu', 'forward', 1, 1, 0, 0)", key);
	assert_int_equal(sqlite3_exec(kb_state_db(st), sql.buf, NULL, NULL, NULL), SQLITE_OK);
	strbuf_release(&sql);
	return sqlite3_last_insert_rowid(kb_state_db(st));
}

static void fake_reply(struct kb_llm_reply *r, enum kb_llm_status status, const char *text,
		       int64_t in, int64_t out, double cost)
{
	kb_llm_reply_release(r);
	r->status = status;
	if (status == KB_LLM_OK)
		strbuf_addstr(&r->text, text);
	else
		strbuf_addstr(&r->error, text);
	r->prompt_tokens = in;
	r->completion_tokens = out;
	r->cost_usd = cost;
	r->latency_ms = 1234;
	r->attempts = 2;
	r->http_status = 200;
	kb_strlcpy(r->model, "fast", sizeof(r->model));
}

static void test_usage_store(void **state)
{
	struct kb_state *st = open_store("usage");
	struct kb_llm_reply r;
	struct kb_llm_usage u;
	struct kb_llm_call_info info = { 0 };
	int64_t s1 = add_search(st, "s1"), s2 = add_search(st, "s2"), id;
	sqlite3_stmt *stmt;

	kb_llm_reply_init(&r);
	info.search_id = s1;
	info.call_key = "s1/g0/i0/k0/translate/a0";
	info.purpose = "translate";
	info.request_hash = "abc";
	fake_reply(&r, KB_LLM_OK, "first", 100, 200, 0.5);
	assert_int_equal(kb_llm_usage_record(st, &info, &r, &id), 0);
	assert_true(id > 0);
	/* a later ok answer for the same key wins; failures never replay */
	fake_reply(&r, KB_LLM_OK, "second", 10, 20, 0.25);
	assert_int_equal(kb_llm_usage_record(st, &info, &r, NULL), 0);
	info.call_key = "s1/g0/i0/k1/translate/a0";
	fake_reply(&r, KB_LLM_RATE_LIMITED, "llm 'fast': http 429", 0, 0, 0);
	assert_int_equal(kb_llm_usage_record(st, &info, &r, NULL), 0);
	/* another search, and a call of no search */
	info.search_id = s2;
	info.call_key = "s2/x";
	fake_reply(&r, KB_LLM_OK, "other", 1000, 1000, 1);
	assert_int_equal(kb_llm_usage_record(st, &info, &r, NULL), 0);
	info.search_id = 0;
	info.call_key = NULL;
	info.purpose = NULL;
	info.request_hash = NULL;
	assert_int_equal(kb_llm_usage_record(st, &info, &r, NULL), 0);

	/* the stored columns */
	assert_int_equal(sqlite3_prepare_v2(kb_state_db(st),
		"SELECT search_id, call_key, purpose, model, prompt_tokens, completion_tokens,"
		" cost_usd, latency_ms, status, request_hash, response FROM llm_calls WHERE id = ?",
		-1, &stmt, NULL), SQLITE_OK);
	sqlite3_bind_int64(stmt, 1, id);
	assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int64(stmt, 0), s1);
	assert_string_equal((const char *)sqlite3_column_text(stmt, 1), "s1/g0/i0/k0/translate/a0");
	assert_string_equal((const char *)sqlite3_column_text(stmt, 2), "translate");
	assert_string_equal((const char *)sqlite3_column_text(stmt, 3), "fast");
	assert_int_equal(sqlite3_column_int64(stmt, 4), 100);
	assert_int_equal(sqlite3_column_int64(stmt, 5), 200);
	assert_true(sqlite3_column_double(stmt, 6) == 0.5);
	assert_int_equal(sqlite3_column_int64(stmt, 7), 1234);
	assert_string_equal((const char *)sqlite3_column_text(stmt, 8), "ok");
	assert_string_equal((const char *)sqlite3_column_text(stmt, 9), "abc");
	assert_string_equal((const char *)sqlite3_column_text(stmt, 10), "first");
	sqlite3_finalize(stmt);

	/* replay */
	assert_int_equal(kb_llm_usage_lookup(st, "s1/g0/i0/k0/translate/a0", &r), 0);
	assert_int_equal(r.status, KB_LLM_OK);
	assert_string_equal(r.text.buf, "second");
	assert_string_equal(r.model, "fast");
	assert_int_equal(r.prompt_tokens, 10);
	assert_int_equal(r.completion_tokens, 20);
	assert_true(r.cost_usd == 0.25);
	assert_int_equal(r.latency_ms, 0);
	assert_int_equal(r.attempts, 0);
	assert_int_equal(r.error.len, 0);
	assert_int_equal(kb_llm_usage_lookup(st, "s1/g0/i0/k1/translate/a0", &r), KB_ENOTFOUND);
	assert_int_equal(r.text.len, 0);
	assert_int_equal(kb_llm_usage_lookup(st, "never", &r), KB_ENOTFOUND);
	assert_int_equal(kb_llm_usage_lookup(st, NULL, &r), KB_ENOTFOUND);

	/* totals */
	assert_int_equal(kb_llm_usage_search(st, s1, &u), 0);
	assert_int_equal(u.calls, 3);
	assert_int_equal(u.failed, 1);  /* the 429 */
	assert_int_equal(u.prompt_tokens, 110);
	assert_int_equal(u.completion_tokens, 220);
	assert_true(fabs(u.cost_usd - 0.75) < 1e-12);
	assert_int_equal(kb_llm_usage_search(st, s2, &u), 0);
	assert_int_equal(u.calls, 1);
	assert_int_equal(kb_llm_usage_search(st, 9999, &u), 0);
	assert_int_equal(u.calls, 0);
	assert_true(u.cost_usd == 0);
	assert_int_equal(kb_llm_usage_daily(st, kb_wall_s(), &u), 0);
	assert_int_equal(u.calls, 5);
	assert_int_equal(u.prompt_tokens, 2110);
	/* a call of more than 24 hours ago no longer counts */
	assert_int_equal(sqlite3_exec(kb_state_db(st),
		"UPDATE llm_calls SET created_at = created_at - 86401 WHERE call_key = 's2/x'",
		NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(kb_llm_usage_daily(st, kb_wall_s(), &u), 0);
	assert_int_equal(u.calls, 4);
	assert_int_equal(u.prompt_tokens, 1110);
	assert_int_equal(u.completion_tokens, 1220);
	assert_true(fabs(u.cost_usd - 1.75) < 1e-12);

	kb_llm_reply_release(&r);
	kb_state_close(st);
}

static void test_budget(void **state)
{
	struct kb_state *st = open_store("budget");
	struct kb_llm_reply r;
	struct kb_llm_call_info info = { 0 };
	struct kb_llm_budget b = { 0 };
	struct kb_llm_estimate est = { 100, 900, 0.01 };
	struct strbuf why = STRBUF_INIT;
	struct kb_config cfg;
	int64_t s1 = add_search(st, "b1");

	kb_llm_reply_init(&r);
	info.search_id = s1;
	fake_reply(&r, KB_LLM_OK, "x", 4000, 5000, 0.98);
	assert_int_equal(kb_llm_usage_record(st, &info, &r, NULL), 0);

	/* no limits */
	assert_int_equal(kb_llm_budget_check(st, &b, s1, &est, &why), 0);
	/* job tokens: 9000 used + 1000 estimated fits 10000, not 9999 */
	b.job_tokens = 10000;
	assert_int_equal(kb_llm_budget_check(st, &b, s1, &est, &why), 0);
	b.job_tokens = 9999;
	assert_int_equal(kb_llm_budget_check(st, &b, s1, &est, &why), KB_EBUDGET);
	assert_string_equal(why.buf, "the job token budget would be exceeded: 9000 used + 1000 estimated"
			    " > 9999");
	/* a call of no search has no job budget */
	strbuf_reset(&why);
	assert_int_equal(kb_llm_budget_check(st, &b, 0, &est, &why), 0);
	assert_int_equal(why.len, 0);
	/* job money */
	b.job_tokens = 0;
	b.job_usd = 1.0;
	assert_int_equal(kb_llm_budget_check(st, &b, s1, &est, &why), 0);
	b.job_usd = 0.985;
	assert_int_equal(kb_llm_budget_check(st, &b, s1, &est, &why), KB_EBUDGET);
	assert_contains(why.buf, "the job budget of $0.98 would be exceeded: $0.9800 spent +"
			" $0.0100 estimated");
	/* daily: every call of the last 24 h, whatever its search */
	strbuf_reset(&why);
	b.job_usd = 0;
	b.daily_tokens = 9500;
	assert_int_equal(kb_llm_budget_check(st, &b, 0, &est, &why), KB_EBUDGET);
	assert_contains(why.buf, "the daily token budget would be exceeded: 9000 used + 1000 estimated"
			" > 9500");
	strbuf_reset(&why);
	b.daily_tokens = 0;
	b.daily_usd = 0.5;
	assert_int_equal(kb_llm_budget_check(st, &b, 0, &est, &why), KB_EBUDGET);
	assert_contains(why.buf, "the daily budget of $0.50 would be exceeded");
	/* yesterday's spending does not count today */
	assert_int_equal(sqlite3_exec(kb_state_db(st), "UPDATE llm_calls SET created_at = 1",
				      NULL, NULL, NULL), SQLITE_OK);
	strbuf_reset(&why);
	assert_int_equal(kb_llm_budget_check(st, &b, 0, &est, &why), 0);
	/* ... but it still counts for its search */
	b.job_usd = 0.985;
	assert_int_equal(kb_llm_budget_check(st, &b, s1, &est, &why), KB_EBUDGET);

	/* from the config */
	kb_config_init(&cfg);
	cfg.llm_daily_budget_tokens = 7;
	kb_llm_budget_from_config(&b, &cfg);
	assert_true(b.job_usd == 5 && b.job_tokens == 0 && b.daily_usd == 0 && b.daily_tokens == 7);
	kb_config_release(&cfg);

	strbuf_release(&why);
	kb_llm_reply_release(&r);
	kb_state_close(st);
}

/* --- against the simulator --- */

static const char *python(void)
{
	return access("/usr/bin/python3", X_OK) ? "python3" : "/usr/bin/python3";
}

static int group_setup(void **state)
{
	const char *top = getenv("KB_TOP");
	struct strbuf script = STRBUF_INIT, port_file = STRBUF_INIT, log = STRBUF_INIT;
	struct strbuf port = STRBUF_INIT;
	int64_t deadline;
	int rc = 0;

	if (!top || !*top)
		top = ".";
	if (!mkdtemp(tmpdir))
		return -1;
	log_set_level(KB_LOG_WARN);
	strbuf_addf(&script, "%s/tests/sim/llm_sim.py", top);
	if (!kb_is_file(script.buf))
		goto out; /* the simulator tests skip */
	strbuf_addf(&port_file, "%s/sim.port", tmpdir);
	strbuf_addf(&log, "%s/sim.log", tmpdir);
	/* its output goes to a file: nothing reads the pipes between calls */
	strvec_pushl(&sim.args, "/bin/sh", "-c", "exec \"$0\" \"$1\" --port-file \"$2\" --api-key \"$3\""
		     " --seed 1 >\"$4\" 2>&1", python(), script.buf, port_file.buf, SIM_KEY, log.buf, NULL);
	if (start_command(&sim)) {
		rc = -1;
		goto out;
	}
	for (deadline = kb_now_ms() + 20000; kb_now_ms() < deadline; usleep(20000)) {
		strbuf_reset(&port);
		if (!strbuf_read_file(&port, port_file.buf, 64) && port.len) {
			sim_port = atoi(port.buf);
			break;
		}
		if (!child_alive(&sim))
			break;
	}
	if (sim_port <= 0) {
		strbuf_reset(&port);
		strbuf_read_file(&port, log.buf, 1 << 16);
		fprintf(stderr, "llm_sim did not start: %s\n", port.buf);
		kill_command(&sim);
		rc = -1;
		goto out;
	}
	sim_up = true;
out:
	strbuf_release(&script);
	strbuf_release(&port_file);
	strbuf_release(&log);
	strbuf_release(&port);
	return rc;
}

static int group_teardown(void **state)
{
	if (sim_up) {
		kill(sim.pid, SIGTERM);
		finish_command(&sim, 5000);
	}
	child_process_release(&sim);
	return kb_rm_rf(tmpdir) ? -1 : 0;
}

static size_t collect(char *data, size_t size, size_t nmemb, void *sb)
{
	strbuf_add(sb, data, size * nmemb);
	return size * nmemb;
}

/* A control call to the simulator; its JSON answer (caller deletes). */
static cJSON *ctl(const char *method, const char *path, const char *body)
{
	struct strbuf url = STRBUF_INIT, out = STRBUF_INIT;
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	CURL *c = curl_easy_init();
	long status = 0;
	cJSON *j;

	strbuf_addf(&url, "http://127.0.0.1:%d/_sim/%s", sim_port, path);
	curl_easy_setopt(c, CURLOPT_URL, url.buf);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200)
		fail_msg("%s %s: %ld %s", method, path, status, out.buf);
	j = cJSON_Parse(out.buf);
	assert_non_null(j);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	strbuf_release(&url);
	strbuf_release(&out);
	return j;
}

static void ctl_do(const char *method, const char *path, const char *body)
{
	cJSON_Delete(ctl(method, path, body));
}

static int sim_requests(void)
{
	cJSON *j = ctl("GET", "stats", NULL);
	int n = (int)num(j, "requests");

	cJSON_Delete(j);
	return n;
}

#define NEED_SIM() do { if (!sim_up) { KB_SKIP("the LLM simulator did not start (python3 missing?)"); return; } } while (0)

/*
 * Models on the simulator: oa (openai), an (anthropic, a system prompt
 * goes to "system"), think (anthropic thinking), bad (a wrong key), dead
 * (a closed port). timeout_s 1.
 */
static void sim_config(struct kb_config *cfg, int max_retries, int max_kb)
{
	struct strbuf ini = STRBUF_INIT, path = STRBUF_INIT;

	strbuf_addf(&ini,
		"[llm]\nmodels = oa, an, think, bad, dead\ntimeout_s = 1\nmax_retries = %d\n"
		"max_response_kb = %d\n"
		"[llm.oa]\nprovider = openai\nbase_url = http://127.0.0.1:%d/v1\nmodel = sim-gpt\n"
		"api_key = ${KB_TEST_SIM_KEY}\nprice_in_per_mtok = 2\nprice_out_per_mtok = 8\n"
		"[llm.an]\nprovider = anthropic\nbase_url = http://127.0.0.1:%d/v1/\nmodel = sim-claude\n"
		"api_key = ${KB_TEST_SIM_KEY}\ntemperature = 0.5\nprice_in_per_mtok = 3\n"
		"price_out_per_mtok = 15\n"
		"[llm.think]\nprovider = anthropic\nbase_url = http://127.0.0.1:%d/v1\nmodel = sim-claude\n"
		"api_key = ${KB_TEST_SIM_KEY}\nreasoning_effort = low\nmax_tokens = 2000\n"
		"[llm.bad]\nprovider = openai\nbase_url = http://127.0.0.1:%d/v1\nmodel = sim-gpt\n"
		"api_key = " BAD_KEY "\n"
		"[llm.dead]\nprovider = openai\nbase_url = http://127.0.0.1:1/v1\nmodel = x\n",
		max_retries, max_kb, sim_port, sim_port, sim_port, sim_port);
	strbuf_addf(&path, "%s/sim.ini", tmpdir);
	assert_int_equal(kb_write_file_atomic(path.buf, ini.buf, ini.len), 0);
	setenv("KB_TEST_SIM_KEY", SIM_KEY, 1);
	assert_int_equal(kb_config_load(cfg, path.buf), 0);
	strbuf_release(&ini);
	strbuf_release(&path);
}

struct fixture {
	struct kb_config cfg;
	struct kb_llm_client *c;
	struct kb_llm_reply r;
};

static void fixture_init(struct fixture *f, int max_retries, int max_kb)
{
	sim_config(&f->cfg, max_retries, max_kb);
	assert_int_equal(kb_llm_client_new(&f->c, &f->cfg), 0);
	kb_llm_client_set_backoff(f->c, 20, 3000);
	kb_llm_reply_init(&f->r);
	ctl_do("POST", "reset", NULL);
}

static void fixture_release(struct fixture *f)
{
	kb_llm_reply_release(&f->r);
	kb_llm_client_free(f->c);
	kb_config_release(&f->cfg);
}

static const struct kb_llm_message kernel_prompt[] = {
	{ "system", "You write CUDA kernels." },
	{ "user", "Write a kernel for this operator." },
};
static const struct kb_llm_request kernel_req = { kernel_prompt, 2, NAN, 0, "translate", 0, NULL };

static size_t model_index(struct fixture *f, const char *name)
{
	long i = kb_llm_find_model(f->c, name);

	assert_true(i >= 0);
	return (size_t)i;
}

static void test_sim_both_protocols(void **state)
{
	static const char *const names[] = { "oa", "an", "think" };
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	for (size_t k = 0; k < ARRAY_SIZE(names); k++) {
		const struct kb_llm_model_cfg *m = kb_llm_model(f.c, model_index(&f, names[k]));
		double cost;

		ctl_do("POST", "script", "{\"replies\": [\"here:\\n```cuda\\n__global__ void k() {}\\n```\\n\"]}");
		assert_int_equal(kb_llm_chat(f.c, model_index(&f, names[k]), &kernel_req, &f.r), 0);
		assert_int_equal(f.r.status, KB_LLM_OK);
		assert_string_equal(f.r.text.buf, "here:\n```cuda\n__global__ void k() {}\n```\n");
		assert_string_equal(f.r.model, names[k]);
		assert_int_equal(f.r.http_status, 200);
		assert_int_equal(f.r.attempts, 1);
		assert_int_equal(f.r.error.len, 0);
		assert_true(f.r.prompt_tokens > 0 && f.r.completion_tokens > 0);
		cost = (f.r.prompt_tokens * m->price_in_per_mtok +
			f.r.completion_tokens * m->price_out_per_mtok) / 1e6;
		assert_true(fabs(f.r.cost_usd - cost) < 1e-12);
		assert_true(f.r.latency_ms >= 0 && f.r.latency_ms < 5000);
	}
	assert_int_equal(sim_requests(), 3);
	fixture_release(&f);
}

static void test_sim_corpus_answer(void **state)
{
	struct fixture f;
	int rc;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	/* no script: the simulator answers from its corpus (some reply, maybe a bad one) */
	rc = kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r);

	assert_true(rc == 0 || f.r.status == KB_LLM_EMPTY || f.r.status == KB_LLM_MALFORMED);
	assert_int_equal(f.r.attempts, 1);
	fixture_release(&f);
}

static void test_sim_bad_key(void **state)
{
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "bad"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_HTTP_ERROR);
	assert_int_equal(f.r.http_status, 401);
	assert_int_equal(f.r.attempts, 1); /* not retried */
	assert_contains(f.r.error.buf, "llm 'bad' (openai sim-gpt): http 401: Incorrect API key");
	assert_contains(f.r.error.buf, "(invalid_request_error)");
	assert_not_contains(f.r.error.buf, BAD_KEY);
	assert_not_contains(f.r.error.buf, SIM_KEY);
	assert_null(strchr(f.r.error.buf, '\n'));
	assert_int_equal(f.r.text.len, 0);
	assert_int_equal(sim_requests(), 1);

	/* anthropic without the right key */
	ctl_do("POST", "config", "{\"api_key\": \"another-key-entirely\"}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "an"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_HTTP_ERROR);
	assert_int_equal(f.r.http_status, 401);
	assert_contains(f.r.error.buf, "llm 'an' (anthropic sim-claude): http 401: invalid x-api-key");
	assert_not_contains(f.r.error.buf, SIM_KEY);
	ctl_do("POST", "config", "{\"api_key\": \"" SIM_KEY "\"}");
	fixture_release(&f);
}

static void test_sim_429_retry_after(void **state)
{
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 429, \"retry_after\": \"1\"}]}");
	ctl_do("POST", "script", "{\"replies\": [\"ok after 429\"]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), 0);
	assert_string_equal(f.r.text.buf, "ok after 429");
	assert_int_equal(f.r.attempts, 2);
	/* retry-after, not the 20 ms backoff */
	if (f.r.latency_ms < 950)
		fail_msg("retried after %lld ms, retry-after said 1 s", (long long)f.r.latency_ms);
	assert_int_equal(sim_requests(), 2);
	fixture_release(&f);
}

static void test_sim_5xx_then_ok(void **state)
{
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 503, \"count\": 2}]}");
	ctl_do("POST", "script", "{\"replies\": [\"third time\"]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), 0);
	assert_string_equal(f.r.text.buf, "third time");
	assert_int_equal(f.r.attempts, 3);
	assert_int_equal(f.r.http_status, 200);
	assert_true(f.r.latency_ms < 2000); /* backoff 20 ms, 40 ms at most */

	/* anthropic overloaded (529) and a 502 with an HTML body */
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 529}, {\"status\": 502}]}");
	ctl_do("POST", "script", "{\"replies\": [\"fine\"]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "an"), &kernel_req, &f.r), 0);
	assert_string_equal(f.r.text.buf, "fine");
	assert_int_equal(f.r.attempts, 3);

	/* every attempt a 5xx: server_error, naming the last answer */
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 500, \"count\": 4}]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_SERVER_ERROR);
	assert_int_equal(f.r.attempts, 4);
	assert_int_equal(f.r.http_status, 500);
	assert_contains(f.r.error.buf, "llm 'oa' (openai sim-gpt): http 500: ");
	assert_contains(f.r.error.buf, "(after 4 attempts)");
	fixture_release(&f);
}

static void test_sim_429_exhausted(void **state)
{
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 2, 4096);
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 429, \"retry_after\": \"0\", \"count\": 3}]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "an"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_RATE_LIMITED);
	assert_int_equal(f.r.attempts, 3);
	assert_int_equal(f.r.http_status, 429);
	assert_contains(f.r.error.buf, "http 429: ");
	assert_contains(f.r.error.buf, "(after 3 attempts)");
	assert_int_equal(sim_requests(), 3);
	fixture_release(&f);
}

static void test_sim_timeout(void **state)
{
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	/* the first attempt takes 2.5 s: timed out at 1 s and retried */
	ctl_do("POST", "faults", "{\"faults\": [{\"delay_ms\": 2500}]}");
	ctl_do("POST", "script", "{\"replies\": [\"patience\"]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), 0);
	assert_int_equal(f.r.attempts, 2);
	assert_true(f.r.latency_ms >= 1000 && f.r.latency_ms < 2400);
	fixture_release(&f);

	/* every attempt too slow: KB_ETIMEOUT */
	fixture_init(&f, 1, 4096);
	ctl_do("POST", "faults", "{\"faults\": [{\"delay_ms\": 1500, \"count\": 2}]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), KB_ETIMEOUT);
	assert_int_equal(f.r.status, KB_LLM_TIMEOUT);
	assert_int_equal(f.r.attempts, 2);
	assert_int_equal(f.r.http_status, 0);
	assert_contains(f.r.error.buf, "llm 'oa' (openai sim-gpt): no answer within 1 s");
	fixture_release(&f);
}

/* A deadline (a time budget) bounds every attempt and every wait: KB_EBUDGET. */
static void test_sim_deadline(void **state)
{
	struct fixture f;
	struct kb_llm_request req = kernel_req;
	int before;

	NEED_SIM();
	/* the attempt is cut at the deadline (0.4 s), before timeout_s (1 s) */
	fixture_init(&f, 3, 4096);
	ctl_do("POST", "faults", "{\"faults\": [{\"delay_ms\": 2500}]}");
	req.deadline_ms = kb_now_ms() + 400;
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &req, &f.r), KB_EBUDGET);
	assert_int_equal(f.r.status, KB_LLM_TIMEOUT);
	assert_int_equal(f.r.attempts, 1);
	assert_true(f.r.latency_ms >= 350 && f.r.latency_ms < 1000);
	assert_contains(f.r.error.buf, "the time budget ran out during the call");
	fixture_release(&f);

	/* a 429 asking for 5 s past the deadline: no wait, no second attempt */
	fixture_init(&f, 3, 4096);
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 429, \"retry_after\": 5}]}");
	req.deadline_ms = kb_now_ms() + 2000;
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &req, &f.r), KB_EBUDGET);
	assert_int_equal(f.r.attempts, 1);
	assert_true(f.r.latency_ms < 1500);
	fixture_release(&f);

	/* past the deadline already: no request at all */
	fixture_init(&f, 3, 4096);
	before = sim_requests();
	req.deadline_ms = kb_now_ms() - 1;
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &req, &f.r), KB_EBUDGET);
	assert_int_equal(sim_requests(), before);
	assert_contains(f.r.error.buf, "the time budget ran out before the call");
	fixture_release(&f);
}

static void test_sim_malformed_empty(void **state)
{
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	/* a broken body is the model's answer: no retry loop */
	ctl_do("POST", "faults", "{\"faults\": [{\"body\": \"{not json\"}]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_MALFORMED);
	assert_int_equal(f.r.attempts, 1);
	assert_contains(f.r.error.buf, "llm 'oa' (openai sim-gpt): malformed reply: not JSON");
	assert_int_equal(sim_requests(), 1);
	/* a reply cut in half */
	ctl_do("POST", "faults", "{\"faults\": [{\"truncate\": true}]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "an"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_MALFORMED);
	assert_int_equal(sim_requests(), 2);
	/* an empty text */
	ctl_do("POST", "faults", "{\"faults\": [{\"empty\": true}, {\"empty\": true}]}");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_EMPTY);
	assert_int_equal(f.r.attempts, 1);
	assert_contains(f.r.error.buf, "llm 'oa' (openai sim-gpt): empty reply");
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "an"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_EMPTY);
	assert_int_equal(sim_requests(), 4);
	fixture_release(&f);
}

static void test_sim_body_cap(void **state)
{
	struct fixture f;
	struct strbuf body = STRBUF_INIT;

	NEED_SIM();
	fixture_init(&f, 3, 16);
	strbuf_addstr(&body, "{\"replies\": [\"");
	for (int i = 0; i < 40000; i++)
		strbuf_addch(&body, 'x');
	strbuf_addstr(&body, "\"]}");
	ctl_do("POST", "script", body.buf);
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_MALFORMED);
	assert_int_equal(f.r.attempts, 1);
	assert_contains(f.r.error.buf, "response body larger than 16 KiB");
	assert_int_equal(f.r.text.len, 0);
	strbuf_release(&body);
	fixture_release(&f);
}

static void test_sim_refused(void **state)
{
	struct fixture f;

	NEED_SIM();
	fixture_init(&f, 2, 4096);
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "dead"), &kernel_req, &f.r), -1);
	assert_int_equal(f.r.status, KB_LLM_TRANSPORT);
	assert_int_equal(f.r.attempts, 3); /* retried like a 5xx */
	assert_int_equal(f.r.http_status, 0);
	assert_contains(f.r.error.buf, "llm 'dead' (openai x): transfer failed: ");
	fixture_release(&f);
}

static void *stop_later(void *arg)
{
	usleep(300 * 1000);
	kb_request_stop(SIGTERM);
	return NULL;
}

static void test_sim_cancel(void **state)
{
	struct fixture f;
	pthread_t t;
	int64_t start;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	/* a stop request ends a 30 s retry-after wait */
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 429, \"retry_after\": \"30\"}]}");
	kb_llm_client_set_backoff(f.c, 20, 60000);
	start = kb_now_ms();
	assert_int_equal(pthread_create(&t, NULL, stop_later, NULL), 0);
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), KB_ECANCELLED);
	pthread_join(t, NULL);
	assert_true(kb_now_ms() - start < 3000);
	assert_int_equal(f.r.attempts, 1);
	assert_contains(f.r.error.buf, "stopped on request while waiting to retry");
	/* and a transfer in flight */
	kb_reset_stop();
	ctl_do("POST", "faults", "{\"faults\": [{\"delay_ms\": 900}]}");
	start = kb_now_ms();
	assert_int_equal(pthread_create(&t, NULL, stop_later, NULL), 0);
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), KB_ECANCELLED);
	pthread_join(t, NULL);
	assert_true(kb_now_ms() - start < 850);
	assert_contains(f.r.error.buf, "stopped on request");
	/* a stop already requested: nothing is sent */
	assert_int_equal(kb_llm_chat(f.c, model_index(&f, "oa"), &kernel_req, &f.r), KB_ECANCELLED);
	assert_int_equal(f.r.attempts, 0);
	kb_reset_stop();
	usleep(700 * 1000); /* let the simulator finish the delayed request */
	fixture_release(&f);
}

static void test_sim_recorded_calls(void **state)
{
	struct fixture f;
	struct kb_state *st;
	struct kb_llm_call_info info = { 0 };
	struct kb_llm_budget b = { 0 };
	struct kb_llm_usage u;
	int64_t search;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	st = open_store("recorded");
	search = add_search(st, "rec");
	info.search_id = search;
	info.call_key = "s1/g0/i0/k0/translate/a0";
	b.job_usd = 1;

	ctl_do("POST", "script", "{\"replies\": [\"recorded answer\", \"a different answer\"]}");
	assert_int_equal(kb_llm_call(f.c, st, model_index(&f, "oa"), &kernel_req, &info, &b, &f.r), 0);
	assert_string_equal(f.r.text.buf, "recorded answer");
	assert_true(f.r.latency_ms > 0 || f.r.attempts == 1);
	assert_int_equal(sim_requests(), 1);
	/* the same key again: from the store, no request */
	assert_int_equal(kb_llm_call(f.c, st, model_index(&f, "an"), &kernel_req, &info, &b, &f.r), 0);
	assert_string_equal(f.r.text.buf, "recorded answer");
	assert_string_equal(f.r.model, "oa");
	assert_int_equal(f.r.latency_ms, 0);
	assert_int_equal(sim_requests(), 1);
	assert_int_equal(kb_llm_usage_search(st, search, &u), 0);
	assert_int_equal(u.calls, 1);
	assert_true(u.prompt_tokens > 0);

	/* a failed call is stored, and not replayed */
	info.call_key = "s1/g0/i0/k1/translate/a0";
	ctl_do("POST", "faults", "{\"faults\": [{\"body\": \"[]\"}]}");
	{
		int64_t before_tokens = u.prompt_tokens + u.completion_tokens;

		assert_int_equal(kb_llm_call(f.c, st, model_index(&f, "oa"), &kernel_req, &info, &b, &f.r), -1);
		assert_int_equal(f.r.status, KB_LLM_MALFORMED);
		/* answered and billed, but no usage in it: the estimate is recorded, not 0 */
		assert_true(f.r.prompt_tokens > 0 && f.r.completion_tokens > 0);
		assert_contains(f.r.error.buf, "tokens and cost estimated");
		assert_int_equal(kb_llm_usage_search(st, search, &u), 0);
		assert_int_equal(u.calls, 2);
		assert_true(u.prompt_tokens + u.completion_tokens > before_tokens);
	}
	assert_int_equal(kb_llm_call(f.c, st, model_index(&f, "oa"), &kernel_req, &info, &b, &f.r), 0);
	assert_string_equal(f.r.text.buf, "a different answer");
	assert_int_equal(sim_requests(), 3);

	/* over budget: refused before any request, nothing stored */
	info.call_key = "s1/g1/i0/k0/mutate/a0";
	b.job_usd = 0;
	b.job_tokens = u.prompt_tokens + u.completion_tokens + 100;
	assert_int_equal(kb_llm_call(f.c, st, model_index(&f, "oa"), &kernel_req, &info, &b, &f.r),
			 KB_EBUDGET);
	assert_contains(f.r.error.buf, "llm 'oa': the job token budget would be exceeded: ");
	assert_int_equal(sim_requests(), 3);
	assert_int_equal(kb_llm_usage_search(st, search, &u), 0);
	assert_int_equal(u.calls, 3);
	/* the stored purpose is the request's */
	{
		sqlite3_stmt *stmt;

		assert_int_equal(sqlite3_prepare_v2(kb_state_db(st),
			"SELECT count(*) FROM llm_calls WHERE purpose = 'translate' AND"
			" length(request_hash) = 64", -1, &stmt, NULL), SQLITE_OK);
		assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
		assert_int_equal(sqlite3_column_int(stmt, 0), 3);
		sqlite3_finalize(stmt);
	}
	kb_state_close(st);
	fixture_release(&f);
}

/* --- the pool: calls in flight (llm/pool.h) --- */

static int64_t stored_calls(struct kb_state *st, const char *like)
{
	sqlite3_stmt *stmt;
	int64_t n;

	assert_int_equal(sqlite3_prepare_v2(kb_state_db(st), "SELECT count(*) FROM llm_calls WHERE call_key LIKE ?",
					    -1, &stmt, NULL), SQLITE_OK);
	sqlite3_bind_text(stmt, 1, like, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
	n = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return n;
}

static void pool_submit_n(struct kb_llm_pool *p, size_t model, const char *prefix, int n)
{
	struct strbuf key = STRBUF_INIT;

	for (int k = 0; k < n; k++) {
		struct kb_llm_call_info info = { .search_id = 0 };

		strbuf_reset(&key);
		strbuf_addf(&key, "%s/k%d", prefix, k);
		info.call_key = key.buf;
		assert_true(kb_llm_pool_submit(p, model, &kernel_req, &info, NULL, NULL) > 0);
	}
	strbuf_release(&key);
}

static void test_pool_in_flight(void **state)
{
	struct fixture f;
	struct kb_llm_pool *p;
	struct kb_state *st;
	struct strbuf dir = STRBUF_INIT;
	int64_t seen[8] = { 0 };
	size_t oa, an;

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	oa = model_index(&f, "oa");
	an = model_index(&f, "an");
	f.cfg.llm_models[oa].max_in_flight = 2;
	strbuf_addf(&dir, "%s/pool", tmpdir);
	assert_int_equal(kb_mkdir_p(dir.buf, 0700), 0);
	assert_int_equal(kb_state_open(&st, dir.buf), 0);
	ctl_do("POST", "latency", "{\"ms\": 300}");
	assert_int_equal(kb_llm_pool_new(&p, &f.cfg, dir.buf, 4), 0);
	/* six calls to a model that takes two at once: never more than two run */
	pool_submit_n(p, oa, "pool-oa", 6);
	for (int k = 0; k < 6; k++) {
		struct kb_llm_pool_done d;

		assert_int_equal(kb_llm_pool_next(p, -1, &d), 0);
		assert_true(d.ticket >= 1 && d.ticket <= 6 && !seen[d.ticket - 1]);
		seen[d.ticket - 1] = 1;
		assert_int_equal(d.rc, 0);
		assert_string_equal(d.reply.model, "oa");
		kb_llm_reply_release(&d.reply);
	}
	assert_int_equal(kb_llm_pool_peak(p), 2);
	{
		struct kb_llm_pool_done d;

		assert_int_equal(kb_llm_pool_next(p, 0, &d), KB_ENOTFOUND);
	}
	/* every completed call was stored by its thread */
	assert_int_equal(stored_calls(st, "pool-oa/%"), 6);
	/* two models: the pool's own limit (4) is the bound now */
	pool_submit_n(p, oa, "pool-mix-oa", 4);
	pool_submit_n(p, an, "pool-mix-an", 4);
	for (int k = 0; k < 8; k++) {
		struct kb_llm_pool_done d;

		assert_int_equal(kb_llm_pool_next(p, -1, &d), 0);
		assert_int_equal(d.rc, 0);
		kb_llm_reply_release(&d.reply);
	}
	assert_true(kb_llm_pool_peak(p) >= 2 && kb_llm_pool_peak(p) <= 4);
	assert_int_equal(stored_calls(st, "pool-mix-%"), 8);
	assert_int_equal(kb_llm_pool_in_flight(p), 0);
	kb_llm_pool_free(p);
	ctl_do("POST", "latency", "{\"ms\": 0}");
	kb_state_close(st);
	strbuf_release(&dir);
	fixture_release(&f);
}

static void test_pool_abort(void **state)
{
	struct fixture f;
	struct kb_llm_pool *p;
	struct strbuf dir = STRBUF_INIT;
	int64_t tokens;
	double usd;
	struct kb_llm_estimate est = { 100, 200, 0.5 };

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	strbuf_addf(&dir, "%s/pool-abort", tmpdir);
	assert_int_equal(kb_mkdir_p(dir.buf, 0700), 0);
	ctl_do("POST", "latency", "{\"ms\": 800}");
	assert_int_equal(kb_llm_pool_new(&p, &f.cfg, dir.buf, 2), 0);
	for (int k = 0; k < 4; k++) {
		struct kb_llm_call_info info = { .call_key = NULL };

		assert_true(kb_llm_pool_submit(p, model_index(&f, "oa"), &kernel_req, &info, &est, NULL) > 0);
	}
	kb_llm_pool_reserved(p, &tokens, &usd);
	assert_int_equal(tokens, 4 * 300);
	assert_true(fabs(usd - 2.0) < 1e-9);
	kb_llm_pool_abort(p);
	/* running and queued calls all come back, as stopped */
	for (int k = 0; k < 4; k++) {
		struct kb_llm_pool_done d;

		assert_int_equal(kb_llm_pool_next(p, -1, &d), 0);
		assert_int_equal(d.rc, KB_ECANCELLED);
		assert_int_not_equal(d.reply.status, KB_LLM_OK);
		kb_llm_reply_release(&d.reply);
	}
	kb_llm_pool_reserved(p, &tokens, &usd);
	assert_int_equal(tokens, 0);
	kb_llm_pool_free(p);
	ctl_do("POST", "latency", "{\"ms\": 0}");
	strbuf_release(&dir);
	fixture_release(&f);
}

static void add_header(struct kb_http_response *r, const char *line)
{
	strvec_push(&r->headers, line);
}

static void test_rate_hold(void **state)
{
	struct kb_http_response r;
	int64_t now = 1700000000000LL, ms;
	char line[128];
	time_t t = (time_t)(now / 1000) + 30;
	struct tm tm;

	kb_http_response_init(&r, 1024);
	r.error = KB_HTTP_OK;
	r.status = 200;
	assert_int_equal(kb_llm_rate_hold_ms(&r, now), 0);
	add_header(&r, "x-ratelimit-remaining-requests: 5");
	add_header(&r, "x-ratelimit-reset-requests: 6m0s");
	assert_int_equal(kb_llm_rate_hold_ms(&r, now), 0);          /* requests left */
	kb_http_response_release(&r);

	kb_http_response_init(&r, 1024);
	r.error = KB_HTTP_OK;
	add_header(&r, "x-ratelimit-remaining-requests: 0");
	add_header(&r, "x-ratelimit-reset-requests: 6m0s");
	assert_int_equal(kb_llm_rate_hold_ms(&r, now), 360000);
	kb_http_response_release(&r);

	kb_http_response_init(&r, 1024);
	r.error = KB_HTTP_OK;
	add_header(&r, "x-ratelimit-remaining-requests: 0");
	add_header(&r, "x-ratelimit-reset-requests: 1.5s20ms");
	assert_int_equal(kb_llm_rate_hold_ms(&r, now), 1520);
	kb_http_response_release(&r);

	kb_http_response_init(&r, 1024);
	r.error = KB_HTTP_OK;
	add_header(&r, "x-ratelimit-remaining-requests: 0");
	add_header(&r, "x-ratelimit-reset-requests: soon");           /* unreadable: no hold */
	assert_int_equal(kb_llm_rate_hold_ms(&r, now), 0);
	kb_http_response_release(&r);

	/* anthropic: an RFC 3339 reset time, 30 s from now */
	gmtime_r(&t, &tm);
	strftime(line, sizeof(line), "anthropic-ratelimit-requests-reset: %Y-%m-%dT%H:%M:%SZ", &tm);
	kb_http_response_init(&r, 1024);
	r.error = KB_HTTP_OK;
	add_header(&r, "anthropic-ratelimit-requests-remaining: 0");
	add_header(&r, line);
	ms = kb_llm_rate_hold_ms(&r, now);
	assert_true(ms >= 29000 && ms <= 31000);
	kb_http_response_release(&r);
}

static void test_pool_hold_after_429(void **state)
{
	struct fixture f;
	struct kb_llm_pool *p;
	struct strbuf dir = STRBUF_INIT;
	struct kb_llm_pool_done d;
	struct kb_llm_call_info info = { .call_key = NULL };

	NEED_SIM();
	fixture_init(&f, 3, 4096);
	strbuf_addf(&dir, "%s/pool-hold", tmpdir);
	assert_int_equal(kb_mkdir_p(dir.buf, 0700), 0);
	assert_int_equal(kb_llm_pool_new(&p, &f.cfg, dir.buf, 2), 0);
	kb_llm_pool_set_backoff(p, 20, 3000);
	ctl_do("POST", "faults", "{\"faults\": [{\"status\": 429, \"retry_after\": \"1\", \"count\": 1}]}");
	assert_true(kb_llm_pool_submit(p, model_index(&f, "oa"), &kernel_req, &info, NULL, NULL) > 0);
	assert_int_equal(kb_llm_pool_next(p, -1, &d), 0);
	assert_int_equal(d.rc, 0);
	assert_int_equal(d.reply.attempts, 2);
	/* the provider's retry-after holds the model for every thread, not only this call */
	assert_true(d.reply.hold_until_ms > 0);
	kb_llm_reply_release(&d.reply);
	kb_llm_pool_free(p);
	strbuf_release(&dir);
	fixture_release(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_openai_request),
		cmocka_unit_test(test_anthropic_request),
		cmocka_unit_test(test_parse_openai),
		cmocka_unit_test(test_parse_anthropic),
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_backoff_overflow),
		cmocka_unit_test(test_pick),
		cmocka_unit_test(test_cost_estimate),
		cmocka_unit_test(test_request_hash),
		cmocka_unit_test(test_usage_store),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_sim_both_protocols),
		cmocka_unit_test(test_sim_corpus_answer),
		cmocka_unit_test(test_sim_bad_key),
		cmocka_unit_test(test_sim_429_retry_after),
		cmocka_unit_test(test_sim_5xx_then_ok),
		cmocka_unit_test(test_sim_429_exhausted),
		cmocka_unit_test(test_sim_timeout),
		cmocka_unit_test(test_sim_deadline),
		cmocka_unit_test(test_sim_malformed_empty),
		cmocka_unit_test(test_sim_body_cap),
		cmocka_unit_test(test_sim_refused),
		cmocka_unit_test(test_sim_cancel),
		cmocka_unit_test(test_sim_recorded_calls),
		cmocka_unit_test(test_rate_hold),
		cmocka_unit_test(test_pool_in_flight),
		cmocka_unit_test(test_pool_abort),
		cmocka_unit_test(test_pool_hold_after_429),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
