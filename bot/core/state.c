#include "core/common.h"
#include "core/state.h"
#include "core/state_priv.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

/* Writers wait this long for the write lock before giving up. */
#define KB_STATE_BUSY_TIMEOUT_MS 10000
/* quick_check stops listing problems after this many */
#define KB_STATE_CHECK_MAX_ERRORS "5"

struct kb_state {
	sqlite3 *db;
	char *path;
	struct strbuf damage;   /* why the file is damaged (SQLITE_CORRUPT, NOTADB, quick_check) */
};

static const char *const job_state_names[] = {
	[KB_JOB_QUEUED] = "queued",
	[KB_JOB_RUNNING] = "running",
	[KB_JOB_DONE] = "done",
	[KB_JOB_FAILED] = "failed",
	[KB_JOB_CANCELLED] = "cancelled",
};

const char *kb_job_state_name(enum kb_job_state state)
{
	if ((unsigned)state >= ARRAY_SIZE(job_state_names))
		return NULL;
	return job_state_names[state];
}

int kb_job_state_parse(const char *name, enum kb_job_state *out)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(job_state_names); i++)
		if (!strcmp(name, job_state_names[i])) {
			*out = (enum kb_job_state)i;
			return 0;
		}
	return -1;
}

void kb_job_release(struct kb_job *job)
{
	free(job->forge);
	free(job->repository);
	free(job->head_sha);
	free(job->operator_path);
	free(job->stage);
	free(job->error);
	memset(job, 0, sizeof(*job));
}

/* Note why the file is damaged; kb_state_open refuses it afterwards. */
static void note_damage(struct kb_state *st, const char *why)
{
	if (st->damage.len)
		strbuf_addstr(&st->damage, "; ");
	strbuf_addstr(&st->damage, why);
}

/*
 * Log "<what> in '<db path>': <sqlite message>" and return -1. Call it right
 * after the failing call: a later ROLLBACK replaces the message. A damaged
 * file (SQLITE_CORRUPT, SQLITE_NOTADB) is noted as well.
 */
KB_PRINTF(2, 3)
static int db_error(struct kb_state *st, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	int code = sqlite3_errcode(st->db) & 0xff;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	error("%s in '%s': %s", sb.buf, st->path, sqlite3_errmsg(st->db));
	if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
		note_damage(st, sqlite3_errmsg(st->db));
	strbuf_release(&sb);
	return -1;
}

static int exec_sql(struct kb_state *st, const char *sql, const char *what)
{
	if (sqlite3_exec(st->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return db_error(st, "%s", what);
	return 0;
}

static int prepare(struct kb_state *st, sqlite3_stmt **stmt, const char *sql, const char *what)
{
	if (sqlite3_prepare_v2(st->db, sql, -1, stmt, NULL) != SQLITE_OK) {
		*stmt = NULL;
		return db_error(st, "%s", what);
	}
	return 0;
}

/* Run a PRAGMA (or any one-row query) and read its first column as int. */
static int query_int(struct kb_state *st, const char *sql, int64_t *out, const char *what)
{
	sqlite3_stmt *stmt;
	int rc = -1;

	if (prepare(st, &stmt, sql, what))
		return -1;
	if (sqlite3_step(stmt) != SQLITE_ROW) {
		db_error(st, "%s", what);
		goto out;
	}
	*out = sqlite3_column_int64(stmt, 0);
	rc = 0;
out:
	sqlite3_finalize(stmt);
	return rc;
}

/* End whatever transaction is open, quietly: SQLite may have ended it already. */
static void rollback_quietly(struct kb_state *st)
{
	if (!sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/*
 * Every writing function runs between kb_state_txn_enter and
 * kb_state_txn_leave: its own BEGIN IMMEDIATE transaction, or a savepoint
 * inside the caller's kb_state_begin() so that a failed step undoes only
 * itself.
 */
int kb_state_txn_enter(struct kb_state *st, bool *own)
{
	*own = sqlite3_get_autocommit(st->db) != 0;
	if (*own)
		return exec_sql(st, "BEGIN IMMEDIATE", "could not start a transaction");
	return exec_sql(st, "SAVEPOINT kb_op", "could not start a savepoint");
}

/* Commit unless rc is KB_ERROR (named codes changed nothing); returns rc, or -1. */
int kb_state_txn_leave(struct kb_state *st, bool own, int rc)
{
	if (rc != KB_ERROR) {
		if (!exec_sql(st, own ? "COMMIT" : "RELEASE kb_op", "could not commit"))
			return rc;
		rc = KB_ERROR;
	}
	if (own) {
		rollback_quietly(st);
	} else if (!sqlite3_get_autocommit(st->db)) {
		sqlite3_exec(st->db, "ROLLBACK TO kb_op", NULL, NULL, NULL);
		sqlite3_exec(st->db, "RELEASE kb_op", NULL, NULL, NULL);
	}
	return rc;
}

/* --- opening and migrations --- */

int kb_state_schema_latest(void)
{
	return kb_state_migrations[kb_state_nr_migrations - 1].version;
}

int kb_state_schema_version(struct kb_state *st)
{
	int64_t v;

	if (query_int(st, "PRAGMA user_version", &v, "could not read the schema version"))
		return -1;
	return (int)v;
}

/* fresh: the database was just created, one line says so (migrate) instead of one per migration */
static int apply_migration(struct kb_state *st, const struct kb_state_migration *m, bool fresh)
{
	struct strbuf sql = STRBUF_INIT;
	sqlite3_stmt *stmt = NULL;
	int64_t cur = 0;
	int rc = -1;

	if (exec_sql(st, "BEGIN IMMEDIATE", "could not start a migration"))
		return -1;
	/* Another process may have migrated while we waited for the lock. */
	if (query_int(st, "PRAGMA user_version", &cur, "could not read the schema version"))
		goto out;
	if (cur >= m->version) {
		rc = 0;
		goto out;
	}
	if (cur != m->version - 1) {
		error("database '%s' has schema version %lld, migration %d needs %d",
		      st->path, (long long)cur, m->version, m->version - 1);
		goto out;
	}
	if (sqlite3_exec(st->db, m->sql, NULL, NULL, NULL) != SQLITE_OK) {
		db_error(st, "could not apply migration %d (%s)", m->version, m->name);
		goto out;
	}
	/* A table rebuild must leave every foreign key satisfied. */
	if (prepare(st, &stmt, "PRAGMA foreign_key_check", "could not check foreign keys"))
		goto out;
	switch (sqlite3_step(stmt)) {
	case SQLITE_DONE:
		break;
	case SQLITE_ROW:
		error("migration %d (%s) breaks a foreign key in table '%s' of '%s'",
		      m->version, m->name, (const char *)sqlite3_column_text(stmt, 0), st->path);
		goto out;
	default:
		db_error(st, "could not check foreign keys after migration %d", m->version);
		goto out;
	}
	strbuf_addf(&sql, "PRAGMA user_version = %d", m->version);
	if (exec_sql(st, sql.buf, "could not set the schema version"))
		goto out;
	rc = 0;
out:
	sqlite3_finalize(stmt);
	strbuf_release(&sql);
	if (!rc)
		rc = exec_sql(st, "COMMIT", "could not commit a migration");
	if (rc)
		rollback_quietly(st);
	else if (cur < m->version)
		log_msg(fresh ? KB_LOG_DEBUG : KB_LOG_INFO, "state: migrated '%s' to schema version %d (%s)",
			st->path, m->version, m->name);
	return rc;
}

static int migrate(struct kb_state *st)
{
	int latest = kb_state_schema_latest();
	int v;

	for (size_t i = 0; i < kb_state_nr_migrations; i++)
		if (kb_state_migrations[i].version != (int)i + 1)
			return error("state migration %zu has version %d; versions must run 1, 2, 3, ...",
				     i, kb_state_migrations[i].version);
	v = kb_state_schema_version(st);
	if (v < 0)
		return -1;
	if (v > latest)
		return error("database '%s' has schema version %d, newer than this kernelbot knows (%d)",
			     st->path, v, latest);
	for (size_t i = (size_t)v; i < kb_state_nr_migrations; i++)
		if (apply_migration(st, &kb_state_migrations[i], v == 0))
			return -1;
	if (v == 0)
		log_info("state: created '%s' (schema version %d)", st->path, latest);
	/* a newer binary may have migrated it meanwhile */
	v = kb_state_schema_version(st);
	if (v < 0)
		return -1;
	if (v > latest)
		return error("database '%s' has schema version %d, newer than this kernelbot knows (%d)",
			     st->path, v, latest);
	return 0;
}

static int configure(struct kb_state *st)
{
	sqlite3_stmt *stmt;
	const char *mode;
	int64_t fk;
	int rc = -1;

	sqlite3_busy_timeout(st->db, KB_STATE_BUSY_TIMEOUT_MS);
	/*
	 * Readers never block the writer and a killed writer leaves only an
	 * uncommitted WAL tail. Switching a new database to WAL can fail with
	 * SQLITE_BUSY without consulting the busy handler while another process
	 * opens it at the same moment, so retry here up to the same timeout.
	 */
	if (prepare(st, &stmt, "PRAGMA journal_mode = WAL", "could not set the journal mode"))
		return -1;
	for (int64_t start = kb_now_ms(); ; ) {
		int step = sqlite3_step(stmt);

		if (step == SQLITE_ROW)
			break;
		sqlite3_reset(stmt);
		if (step != SQLITE_BUSY || kb_now_ms() - start > KB_STATE_BUSY_TIMEOUT_MS) {
			db_error(st, "could not set the journal mode");
			goto out;
		}
		sqlite3_sleep(5 + (int)(kb_now_ms() % 10));
	}
	mode = (const char *)sqlite3_column_text(stmt, 0);
	if (!mode || strcasecmp(mode, "wal")) {
		error("could not switch '%s' to WAL mode (journal mode is '%s')",
		      st->path, mode ? mode : "?");
		goto out;
	}
	/*
	 * synchronous=NORMAL: in WAL mode a commit is then durable against a
	 * killed process (the kill test) and the database is never corrupted;
	 * only a power loss or kernel crash can drop the last few commits. The
	 * job loop redoes those idempotently (jobs by unique key, forge objects
	 * found again by marker), so an fsync per candidate row buys nothing.
	 */
	if (exec_sql(st, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL",
		     "could not set pragmas"))
		goto out;
	/* A build without foreign keys ignores the pragma silently. */
	if (query_int(st, "PRAGMA foreign_keys", &fk, "could not read foreign_keys"))
		goto out;
	if (fk != 1) {
		error("sqlite does not enforce foreign keys on '%s'", st->path);
		goto out;
	}
	rc = 0;
out:
	sqlite3_finalize(stmt);
	return rc;
}

/*
 * PRAGMA quick_check: every page of every b-tree is read and its structure,
 * free list and records checked (integrity_check also matches each index
 * against its table, several times slower); it reads the whole file once,
 * about a second per GB. Problems go to st->damage.
 */
static int check_integrity(struct kb_state *st)
{
	sqlite3_stmt *stmt;
	int step, rc = 0;

	if (prepare(st, &stmt, "PRAGMA quick_check(" KB_STATE_CHECK_MAX_ERRORS ")",
		    "could not check the database"))
		return -1;
	while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
		const char *row = (const char *)sqlite3_column_text(stmt, 0);

		if (!row || strcmp(row, "ok"))
			note_damage(st, row ? row : "quick_check returned NULL");
	}
	if (step != SQLITE_DONE)
		rc = db_error(st, "could not check the database");
	sqlite3_finalize(stmt);
	return st->damage.len ? -1 : rc;
}

/* Copy src to dst, which must not exist yet. */
static int copy_file(const char *src, const char *dst)
{
	char buf[16384];
	int in, out = -1, rc = -1;
	ssize_t n;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return error_errno("could not open '%s'", src);
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0) {
		error_errno("could not create '%s'", dst);
		goto out;
	}
	while ((n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || kb_write_all(out, buf, (size_t)n)) {
			error_errno("could not copy '%s' to '%s'", src, dst);
			goto out;
		}
	}
	if (fsync(out)) {
		error_errno("could not flush '%s'", dst);
		goto out;
	}
	rc = 0;
out:
	if (out >= 0 && close(out) && !rc)
		rc = error_errno("could not close '%s'", dst);
	if (rc && out >= 0)
		unlink(dst);
	close(in);
	return rc;
}

/* True when a and b hold the same bytes; a missing file counts as empty. */
static bool same_content(const char *a, const char *b)
{
	char ba[16384], bb[16384];
	struct stat sa, sb;
	bool same = false, has_a = !stat(a, &sa) && sa.st_size, has_b = !stat(b, &sb) && sb.st_size;
	int fa = -1, fb = -1;
	ssize_t na, nb;

	if (!has_a || !has_b)
		return has_a == has_b;
	if (sa.st_size != sb.st_size)
		return false;
	fa = open(a, O_RDONLY | O_CLOEXEC);
	fb = open(b, O_RDONLY | O_CLOEXEC);
	if (fa < 0 || fb < 0)
		goto out;
	do {
		na = read(fa, ba, sizeof(ba));
		nb = read(fb, bb, sizeof(bb));
		if (na < 0 || na != nb || memcmp(ba, bb, (size_t)na))
			goto out;
	} while (na > 0);
	same = true;
out:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return same;
}

/*
 * An earlier copy of the damaged file, WAL included ("<copy>-wal" beside
 * it), into out: a daemon restarted in a loop makes one copy, not one per
 * start.
 */
static bool find_copy(const char *path, struct strbuf *out)
{
	struct strbuf prefix = STRBUF_INIT, cand = STRBUF_INIT, wal = STRBUF_INIT, cwal = STRBUF_INIT;
	const char *slash = strrchr(path, '/');
	size_t dir_len = slash ? (size_t)(slash - path) : 1;
	struct dirent *de;
	bool found = false;
	DIR *d;

	strbuf_addf(&prefix, "%s.corrupt-", slash ? slash + 1 : path);
	strbuf_add(&cand, slash ? path : ".", dir_len);
	d = opendir(cand.buf);
	strbuf_addf(&wal, "%s-wal", path);
	while (d && !found && (de = readdir(d))) {
		size_t nl = strlen(de->d_name);

		if (strncmp(de->d_name, prefix.buf, prefix.len) ||
		    (nl > 4 && !strcmp(de->d_name + nl - 4, "-wal")))
			continue;
		strbuf_setlen(&cand, dir_len);
		strbuf_addf(&cand, "/%s", de->d_name);
		strbuf_reset(&cwal);
		strbuf_addf(&cwal, "%s-wal", cand.buf);
		found = same_content(path, cand.buf) && same_content(wal.buf, cwal.buf);
	}
	if (d)
		closedir(d);
	if (found) {
		strbuf_reset(out);
		strbuf_add(out, cand.buf, cand.len);
	}
	strbuf_release(&prefix);
	strbuf_release(&cand);
	strbuf_release(&wal);
	strbuf_release(&cwal);
	return found;
}

/*
 * Copy the damaged database (and its WAL when not empty: committed pages
 * not yet checkpointed are part of the database) aside as "<path>.corrupt-YYYYmmddTHHMMSSZ[-N]" ("-wal" beside
 * it); the file itself stays where it is, untouched. 0 with the copy's
 * name in out, or -1.
 */
static int copy_damaged(const char *path, struct strbuf *out)
{
	struct strbuf wal = STRBUF_INIT, copy_wal = STRBUF_INIT;
	struct stat wst;
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	int rc = -1;

	if (find_copy(path, out))
		return 0;
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	for (int n = 1; ; n++) {
		strbuf_reset(out);
		strbuf_addf(out, "%s.corrupt-%s", path, stamp);
		if (n > 1)
			strbuf_addf(out, "-%d", n);
		if (access(out->buf, F_OK) || n == 100)
			break;
	}
	if (copy_file(path, out->buf))
		goto out;
	strbuf_addf(&wal, "%s-wal", path);
	strbuf_addf(&copy_wal, "%s-wal", out->buf);
	if (!stat(wal.buf, &wst) && wst.st_size && copy_file(wal.buf, copy_wal.buf))
		goto out;
	rc = 0;
out:
	strbuf_release(&wal);
	strbuf_release(&copy_wal);
	return rc;
}

/* The file is damaged: say so, where a copy is, and what to do; -1. */
static int refuse_damaged(struct kb_state *st)
{
	struct strbuf copy = STRBUF_INIT;
	int copied;

	/* nothing of ours may write to it any more: no checkpoint at close */
	sqlite3_db_config(st->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	copied = copy_damaged(st->path, &copy);
	sqlite3_close_v2(st->db);
	st->db = NULL;
	if (copied)
		error("state database '%s' is damaged (%s) and no copy of it could be made; "
		      "kernelbot will not use it: copy it aside by hand, then recover it "
		      "(sqlite3 '%s' .recover) or move it, with its -wal and -shm files, out of "
		      "the way to start with an empty state",
		      st->path, st->damage.buf, st->path);
	else
		error("state database '%s' is damaged (%s); a copy of it is in '%s'; "
		      "kernelbot will not use it: recover it (sqlite3 '%s' .recover) or move it, "
		      "with its -wal and -shm files, out of the way to start with an empty state",
		      st->path, st->damage.buf, copy.buf, st->path);
	strbuf_release(&copy);
	return -1;
}

int kb_state_open(struct kb_state **out, const char *state_dir)
{
	struct strbuf path = STRBUF_INIT;
	struct kb_state *st = NULL;
	int rc = -1;

	*out = NULL;
	if (!state_dir || !*state_dir)
		return error("state_dir is empty");
	if (kb_mkdir_p(state_dir, 0700))
		goto out;
	strbuf_addf(&path, "%s/%s", state_dir, KB_STATE_DB_NAME);
	st = xcalloc(1, sizeof(*st));
	st->path = strbuf_detach(&path, NULL);
	strbuf_init(&st->damage, 0);
	if (sqlite3_open_v2(st->path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
			    NULL) != SQLITE_OK) {
		if (st->db)
			db_error(st, "could not open the database");
		else
			error("could not open database '%s': out of memory", st->path);
		goto out;
	}
	/* checked before any migration writes to it */
	if (configure(st) || check_integrity(st) || migrate(st)) {
		if (st->damage.len)
			refuse_damaged(st);
		goto out;
	}
	*out = st;
	st = NULL;
	rc = 0;
out:
	kb_state_close(st);
	strbuf_release(&path);
	return rc;
}

void kb_state_close(struct kb_state *st)
{
	if (!st)
		return;
	if (st->db) {
		rollback_quietly(st);
		/* _v2: statements a caller left unfinalized do not leak the handle */
		if (sqlite3_close_v2(st->db) != SQLITE_OK)
			error("could not close database '%s': %s", st->path, sqlite3_errmsg(st->db));
	}
	strbuf_release(&st->damage);
	free(st->path);
	free(st);
}

const char *kb_state_path(const struct kb_state *st)
{
	return st->path;
}

sqlite3 *kb_state_db(struct kb_state *st)
{
	return st->db;
}

int kb_state_prepare(struct kb_state *st, sqlite3_stmt **stmt, const char *sql)
{
	if (sqlite3_prepare_v2(st->db, sql, -1, stmt, NULL) != SQLITE_OK) {
		*stmt = NULL;
		return -1;
	}
	return 0;
}

int kb_state_exec(struct kb_state *st, const char *sql)
{
	return sqlite3_exec(st->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

const char *kb_state_errmsg(struct kb_state *st)
{
	return sqlite3_errmsg(st->db);
}

int kb_state_step_one(struct kb_state *st, sqlite3_stmt *stmt, const char *what)
{
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW:
		return 1;
	case SQLITE_DONE:
		return KB_ENOTFOUND;
	default:
		return error("could not %s in '%s': %s", what, kb_state_path(st), sqlite3_errmsg(st->db));
	}
}

int kb_state_changes(struct kb_state *st)
{
	return sqlite3_changes(st->db);
}

int64_t kb_state_last_insert_rowid(struct kb_state *st)
{
	return sqlite3_last_insert_rowid(st->db);
}

bool kb_state_in_transaction(struct kb_state *st)
{
	return !sqlite3_get_autocommit(st->db);
}

void kb_state_bind_text(sqlite3_stmt *stmt, int i, const char *s)
{
	if (s)
		sqlite3_bind_text(stmt, i, s, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(stmt, i);
}

void kb_state_bind_id(sqlite3_stmt *stmt, int i, int64_t id)
{
	if (id > 0)
		sqlite3_bind_int64(stmt, i, id);
	else
		sqlite3_bind_null(stmt, i);
}

/* --- explicit transactions --- */

int kb_state_begin(struct kb_state *st)
{
	if (!sqlite3_get_autocommit(st->db))
		return error("a transaction is already open on '%s'", st->path);
	return exec_sql(st, "BEGIN IMMEDIATE", "could not start a transaction");
}

int kb_state_commit(struct kb_state *st)
{
	if (sqlite3_get_autocommit(st->db))
		return error("no transaction is open on '%s' to commit", st->path);
	if (exec_sql(st, "COMMIT", "could not commit")) {
		rollback_quietly(st);
		return -1;
	}
	return 0;
}

int kb_state_rollback(struct kb_state *st)
{
	if (sqlite3_get_autocommit(st->db))
		return 0;
	if (exec_sql(st, "ROLLBACK", "could not roll back"))
		return -1;
	return 0;
}

/* --- repositories --- */

int kb_state_repo_upsert(struct kb_state *st, int64_t *id_out,
			 const char *forge, const char *full_name)
{
	sqlite3_stmt *stmt = NULL;
	bool own;
	int rc = -1;

	if (!forge || !full_name || !*full_name)
		return error("repository name is empty");
	if (kb_state_txn_enter(st, &own))
		return -1;
	if (prepare(st, &stmt,
		    "INSERT INTO repositories (forge, full_name, created_at) VALUES (?1, ?2, ?3)"
		    " ON CONFLICT (forge, full_name) DO UPDATE SET forge = excluded.forge"
		    " RETURNING id",
		    "could not prepare repository upsert"))
		goto out;
	sqlite3_bind_text(stmt, 1, forge, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, full_name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 3, kb_wall_s());
	if (sqlite3_step(stmt) != SQLITE_ROW) {
		db_error(st, "could not add repository '%s' (%s)", full_name, forge);
		goto out;
	}
	*id_out = sqlite3_column_int64(stmt, 0);
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		db_error(st, "could not add repository '%s' (%s)", full_name, forge);
		goto out;
	}
	rc = 0;
out:
	sqlite3_finalize(stmt);
	return kb_state_txn_leave(st, own, rc);
}

/* --- jobs --- */

#define JOB_SELECT \
	"SELECT j.id, j.repository_id, r.forge, r.full_name, j.pr_number, j.head_sha," \
	" j.operator, j.state, j.stage, j.attempts, j.error, j.best_candidate_id," \
	" j.created_at, j.updated_at, j.started_at, j.finished_at" \
	" FROM jobs j JOIN repositories r ON r.id = j.repository_id"

/* Fill job from a JOB_SELECT row. */
static int read_job_row(struct kb_state *st, sqlite3_stmt *stmt, struct kb_job *job)
{
	const char *state = (const char *)sqlite3_column_text(stmt, 7);

	memset(job, 0, sizeof(*job));
	job->id = sqlite3_column_int64(stmt, 0);
	if (!state || kb_job_state_parse(state, &job->state))
		return error("job %lld in '%s' has unknown state '%s'",
			     (long long)job->id, st->path, state ? state : "");
	job->repository_id = sqlite3_column_int64(stmt, 1);
	job->forge = kb_state_column_strdup(stmt, 2);
	job->repository = kb_state_column_strdup(stmt, 3);
	job->pr_number = sqlite3_column_int64(stmt, 4);
	job->head_sha = kb_state_column_strdup(stmt, 5);
	job->operator_path = kb_state_column_strdup(stmt, 6);
	job->stage = kb_state_column_strdup(stmt, 8);
	job->attempts = sqlite3_column_int64(stmt, 9);
	job->error = kb_state_column_strdup(stmt, 10);
	job->best_candidate_id = sqlite3_column_int64(stmt, 11);
	job->created_at = sqlite3_column_int64(stmt, 12);
	job->updated_at = sqlite3_column_int64(stmt, 13);
	job->started_at = sqlite3_column_int64(stmt, 14);
	job->finished_at = sqlite3_column_int64(stmt, 15);
	return 0;
}

int kb_state_job_add(struct kb_state *st, int64_t *id_out, int64_t repo_id,
		     int64_t pr_number, const char *head_sha, const char *operator_path)
{
	sqlite3_stmt *stmt = NULL;
	int64_t now = kb_wall_s();
	bool own;
	int rc = -1;

	if (!head_sha || !*head_sha || !operator_path || !*operator_path)
		return error("job for pr %lld needs a head sha and an operator", (long long)pr_number);
	if (kb_state_txn_enter(st, &own))
		return -1;
	if (prepare(st, &stmt,
		    "INSERT INTO jobs (repository_id, pr_number, head_sha, operator, state,"
		    " attempts, created_at, updated_at)"
		    " VALUES (?1, ?2, ?3, ?4, 'queued', 0, ?5, ?5)"
		    " ON CONFLICT (repository_id, pr_number, head_sha, operator) DO NOTHING",
		    "could not prepare job insert"))
		goto out;
	sqlite3_bind_int64(stmt, 1, repo_id);
	sqlite3_bind_int64(stmt, 2, pr_number);
	sqlite3_bind_text(stmt, 3, head_sha, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 4, operator_path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 5, now);
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		db_error(st, "could not add job for pr %lld operator '%s'",
			 (long long)pr_number, operator_path);
		goto out;
	}
	if (sqlite3_changes(st->db) == 1) {
		*id_out = sqlite3_last_insert_rowid(st->db);
		rc = 0;
		goto out;
	}
	sqlite3_finalize(stmt);
	if (prepare(st, &stmt,
		    "SELECT id FROM jobs WHERE repository_id = ?1 AND pr_number = ?2"
		    " AND head_sha = ?3 AND operator = ?4",
		    "could not prepare job lookup"))
		goto out;
	sqlite3_bind_int64(stmt, 1, repo_id);
	sqlite3_bind_int64(stmt, 2, pr_number);
	sqlite3_bind_text(stmt, 3, head_sha, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 4, operator_path, -1, SQLITE_STATIC);
	if (sqlite3_step(stmt) != SQLITE_ROW) {
		db_error(st, "could not find existing job for pr %lld operator '%s'",
			 (long long)pr_number, operator_path);
		goto out;
	}
	*id_out = sqlite3_column_int64(stmt, 0);
	rc = KB_EEXISTS;
out:
	sqlite3_finalize(stmt);
	return kb_state_txn_leave(st, own, rc);
}

int kb_state_job_set_state(struct kb_state *st, int64_t id, enum kb_job_state state,
			   const char *stage, const char *err)
{
	const char *name = kb_job_state_name(state);
	sqlite3_stmt *stmt = NULL;
	bool own;
	int rc = -1;

	if (!name)
		return error("unknown job state %d", (int)state);
	if (kb_state_txn_enter(st, &own))
		return -1;
	if (prepare(st, &stmt,
		    "UPDATE jobs SET state = ?1, stage = coalesce(?2, stage), error = ?3,"
		    " updated_at = ?4,"
		    " started_at = CASE WHEN ?1 = 'running' THEN ?4 ELSE started_at END,"
		    " finished_at = CASE WHEN ?1 IN ('done', 'failed', 'cancelled') THEN ?4 END"
		    " WHERE id = ?5",
		    "could not prepare job update"))
		goto out;
	sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC);
	if (stage)
		sqlite3_bind_text(stmt, 2, stage, -1, SQLITE_STATIC);
	if (err)
		sqlite3_bind_text(stmt, 3, err, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 4, kb_wall_s());
	sqlite3_bind_int64(stmt, 5, id);
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		db_error(st, "could not set job %lld to '%s'", (long long)id, name);
		goto out;
	}
	rc = sqlite3_changes(st->db) ? 0 : KB_ENOTFOUND;
out:
	sqlite3_finalize(stmt);
	return kb_state_txn_leave(st, own, rc);
}

int kb_state_job_get(struct kb_state *st, int64_t id, struct kb_job *out)
{
	sqlite3_stmt *stmt = NULL;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (prepare(st, &stmt, JOB_SELECT " WHERE j.id = ?1", "could not prepare job lookup"))
		return -1;
	sqlite3_bind_int64(stmt, 1, id);
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW:
		rc = read_job_row(st, stmt, out);
		break;
	case SQLITE_DONE:
		rc = KB_ENOTFOUND;
		break;
	default:
		db_error(st, "could not read job %lld", (long long)id);
		break;
	}
	sqlite3_finalize(stmt);
	if (rc)
		kb_job_release(out);
	return rc;
}

static int job_row(sqlite3_stmt *stmt, void *elem, void *payload)
{
	return read_job_row(payload, stmt, elem);
}

static void job_row_release(void *elem)
{
	kb_job_release(elem);
}

int kb_state_jobs_foreach(struct kb_state *st, const char *state_filter,
			  int (*cb)(const struct kb_job *job, void *payload), void *payload)
{
	sqlite3_stmt *stmt = NULL;
	struct kb_job *jobs;
	void *rows = NULL;
	size_t nr = 0;
	enum kb_job_state filter;
	int rc;

	if (state_filter && kb_job_state_parse(state_filter, &filter))
		return error("unknown job state '%s'", state_filter);
	if (prepare(st, &stmt,
		    JOB_SELECT " WHERE ?1 IS NULL OR j.state = ?1 ORDER BY j.created_at, j.id",
		    "could not prepare job listing"))
		return -1;
	if (state_filter)
		sqlite3_bind_text(stmt, 1, state_filter, -1, SQLITE_STATIC);
	rc = kb_state_read_rows(st, stmt, "list jobs", sizeof(*jobs), &rows, &nr, job_row,
				job_row_release, st);
	/* the statement ends its read transaction before any callback runs */
	sqlite3_finalize(stmt);
	jobs = rows;
	for (size_t i = 0; i < nr && !rc; i++)
		rc = cb(&jobs[i], payload);
	for (size_t i = 0; i < nr; i++)
		kb_job_release(&jobs[i]);
	free(jobs);
	return rc;
}

int kb_state_job_claim_next(struct kb_state *st, struct kb_job *out)
{
	sqlite3_stmt *stmt = NULL;
	int64_t id = 0;
	bool own;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	/* one writer transaction: nobody can claim the same row in between */
	if (kb_state_txn_enter(st, &own))
		return -1;
	if (prepare(st, &stmt,
		    "UPDATE jobs SET state = 'running', started_at = ?1, updated_at = ?1,"
		    " finished_at = NULL, error = NULL"
		    " WHERE id = (SELECT id FROM jobs WHERE state = 'queued'"
		    "             ORDER BY created_at, id LIMIT 1)"
		    " RETURNING id",
		    "could not prepare job claim"))
		goto out;
	sqlite3_bind_int64(stmt, 1, kb_wall_s());
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW:
		id = sqlite3_column_int64(stmt, 0);
		if (sqlite3_step(stmt) != SQLITE_DONE) {
			db_error(st, "could not claim a queued job");
			goto out;
		}
		break;
	case SQLITE_DONE:
		rc = KB_ENOTFOUND;
		goto out;
	default:
		db_error(st, "could not claim a queued job");
		goto out;
	}
	sqlite3_finalize(stmt);
	stmt = NULL;
	rc = kb_state_job_get(st, id, out);
	if (rc == KB_ENOTFOUND)
		rc = error("claimed job %lld vanished from '%s'", (long long)id, st->path);
out:
	sqlite3_finalize(stmt);
	rc = kb_state_txn_leave(st, own, rc);
	if (rc)
		kb_job_release(out);
	return rc;
}

int kb_state_requeue_running(struct kb_state *st)
{
	sqlite3_stmt *stmt = NULL;
	bool own;
	int rc = -1;

	if (kb_state_txn_enter(st, &own))
		return -1;
	if (prepare(st, &stmt,
		    "UPDATE jobs SET state = 'queued', attempts = attempts + 1, updated_at = ?1"
		    " WHERE state = 'running'",
		    "could not prepare job requeue"))
		goto out;
	sqlite3_bind_int64(stmt, 1, kb_wall_s());
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		db_error(st, "could not requeue running jobs");
		goto out;
	}
	rc = sqlite3_changes(st->db);
out:
	sqlite3_finalize(stmt);
	rc = kb_state_txn_leave(st, own, rc);
	if (rc > 0)
		log_info("state: requeued %d interrupted job%s", rc, rc == 1 ? "" : "s");
	return rc;
}
