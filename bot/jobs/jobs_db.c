#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "jobs/jobs_priv.h"
#include "core/hash.h"

/*
 * The store queries of the job loop beyond core/state.h: triggers,
 * forge_objects and the job columns of migration 2. Each helper is one
 * statement; callers group them with kb_state_begin/commit.
 */

/*
 * One statement on the job loop's tables: types is one letter per "?"
 * (kb_state_vbind: 'i' int64_t, 'd' double, 't' const char *, NULL binds
 * NULL). jdb_run's *changes (may be NULL) gets the rows changed; jdb_int
 * reads one int64, KB_ENOTFOUND (quiet) without a row. 0 or -1 (logged).
 */
#define jdb_run(st, changes, sql, ...) \
	kb_state_run(st, changes, "update the job tables", sql, __VA_ARGS__)
#define jdb_int(st, out, sql, ...) \
	kb_state_query_int(st, out, "query the job tables", sql, __VA_ARGS__)

void jtrigger_release(struct jtrigger *t)
{
	free(t->repo);
	free(t->head_sha);
	free(t->actor);
	free(t->source);
	free(t->state);
	memset(t, 0, sizeof(*t));
}

void jobject_release(struct jobject *o)
{
	free(o->remote_id);
	free(o->url);
	free(o->body_hash);
	memset(o, 0, sizeof(*o));
}

void jextra_release(struct jextra *x)
{
	free(x->progress);
	free(x->result);
	memset(x, 0, sizeof(*x));
}

#define TRIGGER_COLS \
	"SELECT t.id, t.repository_id, t.pr_number, r.full_name, t.head_sha, t.actor, " \
	"t.source, t.state FROM triggers t JOIN repositories r ON r.id = t.repository_id "

static int trigger_query(struct kb_state *st, struct jtrigger *out, const char *sql,
			 int64_t a, int64_t b)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	jtrigger_release(out);
	rc = kb_state_query_row(st, &stmt, "read a trigger", sql, b ? "ii" : "i", a, b);
	if (rc == 1) {
		out->id = sqlite3_column_int64(stmt, 0);
		out->repo_id = sqlite3_column_int64(stmt, 1);
		out->pr = sqlite3_column_int64(stmt, 2);
		out->repo = kb_state_column_strdup(stmt, 3);
		out->head_sha = kb_state_column_strdup(stmt, 4);
		out->actor = kb_state_column_strdup(stmt, 5);
		out->source = kb_state_column_strdup(stmt, 6);
		out->state = kb_state_column_strdup(stmt, 7);
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

int jdb_trigger_get(struct kb_state *st, struct jtrigger *out, int64_t id)
{
	return trigger_query(st, out, TRIGGER_COLS "WHERE t.id = ?", id, 0);
}

int jdb_trigger_active(struct kb_state *st, struct jtrigger *out, int64_t repo_id, int64_t pr)
{
	return trigger_query(st, out, TRIGGER_COLS
			     "WHERE t.repository_id = ? AND t.pr_number = ? AND t.state = 'active'",
			     repo_id, pr);
}

int jdb_object_get(struct kb_state *st, struct jobject *out, int64_t repo_id,
		   const char *kind, const char *marker)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	jobject_release(out);
	rc = kb_state_query_row(st, &stmt, "read forge objects",
				"SELECT id, remote_id, url, body_hash FROM forge_objects"
				" WHERE repository_id = ? AND kind = ? AND marker = ?",
				"itt", repo_id, kind, marker);
	if (rc == 1) {
		out->id = sqlite3_column_int64(stmt, 0);
		out->remote_id = kb_state_column_strdup(stmt, 1);
		out->url = kb_state_column_strdup(stmt, 2);
		out->body_hash = kb_state_column_strdup(stmt, 3);
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

int jdb_object_put(struct kb_state *st, int64_t repo_id, int64_t job_id, const char *kind,
		   const char *marker, const char *remote_id, const char *url,
		   const char *body_hash)
{
	int64_t now = kb_wall_s();

	return jdb_run(st, NULL,
		       "INSERT INTO forge_objects (job_id, repository_id, kind, remote_id, url, marker,"
		       " body_hash, created_at, updated_at) VALUES (NULLIF(?, 0), ?, ?, ?, ?, ?, ?, ?, ?) "
		       "ON CONFLICT (repository_id, kind, marker) DO UPDATE SET "
		       " job_id = COALESCE(excluded.job_id, job_id),"
		       " remote_id = COALESCE(excluded.remote_id, remote_id),"
		       " url = COALESCE(excluded.url, url),"
		       " body_hash = COALESCE(excluded.body_hash, body_hash),"
		       " updated_at = excluded.updated_at",
		       "iitttttii", job_id, repo_id, kind, remote_id, url, marker, body_hash, now, now);
}

int jdb_extra_get(struct kb_state *st, struct jextra *out, int64_t job_id)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	jextra_release(out);
	rc = kb_state_query_row(st, &stmt, "read a job's progress",
				"SELECT trigger_id, progress, best_speedup, reviewed_speedup, result"
				" FROM jobs WHERE id = ?", "i", job_id);
	if (rc == 1) {
		out->trigger_id = sqlite3_column_int64(stmt, 0);
		out->progress = kb_state_column_strdup(stmt, 1);
		out->best_speedup = sqlite3_column_double(stmt, 2);
		out->reviewed_speedup = sqlite3_column_double(stmt, 3);
		out->result = kb_state_column_strdup(stmt, 4);
		rc = 0;
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* --- repositories and triggers --- */

int jdb_repo_id(struct kb_state *st, int64_t *id, const char *forge, const char *repo)
{
	return jdb_int(st, id, "SELECT id FROM repositories WHERE forge = ? AND full_name = ?",
		       "tt", forge, repo);
}

int jdb_trigger_job_ids(struct kb_state *st, int64_t tid, bool queued_too, int64_t **ids,
			size_t *nr)
{
	sqlite3_stmt *stmt = NULL;
	size_t alloc = 0;

	*ids = NULL;
	*nr = 0;
	if (kb_state_prepare(st, &stmt, queued_too
			     ? "SELECT id FROM jobs WHERE trigger_id = ? AND state IN ('queued', 'running')"
			       " ORDER BY id"
			     : "SELECT id FROM jobs WHERE trigger_id = ? AND state IN ('running')"
			       " ORDER BY id"))
		return error("could not query jobs in '%s'", kb_state_path(st));
	sqlite3_bind_int64(stmt, 1, tid);
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		if (*nr == alloc) {
			alloc = alloc ? 2 * alloc : 8;
			*ids = xrealloc(*ids, alloc * sizeof(**ids));
		}
		(*ids)[(*nr)++] = sqlite3_column_int64(stmt, 0);
	}
	sqlite3_finalize(stmt);
	return 0;
}

bool jdb_trigger_cancelled_since(struct kb_state *st, int64_t repo_id, int64_t pr, int64_t since)
{
	sqlite3_stmt *stmt = NULL;
	bool stopped = false;

	if (kb_state_prepare(st, &stmt, "SELECT state, updated_at FROM triggers WHERE"
			     " repository_id = ? AND pr_number = ? ORDER BY id DESC LIMIT 1"))
		return false;
	sqlite3_bind_int64(stmt, 1, repo_id);
	sqlite3_bind_int64(stmt, 2, pr);
	if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) &&
	    !strcmp((const char *)sqlite3_column_text(stmt, 0), "cancelled") &&
	    sqlite3_column_int64(stmt, 1) >= since)
		stopped = true;
	sqlite3_finalize(stmt);
	return stopped;
}

int jdb_trigger_replace(struct kb_state *st, int64_t tid)
{
	if (jdb_run(st, NULL, "UPDATE triggers SET state = 'replaced', updated_at = ? WHERE id = ?",
		    "ii", kb_wall_s(), tid) ||
	    jdb_run(st, NULL, "UPDATE jobs SET state = 'cancelled', finished_at = ?, updated_at = ?"
			      " WHERE trigger_id = ? AND state IN ('queued', 'running')",
		    "iii", kb_wall_s(), kb_wall_s(), tid))
		return -1;
	return 0;
}

int jdb_trigger_add(struct kb_state *st, int64_t *tid, int64_t repo_id, int64_t pr,
		    const char *head_sha, const char *actor, const char *source)
{
	if (jdb_run(st, NULL, "INSERT INTO triggers (repository_id, pr_number, head_sha, actor,"
			      " source, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
		    "iitttii", repo_id, pr, head_sha, actor, source, kb_wall_s(), kb_wall_s()))
		return -1;
	*tid = kb_state_last_insert_rowid(st);
	return 0;
}

int jdb_trigger_cancel(struct kb_state *st, int64_t tid, int *changes)
{
	if (jdb_run(st, NULL, "UPDATE triggers SET state = 'cancelled', updated_at = ? WHERE id = ?",
		    "ii", kb_wall_s(), tid) ||
	    jdb_run(st, changes, "UPDATE jobs SET state = 'cancelled', finished_at = ?,"
				 " updated_at = ? WHERE trigger_id = ? AND state = 'queued'",
		    "iii", kb_wall_s(), kb_wall_s(), tid))
		return -1;
	return 0;
}

int jdb_trigger_pending(struct kb_state *st, int64_t tid, int64_t *n)
{
	return jdb_int(st, n, "SELECT count(*) FROM jobs WHERE trigger_id = ? AND state IN "
			      "('queued', 'running')", "i", tid);
}

int jdb_trigger_counts(struct kb_state *st, int64_t tid, int64_t job_id, enum kb_job_state as,
		       int64_t *pending, int64_t *failed, int64_t *done)
{
	static const char *const count_sql =
		"SELECT count(*) FROM jobs WHERE trigger_id = ? AND "
		"(CASE WHEN id = ? THEN ? ELSE state END) IN (?, ?)";
	const char *as_name = kb_job_state_name(as);

	if (jdb_int(st, pending, count_sql, "iittt", tid, job_id, as_name, "queued", "running") ||
	    jdb_int(st, failed, count_sql, "iittt", tid, job_id, as_name, "failed", "failed") ||
	    jdb_int(st, done, count_sql, "iittt", tid, job_id, as_name, "done", "done"))
		return -1;
	return 0;
}

void jrows_free(struct jrow *rows, size_t nr)
{
	for (size_t i = 0; i < nr; i++) {
		free(rows[i].operator_path);
		free(rows[i].state);
		free(rows[i].stage);
		free(rows[i].progress);
		free(rows[i].error);
		free(rows[i].result);
		free(rows[i].head_sha);
	}
	free(rows);
}

int jdb_trigger_rows(struct kb_state *st, int64_t tid, struct jrow **rows, size_t *nr)
{
	sqlite3_stmt *stmt = NULL;
	size_t alloc = 0;

	*rows = NULL;
	*nr = 0;
	if (kb_state_prepare(st, &stmt,
			     "SELECT id, operator, state, stage, progress, best_speedup, error, result,"
			     " started_at, finished_at, head_sha FROM jobs WHERE trigger_id = ?"
			     " ORDER BY id"))
		return error("could not query jobs in '%s'", kb_state_path(st));
	sqlite3_bind_int64(stmt, 1, tid);
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		struct jrow *row;

		if (*nr == alloc) {
			alloc = alloc ? 2 * alloc : 8;
			*rows = xrealloc(*rows, alloc * sizeof(**rows));
		}
		row = &(*rows)[(*nr)++];
		row->id = sqlite3_column_int64(stmt, 0);
		row->operator_path = kb_state_column_strdup(stmt, 1);
		row->state = kb_state_column_strdup(stmt, 2);
		row->stage = kb_state_column_strdup(stmt, 3);
		row->progress = kb_state_column_strdup(stmt, 4);
		row->best_speedup = sqlite3_column_double(stmt, 5);
		row->error = kb_state_column_strdup(stmt, 6);
		row->result = kb_state_column_strdup(stmt, 7);
		row->started_at = sqlite3_column_int64(stmt, 8);
		row->finished_at = sqlite3_column_int64(stmt, 9);
		row->head_sha = kb_state_column_strdup(stmt, 10);
	}
	sqlite3_finalize(stmt);
	return 0;
}

/* --- jobs (the columns of migration 2) --- */

int jdb_job_requeue(struct kb_state *st, int64_t job_id)
{
	return jdb_run(st, NULL,
		       "UPDATE jobs SET state = 'queued', stage = NULL, error = NULL,"
		       " finished_at = NULL, progress = NULL, best_speedup = NULL,"
		       " reviewed_speedup = NULL, result = NULL, updated_at = ?"
		       " WHERE id = ?", "ii", kb_wall_s(), job_id);
}

int jdb_job_set_trigger(struct kb_state *st, int64_t job_id, int64_t tid)
{
	return jdb_run(st, NULL, "UPDATE jobs SET trigger_id = ? WHERE id = ?", "ii", tid, job_id);
}

int jdb_job_set_stage(struct kb_state *st, int64_t job_id, const char *stage)
{
	return jdb_run(st, NULL, "UPDATE jobs SET stage = ?, updated_at = ? WHERE id = ?", "tii",
		       stage, kb_wall_s(), job_id);
}

int jdb_job_set_progress(struct kb_state *st, int64_t job_id, const char *progress, double best)
{
	return jdb_run(st, NULL,
		       "UPDATE jobs SET progress = json(?), best_speedup = ?, updated_at = ?"
		       " WHERE id = ?", "tdii", progress, best, kb_wall_s(), job_id);
}

int jdb_job_set_result(struct kb_state *st, int64_t job_id, const char *result, double best)
{
	return jdb_run(st, NULL, "UPDATE jobs SET result = json(?), best_speedup = ? WHERE id = ?",
		       "tdi", result, best, job_id);
}

int jdb_job_reviewed(struct kb_state *st, int64_t job_id, int64_t repo_id, const char *marker,
		     double best, int *changes)
{
	if (jdb_run(st, changes,
		    "INSERT OR IGNORE INTO forge_objects (job_id, repository_id, kind, marker,"
		    " created_at, updated_at) VALUES (?, ?, 'review_comment', ?, ?, ?)",
		    "iitii", job_id, repo_id, marker, kb_wall_s(), kb_wall_s()) ||
	    jdb_run(st, NULL, "UPDATE jobs SET reviewed_speedup = ? WHERE id = ?", "di", best,
		    job_id))
		return -1;
	return 0;
}

void jhash(char out[65], const char *s)
{
	kb_sha256_hex(s, strlen(s), out);
}
