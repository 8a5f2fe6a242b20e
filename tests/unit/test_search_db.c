/*
 * The search's store (bot/search/search_db.c) on a real SQLite file:
 * keys, create / find / resume, candidate dedupe, archive, prompts and
 * history round trips, a generation rolled back with its transaction.
 * Also the pure pieces the search driver owns: the prompt renderer, the
 * prompt template files, the soft verifiers' verdict parsing and their
 * precision / recall.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/state.h"
#include "core/state_priv.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "llm/llm.h"
#include "llm/usage.h"
#include "search/archive.h"
#include "search/llm_verifiers.h"
#include "search/metaprompt.h"
#include "search/search_db.h"
#include "search/search_prompts.h"

#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

struct fixture {
	char dir[64];
	char state_dir[96];
	struct kb_state *st;
};

static int setup(void **ctx)
{
	struct fixture *f = xcalloc(1, sizeof(*f));

	kb_strlcpy(f->dir, "/tmp/kb-test-srchdb-XXXXXX", sizeof(f->dir));
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	xsnprintf(f->state_dir, sizeof(f->state_dir), "%s/state", f->dir);
	if (kb_state_open(&f->st, f->state_dir)) {
		kb_rm_rf(f->dir);
		free(f);
		return -1;
	}
	*ctx = f;
	return 0;
}

static int teardown(void **ctx)
{
	struct fixture *f = *ctx;

	kb_state_close(f->st);
	kb_rm_rf(f->dir);
	free(f);
	return 0;
}

static int64_t sql_int(struct kb_state *st, const char *sql)
{
	sqlite3_stmt *stmt;
	int64_t v = -1;

	if (sqlite3_prepare_v2(kb_state_db(st), sql, -1, &stmt, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return v;
}

/* A running search of key; its id. */
static int64_t new_search(struct kb_state *st, const char *key, uint64_t seed)
{
	struct kb_search_row r = { 0 };
	int64_t id;

	r.key = xstrdup(key);
	r.operator_path = xstrdup("tests/operators/kb_relu.py");
	r.backend = xstrdup("cpu");
	r.pass = xstrdup("forward");
	r.seed = seed;
	r.rng = seed ^ 77;
	assert_int_equal(kb_search_db_create(st, &r), 0);
	assert_true(r.id > 0);
	assert_string_equal(r.state, "running");
	id = r.id;
	kb_search_row_release(&r);
	return id;
}

/* --- keys --- */

static void test_keys(void **ctx)
{
	struct kb_config cfg;
	struct kb_llm_model_cfg m = { 0 };
	struct strbuf key = STRBUF_INIT, ck = STRBUF_INIT, fresh = STRBUF_INIT;
	char s1[17], s2[17], s3[17], s4[17], cb1[17], cb2[17];

	(void)ctx;
	kb_config_init(&cfg);
	kb_search_settings_hash(&cfg, s1);
	assert_int_equal(strlen(s1), 16);
	/* a budget is not part of the identity: a bigger budget resumes the same search */
	cfg.search_job_budget_usd = 123;
	kb_search_settings_hash(&cfg, s2);
	assert_string_equal(s1, s2);
	/* the search's shape is */
	cfg.search_islands += 1;
	kb_search_settings_hash(&cfg, s3);
	assert_string_not_equal(s1, s3);
	cfg.search_islands -= 1;
	/* and so are the models */
	m.name = (char *)"sim";
	m.model = (char *)"sim-1";
	m.base_url = (char *)"http://127.0.0.1:1/v1";
	m.reasoning_effort = (char *)"";
	m.weight = 1;
	m.temperature = NAN;
	cfg.llm_models = &m;
	cfg.nr_llm_models = 1;
	kb_search_settings_hash(&cfg, s4);
	assert_string_not_equal(s1, s4);
	cfg.llm_models = NULL;
	cfg.nr_llm_models = 0;
	kb_config_release(&cfg);

	kb_search_key(&key, "abc", "cpu", "forward", s1, 42);
	strbuf_addf(&ck, "srch/1|abc|cpu|forward|%s|42", s1);
	assert_string_equal(key.buf, ck.buf);
	/* a fresh search of the same seed asks under the same call keys (replay) */
	strbuf_addf(&fresh, "%s|fresh-3", key.buf);
	kb_search_call_base(key.buf, cb1);
	kb_search_call_base(fresh.buf, cb2);
	assert_string_equal(cb1, cb2);
	strbuf_reset(&ck);
	kb_search_call_key(&ck, cb1, 2, 1, 3, "mutate", 0);
	strbuf_reset(&key);
	strbuf_addf(&key, "%s/g2/i1/k3/mutate/a0", cb1);
	assert_string_equal(ck.buf, key.buf);
	/* another seed: other keys */
	strbuf_reset(&key);
	kb_search_key(&key, "abc", "cpu", "forward", s1, 43);
	kb_search_call_base(key.buf, cb2);
	assert_string_not_equal(cb1, cb2);
	strbuf_release(&key);
	strbuf_release(&ck);
	strbuf_release(&fresh);
}

/* --- searches --- */

/* Every [search] key the config table has, each set in turn to another value. */
struct search_keys {
	char path[96];
	char base[17];
	int keys, hashed;
};

/* A value for e other than its default, as the config file writes it. */
static void other_value(struct strbuf *out, const struct kb_config_entry *e)
{
	switch (e->type) {
	case KB_CONFIG_TEXT:
		strbuf_addf(out, "%sx", e->text);
		break;
	case KB_CONFIG_INT:
		strbuf_addf(out, "%lld", (long long)e->i + 1);
		break;
	case KB_CONFIG_DOUBLE:
		strbuf_addf(out, "%.9g", e->d > 0 ? e->d / 2 : 0.5);
		break;
	case KB_CONFIG_BOOL:
		strbuf_addstr(out, e->b ? "off" : "on");
		break;
	}
}

static void check_search_key(const struct kb_config_entry *e, void *payload)
{
	struct search_keys *sk = payload;
	struct strbuf ini = STRBUF_INIT;
	struct kb_config cfg;
	char h[17];

	strbuf_addf(&ini, "[search]\n%s = ", e->key);
	other_value(&ini, e);
	strbuf_addch(&ini, '\n');
	assert_int_equal(kb_write_file_atomic(sk->path, ini.buf, ini.len), 0);
	assert_int_equal(kb_config_load(&cfg, sk->path), 0);
	kb_search_settings_hash(&cfg, h);
	if (kb_search_setting_resumable(e->key)) {
		assert_string_equal(h, sk->base);
	} else {
		if (!strcmp(h, sk->base))
			fail_msg("[search] %s is not part of the settings hash", e->key);
		sk->hashed++;
	}
	sk->keys++;
	kb_config_release(&cfg);
	strbuf_release(&ini);
}

/*
 * The settings hash comes from the config table: every [search] key there
 * changes it except the few a resumed search may change, so a key added
 * to the table is covered (or this test names it).
 */
static void test_settings_hash_covers_search_keys(void **ctx)
{
	struct search_keys sk = { .keys = 0 };
	struct kb_config cfg;
	char dir[64];

	(void)ctx;
	kb_strlcpy(dir, "/tmp/kb-test-srchkeys-XXXXXX", sizeof(dir));
	assert_non_null(mkdtemp(dir));
	xsnprintf(sk.path, sizeof(sk.path), "%s/config.ini", dir);
	kb_config_init(&cfg);
	kb_search_settings_hash(&cfg, sk.base);
	kb_config_foreach(&cfg, "search", check_search_key, &sk);
	kb_config_release(&cfg);
	kb_rm_rf(dir);
	/* the table's [search] keys, budgets and seed aside */
	assert_true(sk.keys >= 19);
	assert_int_equal(sk.keys - sk.hashed, 3);
}

static void test_create_find_resume(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_search_row r;
	struct strbuf key = STRBUF_INIT;
	cJSON *info;
	int64_t id = new_search(f->st, "srch/1|a|cpu|forward|s|1", 1);

	assert_int_equal(kb_search_db_find(f->st, "srch/1|a|cpu|forward|s|2", &r), KB_ENOTFOUND);
	kb_search_row_release(&r);
	assert_int_equal(kb_search_db_find(f->st, "srch/1|a|cpu|forward|s|1", &r), 0);
	assert_int_equal(r.id, id);
	assert_string_equal(r.state, "running");
	assert_int_equal(r.generation, 0);
	assert_true(r.rng == (1 ^ 77));

	/* the end of a generation */
	r.generation = 3;
	r.rng = 0xfedcba9876543210ULL; /* above 2^63: stored as its bits */
	r.best_candidate_id = 0;
	r.wall_s = 12.5;
	assert_int_equal(kb_search_db_checkpoint(f->st, &r), 0);
	kb_search_row_release(&r);
	assert_int_equal(kb_search_db_find(f->st, "srch/1|a|cpu|forward|s|1", &r), 0);
	assert_int_equal(r.generation, 3);
	assert_true(r.rng == 0xfedcba9876543210ULL);
	assert_true(fabs(r.wall_s - 12.5) < 1e-9);
	assert_int_equal(r.finished_at, 0);
	kb_search_row_release(&r);

	/* done, with its result */
	info = cJSON_CreateObject();
	cJSON_AddStringToObject(info, "outcome", "ok");
	assert_int_equal(kb_search_db_set_state(f->st, id, "done", info, 20), 0);
	cJSON_Delete(info);
	assert_int_equal(kb_search_db_find(f->st, "srch/1|a|cpu|forward|s|1", &r), 0);
	assert_string_equal(r.state, "done");
	assert_true(r.finished_at > 0);
	assert_string_equal(cJSON_GetObjectItem(r.info, "outcome")->valuestring, "ok");
	kb_search_row_release(&r);
	/* info NULL keeps the stored one; running clears finished_at */
	assert_int_equal(kb_search_db_set_state(f->st, id, "running", NULL, 21), 0);
	assert_int_equal(kb_search_db_find(f->st, "srch/1|a|cpu|forward|s|1", &r), 0);
	assert_non_null(r.info);
	assert_int_equal(r.finished_at, 0);
	kb_search_row_release(&r);
	assert_int_equal(kb_search_db_set_state(f->st, id + 100, "done", NULL, 0), -1);

	/* --fresh: the first unused suffix */
	assert_int_equal(kb_search_db_fresh_key(f->st, "srch/1|a|cpu|forward|s|1", &key), 0);
	assert_string_equal(key.buf, "srch/1|a|cpu|forward|s|1|fresh-1");
	new_search(f->st, key.buf, 1);
	strbuf_reset(&key);
	assert_int_equal(kb_search_db_fresh_key(f->st, "srch/1|a|cpu|forward|s|1", &key), 0);
	assert_string_equal(key.buf, "srch/1|a|cpu|forward|s|1|fresh-2");
	/* the key is unique */
	{
		struct kb_search_row dup = { 0 };

		dup.key = xstrdup("srch/1|a|cpu|forward|s|1");
		assert_int_equal(kb_search_db_create(f->st, &dup), -1);
		kb_search_row_release(&dup);
	}
	strbuf_release(&key);
}

/* --- candidates --- */

static struct kb_search_cand *cand(const char *hash, const char *source, const char *key)
{
	struct kb_search_cand *c = xmalloc(sizeof(*c));

	kb_search_cand_init(c);
	kb_strlcpy(c->hash, hash, sizeof(c->hash));
	c->source = xstrdup(source);
	c->proposer = xstrdup("translate");
	c->model = xstrdup("sim");
	c->call_key = key ? xstrdup(key) : NULL;
	c->backend = xstrdup("cpu");
	c->generation = 1;
	c->island = 1;
	return c;
}

static void test_candidates(void **ctx)
{
	struct fixture *f = *ctx;
	int64_t id = new_search(f->st, "k1", 1), other = new_search(f->st, "k2", 2);
	struct kb_search_cand *a = cand("h1", "int kb_forward;", "cb/g0/i0/k0/translate/a0");
	struct kb_search_cand *b = cand("h1", "int  kb_forward ;", "cb/g1/i0/k0/mutate/a0");
	struct kb_search_cand *c = cand("h2", "other", NULL);
	struct kb_search_cand **all;
	struct kb_search_cand got;
	size_t n;

	assert_int_equal(kb_search_db_cand_insert(f->st, id, a), 0);
	assert_true(a->id > 0);
	/* the same normalised source again: a duplicate, nothing written */
	assert_int_equal(kb_search_db_cand_insert(f->st, id, b), KB_EEXISTS);
	assert_int_equal(b->id, a->id);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM candidates"), 1);
	/* but another search may hold it */
	assert_int_equal(kb_search_db_cand_insert(f->st, other, b), 0);
	assert_true(b->id != a->id);
	assert_int_equal(kb_search_db_cand_insert(f->st, id, c), 0);

	/* an outcome */
	kb_strlcpy(a->verdict, "verified", sizeof(a->verdict));
	a->speedup = 1.75;
	a->cell = 21;
	a->evidence = cJSON_Parse("{\"verdict\":\"verified\",\"summary\":{\"geomean_speedup_eager\":1.75}}");
	a->build_info = cJSON_Parse("{\"registers\":32}");
	a->verifiers = cJSON_Parse("{\"pass\":true,\"compile\":{\"verdict\":\"PASS\"}}");
	a->reasons = cJSON_CreateArray();
	assert_int_equal(kb_search_db_cand_update(f->st, a), 0);

	kb_search_cand_init(&got);
	assert_int_equal(kb_search_db_cand_get(f->st, a->id, &got), 0);
	assert_string_equal(got.verdict, "verified");
	assert_true(fabs(got.speedup - 1.75) < 1e-12);
	assert_true(isnan(got.speedup_compile));
	assert_int_equal(got.cell, 21);
	assert_string_equal(got.source, "int kb_forward;");
	assert_string_equal(got.call_key, "cb/g0/i0/k0/translate/a0");
	assert_string_equal(got.model, "sim");
	assert_int_equal(got.generation, 1);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(got.verifiers, "pass")));
	assert_int_equal(cJSON_GetObjectItem(got.build_info, "registers")->valueint, 32);
	kb_search_cand_release(&got);
	assert_int_equal(kb_search_db_cand_get(f->st, 9999, &got), KB_ENOTFOUND);
	kb_search_cand_release(&got);

	/* a resumed search loads its own, in id order; unmeasured stays NAN, no cell is -1 */
	assert_int_equal(kb_search_db_cands_load(f->st, id, &all, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(all[0]->id, a->id);
	assert_int_equal(all[1]->id, c->id);
	assert_string_equal(all[1]->verdict, "pending");
	assert_true(isnan(all[1]->speedup));
	assert_int_equal(all[1]->cell, -1);
	assert_null(all[1]->call_key);
	for (size_t i = 0; i < n; i++)
		kb_search_cand_free(all[i]);
	free(all);

	/* a bad cell is refused by the schema */
	c->cell = 64;
	assert_int_equal(kb_search_db_cand_update(f->st, c), -1);
	kb_search_cand_free(a);
	kb_search_cand_free(b);
	kb_search_cand_free(c);
}

/* --- archive --- */

static void test_archive_round_trip(void **ctx)
{
	struct fixture *f = *ctx;
	int64_t id = new_search(f->st, "k", 1), ids[4];
	struct kb_archive a, b;

	for (int i = 0; i < 4; i++) {
		char h[8], src[16];
		struct kb_search_cand *c;

		xsnprintf(h, sizeof(h), "h%d", i);
		xsnprintf(src, sizeof(src), "src %d", i);
		c = cand(h, src, NULL);
		assert_int_equal(kb_search_db_cand_insert(f->st, id, c), 0);
		ids[i] = c->id;
		kb_search_cand_free(c);
	}
	assert_int_equal(kb_archive_init(&a, 2), 0);
	assert_int_equal(kb_archive_offer(&a, 0, 5, ids[0], 1.5), 1);
	assert_int_equal(kb_archive_offer(&a, 0, 5, ids[1], 2.5), 1);
	assert_int_equal(kb_archive_offer(&a, 1, 63, ids[2], 0.5), 1);
	assert_int_equal(kb_archive_offer(&a, 1, 0, ids[3], 3.25), 1);
	a.cells[5].chosen = 7;
	assert_int_equal(kb_search_db_archive_save(f->st, id, &a), 0);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM archive_cells"), 3);

	assert_int_equal(kb_archive_init(&b, 2), 0);
	assert_int_equal(kb_search_db_archive_load(f->st, id, &b), 0);
	for (size_t i = 0; i < 2 * KB_BEHAVIOR_CELLS; i++) {
		assert_int_equal(a.cells[i].candidate_id, b.cells[i].candidate_id);
		assert_true(a.cells[i].fitness == b.cells[i].fitness);
		assert_int_equal(a.cells[i].chosen, b.cells[i].chosen);
	}
	assert_int_equal(b.cells[5].candidate_id, ids[1]);
	assert_int_equal(b.cells[5].chosen, 7);
	kb_archive_release(&b);

	/* saving replaces: a cell emptied in memory is gone from the store */
	memset(&a.cells[KB_BEHAVIOR_CELLS + 63], 0, sizeof(a.cells[0]));
	assert_int_equal(kb_search_db_archive_save(f->st, id, &a), 0);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM archive_cells"), 2);
	/* an archive with fewer islands skips the others' cells */
	assert_int_equal(kb_archive_init(&b, 1), 0);
	assert_int_equal(kb_search_db_archive_load(f->st, id, &b), 0);
	assert_int_equal(kb_archive_filled(&b, SIZE_MAX), 1);
	kb_archive_release(&b);
	kb_archive_release(&a);
}

/* --- prompts and history --- */

static void test_prompts_history_usage(void **ctx)
{
	struct fixture *f = *ctx;
	int64_t id = new_search(f->st, "k", 1);
	struct kb_prompt p, *all;
	struct kb_llm_call_info info = { .search_id = id, .call_key = "cb/g0/i0/k0/translate/a0" };
	struct kb_llm_reply reply;
	struct kb_llm_usage t;
	cJSON *hist;
	size_t n;

	kb_prompt_init(&p);
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++)
		p.sections[i] = xstrdup(kb_prompt_section_names[i]);
	p.fitness = NAN;
	assert_int_equal(kb_search_db_prompt_insert(f->st, id, 0, &p), 0);
	assert_true(p.id > 0);
	p.uses = 4;
	p.fitness = 2.5;
	assert_int_equal(kb_search_db_prompt_update(f->st, &p), 0);
	assert_int_equal(kb_search_db_prompts_load(f->st, id, &all, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(all[0].id, p.id);
	assert_int_equal(all[0].uses, 4);
	assert_true(all[0].fitness == 2.5);
	assert_string_equal(all[0].sections[1], "pitfalls");
	kb_prompt_release(&all[0]);
	free(all);
	kb_prompt_release(&p);

	assert_int_equal(kb_search_db_history_add(f->st, id, 2.0, 1.5, 0), 0);
	assert_int_equal(kb_search_db_history_add(f->st, id, 1.0, 1.25, 0), 0);
	hist = kb_search_db_history(f->st, id);
	assert_int_equal(cJSON_GetArraySize(hist), 2);
	assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(hist, 0), "t_s")->valuedouble == 1.0);
	assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(hist, 1), "speedup")->valuedouble == 1.5);
	cJSON_Delete(hist);

	/* usage: one ok call and one failed call of this search */
	kb_llm_reply_init(&reply);
	reply.status = KB_LLM_OK;
	strbuf_addstr(&reply.text, "```cpp\nint x;\n```");
	reply.prompt_tokens = 100;
	reply.completion_tokens = 20;
	reply.cost_usd = 0.25;
	kb_strlcpy(reply.model, "sim", sizeof(reply.model));
	assert_int_equal(kb_llm_usage_record(f->st, &info, &reply, NULL), 0);
	reply.status = KB_LLM_RATE_LIMITED;
	reply.prompt_tokens = reply.completion_tokens = 0;
	reply.cost_usd = 0;
	info.call_key = "cb/g0/i0/k1/translate/a0";
	assert_int_equal(kb_llm_usage_record(f->st, &info, &reply, NULL), 0);
	kb_llm_reply_release(&reply);
	assert_int_equal(kb_llm_usage_search(f->st, id, &t), 0);
	assert_int_equal(t.calls, 2);
	assert_int_equal(t.failed, 1);
	assert_int_equal(t.prompt_tokens, 100);
	assert_int_equal(t.completion_tokens, 20);
	assert_true(fabs(t.cost_usd - 0.25) < 1e-12);
	/* replay: the ok answer is found by its key alone */
	kb_llm_reply_init(&reply);
	assert_int_equal(kb_llm_usage_lookup(f->st, "cb/g0/i0/k0/translate/a0", &reply), 0);
	assert_string_equal(reply.text.buf, "```cpp\nint x;\n```");
	assert_int_equal(kb_llm_usage_lookup(f->st, "cb/g0/i0/k1/translate/a0", &reply), KB_ENOTFOUND);
	kb_llm_reply_release(&reply);
	/* a rate limit is the network's: asked again; an empty reply is the model's answer: kept */
	{
		struct strbuf status = STRBUF_INIT, err = STRBUF_INIT;

		assert_int_equal(kb_search_db_call_failure(f->st, "cb/g0/i0/k1/translate/a0", &status, &err),
				 KB_ENOTFOUND);
		kb_llm_reply_init(&reply);
		reply.status = KB_LLM_EMPTY;
		strbuf_addstr(&reply.error, "empty reply");
		info.call_key = "cb/g0/i0/k2/translate/a0";
		assert_int_equal(kb_llm_usage_record(f->st, &info, &reply, NULL), 0);
		kb_llm_reply_release(&reply);
		assert_int_equal(kb_search_db_call_failure(f->st, "cb/g0/i0/k2/translate/a0", &status, &err), 0);
		assert_string_equal(status.buf, "empty");
		assert_string_equal(err.buf, "empty reply");
		strbuf_release(&status);
		strbuf_release(&err);
	}
}

/* A generation is stored whole or not at all: a kill before the commit leaves the previous one. */
static void test_generation_rollback(void **ctx)
{
	struct fixture *f = *ctx;
	int64_t id = new_search(f->st, "k", 9);
	struct kb_search_row r;
	struct kb_search_cand *c = cand("h", "s", NULL);
	struct kb_archive a;

	assert_int_equal(kb_search_db_cand_insert(f->st, id, c), 0);
	assert_int_equal(kb_archive_init(&a, 1), 0);
	assert_int_equal(kb_archive_offer(&a, 0, 3, c->id, 1.1), 1);
	assert_int_equal(kb_search_db_find(f->st, "k", &r), 0);

	assert_int_equal(kb_state_begin(f->st), 0);
	assert_int_equal(kb_search_db_archive_save(f->st, id, &a), 0);
	r.generation = 1;
	assert_int_equal(kb_search_db_checkpoint(f->st, &r), 0);
	assert_int_equal(kb_search_db_history_add(f->st, id, 1, 1.1, c->id), 0);
	assert_int_equal(kb_state_rollback(f->st), 0);
	kb_search_row_release(&r);

	assert_int_equal(kb_search_db_find(f->st, "k", &r), 0);
	assert_int_equal(r.generation, 0);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM archive_cells"), 0);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM search_history"), 0);
	/* the candidate was stored on its own: a resumed run finds it by source */
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM candidates"), 1);

	/* committed, it is there */
	assert_int_equal(kb_state_begin(f->st), 0);
	assert_int_equal(kb_search_db_archive_save(f->st, id, &a), 0);
	r.generation = 1;
	assert_int_equal(kb_search_db_checkpoint(f->st, &r), 0);
	assert_int_equal(kb_state_commit(f->st), 0);
	kb_search_row_release(&r);
	assert_int_equal(kb_search_db_find(f->st, "k", &r), 0);
	assert_int_equal(r.generation, 1);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM archive_cells"), 1);
	kb_search_row_release(&r);
	kb_archive_release(&a);
	kb_search_cand_free(c);
}

/* --- the record: prompt texts, migrations, diagnoses (schema v7) --- */

static void test_record(void **ctx)
{
	struct fixture *f = *ctx;
	int64_t id = new_search(f->st, "k", 9), other = new_search(f->st, "k2", 9);
	struct kb_search_cand *c = cand("h", "s", NULL);
	struct kb_migration m = { .from = 1, .to = 0, .cell = 5, .fitness = 2.5, .accepted = true };
	struct strvec texts = STRVEC_INIT;
	struct strbuf big = STRBUF_INIT;
	int64_t *ids = NULL, d[4];

	assert_int_equal(kb_search_db_cand_insert(f->st, id, c), 0);
	/* a prompt: redacted, the first text of a key stays */
	assert_int_equal(kb_search_db_prompt_text_add(f->st, id, "cb/g0/i0/k0/translate/a0", "translate",
						      "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 here"), 0);
	assert_int_equal(kb_search_db_prompt_text_add(f->st, id, "cb/g0/i0/k0/translate/a0", "translate",
						      "another text"), 0);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM search_prompt_texts"), 1);
	assert_int_equal(sql_int(f->st, "SELECT instr(text, 'ghp_') FROM search_prompt_texts"), 0);
	assert_int_equal(sql_int(f->st, "SELECT instr(text, 'here') > 0 FROM search_prompt_texts"), 1);
	/* a long one is capped, its length kept */
	for (int i = 0; i < 10000; i++)
		strbuf_addstr(&big, "0123456789");
	assert_int_equal(kb_search_db_prompt_text_add(f->st, id, "cb/g1/i0/k0/mutate/a0", "mutate", big.buf), 0);
	assert_int_equal(sql_int(f->st, "SELECT length FROM search_prompt_texts WHERE purpose = 'mutate'"), 100000);
	assert_true(sql_int(f->st, "SELECT length(text) FROM search_prompt_texts WHERE purpose = 'mutate'") <=
		    KB_SEARCH_PROMPT_TEXT_MAX);

	/* a migration; a rerun of its generation replaces it */
	m.candidate_id = c->id;
	assert_int_equal(kb_search_db_migration_add(f->st, id, 2, &m), 0);
	m.accepted = false;
	assert_int_equal(kb_search_db_migration_add(f->st, id, 2, &m), 0);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM search_migrations"), 1);
	assert_int_equal(sql_int(f->st, "SELECT from_island * 100 + to_island * 10 + accepted FROM search_migrations"
				 " WHERE generation = 2 AND cell = 5"), 100);
	assert_int_equal(sql_int(f->st, "SELECT candidate_id FROM search_migrations"), c->id);

	/* diagnoses: stored not pending; the commit marks the ones still waiting */
	assert_int_equal(kb_search_db_diagnosis_add(f->st, id, 1, c->id, "kernel #1: build: error", &d[0]), 0);
	assert_int_equal(kb_search_db_diagnosis_add(f->st, id, 1, 0, "a reply had no kernel", &d[1]), 0);
	assert_int_equal(kb_search_db_diagnosis_add(f->st, id, 2, 0, "call failed", &d[2]), 0);
	assert_int_equal(kb_search_db_diagnosis_add(f->st, other, 1, 0, "other search", &d[3]), 0);
	assert_true(d[0] > 0 && d[1] > d[0] && d[2] > d[1]);
	assert_int_equal(kb_search_db_diagnoses_load(f->st, id, 0, &texts, &ids), 0);
	assert_int_equal(texts.nr, 0);
	assert_int_equal(kb_search_db_diagnoses_mark(f->st, other, &d[3], 1), 0);
	assert_int_equal(kb_search_db_diagnoses_mark(f->st, id, d, 2), 0);
	assert_int_equal(kb_search_db_diagnoses_mark(f->st, id, &d[1], 2), 0); /* a rewrite took d[0] */
	assert_int_equal(kb_search_db_diagnoses_load(f->st, id, 0, &texts, &ids), 0);
	assert_int_equal(texts.nr, 2);
	assert_string_equal(texts.v[0], "a reply had no kernel");
	assert_string_equal(texts.v[1], "call failed");
	assert_true(ids[0] == d[1] && ids[1] == d[2]);
	/* by candidate: pending or not */
	assert_int_equal(kb_search_db_diagnoses_load(f->st, id, c->id, &texts, &ids), 0);
	assert_int_equal(texts.nr, 3);
	assert_string_equal(texts.v[2], "kernel #1: build: error");
	assert_int_equal(ids[2], d[0]);
	assert_int_equal(sql_int(f->st, "SELECT pending FROM search_diagnoses WHERE text = 'other search'"), 1);

	strvec_clear(&texts);
	free(ids);
	strbuf_release(&big);
	kb_search_cand_free(c);
}

/* A database of schema v6 gets the record's tables, and keeps its searches. */
static void test_record_migration(void **ctx)
{
	struct fixture *f = *ctx;
	int64_t id = new_search(f->st, "old", 3), d;

	assert_int_equal(kb_state_exec(f->st, "DROP TABLE search_prompt_texts; DROP TABLE search_migrations;"
				       " DROP TABLE search_diagnoses; PRAGMA user_version = 6"), 0);
	kb_state_close(f->st);
	f->st = NULL;
	assert_int_equal(kb_state_open(&f->st, f->state_dir), 0);
	assert_true(kb_state_schema_version(f->st) >= 7);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM searches WHERE key = 'old'"), 1);
	assert_int_equal(kb_search_db_diagnosis_add(f->st, id, 0, 0, "after the upgrade", &d), 0);
	assert_int_equal(kb_search_db_diagnoses_mark(f->st, id, &d, 1), 0);
	assert_int_equal(kb_search_db_prompt_text_add(f->st, id, "cb/g0/i0/k0/translate/a0", "translate", "p"), 0);
	assert_int_equal(sql_int(f->st, "SELECT count(*) FROM search_diagnoses WHERE pending = 1") +
			 sql_int(f->st, "SELECT count(*) FROM search_prompt_texts") +
			 sql_int(f->st, "SELECT count(*) FROM search_migrations"), 2);
}

/* --- prompt rendering --- */

static void test_render(void **ctx)
{
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf out = STRBUF_INIT, why = STRBUF_INIT;

	(void)ctx;
	kb_prompt_var(&v, "name", "relu");
	kb_prompt_var(&v, "code", "a {{b}} c");
	kb_prompt_var(&v, "empty", "");
	kb_prompt_varf(&v, "n", "%d", 3);
	kb_prompt_var(&v, "name", "softmax"); /* replaced */
	assert_string_equal(kb_prompt_var_get(&v, "name"), "softmax");
	assert_null(kb_prompt_var_get(&v, "nope"));

	assert_int_equal(kb_prompt_render("op {{name}} x{{n}}: {{code}}", &v, &out, &why), 0);
	assert_string_equal(out.buf, "op softmax x3: a {{b}} c");
	strbuf_reset(&out);
	/* sections: shown when set and not empty; tag lines take their newline along */
	assert_int_equal(kb_prompt_render("a\n{{#name}}\nN={{name}}\n{{/name}}\n{{#empty}}\nE\n{{/empty}}\nz", &v,
					  &out, &why), 0);
	assert_string_equal(out.buf, "a\nN=softmax\nz");
	strbuf_reset(&out);
	assert_int_equal(kb_prompt_render("{{#missing}}x{{nope}}{{/missing}}ok", &v, &out, &why), 0);
	assert_string_equal(out.buf, "ok");

	strbuf_reset(&out);
	assert_int_equal(kb_prompt_render("{{nope}}", &v, &out, &why), -1);
	assert_non_null(strstr(why.buf, "no value for '{{nope}}'"));
	strbuf_reset(&why);
	assert_int_equal(kb_prompt_render("x {{name", &v, &out, &why), -1);
	assert_non_null(strstr(why.buf, "unclosed"));
	strbuf_reset(&why);
	assert_int_equal(kb_prompt_render("{{#name}}x", &v, &out, &why), -1);
	assert_non_null(strstr(why.buf, "not closed"));
	strbuf_reset(&why);
	assert_int_equal(kb_prompt_render("{{#name}}x{{/code}}", &v, &out, &why), -1);
	strbuf_reset(&why);
	assert_int_equal(kb_prompt_render("{{Bad Name}}", &v, &out, &why), -1);
	kb_prompt_vars_release(&v);
	strbuf_release(&out);
	strbuf_release(&why);
}

/* Every template file renders with the variables the search gives it. */
static void test_prompt_files(void **ctx)
{
	static const char *const names[] = {
		"operator_source", "configs", "abi_header", "example", "language", "lang_tag", "file_kind",
		"compiler", "backend", "pass", "device", "format", "rules", "strategies", "pitfalls",
		"analysis", "parent_source", "parent_speedup", "parent_behavior", "parent_evidence",
		"second_source", "second_speedup", "second_behavior", "second_evidence", "resources", "hints",
		"inspirations", "direction", "candidate_source", "error", "failure_kind", "diagnoses", "id",
		"speedup", "behavior", "source", "arch", "backward",
	};
	static const char *const files[] = {
		"translate.md", "repair.md", "mutate.md", "crossover.md", "verify_compile.md",
		"verify_numerics.md", "verify_memory.md", "meta_rewrite.md", "templatize.md", "inspiration.md",
		"rules_cpu.md", "rules_cuda.md", "strategies.md", "pitfalls.md", "analysis.md",
		"example_cpu.cpp", "example_cuda.cu",
	};
	const char *top = getenv("KB_TOP") ? getenv("KB_TOP") : ".";
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf t = STRBUF_INIT, out = STRBUF_INIT, why = STRBUF_INIT;

	(void)ctx;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		kb_prompt_varf(&v, names[i], "<%s>", names[i]);
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		strbuf_reset(&t);
		strbuf_reset(&out);
		strbuf_reset(&why);
		assert_int_equal(kb_prompt_load(top, files[i], &t), 0);
		if (kb_prompt_render(t.buf, &v, &out, &why))
			fail_msg("%s: %s", files[i], why.buf);
		assert_null(strstr(out.buf, "{{"));
		/* the simulator and real models rely on these */
		if (!strncmp(files[i], "verify_", 7)) {
			assert_non_null(strstr(out.buf, "VERDICT: PASS"));
			assert_non_null(strstr(out.buf, "VERDICT: FAIL"));
			assert_non_null(strstr(out.buf, "<candidate_source>"));
		}
		if (!strcmp(files[i], "meta_rewrite.md")) {
			assert_non_null(strstr(out.buf, "\n## strategies\n"));
			assert_non_null(strstr(out.buf, "\n## pitfalls\n"));
			assert_non_null(strstr(out.buf, "\n## analysis\n"));
		}
		if (!strcmp(files[i], "translate.md") || !strcmp(files[i], "mutate.md") ||
		    !strcmp(files[i], "crossover.md") || !strcmp(files[i], "repair.md")) {
			assert_non_null(strstr(out.buf, "<operator_source>"));
			assert_null(strstr(out.buf, "VERDICT"));
			assert_null(strstr(out.buf, "## strategies"));
		}
	}
	kb_prompt_vars_release(&v);
	strbuf_release(&t);
	strbuf_release(&out);
	strbuf_release(&why);
}

/* --- soft verifiers --- */

static void test_verdicts(void **ctx)
{
	struct kb_verifier_stats s = { 0 };
	cJSON *pass = cJSON_Parse("{\"pass\": true}"), *fail = cJSON_Parse("{\"pass\": false}");

	(void)ctx;
	assert_int_equal(kb_soft_verdict_parse("looks fine\nVERDICT: PASS\n"), 1);
	assert_int_equal(kb_soft_verdict_parse("VERDICT: PASS\nbut wait\n**Verdict:** FAIL."), 0);
	assert_int_equal(kb_soft_verdict_parse("verdict: fail"), 0);
	assert_int_equal(kb_soft_verdict_parse("The VERDICT: PASS line is what I give"), -1);
	assert_int_equal(kb_soft_verdict_parse("VERDICT: PASSABLE"), -1);
	assert_int_equal(kb_soft_verdict_parse(""), -1);
	assert_string_equal(kb_soft_verifier_name(KB_SV_NUMERICS), "numerics");

	assert_true(isnan(kb_verifier_precision(&s)));
	assert_true(isnan(kb_verifier_recall(&s)));
	assert_int_equal(kb_verifier_stats_add_candidate(&s, fail, "rejected"), 1);  /* tp */
	assert_int_equal(kb_verifier_stats_add_candidate(&s, fail, "build"), 1);     /* tp */
	assert_int_equal(kb_verifier_stats_add_candidate(&s, fail, "verified"), 1);  /* fp */
	assert_int_equal(kb_verifier_stats_add_candidate(&s, pass, "rejected"), 1);  /* fn */
	assert_int_equal(kb_verifier_stats_add_candidate(&s, pass, "verified"), 1);  /* tn */
	/* no ground truth: not counted */
	assert_int_equal(kb_verifier_stats_add_candidate(&s, fail, "filtered"), 0);
	assert_int_equal(kb_verifier_stats_add_candidate(&s, pass, "error"), 0);
	assert_int_equal(kb_verifier_stats_add_candidate(&s, NULL, "verified"), 0);
	assert_int_equal(s.tp, 2);
	assert_int_equal(s.fp, 1);
	assert_int_equal(s.fn, 1);
	assert_int_equal(s.tn, 1);
	assert_true(fabs(kb_verifier_precision(&s) - 2.0 / 3) < 1e-12);
	assert_true(fabs(kb_verifier_recall(&s) - 2.0 / 3) < 1e-12);
	cJSON_Delete(pass);
	cJSON_Delete(fail);
}

/* Each verifier is scored on its own verdict; a reply with none is no prediction. */
static void test_verifier_stats_each(void **ctx)
{
	struct kb_verifier_stats num = { 0 }, mem = { 0 };
	cJSON *v = cJSON_Parse("{\"compile\": {\"verdict\": \"PASS\"}, \"numerics\": {\"verdict\": \"FAIL\"},"
			       " \"memory\": {\"verdict\": \"none\"}, \"pass\": false}");

	(void)ctx;
	assert_int_equal(kb_verifier_stats_add_one(&num, v, KB_SV_NUMERICS, "rejected"), 1); /* tp */
	assert_int_equal(kb_verifier_stats_add_one(&num, v, KB_SV_NUMERICS, "verified"), 1); /* fp */
	assert_int_equal(kb_verifier_stats_add_one(&mem, v, KB_SV_MEMORY, "rejected"), 0);   /* none */
	assert_int_equal(kb_verifier_stats_add_one(&mem, v, KB_SV_COMPILE, "rejected"), 1);  /* fn */
	assert_int_equal(kb_verifier_stats_add_one(&mem, v, KB_SV_COMPILE, "pending"), 0);
	assert_int_equal(kb_verifier_stats_add_one(&mem, NULL, KB_SV_COMPILE, "verified"), 0);
	assert_int_equal(num.tp, 1);
	assert_int_equal(num.fp, 1);
	assert_int_equal(mem.fn, 1);
	assert_int_equal(mem.tp + mem.fp + mem.tn, 0);
	cJSON_Delete(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_verifier_stats_each),
		cmocka_unit_test(test_settings_hash_covers_search_keys),
		cmocka_unit_test_setup_teardown(test_create_find_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_candidates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_archive_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prompts_history_usage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generation_rollback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_migration, setup, teardown),
		cmocka_unit_test(test_render),
		cmocka_unit_test(test_prompt_files),
		cmocka_unit_test(test_verdicts),
	};

	log_set_level(KB_LOG_OFF);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
