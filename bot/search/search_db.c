#include "core/common.h"
#include "search/search_db.h"
#include "core/config.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/state.h"
#include "core/util.h"
#include "llm/llm.h"
#include "search/archive.h"
#include "search/metaprompt.h"
#include "templates/tune.h"
#include "core/hash.h"
#include "verifier/evidence.h"

#include <math.h>

/* --- keys --- */

/* Key fields are joined with '|': keep it out of them. */
static void add_field(struct strbuf *out, const char *s)
{
	strbuf_addch(out, '|');
	for (; s && *s; s++)
		strbuf_addch(out, *s == '|' ? '/' : *s);
}

bool kb_search_setting_resumable(const char *key)
{
	static const char *const resumable[] = { "job_budget_usd", "job_budget_tokens", "seed" };

	for (size_t i = 0; i < ARRAY_SIZE(resumable); i++)
		if (!strcmp(key, resumable[i]))
			return true;
	return false;
}

/* " name=value" of one [search] key, under the names the hash has always used. */
static void hash_search_key(const struct kb_config_entry *e, void *payload)
{
	/* older, shorter names: kept so that searches stored before resume */
	static const struct { const char *key, *name; } names[] = {
		{ "llm_verifiers", "verifiers" }, { "verifier_audit", "audit" },
		{ "repair_rounds", "repair" }, { "migration_interval", "migration" },
		{ "meta_interval", "meta" },
	};
	struct strbuf *sb = payload;
	const char *name = e->key;

	if (kb_search_setting_resumable(e->key))
		return;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(e->key, names[i].key))
			name = names[i].name;
	strbuf_addf(sb, " %s=", name);
	switch (e->type) {
	case KB_CONFIG_TEXT:
		strbuf_addstr(sb, e->text);
		break;
	case KB_CONFIG_INT:
		strbuf_addf(sb, "%lld", (long long)e->i);
		break;
	case KB_CONFIG_DOUBLE:
		strbuf_addf(sb, "%.9g", e->d);
		break;
	case KB_CONFIG_BOOL:
		strbuf_addf(sb, "%d", e->b);
		break;
	}
}

void kb_search_settings_hash(const struct kb_config *cfg, char out[17])
{
	struct strbuf sb = STRBUF_INIT;
	char tune[17], hex[65];

	kb_tune_settings_hash(cfg, tune);
	strbuf_addf(&sb, "tune=%s tune_seeds=%d", tune, KB_TUNE_SEEDS);
	kb_config_foreach(cfg, "search", hash_search_key, &sb);
	strbuf_addf(&sb, " aux=%s", cfg->llm_aux_model ? cfg->llm_aux_model : "");
	for (size_t i = 0; i < cfg->nr_llm_models; i++) {
		const struct kb_llm_model_cfg *m = &cfg->llm_models[i];

		strbuf_addf(&sb, " model=%s,%s,%s,%.9g,%.9g,%s,%lld", m->name ? m->name : "",
			    kb_llm_provider_name((enum kb_llm_provider)m->provider), m->model ? m->model : "",
			    m->weight, m->temperature, m->reasoning_effort ? m->reasoning_effort : "",
			    (long long)m->max_tokens);
	}
	kb_sha256_hex(sb.buf, sb.len, hex);
	memcpy(out, hex, 16);
	out[16] = '\0';
	strbuf_release(&sb);
}

void kb_search_key(struct strbuf *out, const char *op_hash, const char *backend, const char *pass,
		   const char *settings, uint64_t seed)
{
	char n[24];

	xsnprintf(n, sizeof(n), "%llu", (unsigned long long)seed);
	strbuf_addstr(out, "srch/1");
	add_field(out, op_hash);
	add_field(out, backend);
	add_field(out, pass);
	add_field(out, settings);
	add_field(out, n);
}

void kb_search_call_base(const char *key, char out[17])
{
	const char *fresh = strstr(key, "|fresh-");
	char hex[65];

	kb_sha256_hex(key, fresh ? (size_t)(fresh - key) : strlen(key), hex);
	memcpy(out, hex, 16);
	out[16] = '\0';
}

void kb_search_call_key(struct strbuf *out, const char *call_base, int64_t generation,
			int64_t island, int64_t slot, const char *purpose, int64_t attempt)
{
	strbuf_addf(out, "%s/g%lld/i%lld/k%lld/%s/a%lld", call_base, (long long)generation,
		    (long long)island, (long long)slot, purpose, (long long)attempt);
}

/* --- sqlite helpers (the shared ones are in core/state.h) --- */

/* j printed (free it), or NULL for NULL */
static char *json_text(const cJSON *j)
{
	char *text = j ? cJSON_PrintUnformatted(j) : NULL;

	if (j && !text)
		die("out of memory");
	return text;
}

enum stored { STORED_PLAIN, STORED_EVIDENCE, STORED_BUILD, STORED_INFO };

/*
 * What a candidate's or a search's outcome may keep long-term, printed:
 * every string redacted, and none of the output of untrusted processes
 * (kb_evidence_scrub; a build object's compiler errors). The search keeps
 * the unscrubbed objects in memory, for its repair prompts.
 */
static char *stored_text(const cJSON *j, enum stored kind)
{
	cJSON *copy = j ? cJSON_Duplicate(j, true) : NULL;
	char *text;

	if (j && !copy)
		die("out of memory");
	if (kind == STORED_EVIDENCE)
		kb_evidence_scrub(copy);
	else if (kind == STORED_BUILD)
		cJSON_DeleteItemFromObjectCaseSensitive(copy, "errors");
	else if (kind == STORED_INFO)
		kb_evidence_scrub(cJSON_GetObjectItemCaseSensitive(copy, "evidence"));
	kb_redact_json(copy, KB_REDACT_FIELD_MAX);
	text = json_text(copy);
	cJSON_Delete(copy);
	return text;
}

static void bind_stored(sqlite3_stmt *stmt, int i, const cJSON *j, enum stored kind)
{
	char *text = stored_text(j, kind);

	if (text)
		sqlite3_bind_text(stmt, i, text, -1, free);
	else
		sqlite3_bind_null(stmt, i);
}

static cJSON *col_json(sqlite3_stmt *stmt, int i)
{
	const char *s = (const char *)sqlite3_column_text(stmt, i);

	return s ? cJSON_Parse(s) : NULL;
}

static double col_real(sqlite3_stmt *stmt, int i)
{
	return sqlite3_column_type(stmt, i) == SQLITE_NULL ? NAN : sqlite3_column_double(stmt, i);
}

/* --- searches --- */

void kb_search_row_release(struct kb_search_row *r)
{
	free(r->key);
	free(r->operator_path);
	free(r->backend);
	free(r->pass);
	free(r->state);
	cJSON_Delete(r->info);
	memset(r, 0, sizeof(*r));
}

#define SEARCH_COLS "id, key, job_id, operator, backend, pass, seed, state, generation, rng, " \
	"best_candidate_id, wall_s, info, started_at, updated_at, finished_at"

static void search_from_row(sqlite3_stmt *stmt, struct kb_search_row *r)
{
	r->id = sqlite3_column_int64(stmt, 0);
	r->key = kb_state_column_strdup(stmt, 1);
	r->job_id = sqlite3_column_int64(stmt, 2);
	r->operator_path = kb_state_column_strdup(stmt, 3);
	r->backend = kb_state_column_strdup(stmt, 4);
	r->pass = kb_state_column_strdup(stmt, 5);
	r->seed = (uint64_t)sqlite3_column_int64(stmt, 6);
	r->state = kb_state_column_strdup(stmt, 7);
	r->generation = sqlite3_column_int64(stmt, 8);
	r->rng = (uint64_t)sqlite3_column_int64(stmt, 9);
	r->best_candidate_id = sqlite3_column_int64(stmt, 10);
	r->wall_s = sqlite3_column_double(stmt, 11);
	r->info = col_json(stmt, 12);
	r->started_at = sqlite3_column_int64(stmt, 13);
	r->updated_at = sqlite3_column_int64(stmt, 14);
	r->finished_at = sqlite3_column_int64(stmt, 15);
}

int kb_search_db_find(struct kb_state *st, const char *key, struct kb_search_row *out)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = kb_state_query_row(st, &stmt, "look up a search",
				"SELECT " SEARCH_COLS " FROM searches WHERE key = ?1", "t", key);
	if (rc == 1) {
		search_from_row(stmt, out);
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

int kb_search_db_create(struct kb_state *st, struct kb_search_row *r)
{
	sqlite3_stmt *stmt = NULL;
	int64_t now = kb_wall_s();
	int rc;

	rc = kb_state_query_row(st, &stmt, "create the search",
				"INSERT INTO searches (key, job_id, operator, backend, pass, seed, rng,"
				" started_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)"
				" RETURNING id", "tItttiii", r->key, r->job_id,
				r->operator_path ? r->operator_path : "", r->backend ? r->backend : "",
				r->pass ? r->pass : "forward", (int64_t)r->seed, (int64_t)r->rng, now);
	if (rc == 1) {
		r->id = sqlite3_column_int64(stmt, 0);
		r->started_at = r->updated_at = now;
		free(r->state);
		r->state = xstrdup("running");
		rc = 0;
	} else {
		rc = -1; /* RETURNING: a row unless it failed */
	}
	sqlite3_finalize(stmt);
	return rc;
}

int kb_search_db_fresh_key(struct kb_state *st, const char *base, struct strbuf *out)
{
	struct strbuf key = STRBUF_INIT;
	struct kb_search_row row;
	int rc = -1;

	for (int n = 1; n < 1000000; n++) {
		strbuf_reset(&key);
		strbuf_addf(&key, "%s|fresh-%d", base, n);
		rc = kb_search_db_find(st, key.buf, &row);
		kb_search_row_release(&row);
		if (rc == KB_ENOTFOUND) {
			strbuf_addstr(out, key.buf);
			rc = 0;
			break;
		}
		if (rc)
			break;
		rc = -1;
	}
	strbuf_release(&key);
	return rc;
}

int kb_search_db_checkpoint(struct kb_state *st, const struct kb_search_row *r)
{
	return kb_state_run(st, NULL, "update the search",
			    "UPDATE searches SET generation = ?2, rng = ?3, best_candidate_id = ?4,"
			    " wall_s = ?5, updated_at = ?6 WHERE id = ?1",
			    "iiiIdi", r->id, r->generation, (int64_t)r->rng, r->best_candidate_id,
			    r->wall_s, kb_wall_s());
}

int kb_search_db_set_state(struct kb_state *st, int64_t id, const char *state, const cJSON *info,
			   double wall_s)
{
	char *text = stored_text(info, STORED_INFO);
	int64_t now = kb_wall_s();
	int changes = 0, rc;

	rc = kb_state_run(st, &changes, "set the search's state",
			  "UPDATE searches SET state = ?2, info = coalesce(?3, info), wall_s = ?4,"
			  " updated_at = ?5, finished_at = ?6 WHERE id = ?1",
			  "ittdiI", id, state, text, wall_s, now, strcmp(state, "running") ? now : (int64_t)0);
	free(text);
	if (!rc && changes != 1)
		rc = error("no search %lld to update", (long long)id);
	return rc;
}

/* --- candidates --- */

void kb_search_cand_init(struct kb_search_cand *c)
{
	memset(c, 0, sizeof(*c));
	kb_strlcpy(c->verdict, "pending", sizeof(c->verdict));
	c->speedup = c->speedup_compile = NAN;
	c->cell = -1;
}

void kb_search_cand_release(struct kb_search_cand *c)
{
	free(c->proposer);
	free(c->model);
	free(c->call_key);
	free(c->source);
	free(c->backend);
	cJSON_Delete(c->reasons);
	cJSON_Delete(c->evidence);
	cJSON_Delete(c->build_info);
	cJSON_Delete(c->verifiers);
	kb_search_cand_init(c);
}

void kb_search_cand_free(struct kb_search_cand *c)
{
	if (!c)
		return;
	kb_search_cand_release(c);
	free(c);
}

static int cand_id_by_hash(struct kb_state *st, int64_t search_id, const char *hash, int64_t *id)
{
	return kb_state_query_int(st, id, "look up a candidate",
				  "SELECT id FROM candidates WHERE search_id = ?1 AND source_hash = ?2",
				  "it", search_id, hash);
}

/* A candidate's outcome, the same eight columns in the insert and the
 * update: verdict, reasons, speedup, speedup_compile, evidence, cell,
 * build_info, verifiers, bound from parameter first on. */
static void bind_outcome(sqlite3_stmt *stmt, int first, const struct kb_search_cand *c)
{
	sqlite3_bind_text(stmt, first, c->verdict, -1, SQLITE_STATIC);
	bind_stored(stmt, first + 1, c->reasons, STORED_PLAIN);
	kb_state_bind_real(stmt, first + 2, c->speedup);
	kb_state_bind_real(stmt, first + 3, c->speedup_compile);
	bind_stored(stmt, first + 4, c->evidence, STORED_EVIDENCE);
	if (c->cell >= 0)
		sqlite3_bind_int(stmt, first + 5, c->cell);
	else
		sqlite3_bind_null(stmt, first + 5);
	bind_stored(stmt, first + 6, c->build_info, STORED_BUILD);
	bind_stored(stmt, first + 7, c->verifiers, STORED_PLAIN);
}

int kb_search_db_cand_insert(struct kb_state *st, int64_t search_id, struct kb_search_cand *c)
{
	sqlite3_stmt *stmt = NULL;
	int64_t id = 0;
	bool own;
	int rc;

	if (kb_state_txn_enter(st, &own))
		return -1;
	rc = cand_id_by_hash(st, search_id, c->hash, &id);
	if (!rc) {
		c->id = id;
		rc = KB_EEXISTS;
		goto out;
	}
	if (rc != KB_ENOTFOUND)
		goto out;
	rc = -1;
	if (kb_state_prepare_logged(st, &stmt,
		    "INSERT INTO candidates (search_id, parent_id, second_parent_id, proposer, model, prompt_id,"
		    " call_key, source, source_hash, backend, generation, island, verdict, reasons, speedup,"
		    " speedup_compile, evidence, cell, build_info, verifiers, created_at)"
		    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,"
		    " ?19, ?20, ?21) RETURNING id",
		    "could not prepare the candidate insert"))
		goto out;
	if (!c->created_at)
		c->created_at = kb_wall_s();
	sqlite3_bind_int64(stmt, 1, search_id);
	kb_state_bind_id(stmt, 2, c->parent_id);
	kb_state_bind_id(stmt, 3, c->second_parent_id);
	sqlite3_bind_text(stmt, 4, c->proposer ? c->proposer : "?", -1, SQLITE_STATIC);
	kb_state_bind_text(stmt, 5, c->model);
	kb_state_bind_id(stmt, 6, c->prompt_id);
	kb_state_bind_text(stmt, 7, c->call_key);
	sqlite3_bind_text(stmt, 8, c->source ? c->source : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 9, c->hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 10, c->backend ? c->backend : "", -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 11, c->generation);
	sqlite3_bind_int64(stmt, 12, c->island);
	bind_outcome(stmt, 13, c);
	sqlite3_bind_int64(stmt, 21, c->created_at);
	if (sqlite3_step(stmt) != SQLITE_ROW) {
		kb_state_error(st, "could not insert a candidate");
		goto out;
	}
	c->id = sqlite3_column_int64(stmt, 0);
	rc = 0;
out:
	sqlite3_finalize(stmt);
	return kb_state_txn_leave(st, own, rc);
}

int kb_search_db_cand_update(struct kb_state *st, const struct kb_search_cand *c)
{
	sqlite3_stmt *stmt = NULL;
	int rc = -1;

	if (kb_state_prepare_logged(st, &stmt,
		    "UPDATE candidates SET verdict = ?2, reasons = ?3, speedup = ?4, speedup_compile = ?5,"
		    " evidence = ?6, cell = ?7, build_info = ?8, verifiers = ?9 WHERE id = ?1",
		    "could not prepare the candidate update"))
		return -1;
	sqlite3_bind_int64(stmt, 1, c->id);
	bind_outcome(stmt, 2, c);
	if (sqlite3_step(stmt) != SQLITE_DONE)
		kb_state_error(st, "could not update a candidate");
	else if (kb_state_changes(st) != 1)
		error("no candidate %lld to update", (long long)c->id);
	else
		rc = 0;
	sqlite3_finalize(stmt);
	return rc;
}

#define CAND_COLS "id, parent_id, second_parent_id, proposer, model, prompt_id, call_key, source," \
	" source_hash, backend, generation, island, verdict, reasons, speedup, speedup_compile, evidence," \
	" cell, build_info, verifiers, created_at"

static void cand_from_row(sqlite3_stmt *stmt, struct kb_search_cand *c)
{
	const char *s;

	kb_search_cand_init(c);
	c->id = sqlite3_column_int64(stmt, 0);
	c->parent_id = sqlite3_column_int64(stmt, 1);
	c->second_parent_id = sqlite3_column_int64(stmt, 2);
	c->proposer = kb_state_column_strdup(stmt, 3);
	c->model = kb_state_column_strdup(stmt, 4);
	c->prompt_id = sqlite3_column_int64(stmt, 5);
	c->call_key = kb_state_column_strdup(stmt, 6);
	c->source = kb_state_column_strdup(stmt, 7);
	s = (const char *)sqlite3_column_text(stmt, 8);
	kb_strlcpy(c->hash, s ? s : "", sizeof(c->hash));
	c->backend = kb_state_column_strdup(stmt, 9);
	c->generation = sqlite3_column_int64(stmt, 10);
	c->island = sqlite3_column_int64(stmt, 11);
	s = (const char *)sqlite3_column_text(stmt, 12);
	kb_strlcpy(c->verdict, s ? s : "pending", sizeof(c->verdict));
	c->reasons = col_json(stmt, 13);
	c->speedup = col_real(stmt, 14);
	c->speedup_compile = col_real(stmt, 15);
	c->evidence = col_json(stmt, 16);
	c->cell = sqlite3_column_type(stmt, 17) == SQLITE_NULL ? -1 : sqlite3_column_int(stmt, 17);
	c->build_info = col_json(stmt, 18);
	c->verifiers = col_json(stmt, 19);
	c->created_at = sqlite3_column_int64(stmt, 20);
}

int kb_search_db_cand_get(struct kb_state *st, int64_t id, struct kb_search_cand *out)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = kb_state_query_row(st, &stmt, "read a candidate",
				"SELECT " CAND_COLS " FROM candidates WHERE id = ?1", "i", id);
	if (rc == 1) {
		kb_search_cand_release(out);
		cand_from_row(stmt, out);
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

static int cand_row(sqlite3_stmt *stmt, void *elem, void *payload)
{
	struct kb_search_cand **c = elem;

	*c = xmalloc(sizeof(**c));
	cand_from_row(stmt, *c);
	return 0;
}

static void cand_row_free(void *elem)
{
	kb_search_cand_free(*(struct kb_search_cand **)elem);
}

int kb_search_db_cands_load(struct kb_state *st, int64_t search_id, struct kb_search_cand ***out,
			    size_t *n)
{
	sqlite3_stmt *stmt = NULL;
	void *rows = NULL;
	int rc;

	*out = NULL;
	*n = 0;
	if (kb_state_prepare_logged(st, &stmt,
				    "SELECT " CAND_COLS " FROM candidates WHERE search_id = ?1 ORDER BY id",
				    "could not prepare the candidates read"))
		return -1;
	sqlite3_bind_int64(stmt, 1, search_id);
	rc = kb_state_read_rows(st, stmt, "read the candidates", sizeof(**out), &rows, n,
				cand_row, cand_row_free, NULL);
	sqlite3_finalize(stmt);
	*out = rows;
	return rc;
}

/* --- archive --- */

int kb_search_db_archive_save(struct kb_state *st, int64_t search_id, const struct kb_archive *a)
{
	sqlite3_stmt *del = NULL, *ins = NULL;
	int64_t now = kb_wall_s();
	bool own;
	int rc = -1;

	if (kb_state_txn_enter(st, &own))
		return -1;
	if (kb_state_prepare_logged(st, &del, "DELETE FROM archive_cells WHERE search_id = ?1", "could not prepare the archive reset") ||
	    kb_state_prepare_logged(st, &ins, "INSERT INTO archive_cells (search_id, island, cell, candidate_id, fitness, chosen,"
		    " updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", "could not prepare the archive insert"))
		goto out;
	sqlite3_bind_int64(del, 1, search_id);
	if (sqlite3_step(del) != SQLITE_DONE) {
		kb_state_error(st, "could not reset the archive");
		goto out;
	}
	for (size_t i = 0; i < a->nr_islands; i++)
		for (int c = 0; c < KB_BEHAVIOR_CELLS; c++) {
			const struct kb_elite *e = &a->cells[i * KB_BEHAVIOR_CELLS + (size_t)c];

			if (!e->candidate_id)
				continue;
			sqlite3_reset(ins);
			sqlite3_bind_int64(ins, 1, search_id);
			sqlite3_bind_int64(ins, 2, (int64_t)i);
			sqlite3_bind_int(ins, 3, c);
			sqlite3_bind_int64(ins, 4, e->candidate_id);
			sqlite3_bind_double(ins, 5, e->fitness);
			sqlite3_bind_int64(ins, 6, (int64_t)e->chosen);
			sqlite3_bind_int64(ins, 7, now);
			if (sqlite3_step(ins) != SQLITE_DONE) {
				kb_state_error(st, "could not store an archive cell");
				goto out;
			}
		}
	rc = 0;
out:
	sqlite3_finalize(del);
	sqlite3_finalize(ins);
	return kb_state_txn_leave(st, own, rc);
}

int kb_search_db_archive_load(struct kb_state *st, int64_t search_id, struct kb_archive *a)
{
	sqlite3_stmt *stmt = NULL;
	int rc = -1, step;

	if (kb_state_prepare_logged(st, &stmt, "SELECT island, cell, candidate_id, fitness, chosen FROM archive_cells"
		    " WHERE search_id = ?1", "could not prepare the archive read"))
		return -1;
	sqlite3_bind_int64(stmt, 1, search_id);
	while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
		int64_t island = sqlite3_column_int64(stmt, 0);
		int cell = sqlite3_column_int(stmt, 1);
		struct kb_elite *e;

		if (island < 0 || (uint64_t)island >= a->nr_islands || cell < 0 || cell >= KB_BEHAVIOR_CELLS)
			continue;
		e = &a->cells[(size_t)island * KB_BEHAVIOR_CELLS + (size_t)cell];
		e->candidate_id = sqlite3_column_int64(stmt, 2);
		e->fitness = sqlite3_column_double(stmt, 3);
		e->chosen = (uint64_t)sqlite3_column_int64(stmt, 4);
	}
	if (step != SQLITE_DONE)
		kb_state_error(st, "could not read the archive");
	else
		rc = 0;
	sqlite3_finalize(stmt);
	return rc;
}

/* --- prompts --- */

int kb_search_db_prompt_insert(struct kb_state *st, int64_t search_id, int64_t generation,
			       struct kb_prompt *p)
{
	sqlite3_stmt *stmt = NULL;
	cJSON *sections = kb_prompt_sections_json(p);
	char *text = json_text(sections);
	int rc;

	rc = kb_state_query_row(st, &stmt, "insert a prompt",
				"INSERT INTO prompts (search_id, parent_id, sections, fitness, uses,"
				" generation, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
				"iItriii", search_id, p->parent_id, text, p->fitness, p->uses, generation,
				kb_wall_s());
	if (rc == 1) {
		p->id = sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else {
		rc = -1; /* RETURNING: a row unless it failed */
	}
	sqlite3_finalize(stmt);
	free(text);
	cJSON_Delete(sections);
	return rc;
}

int kb_search_db_prompt_update(struct kb_state *st, const struct kb_prompt *p)
{
	return kb_state_run(st, NULL, "update a prompt",
			    "UPDATE prompts SET fitness = ?2, uses = ?3 WHERE id = ?1",
			    "iri", p->id, p->fitness, p->uses);
}

/* one row of prompts; payload: the search's id, for the message */
static int prompt_row(sqlite3_stmt *stmt, void *elem, void *payload)
{
	struct kb_prompt *p = elem;
	cJSON *sections = col_json(stmt, 2);
	int rc = 0;

	kb_prompt_init(p);
	p->id = sqlite3_column_int64(stmt, 0);
	p->parent_id = sqlite3_column_int64(stmt, 1);
	p->fitness = col_real(stmt, 3);
	p->uses = sqlite3_column_int64(stmt, 4);
	if (kb_prompt_sections_from_json(p, sections))
		rc = error("prompt %lld of search %lld has bad sections", (long long)p->id,
			   (long long)*(const int64_t *)payload);
	cJSON_Delete(sections);
	return rc;
}

static void prompt_row_release(void *elem)
{
	kb_prompt_release(elem);
}

int kb_search_db_prompts_load(struct kb_state *st, int64_t search_id, struct kb_prompt **out, size_t *n)
{
	sqlite3_stmt *stmt = NULL;
	void *rows = NULL;
	int rc;

	*out = NULL;
	*n = 0;
	if (kb_state_prepare_logged(st, &stmt, "SELECT id, parent_id, sections, fitness, uses FROM prompts"
				    " WHERE search_id = ?1 ORDER BY id", "could not prepare the prompts read"))
		return -1;
	sqlite3_bind_int64(stmt, 1, search_id);
	rc = kb_state_read_rows(st, stmt, "read the prompts", sizeof(**out), &rows, n,
				prompt_row, prompt_row_release, &search_id);
	sqlite3_finalize(stmt);
	*out = rows;
	return rc;
}

/* --- history --- */

int kb_search_db_history_add(struct kb_state *st, int64_t search_id, double t_s, double best,
			     int64_t candidate_id)
{
	return kb_state_run(st, NULL, "store the search history",
			    "INSERT INTO search_history (search_id, t_s, best, candidate_id)"
			    " VALUES (?1, ?2, ?3, ?4)", "iddI", search_id, t_s, best, candidate_id);
}

cJSON *kb_search_db_history(struct kb_state *st, int64_t search_id)
{
	sqlite3_stmt *stmt = NULL;
	cJSON *arr;
	int step;

	if (kb_state_prepare_logged(st, &stmt, "SELECT t_s, best, candidate_id FROM search_history WHERE search_id = ?1"
		    " ORDER BY t_s, rowid", "could not prepare the history read"))
		return NULL;
	arr = cJSON_CreateArray();
	sqlite3_bind_int64(stmt, 1, search_id);
	while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
		cJSON *e = cJSON_CreateObject();

		cJSON_AddNumberToObject(e, "t_s", round(sqlite3_column_double(stmt, 0) * 100) / 100);
		cJSON_AddNumberToObject(e, "speedup", round(sqlite3_column_double(stmt, 1) * 1000) / 1000);
		cJSON_AddNumberToObject(e, "candidate_id", (double)sqlite3_column_int64(stmt, 2));
		cJSON_AddItemToArray(arr, e);
	}
	if (step != SQLITE_DONE) {
		kb_state_error(st, "could not read the search history");
		cJSON_Delete(arr);
		arr = NULL;
	}
	sqlite3_finalize(stmt);
	return arr;
}

/* --- LLM usage --- */

int kb_search_db_call_failure(struct kb_state *st, const char *call_key, struct strbuf *status,
			      struct strbuf *error)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = kb_state_query_row(st, &stmt, "look up an llm call",
				"SELECT status, response FROM llm_calls WHERE call_key = ?1"
				" AND status IN ('empty', 'malformed') ORDER BY id DESC LIMIT 1",
				"t", call_key);
	if (rc == 1) {
		const char *s = (const char *)sqlite3_column_text(stmt, 0);
		const char *e = (const char *)sqlite3_column_text(stmt, 1);

		strbuf_addstr(status, s ? s : "");
		strbuf_addstr(error, e ? e : "");
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

int kb_search_db_key_known(struct kb_state *st, int64_t search_id, const char *call_key, bool *known)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	*known = false;
	rc = kb_state_query_row(st, &stmt, "look up a call key",
				"SELECT 1 WHERE EXISTS (SELECT 1 FROM llm_calls WHERE call_key = ?1)"
				" OR EXISTS (SELECT 1 FROM search_prompt_texts WHERE search_id = ?2 AND call_key = ?1)",
				"ti", call_key, search_id);
	sqlite3_finalize(stmt);
	if (rc == 1)
		*known = true;
	return rc == -1 ? -1 : 0;
}
