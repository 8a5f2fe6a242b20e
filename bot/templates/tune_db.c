#include "core/common.h"
#include "templates/tune.h"
#include "core/log.h"
#include "core/state.h"
#include "core/util.h"
#include "verifier/evidence.h"

/*
 * The timings table: tuning results cached by key (kb_timings_get and
 * kb_timings_put in tune.h). The only SQL of bot/templates/.
 */

cJSON *kb_timings_get(struct kb_state *st, const char *key)
{
	sqlite3_stmt *stmt = NULL;
	cJSON *v = NULL;

	if (kb_state_prepare(st, &stmt, "SELECT value FROM timings WHERE key = ?1")) {
		error("could not read the timings cache: %s", kb_state_errmsg(st));
		return NULL;
	}
	sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
	if (sqlite3_step(stmt) == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(stmt, 0);

		if (text)
			v = cJSON_Parse(text);
	}
	sqlite3_finalize(stmt);
	return v;
}

int kb_timings_put(struct kb_state *st, const char *key, const cJSON *value)
{
	sqlite3_stmt *stmt = NULL;
	cJSON *kept = cJSON_Duplicate(value, true);
	char *text;
	int rc = -1;

	/* evidence among the values: nothing untrusted processes printed is kept */
	kb_evidence_scrub(kept);
	text = kept ? cJSON_PrintUnformatted(kept) : NULL;
	cJSON_Delete(kept);
	if (!text)
		die("out of memory");
	if (kb_state_prepare(st, &stmt, "INSERT OR REPLACE INTO timings (key, value, updated_at) "
			     "VALUES (?1, ?2, ?3)")) {
		error("could not write the timings cache: %s", kb_state_errmsg(st));
		goto out;
	}
	sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, text, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 3, kb_wall_s());
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		error("could not write the timings cache: %s", kb_state_errmsg(st));
		goto out;
	}
	rc = 0;
out:
	sqlite3_finalize(stmt);
	free(text);
	return rc;
}
