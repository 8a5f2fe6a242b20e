#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/state.h"
#include "core/util.h"
#include "verifier/baseline_cache.h"
#include "verifier/baseline_db.h"
#include "verifier/harness_client.h"
#include "verifier/operator_hash.h"

#include <fcntl.h>

#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

/*
 * The baseline cache's bot side (verifier/baseline_db.h, baseline_cache.h):
 * filing and returning the judge's figures per operator content and key.
 * The harness side and the whole round trip: tests/python/test_baseline_cache.py.
 */

struct fixture {
	char dir[64];
	char state_dir[96];
	char op[96];
	struct kb_config cfg;
	struct kb_verifier vf;   /* only cfg and the state store are used */
};

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static int setup(void **ctx)
{
	struct fixture *f = xcalloc(1, sizeof(*f));

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	kb_strlcpy(f->dir, "/tmp/kb-test-baselines-XXXXXX", sizeof(f->dir));
	assert_non_null(mkdtemp(f->dir));
	xsnprintf(f->state_dir, sizeof(f->state_dir), "%s/state", f->dir);
	xsnprintf(f->op, sizeof(f->op), "%s/op.py", f->dir);
	write_file(f->op, "class Model: pass\n");
	kb_config_init(&f->cfg);
	free(f->cfg.state_dir);
	f->cfg.state_dir = xstrdup(f->state_dir);
	f->vf.cfg = &f->cfg;
	*ctx = f;
	return 0;
}

static int teardown(void **ctx)
{
	struct fixture *f = *ctx;

	kb_state_close(f->vf.st);
	kb_config_release(&f->cfg);
	kb_rm_rf(f->dir);
	free(f);
	return 0;
}

/* [{"key": key, "figures": {"eager": {"median_ms": ms}}}] */
static cJSON *measured(const char *key, double ms)
{
	cJSON *arr = cJSON_CreateArray(), *e = cJSON_CreateObject();
	cJSON *fig = cJSON_AddObjectToObject(e, "figures");

	cJSON_AddStringToObject(e, "key", key);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(fig, "eager"), "median_ms", ms);
	cJSON_AddItemToArray(arr, e);
	return arr;
}

static double eager_ms(const cJSON *entry)
{
	const cJSON *fig = cJSON_GetObjectItemCaseSensitive(entry, "figures");

	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(fig, "eager"),
						"median_ms")->valuedouble;
}

/* Entries are filed per operator hash and key; a key measured again replaces its figures. */
static void test_put_get_upsert(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st;
	cJSON *m, *got;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	m = measured("k1", 2.5);
	assert_int_equal(kb_baseline_cache_put(st, "aaaa", m), 0);
	cJSON_Delete(m);
	m = measured("k2", 4.0);
	assert_int_equal(kb_baseline_cache_put(st, "aaaa", m), 0);
	cJSON_Delete(m);
	m = measured("k1", 3.0);
	assert_int_equal(kb_baseline_cache_put(st, "aaaa", m), 0);
	cJSON_Delete(m);

	got = kb_baseline_cache_get(st, "aaaa");
	assert_int_equal(cJSON_GetArraySize(got), 2);
	for (int i = 0; i < 2; i++) {
		const cJSON *e = cJSON_GetArrayItem(got, i);
		const char *k = cJSON_GetObjectItemCaseSensitive(e, "key")->valuestring;

		assert_true(eager_ms(e) == (strcmp(k, "k1") ? 4.0 : 3.0));
		assert_true(cJSON_GetObjectItemCaseSensitive(e, "age_s")->valuedouble >= 0);
	}
	cJSON_Delete(got);
	/* another operator's content sees none of them */
	got = kb_baseline_cache_get(st, "bbbb");
	assert_int_equal(cJSON_GetArraySize(got), 0);
	cJSON_Delete(got);
	kb_state_close(st);
}

/* A row that is not an object of figures is left out; entries without a key are not stored. */
static void test_bad_rows_and_entries_skipped(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st;
	cJSON *m, *got, *bad;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	assert_int_equal(kb_state_exec(st, "INSERT INTO baselines VALUES ('aaaa', 'forged', '[1, 2]', 0)"), 0);
	m = measured("good", 1.0);
	bad = cJSON_CreateObject();
	cJSON_AddNumberToObject(bad, "key", 7);
	cJSON_AddItemToArray(m, bad);
	bad = cJSON_CreateObject();
	cJSON_AddStringToObject(bad, "key", "no-figures");
	cJSON_AddStringToObject(bad, "figures", "fast");
	cJSON_AddItemToArray(m, bad);
	assert_int_equal(kb_baseline_cache_put(st, "aaaa", m), 0);
	cJSON_Delete(m);

	got = kb_baseline_cache_get(st, "aaaa");
	assert_non_null(got);
	assert_int_equal(cJSON_GetArraySize(got), 1);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(got, 0), "key")->valuestring,
			    "good");
	cJSON_Delete(got);
	kb_state_close(st);
}

/*
 * Around an evaluation: the request carries the operator's entries; the
 * judge's fresh figures are filed only from a verified evidence, and
 * never stay in it. An edited operator finds none.
 */
static void test_request_and_keep(void **ctx)
{
	struct fixture *f = *ctx;
	char hash[65], hash2[65];
	cJSON *req = cJSON_CreateObject(), *ev;
	const cJSON *entries;

	assert_int_equal(kb_baseline_cache_request(&f->vf, f->op, req, hash), 0);
	assert_int_equal(strlen(hash), 64);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(req, "baseline_cache")), 0);

	/* rejected: nothing filed, the field removed all the same */
	ev = cJSON_Parse("{\"verdict\": \"rejected\"}");
	cJSON_AddItemToObject(ev, "baselines_measured", measured("k", 1.5));
	kb_baseline_cache_keep(&f->vf, hash, ev);
	assert_false(cJSON_HasObjectItem(ev, "baselines_measured"));
	cJSON_Delete(ev);
	ev = cJSON_Parse("{\"verdict\": \"verified\"}");
	cJSON_AddItemToObject(ev, "baselines_measured", measured("k", 2.5));
	kb_baseline_cache_keep(&f->vf, hash, ev);
	assert_false(cJSON_HasObjectItem(ev, "baselines_measured"));
	cJSON_Delete(ev);

	assert_int_equal(kb_baseline_cache_request(&f->vf, f->op, req, hash), 0);
	entries = cJSON_GetObjectItemCaseSensitive(req, "baseline_cache");
	assert_int_equal(cJSON_GetArraySize(entries), 1);
	assert_true(eager_ms(cJSON_GetArrayItem(entries, 0)) == 2.5);

	write_file(f->op, "class Model: pass\n# edited\n");
	assert_int_equal(kb_baseline_cache_request(&f->vf, f->op, req, hash2), 0);
	assert_string_not_equal(hash, hash2);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(req, "baseline_cache")), 0);
	cJSON_Delete(req);
}

/* No state store: the request goes without a cache, and nothing fails. */
static void test_no_store_no_cache(void **ctx)
{
	struct fixture *f = *ctx;
	char hash[65];
	cJSON *req = cJSON_CreateObject();

	write_file(f->state_dir, "a file where the state dir should be\n");
	assert_int_equal(kb_baseline_cache_request(&f->vf, f->op, req, hash), -1);
	assert_false(cJSON_HasObjectItem(req, "baseline_cache"));
	assert_true(f->vf.st_tried);
	/* tried once per verifier */
	assert_int_equal(kb_baseline_cache_request(&f->vf, f->op, req, hash), -1);
	cJSON_Delete(req);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_put_get_upsert, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_rows_and_entries_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_and_keep, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_store_no_cache, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
