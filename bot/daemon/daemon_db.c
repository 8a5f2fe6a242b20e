#include "core/common.h"
#include "daemon/daemon_db.h"
#include "core/log.h"
#include "core/util.h"
#include "daemon/webhook.h"

/* --- webhook deliveries and events --- */

/* Record key in webhook_deliveries; *fresh is false when it was there already. */
static int record_key(struct kb_state *st, const char *key, const char *event, int64_t now,
		      bool *fresh)
{
	sqlite3_stmt *stmt = NULL;

	if (kb_state_prepare(st, &stmt, "INSERT OR IGNORE INTO webhook_deliveries (delivery_id, event,"
				       " received_at) VALUES (?, ?, ?)"))
		return -1;
	sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, event, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 3, now);
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		sqlite3_finalize(stmt);
		return -1;
	}
	sqlite3_finalize(stmt);
	*fresh = kb_state_changes(st) > 0;
	return 0;
}

int ddb_webhook_record(struct kb_state *st, const char *delivery, const char *key,
		       const char *event, const char *payload)
{
	sqlite3_stmt *stmt = NULL;
	int64_t now = kb_wall_s();
	bool fresh = false;
	int rc = -1;

	if (kb_state_begin(st))
		return -1;
	if (record_key(st, delivery, event, now, &fresh))
		goto fail;
	if (fresh && key && *key && strcmp(key, delivery) &&
	    record_key(st, key, event, now, &fresh))
		goto fail;
	if (!fresh) {
		kb_state_rollback(st);
		return KB_EEXISTS;
	}
	if (payload) {
		if (kb_state_prepare(st, &stmt, "INSERT INTO webhook_events (delivery_id, event, payload,"
					       " received_at) VALUES (?, ?, json(?), ?)"))
			goto fail;
		sqlite3_bind_text(stmt, 1, delivery, -1, SQLITE_STATIC);
		sqlite3_bind_text(stmt, 2, event, -1, SQLITE_STATIC);
		sqlite3_bind_text(stmt, 3, payload, -1, SQLITE_STATIC);
		sqlite3_bind_int64(stmt, 4, now);
		if (sqlite3_step(stmt) != SQLITE_DONE)
			goto fail;
		sqlite3_finalize(stmt);
		stmt = NULL;
	}
	return kb_state_commit(st);
fail:
	rc = error("could not store webhook delivery '%s' in '%s': %s", delivery,
		   kb_state_path(st), kb_state_errmsg(st));
	sqlite3_finalize(stmt);
	kb_state_rollback(st);
	return rc;
}

int kb_webhook_next(struct kb_state *st, int64_t *id, struct strbuf *payload)
{
	sqlite3_stmt *stmt;
	int rc;

	if (kb_state_prepare(st, &stmt, "SELECT id, payload FROM webhook_events WHERE"
				       " handled_at IS NULL ORDER BY id LIMIT 1"))
		return error("could not read webhook events from '%s'", kb_state_path(st));
	rc = kb_state_step_one(st, stmt, "read webhook events");
	if (rc == 1) {
		*id = sqlite3_column_int64(stmt, 0);
		strbuf_addstr(payload, (const char *)sqlite3_column_text(stmt, 1));
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

int kb_webhook_done(struct kb_state *st, int64_t id)
{
	sqlite3_stmt *stmt;
	int rc = 0;

	if (kb_state_begin(st))
		return -1;
	if (kb_state_prepare(st, &stmt, "UPDATE webhook_events SET handled_at = ? WHERE id = ?")) {
		kb_state_rollback(st);
		return error("could not update webhook events in '%s'", kb_state_path(st));
	}
	sqlite3_bind_int64(stmt, 1, kb_wall_s());
	sqlite3_bind_int64(stmt, 2, id);
	if (sqlite3_step(stmt) != SQLITE_DONE)
		rc = error("could not update webhook events in '%s'", kb_state_path(st));
	sqlite3_finalize(stmt);
	if (rc) {
		kb_state_rollback(st);
		return rc;
	}
	return kb_state_commit(st);
}

/* --- what the daemon polls --- */

/* One count from sql with one or two integer parameters; 0 when it fails. */
static int64_t count_of(struct kb_state *st, const char *sql, int64_t a, int64_t b)
{
	sqlite3_stmt *stmt;
	int64_t n = 0;

	if (kb_state_prepare(st, &stmt, sql))
		return 0;
	sqlite3_bind_int64(stmt, 1, a);
	if (sqlite3_bind_parameter_count(stmt) > 1)
		sqlite3_bind_int64(stmt, 2, b);
	if (sqlite3_step(stmt) == SQLITE_ROW)
		n = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return n;
}

int64_t ddb_pending_jobs(struct kb_state *st, int64_t repo_id)
{
	return count_of(st, "SELECT count(*) FROM jobs j JOIN triggers t ON j.trigger_id = t.id"
			    " WHERE t.repository_id = ? AND t.state = 'active' AND j.state IN"
			    " ('queued', 'running')", repo_id, 0);
}

int64_t ddb_trigger_count(struct kb_state *st, int64_t repo_id, int64_t pr)
{
	return count_of(st, "SELECT count(*) FROM triggers WHERE repository_id = ? AND"
			    " pr_number = ?", repo_id, pr);
}

int ddb_active_prs(struct kb_state *st, int64_t repo_id, int64_t **prs, size_t *nr)
{
	sqlite3_stmt *stmt;

	*prs = NULL;
	*nr = 0;
	if (kb_state_prepare(st, &stmt, "SELECT pr_number FROM triggers WHERE"
				       " repository_id = ? AND state = 'active'"))
		return error("could not read triggers in '%s'", kb_state_path(st));
	sqlite3_bind_int64(stmt, 1, repo_id);
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		*prs = xrealloc(*prs, (*nr + 1) * sizeof(**prs));
		(*prs)[(*nr)++] = sqlite3_column_int64(stmt, 0);
	}
	sqlite3_finalize(stmt);
	return 0;
}

int ddb_poll_get(struct kb_state *st, int64_t repo_id, struct strbuf *etag,
		 int64_t *last_polled_at)
{
	sqlite3_stmt *stmt;

	if (kb_state_prepare(st, &stmt, "SELECT etag, last_polled_at FROM repositories"
				       " WHERE id = ?"))
		return error("could not read repositories in '%s'", kb_state_path(st));
	sqlite3_bind_int64(stmt, 1, repo_id);
	if (sqlite3_step(stmt) == SQLITE_ROW) {
		if (sqlite3_column_text(stmt, 0))
			strbuf_addstr(etag, (const char *)sqlite3_column_text(stmt, 0));
		*last_polled_at = sqlite3_column_int64(stmt, 1);
	}
	sqlite3_finalize(stmt);
	return 0;
}

int ddb_poll_put(struct kb_state *st, int64_t repo_id, const char *etag)
{
	sqlite3_stmt *stmt = NULL;
	int rc = -1;

	if (kb_state_prepare(st, &stmt, "UPDATE repositories SET etag = ?,"
				       " last_polled_at = ? WHERE id = ?"))
		return -1;
	if (sqlite3_bind_text(stmt, 1, etag, -1, SQLITE_STATIC) == SQLITE_OK &&
	    sqlite3_bind_int64(stmt, 2, kb_wall_s()) == SQLITE_OK &&
	    sqlite3_bind_int64(stmt, 3, repo_id) == SQLITE_OK &&
	    sqlite3_step(stmt) == SQLITE_DONE)
		rc = 0;
	sqlite3_finalize(stmt);
	return rc;
}

bool ddb_idle(struct kb_state *st)
{
	int64_t n = 0;
	sqlite3_stmt *stmt;

	if (kb_state_prepare(st, &stmt,
			     "SELECT (SELECT count(*) FROM jobs WHERE state IN ('queued', 'running'))"
			     " + (SELECT count(*) FROM webhook_events WHERE handled_at IS NULL)"))
		return false;
	if (sqlite3_step(stmt) == SQLITE_ROW)
		n = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return n == 0;
}
