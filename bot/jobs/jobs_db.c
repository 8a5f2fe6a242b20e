#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "jobs/jobs_priv.h"
#include "verifier/evidence.h"

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
				     sqlite3_errmsg(kb_state_db(st)));
	}
	return 0;
}

static int prep(struct kb_state *st, sqlite3_stmt **stmt, const char *sql)
{
	if (sqlite3_prepare_v2(kb_state_db(st), sql, -1, stmt, NULL) != SQLITE_OK) {
		*stmt = NULL;
		return error("could not prepare a query in '%s': %s", kb_state_path(st),
			     sqlite3_errmsg(kb_state_db(st)));
	}
	return 0;
}

int jdb_run(struct kb_state *st, int *changes, const char *sql, const char *types, ...)
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
		error("could not update '%s': %s", kb_state_path(st), sqlite3_errmsg(kb_state_db(st)));
		goto out;
	}
	if (changes)
		*changes = sqlite3_changes(kb_state_db(st));
	rc = 0;
out:
	va_end(ap);
	sqlite3_finalize(stmt);
	return rc;
}

int jdb_int(struct kb_state *st, int64_t *out, const char *sql, const char *types, ...)
{
	sqlite3_stmt *stmt;
	va_list ap;
	int rc = -1;

	if (prep(st, &stmt, sql))
		return -1;
	va_start(ap, types);
	if (bind_args(st, stmt, types, ap))
		goto out;
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW:
		*out = sqlite3_column_int64(stmt, 0);
		rc = 0;
		break;
	case SQLITE_DONE:
		rc = KB_ENOTFOUND;
		break;
	default:
		error("could not query '%s': %s", kb_state_path(st), sqlite3_errmsg(kb_state_db(st)));
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
		      sqlite3_errmsg(kb_state_db(st)));
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
		      sqlite3_errmsg(kb_state_db(st)));
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
		      sqlite3_errmsg(kb_state_db(st)));
	}
	sqlite3_finalize(stmt);
	return rc;
}

void jhash(char out[65], const char *s)
{
	kb_sha256_hex(s, strlen(s), out);
}
