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

static int bind_args(struct kb_state *st, sqlite3_stmt *stmt, const char *types, va_list ap)
{
	for (int i = 0; types[i]; i++) {
		int rc;

		switch (types[i]) {
		case 'i':
			rc = sqlite3_bind_int64(stmt, i + 1, va_arg(ap, int64_t));
			break;
		case 'd':
			rc = sqlite3_bind_double(stmt, i + 1, va_arg(ap, double));
			break;
		case 't': {
			const char *s = va_arg(ap, const char *);

			rc = s ? sqlite3_bind_text(stmt, i + 1, s, -1, SQLITE_TRANSIENT)
			       : sqlite3_bind_null(stmt, i + 1);
			break;
		}
		default:
			return error("internal error: bad bind type '%c'", types[i]);
		}
		if (rc != SQLITE_OK)
			return error("could not bind a value in '%s': %s", kb_state_path(st),
				     kb_state_errmsg(st));
	}
	return 0;
}

static int prep(struct kb_state *st, sqlite3_stmt **stmt, const char *sql)
{
	if (kb_state_prepare(st, stmt, sql)) {
		return error("could not prepare a query in '%s': %s", kb_state_path(st),
			     kb_state_errmsg(st));
	}
	return 0;
}

/*
 * Run one statement with bound arguments: types is one letter per "?"
 * ('i' int64_t, 'd' double, 't' const char * (NULL binds NULL)).
 * *changes (may be NULL) gets the rows changed. 0 or -1 (logged).
 */
static int jdb_run(struct kb_state *st, int *changes, const char *sql, const char *types, ...)
{
	sqlite3_stmt *stmt;
	va_list ap;
	int rc = -1;

	if (prep(st, &stmt, sql))
		return -1;
	va_start(ap, types);
	if (bind_args(st, stmt, types, ap))
		goto out;
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		error("could not update '%s': %s", kb_state_path(st), kb_state_errmsg(st));
		goto out;
	}
	if (changes)
		*changes = kb_state_changes(st);
	rc = 0;
out:
	va_end(ap);
	sqlite3_finalize(stmt);
	return rc;
}

/* One int64 from a one-row query; KB_ENOTFOUND (quiet) when no row. */
static int jdb_int(struct kb_state *st, int64_t *out, const char *sql, const char *types, ...)
{
	sqlite3_stmt *stmt;
	va_list ap;
	int rc = -1;

	if (prep(st, &stmt, sql))
		return -1;
	va_start(ap, types);
	if (bind_args(st, stmt, types, ap))
		goto out;
	rc = kb_state_step_one(st, stmt, "query");
	if (rc == 1) {
		*out = sqlite3_column_int64(stmt, 0);
		rc = 0;
	}
out:
	va_end(ap);
	sqlite3_finalize(stmt);
	return rc;
}

static char *col_dup(sqlite3_stmt *stmt, int col)
{
	const unsigned char *s = sqlite3_column_text(stmt, col);

	return s ? xstrdup((const char *)s) : NULL;
}

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
	sqlite3_stmt *stmt;
	int rc = -1;

	jtrigger_release(out);
	if (prep(st, &stmt, sql))
		return -1;
	sqlite3_bind_int64(stmt, 1, a);
	if (b)
		sqlite3_bind_int64(stmt, 2, b);
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW:
		out->id = sqlite3_column_int64(stmt, 0);
		out->repo_id = sqlite3_column_int64(stmt, 1);
		out->pr = sqlite3_column_int64(stmt, 2);
		out->repo = col_dup(stmt, 3);
		out->head_sha = col_dup(stmt, 4);
		out->actor = col_dup(stmt, 5);
		out->source = col_dup(stmt, 6);
		out->state = col_dup(stmt, 7);
		rc = 0;
		break;
	case SQLITE_DONE:
		rc = KB_ENOTFOUND;
		break;
	default:
		error("could not read a trigger from '%s': %s", kb_state_path(st),
		      kb_state_errmsg(st));
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
	sqlite3_stmt *stmt;
	int rc = -1;

	jobject_release(out);
	if (prep(st, &stmt, "SELECT id, remote_id, url, body_hash FROM forge_objects "
			    "WHERE repository_id = ? AND kind = ? AND marker = ?"))
		return -1;
	sqlite3_bind_int64(stmt, 1, repo_id);
	sqlite3_bind_text(stmt, 2, kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 3, marker, -1, SQLITE_STATIC);
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW:
		out->id = sqlite3_column_int64(stmt, 0);
		out->remote_id = col_dup(stmt, 1);
		out->url = col_dup(stmt, 2);
		out->body_hash = col_dup(stmt, 3);
		rc = 0;
		break;
	case SQLITE_DONE:
		rc = KB_ENOTFOUND;
		break;
	default:
		error("could not read forge objects from '%s': %s", kb_state_path(st),
		      kb_state_errmsg(st));
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
	sqlite3_stmt *stmt;
	int rc = -1;

	jextra_release(out);
	if (prep(st, &stmt, "SELECT trigger_id, progress, best_speedup, reviewed_speedup, result "
			    "FROM jobs WHERE id = ?"))
		return -1;
	sqlite3_bind_int64(stmt, 1, job_id);
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW:
		out->trigger_id = sqlite3_column_int64(stmt, 0);
		out->progress = col_dup(stmt, 1);
		out->best_speedup = sqlite3_column_double(stmt, 2);
		out->reviewed_speedup = sqlite3_column_double(stmt, 3);
		out->result = col_dup(stmt, 4);
		rc = 0;
		break;
	case SQLITE_DONE:
		rc = KB_ENOTFOUND;
		break;
	default:
		error("could not read job %lld from '%s': %s", (long long)job_id, kb_state_path(st),
		      kb_state_errmsg(st));
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
		row->operator_path = col_dup(stmt, 1);
		row->state = col_dup(stmt, 2);
		row->stage = col_dup(stmt, 3);
		row->progress = col_dup(stmt, 4);
		row->best_speedup = sqlite3_column_double(stmt, 5);
		row->error = col_dup(stmt, 6);
		row->result = col_dup(stmt, 7);
		row->started_at = sqlite3_column_int64(stmt, 8);
		row->finished_at = sqlite3_column_int64(stmt, 9);
		row->head_sha = col_dup(stmt, 10);
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
