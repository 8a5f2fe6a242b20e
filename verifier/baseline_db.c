#include "core/common.h"
#include "verifier/baseline_db.h"
#include "core/log.h"
#include "core/state.h"
#include "core/util.h"

/* The baselines table (state_schema.c, v6); the only SQL of verifier/. */

cJSON *kb_baseline_cache_get(struct kb_state *st, const char *op_hash)
{
	sqlite3_stmt *stmt = NULL;
	cJSON *out = NULL;
	int64_t now = kb_wall_s();
	int step, skipped = 0;

	if (kb_state_prepare_logged(st, &stmt, "SELECT key, figures, created_at FROM baselines"
				    " WHERE operator_hash = ?1 ORDER BY created_at DESC, key LIMIT ?2",
				    "could not read the baseline cache"))
		return NULL;
	sqlite3_bind_text(stmt, 1, op_hash, -1, SQLITE_STATIC);
	sqlite3_bind_int(stmt, 2, KB_BASELINE_MAX_ROWS);
	out = cJSON_CreateArray();
	while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(stmt, 0);
		cJSON *figures = cJSON_Parse((const char *)sqlite3_column_text(stmt, 1));
		int64_t created = sqlite3_column_int64(stmt, 2);
		cJSON *e;

		if (!key || !cJSON_IsObject(figures)) {
			skipped++;
			cJSON_Delete(figures);
			continue;
		}
		e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "key", key);
		cJSON_AddItemToObject(e, "figures", figures);
		cJSON_AddNumberToObject(e, "age_s", (double)(now > created ? now - created : 0));
		cJSON_AddItemToArray(out, e);
	}
	if (step != SQLITE_DONE) {
		kb_state_error(st, "could not read the baseline cache");
		cJSON_Delete(out);
		out = NULL;
	}
	if (skipped)
		log_warn("baseline cache: %d entr%s of operator %.12s without an object of figures "
			 "ignored (measured again)", skipped, skipped == 1 ? "y" : "ies", op_hash);
	sqlite3_finalize(stmt);
	return out;
}

/* One entry's key and figures as text to store, or false (warned) to skip it. */
static bool entry_text(const cJSON *e, const char **key, char **figures)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "key");
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "figures");

	*figures = NULL;
	if (!cJSON_IsString(k) || !*k->valuestring || !cJSON_IsObject(f)) {
		log_warn("baseline cache: a measured entry without a key or figures, not stored");
		return false;
	}
	*key = k->valuestring;
	*figures = cJSON_PrintUnformatted(f);
	if (!*figures)
		die("out of memory");
	if (strlen(*figures) > KB_BASELINE_MAX_FIGURES) {
		log_warn("baseline cache: figures of %zu bytes for one config, not stored",
			 strlen(*figures));
		FREE_AND_NULL(*figures);
		return false;
	}
	return true;
}

int kb_baseline_cache_put(struct kb_state *st, const char *op_hash, const cJSON *measured)
{
	const cJSON *e;
	bool own;
	int rc = 0;

	if (!cJSON_IsArray(measured) || !cJSON_GetArraySize(measured))
		return 0;
	if (kb_state_txn_enter(st, &own))
		return -1;
	cJSON_ArrayForEach(e, measured) {
		const char *key;
		char *figures;

		if (!entry_text(e, &key, &figures))
			continue;
		rc = kb_state_run(st, NULL, "store a cached baseline",
				  "INSERT INTO baselines (operator_hash, key, figures, created_at)"
				  " VALUES (?, ?, ?, ?) ON CONFLICT (operator_hash, key) DO UPDATE"
				  " SET figures = excluded.figures, created_at = excluded.created_at",
				  "ttti", op_hash, key, figures, kb_wall_s());
		free(figures);
		if (rc)
			break;
	}
	return kb_state_txn_leave(st, own, rc);
}
