#include "core/common.h"
#include "search/search_db.h"
#include "core/redact.h"
#include "core/state.h"
#include "core/strvec.h"
#include "core/util.h"
#include "search/archive.h"

/*
 * The record of a search (schema v7): the prompts it sent, its island
 * migrations and its failure diagnoses. Only the diagnoses are read back
 * (a resumed search's meta-prompt rewrites see what an uninterrupted
 * one's would); the rest is for whoever audits a search.
 */

int kb_search_db_prompt_text_add(struct kb_state *st, int64_t search_id, const char *call_key,
				 const char *purpose, const char *text)
{
	struct strbuf sb = STRBUF_INIT;
	size_t length = text ? strlen(text) : 0;
	int rc;

	/* a prompt carries model replies and harness reasons: untrusted text */
	strbuf_addstr(&sb, text ? text : "");
	kb_redact(&sb, KB_SEARCH_PROMPT_TEXT_MAX);
	rc = kb_state_run(st, NULL, "store a prompt text",
			  "INSERT OR IGNORE INTO search_prompt_texts (search_id, call_key, purpose, text, length,"
			  " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
			  "itttii", search_id, call_key, purpose, sb.buf, (int64_t)length, kb_wall_s());
	strbuf_release(&sb);
	return rc;
}

int kb_search_db_migration_add(struct kb_state *st, int64_t search_id, int64_t generation,
			       const struct kb_migration *m)
{
	return kb_state_run(st, NULL, "store an island migration",
			    "INSERT OR REPLACE INTO search_migrations (search_id, generation, from_island, to_island,"
			    " candidate_id, cell, fitness, accepted, created_at)"
			    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
			    "iiiiIirii", search_id, generation, (int64_t)m->from, (int64_t)m->to, m->candidate_id,
			    (int64_t)m->cell, m->fitness, (int64_t)m->accepted, kb_wall_s());
}

int kb_search_db_diagnosis_add(struct kb_state *st, int64_t search_id, int64_t generation,
			       int64_t candidate_id, const char *text, int64_t *id)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	*id = 0;
	rc = kb_state_query_row(st, &stmt, "store a diagnosis",
				"INSERT INTO search_diagnoses (search_id, generation, candidate_id, text, created_at)"
				" VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
				"iiIti", search_id, generation, candidate_id, text, kb_wall_s());
	if (rc == 1) {
		*id = sqlite3_column_int64(stmt, 0);
		rc = 0;
	} else {
		rc = -1; /* RETURNING: a row unless it failed */
	}
	sqlite3_finalize(stmt);
	return rc;
}

int kb_search_db_diagnoses_mark(struct kb_state *st, int64_t search_id, const int64_t *ids, size_t n)
{
	bool own;
	int rc = -1;

	if (kb_state_txn_enter(st, &own))
		return -1;
	if (kb_state_run(st, NULL, "clear the pending diagnoses",
			 "UPDATE search_diagnoses SET pending = 0 WHERE search_id = ?1 AND pending != 0",
			 "i", search_id))
		goto out;
	for (size_t i = 0; i < n; i++)
		if (kb_state_run(st, NULL, "mark a pending diagnosis",
				 "UPDATE search_diagnoses SET pending = 1 WHERE search_id = ?1 AND id = ?2",
				 "ii", search_id, ids[i]))
			goto out;
	rc = 0;
out:
	return kb_state_txn_leave(st, own, rc);
}

int kb_search_db_diagnoses_load(struct kb_state *st, int64_t search_id, int64_t candidate_id,
				struct strvec *texts, int64_t **ids)
{
	sqlite3_stmt *stmt = NULL;
	int rc = -1, step;

	if (kb_state_prepare_logged(st, &stmt, "SELECT id, text FROM search_diagnoses WHERE search_id = ?1"
				    " AND (?2 = 0 AND pending != 0 OR ?2 != 0 AND candidate_id = ?2) ORDER BY id",
				    "could not prepare the diagnoses read"))
		return -1;
	sqlite3_bind_int64(stmt, 1, search_id);
	sqlite3_bind_int64(stmt, 2, candidate_id);
	while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(stmt, 1);

		*ids = xrealloc(*ids, (texts->nr + 1) * sizeof(**ids));
		(*ids)[texts->nr] = sqlite3_column_int64(stmt, 0);
		strvec_push(texts, text ? text : "");
	}
	if (step != SQLITE_DONE)
		kb_state_error(st, "could not read the diagnoses");
	else
		rc = 0;
	sqlite3_finalize(stmt);
	return rc;
}
