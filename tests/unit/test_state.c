#include "core/common.h"
#include "cli/runs_db.h"
#include "core/log.h"
#include "core/state.h"
#include "core/state_priv.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

/* Each test gets a fresh directory; the database lives in <dir>/state. */
struct fixture {
	char dir[64];
	char state_dir[96];
};

static int setup(void **ctx)
{
	struct fixture *f = xcalloc(1, sizeof(*f));

	kb_strlcpy(f->dir, "/tmp/kb-test-state-XXXXXX", sizeof(f->dir));
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	xsnprintf(f->state_dir, sizeof(f->state_dir), "%s/state", f->dir);
	*ctx = f;
	return 0;
}

static int teardown(void **ctx)
{
	struct fixture *f = *ctx;

	kb_rm_rf(f->dir);
	free(f);
	return 0;
}

/* A one-value query on a raw handle; -1 on error. */
static int64_t sql_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt;
	int64_t v = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return v;
}

static char *sql_text(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt;
	char *v = NULL;

	if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK)
		return NULL;
	if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0))
		v = xstrdup((const char *)sqlite3_column_text(stmt, 0));
	sqlite3_finalize(stmt);
	return v;
}

static void assert_integrity_ok(sqlite3 *db)
{
	char *ic = sql_text(db, "PRAGMA integrity_check");

	assert_non_null(ic);
	assert_string_equal(ic, "ok");
	free(ic);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
}

static int64_t add_repo(struct kb_state *st, const char *name)
{
	int64_t id = 0;

	assert_int_equal(kb_state_repo_upsert(st, &id, "github", name), 0);
	assert_true(id > 0);
	return id;
}

static int64_t add_job(struct kb_state *st, int64_t repo, int64_t pr, const char *op)
{
	int64_t id = 0;

	assert_int_equal(kb_state_job_add(st, &id, repo, pr,
					  "0123456789abcdef0123456789abcdef01234567", op), 0);
	assert_true(id > 0);
	return id;
}

static const char *const tables[] = {
	"repositories", "jobs", "candidates", "archive_cells", "prompts", "searches", "search_history",
	"forge_objects", "llm_calls", "webhook_deliveries", "timings",
};

static void test_open_migrates_empty(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct strbuf sb = STRBUF_INIT;
	sqlite3 *db;
	char *mode;

	/* state_dir does not exist yet: open creates it */
	assert_false(kb_is_dir(f->state_dir));
	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	assert_non_null(st);
	strbuf_addf(&sb, "%s/" KB_STATE_DB_NAME, f->state_dir);
	assert_true(kb_is_file(sb.buf));
	assert_string_equal(kb_state_path(st), sb.buf);
	assert_true(kb_state_schema_latest() >= 1);
	assert_int_equal(kb_state_schema_version(st), kb_state_schema_latest());

	db = kb_state_db(st);
	mode = sql_text(db, "PRAGMA journal_mode");
	assert_string_equal(mode, "wal");
	free(mode);
	assert_int_equal(sql_int(db, "PRAGMA foreign_keys"), 1);
	assert_int_equal(sql_int(db, "PRAGMA synchronous"), 1); /* NORMAL */
	assert_true(sql_int(db, "PRAGMA busy_timeout") >= 1000);
	for (size_t i = 0; i < ARRAY_SIZE(tables); i++) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'",
			    tables[i]);
		assert_int_equal(sql_int(db, sb.buf), 1);
	}
	assert_int_equal(sql_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'jobs_by_state'"), 1);
	assert_integrity_ok(db);
	kb_state_close(st);
	strbuf_release(&sb);
}

static void test_reopen_is_idempotent(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct kb_job job = KB_JOB_INIT;
	int64_t objects, repo, id;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	repo = add_repo(st, "owner/repo");
	id = add_job(st, repo, 7, "ops/a.py");
	objects = sql_int(kb_state_db(st), "SELECT count(*) FROM sqlite_master");
	kb_state_close(st);

	for (int i = 0; i < 3; i++) {
		assert_int_equal(kb_state_open(&st, f->state_dir), 0);
		assert_int_equal(kb_state_schema_version(st), kb_state_schema_latest());
		assert_int_equal(sql_int(kb_state_db(st), "SELECT count(*) FROM sqlite_master"), objects);
		assert_int_equal(kb_state_job_get(st, id, &job), 0);
		assert_string_equal(job.repository, "owner/repo");
		assert_string_equal(job.forge, "github");
		assert_int_equal(job.pr_number, 7);
		kb_job_release(&job);
		kb_state_close(st);
	}
}

static void test_future_version_refused(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct strbuf path = STRBUF_INIT, sql = STRBUF_INIT, log = STRBUF_INIT;
	sqlite3 *db;
	int future = kb_state_schema_latest() + 41;
	char want[64];

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	kb_state_close(st);
	strbuf_addf(&path, "%s/" KB_STATE_DB_NAME, f->state_dir);
	assert_int_equal(sqlite3_open(path.buf, &db), SQLITE_OK);
	strbuf_addf(&sql, "PRAGMA user_version = %d", future);
	assert_int_equal(sqlite3_exec(db, sql.buf, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);

	/* the message must name both versions */
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/log", f->dir);
	assert_int_equal(log_open(path.buf), 0);
	st = (struct kb_state *)&st; /* must be reset to NULL on failure */
	assert_int_equal(kb_state_open(&st, f->state_dir), -1);
	log_close();
	assert_null(st);
	assert_int_equal(strbuf_read_file(&log, path.buf, 0), 0);
	xsnprintf(want, sizeof(want), "schema version %d", future);
	assert_non_null(strstr(log.buf, want));
	xsnprintf(want, sizeof(want), "(%d)", kb_state_schema_latest());
	assert_non_null(strstr(log.buf, want));
	assert_non_null(strstr(log.buf, "newer"));

	strbuf_release(&path);
	strbuf_release(&sql);
	strbuf_release(&log);
}

static void test_migrations_table(void **ctx)
{
	assert_true(kb_state_nr_migrations >= 1);
	for (size_t i = 0; i < kb_state_nr_migrations; i++) {
		assert_int_equal(kb_state_migrations[i].version, (int)i + 1);
		assert_non_null(kb_state_migrations[i].name);
		assert_non_null(kb_state_migrations[i].sql);
	}
}

static void test_repo_upsert(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	int64_t a = 0, b = 0, c = 0, d = 0;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	assert_int_equal(kb_state_repo_upsert(st, &a, "github", "owner/repo"), 0);
	assert_int_equal(kb_state_repo_upsert(st, &b, "github", "owner/repo"), 0);
	assert_int_equal(kb_state_repo_upsert(st, &c, "local", "owner/repo"), 0);
	assert_true(a > 0);
	assert_int_equal(a, b);
	assert_true(c != a);
	/* the CHECK constraint refuses an unknown forge */
	assert_int_equal(kb_state_repo_upsert(st, &d, "gitlab", "owner/repo"), -1);
	assert_int_equal(sql_int(kb_state_db(st), "SELECT count(*) FROM repositories"), 2);
	kb_state_close(st);
}

static void test_job_add_duplicate(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct kb_job job = KB_JOB_INIT;
	int64_t repo, id, dup = 0, other = 0;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	repo = add_repo(st, "owner/repo");
	id = add_job(st, repo, 12, "ops/softmax.py");
	assert_int_equal(kb_state_job_add(st, &dup, repo, 12,
					  "0123456789abcdef0123456789abcdef01234567", "ops/softmax.py"),
			 KB_EEXISTS);
	assert_int_equal(dup, id);
	/* any part of the key differing makes a new job */
	assert_int_equal(kb_state_job_add(st, &other, repo, 12, "ffff", "ops/softmax.py"), 0);
	assert_true(other != id);
	assert_int_equal(kb_state_job_add(st, &other, repo, 13,
					  "0123456789abcdef0123456789abcdef01234567", "ops/softmax.py"), 0);
	assert_int_equal(kb_state_job_add(st, &other, repo, 12,
					  "0123456789abcdef0123456789abcdef01234567", "ops/gelu.py"), 0);
	assert_int_equal(sql_int(kb_state_db(st), "SELECT count(*) FROM jobs"), 4);
	assert_int_equal(kb_state_job_add(st, &other, repo, 12, "", "ops/x.py"), -1);

	assert_int_equal(kb_state_job_get(st, id, &job), 0);
	assert_int_equal(job.id, id);
	assert_int_equal(job.repository_id, repo);
	assert_int_equal(job.state, KB_JOB_QUEUED);
	assert_string_equal(job.head_sha, "0123456789abcdef0123456789abcdef01234567");
	assert_string_equal(job.operator_path, "ops/softmax.py");
	assert_null(job.stage);
	assert_null(job.error);
	assert_int_equal(job.attempts, 0);
	assert_int_equal(job.best_candidate_id, 0);
	assert_true(job.created_at > 0 && job.updated_at >= job.created_at);
	assert_int_equal(job.started_at, 0);
	assert_int_equal(job.finished_at, 0);
	kb_job_release(&job);
	assert_int_equal(kb_state_job_get(st, 999999, &job), KB_ENOTFOUND);
	kb_state_close(st);
}

static void test_job_state_changes(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct kb_job job = KB_JOB_INIT;
	int64_t repo, id;
	enum kb_job_state s;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	repo = add_repo(st, "owner/repo");
	id = add_job(st, repo, 1, "ops/a.py");

	assert_int_equal(kb_state_job_set_state(st, id, KB_JOB_RUNNING, "translate", NULL), 0);
	assert_int_equal(kb_state_job_get(st, id, &job), 0);
	assert_int_equal(job.state, KB_JOB_RUNNING);
	assert_string_equal(job.stage, "translate");
	assert_true(job.started_at > 0);
	assert_int_equal(job.finished_at, 0);
	kb_job_release(&job);

	/* stage NULL keeps the stage; an error is stored; finished_at set */
	assert_int_equal(kb_state_job_set_state(st, id, KB_JOB_FAILED, NULL, "nvcc said no"), 0);
	assert_int_equal(kb_state_job_get(st, id, &job), 0);
	assert_int_equal(job.state, KB_JOB_FAILED);
	assert_string_equal(job.stage, "translate");
	assert_string_equal(job.error, "nvcc said no");
	assert_true(job.finished_at > 0);
	kb_job_release(&job);

	/* back to queued: error and finished_at cleared */
	assert_int_equal(kb_state_job_set_state(st, id, KB_JOB_QUEUED, "re-run", NULL), 0);
	assert_int_equal(kb_state_job_get(st, id, &job), 0);
	assert_int_equal(job.state, KB_JOB_QUEUED);
	assert_string_equal(job.stage, "re-run");
	assert_null(job.error);
	assert_int_equal(job.finished_at, 0);
	kb_job_release(&job);

	assert_int_equal(kb_state_job_set_state(st, 424242, KB_JOB_DONE, NULL, NULL), KB_ENOTFOUND);
	assert_int_equal(kb_state_job_set_state(st, id, (enum kb_job_state)17, NULL, NULL), -1);

	assert_int_equal(kb_job_state_parse("cancelled", &s), 0);
	assert_int_equal(s, KB_JOB_CANCELLED);
	assert_string_equal(kb_job_state_name(KB_JOB_DONE), "done");
	assert_int_equal(kb_job_state_parse("bogus", &s), -1);
	assert_null(kb_job_state_name((enum kb_job_state)99));
	kb_state_close(st);
}

struct walk {
	struct kb_state *st;
	int64_t ids[16];
	int nr;
	int stop_after;
	bool write;
};

static int walk_cb(const struct kb_job *job, void *payload)
{
	struct walk *w = payload;

	w->ids[w->nr++] = job->id;
	/* writing from inside the walk must work: no statement is open */
	if (w->write && kb_state_job_set_state(w->st, job->id, KB_JOB_CANCELLED, "walked", NULL))
		return -1;
	return w->nr == w->stop_after ? 7 : 0;
}

static void test_jobs_foreach(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct walk w = { 0 };
	int64_t repo, a, b, c;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	repo = add_repo(st, "owner/repo");
	a = add_job(st, repo, 1, "ops/a.py");
	b = add_job(st, repo, 2, "ops/b.py");
	c = add_job(st, repo, 3, "ops/c.py");
	assert_int_equal(kb_state_job_set_state(st, b, KB_JOB_DONE, "done", NULL), 0);

	w.st = st;
	assert_int_equal(kb_state_jobs_foreach(st, NULL, walk_cb, &w), 0);
	assert_int_equal(w.nr, 3);
	assert_int_equal(w.ids[0], a); /* oldest first */
	assert_int_equal(w.ids[1], b);
	assert_int_equal(w.ids[2], c);

	memset(&w, 0, sizeof(w));
	w.st = st;
	assert_int_equal(kb_state_jobs_foreach(st, "queued", walk_cb, &w), 0);
	assert_int_equal(w.nr, 2);
	assert_int_equal(w.ids[0], a);
	assert_int_equal(w.ids[1], c);

	memset(&w, 0, sizeof(w));
	assert_int_equal(kb_state_jobs_foreach(st, "running", walk_cb, &w), 0);
	assert_int_equal(w.nr, 0);

	/* a callback's non-zero return stops the walk and comes back */
	memset(&w, 0, sizeof(w));
	w.stop_after = 1;
	assert_int_equal(kb_state_jobs_foreach(st, NULL, walk_cb, &w), 7);
	assert_int_equal(w.nr, 1);

	assert_int_equal(kb_state_jobs_foreach(st, "nonsense", walk_cb, &w), -1);

	memset(&w, 0, sizeof(w));
	w.st = st;
	w.write = true;
	assert_int_equal(kb_state_jobs_foreach(st, "queued", walk_cb, &w), 0);
	assert_int_equal(w.nr, 2);
	assert_int_equal(sql_int(kb_state_db(st), "SELECT count(*) FROM jobs WHERE state = 'cancelled'"), 2);
	kb_state_close(st);
}

static void test_claim_next(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct kb_job j1 = KB_JOB_INIT, j2 = KB_JOB_INIT, j3 = KB_JOB_INIT;
	int64_t repo, a, b;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	assert_int_equal(kb_state_job_claim_next(st, &j1), KB_ENOTFOUND);
	repo = add_repo(st, "owner/repo");
	a = add_job(st, repo, 1, "ops/a.py");
	b = add_job(st, repo, 2, "ops/b.py");

	assert_int_equal(kb_state_job_claim_next(st, &j1), 0);
	assert_int_equal(kb_state_job_claim_next(st, &j2), 0);
	assert_int_equal(kb_state_job_claim_next(st, &j3), KB_ENOTFOUND);
	assert_int_equal(j1.id, a);
	assert_int_equal(j2.id, b);
	assert_int_equal(j1.state, KB_JOB_RUNNING);
	assert_int_equal(j2.state, KB_JOB_RUNNING);
	assert_true(j1.started_at > 0);
	assert_string_equal(j1.repository, "owner/repo");
	assert_int_equal(j3.id, 0);
	kb_job_release(&j1);
	kb_job_release(&j2);
	kb_job_release(&j3);
	kb_state_close(st);
}

/* Wait for a child and return its exit code, or 128 + signal. */
static int wait_child(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

/* Children claim jobs until none is left and write the ids to a pipe. */
static void test_claim_two_processes(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	enum { JOBS = 60 };
	int seen[JOBS + 1] = { 0 }, fds[2], total = 0, rc0, rc1;
	int64_t repo, id;
	pid_t pids[2];
	FILE *in;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	repo = add_repo(st, "owner/repo");
	for (int i = 0; i < JOBS; i++) {
		id = add_job(st, repo, i + 1, "ops/a.py");
		assert_true(id >= 1 && id <= JOBS);
	}
	kb_state_close(st);

	assert_int_equal(pipe(fds), 0);
	for (int c = 0; c < 2; c++) {
		pids[c] = fork();
		assert_true(pids[c] >= 0);
		if (!pids[c]) {
			struct kb_job job = KB_JOB_INIT;
			int rc, code = 0;

			close(fds[0]);
			if (kb_state_open(&st, f->state_dir))
				_exit(3);
			while ((rc = kb_state_job_claim_next(st, &job)) == 0) {
				char line[32];
				int n = snprintf(line, sizeof(line), "%lld\n", (long long)job.id);

				if (write(fds[1], line, (size_t)n) != n)
					code = 4;
				kb_job_release(&job);
			}
			if (rc != KB_ENOTFOUND)
				code = 5;
			kb_state_close(st);
			_exit(code);
		}
	}
	close(fds[1]);
	in = fdopen(fds[0], "r");
	assert_non_null(in);
	for (long long v; fscanf(in, "%lld", &v) == 1; total++) {
		assert_true(v >= 1 && v <= JOBS);
		seen[v]++;
	}
	fclose(in);
	rc0 = wait_child(pids[0]);
	rc1 = wait_child(pids[1]);
	assert_int_equal(rc0, 0);
	assert_int_equal(rc1, 0);
	assert_int_equal(total, JOBS);
	for (int i = 1; i <= JOBS; i++)
		assert_int_equal(seen[i], 1);
}

static void test_requeue_running(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	struct kb_job job = KB_JOB_INIT;
	int64_t repo, a, b, c;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	assert_int_equal(kb_state_requeue_running(st), 0);
	repo = add_repo(st, "owner/repo");
	a = add_job(st, repo, 1, "ops/a.py");
	b = add_job(st, repo, 2, "ops/b.py");
	c = add_job(st, repo, 3, "ops/c.py");
	assert_int_equal(kb_state_job_set_state(st, a, KB_JOB_RUNNING, "verify", NULL), 0);
	assert_int_equal(kb_state_job_set_state(st, b, KB_JOB_RUNNING, NULL, NULL), 0);
	assert_int_equal(kb_state_job_set_state(st, c, KB_JOB_DONE, NULL, NULL), 0);
	kb_state_close(st);

	/* "restart" */
	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	assert_int_equal(kb_state_requeue_running(st), 2);
	assert_int_equal(kb_state_job_get(st, a, &job), 0);
	assert_int_equal(job.state, KB_JOB_QUEUED);
	assert_int_equal(job.attempts, 1);
	assert_string_equal(job.stage, "verify"); /* where it stood */
	kb_job_release(&job);
	assert_int_equal(kb_state_job_get(st, c, &job), 0);
	assert_int_equal(job.state, KB_JOB_DONE);
	assert_int_equal(job.attempts, 0);
	kb_job_release(&job);
	assert_int_equal(kb_state_requeue_running(st), 0);

	/* claimed again, interrupted again: attempts counts both */
	assert_int_equal(kb_state_job_claim_next(st, &job), 0);
	assert_int_equal(job.id, a);
	kb_job_release(&job);
	assert_int_equal(kb_state_requeue_running(st), 1);
	assert_int_equal(kb_state_job_get(st, a, &job), 0);
	assert_int_equal(job.attempts, 2);
	kb_job_release(&job);
	kb_state_close(st);
}

static void test_foreign_keys(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	int64_t id = 0;
	sqlite3 *db;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	db = kb_state_db(st);
	assert_int_equal(kb_state_job_add(st, &id, 9999, 1, "abc", "ops/a.py"), -1);
	assert_int_equal(sqlite3_exec(db,
		"INSERT INTO candidates (search_id, proposer, source, source_hash, backend, created_at)"
		" VALUES (12345, 'llm', 'x', 'h', 'cpu', 0)", NULL, NULL, NULL), SQLITE_CONSTRAINT);
	assert_int_equal(sqlite3_extended_errcode(db), SQLITE_CONSTRAINT_FOREIGNKEY);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM jobs"), 0);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM candidates"), 0);
	/* JSON columns are checked */
	id = add_job(st, add_repo(st, "o/r"), 1, "ops/a.py");
	assert_int_equal(sqlite3_exec(db,
		"INSERT INTO timings (key, value, updated_at) VALUES ('k', '{not json', 0)",
		NULL, NULL, NULL), SQLITE_CONSTRAINT);
	kb_state_close(st);
}

static void test_explicit_transaction(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	int64_t repo, id = 0, bad = 0;
	sqlite3 *db;

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	db = kb_state_db(st);
	repo = add_repo(st, "owner/repo");

	assert_int_equal(kb_state_begin(st), 0);
	assert_int_equal(kb_state_begin(st), -1); /* no nesting */
	id = add_job(st, repo, 1, "ops/a.py");
	assert_int_equal(kb_state_rollback(st), 0);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM jobs"), 0);

	/* a failing call inside undoes itself only; the rest commits */
	assert_int_equal(kb_state_begin(st), 0);
	id = add_job(st, repo, 1, "ops/a.py");
	assert_int_equal(kb_state_job_add(st, &bad, 9999, 2, "abc", "ops/b.py"), -1);
	assert_int_equal(kb_state_job_set_state(st, id, KB_JOB_RUNNING, "x", NULL), 0);
	assert_int_equal(kb_state_commit(st), 0);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM jobs"), 1);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM jobs WHERE state = 'running'"), 1);
	assert_int_equal(kb_state_commit(st), -1); /* nothing open */
	assert_int_equal(kb_state_rollback(st), 0);
	kb_state_close(st);
}

/*
 * The kill test's child: forever, one transaction = one job + 50 candidate
 * rows of ~2 KiB each, so that most of the time is spent inside a write.
 * Writes a byte to ready_fd after the first commit.
 */
enum { KILL_CANDIDATES = 50 };

static _Noreturn void kill_child(const char *state_dir, int ready_fd, int round)
{
	struct kb_state *st;
	char source[2048];
	sqlite3_stmt *ins = NULL, *srch = NULL;
	int64_t repo;

	memset(source, 'x', sizeof(source) - 1);
	source[sizeof(source) - 1] = '\0';
	if (kb_state_open(&st, state_dir) || kb_state_repo_upsert(st, &repo, "local", "kill/test"))
		_exit(3);
	if (sqlite3_prepare_v2(kb_state_db(st),
			       "INSERT INTO candidates (search_id, proposer, source, source_hash, backend,"
			       " evidence, created_at) VALUES (?1, 'template', ?2, ?3, 'cpu', '{\"ok\": true}', 0)",
			       -1, &ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(kb_state_db(st),
			       "INSERT INTO searches (key, job_id, operator, backend, pass, seed, rng,"
			       " started_at, updated_at) VALUES (?1, ?2, 'ops/k.py', 'cpu', 'forward', 1, 1, 0, 0)",
			       -1, &srch, NULL) != SQLITE_OK)
		_exit(4);
	for (int64_t i = 0; ; i++) {
		char sha[32], hash[32];
		int64_t job, search;

		xsnprintf(sha, sizeof(sha), "r%d-%lld", round, (long long)i);
		if (kb_state_begin(st) ||
		    kb_state_job_add(st, &job, repo, i, sha, "ops/k.py"))
			_exit(5);
		sqlite3_bind_text(srch, 1, sha, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(srch, 2, job);
		if (sqlite3_step(srch) != SQLITE_DONE)
			_exit(6);
		sqlite3_reset(srch);
		search = sqlite3_last_insert_rowid(kb_state_db(st));
		for (int c = 0; c < KILL_CANDIDATES; c++) {
			xsnprintf(hash, sizeof(hash), "h%d", c);
			sqlite3_bind_int64(ins, 1, search);
			sqlite3_bind_text(ins, 2, source, -1, SQLITE_STATIC);
			sqlite3_bind_text(ins, 3, hash, -1, SQLITE_TRANSIENT);
			if (sqlite3_step(ins) != SQLITE_DONE)
				_exit(6);
			sqlite3_reset(ins);
		}
		if (kb_state_commit(st))
			_exit(7);
		if (i == 0 && write(ready_fd, "r", 1) != 1)
			_exit(8);
	}
}

static void test_kill_mid_write(void **ctx)
{
	struct fixture *f = *ctx;
	int64_t prev_jobs = 0;

	srand((unsigned)(kb_now_ms() ^ getpid()));
	for (int round = 0; round < 4; round++) {
		struct kb_state *st = NULL;
		int fds[2];
		char c;
		pid_t pid;
		sqlite3 *db;
		int64_t jobs;
		long delay_ms = 200 + rand() % 301;
		struct timespec ts = { delay_ms / 1000, (delay_ms % 1000) * 1000000L };

		assert_int_equal(pipe(fds), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (!pid) {
			close(fds[0]);
			kill_child(f->state_dir, fds[1], round);
		}
		close(fds[1]);
		/* time the kill from the child's first commit */
		assert_int_equal(read(fds[0], &c, 1), 1);
		close(fds[0]);
		nanosleep(&ts, NULL);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(wait_child(pid), 128 + SIGKILL);

		assert_int_equal(kb_state_open(&st, f->state_dir), 0);
		db = kb_state_db(st);
		assert_integrity_ok(db);
		jobs = sql_int(db, "SELECT count(*) FROM jobs");
		assert_true(jobs > prev_jobs); /* committed work survives, new work landed */
		/* no partial transaction: every job has all its candidates */
		assert_int_equal(sql_int(db,
			"SELECT count(*) FROM jobs j WHERE (SELECT count(*) FROM candidates c"
			" JOIN searches s ON s.id = c.search_id WHERE s.job_id = j.id) != 50"), 0);
		assert_int_equal(sql_int(db, "SELECT count(*) FROM candidates"), jobs * KILL_CANDIDATES);
		prev_jobs = jobs;
		kb_state_close(st);
	}
}

/*
 * Two processes, N read-modify-write transactions each, on a database
 * neither has created yet (so the first open and migration race too).
 */
enum { RMW_ROUNDS = 200 };

static _Noreturn void rmw_child(const char *state_dir, int go_fd, int who)
{
	struct kb_state *st;
	sqlite3 *db;
	int64_t repo;
	char c;

	if (read(go_fd, &c, 1) != 0) /* wait until the parent closes the pipe */
		_exit(2);
	if (kb_state_open(&st, state_dir) || kb_state_repo_upsert(st, &repo, "local", "two/procs"))
		_exit(3);
	db = kb_state_db(st);
	for (int i = 0; i < RMW_ROUNDS; i++) {
		char sha[32], sql[128];
		int64_t job, count;

		xsnprintf(sha, sizeof(sha), "p%d-%d", who, i);
		if (kb_state_begin(st) || kb_state_job_add(st, &job, repo, i, sha, "ops/c.py"))
			_exit(4);
		/* a lost update would show up as a counter below 2N */
		count = sql_int(db, "SELECT coalesce((SELECT value FROM timings WHERE key = 'counter'), 0)");
		if (count < 0)
			_exit(5);
		usleep(200); /* widen the read-modify-write window: the other process must wait */
		xsnprintf(sql, sizeof(sql),
			  "INSERT OR REPLACE INTO timings (key, value, updated_at) VALUES ('counter', '%lld', 0)",
			  (long long)count + 1);
		if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
			_exit(6);
		if (kb_state_commit(st))
			_exit(7);
		usleep(300); /* work between transactions, as the job loop does */
	}
	kb_state_close(st);
	_exit(0);
}

static void test_two_processes(void **ctx)
{
	struct fixture *f = *ctx;
	struct kb_state *st = NULL;
	sqlite3 *db;
	pid_t pids[2];
	int fds[2], rc0, rc1;

	assert_int_equal(pipe(fds), 0);
	for (int c = 0; c < 2; c++) {
		pids[c] = fork();
		assert_true(pids[c] >= 0);
		if (!pids[c]) {
			close(fds[1]);
			rmw_child(f->state_dir, fds[0], c);
		}
	}
	close(fds[0]);
	close(fds[1]); /* go */
	rc0 = wait_child(pids[0]);
	rc1 = wait_child(pids[1]);
	assert_int_equal(rc0, 0);
	assert_int_equal(rc1, 0);

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	db = kb_state_db(st);
	assert_integrity_ok(db);
	assert_int_equal(kb_state_schema_version(st), kb_state_schema_latest());
	assert_int_equal(sql_int(db, "SELECT count(*) FROM repositories"), 1);
	assert_int_equal(sql_int(db, "SELECT count(*) FROM jobs"), 2 * RMW_ROUNDS);
	assert_int_equal(sql_int(db, "SELECT value FROM timings WHERE key = 'counter'"), 2 * RMW_ROUNDS);
	/* the two really ran at the same time: their jobs interleave */
	assert_true(sql_int(db,
		"SELECT count(*) FROM (SELECT substr(head_sha, 1, 2) AS who,"
		" lag(substr(head_sha, 1, 2)) OVER (ORDER BY id) AS prev FROM jobs)"
		" WHERE prev IS NOT NULL AND prev != who") >= 2);
	kb_state_close(st);
}

/* --- a damaged file is refused, with a copy of it --- */

/* Entries of dir whose name starts with prefix and does not end in "-wal". */
static int count_copies(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (!strncmp(de->d_name, prefix, strlen(prefix)) &&
		    !(len > 4 && !strcmp(de->d_name + len - 4, "-wal")))
			n++;
	}
	closedir(d);
	return n;
}

/* A database of a few dozen pages, closed (its WAL checkpointed into it). */
static void fill_database(const char *state_dir)
{
	struct kb_state *st = NULL;
	char op[600];
	int64_t repo;

	assert_int_equal(kb_state_open(&st, state_dir), 0);
	repo = add_repo(st, "owner/damaged");
	memset(op, 'o', sizeof(op) - 1);
	op[sizeof(op) - 1] = '\0';
	assert_int_equal(kb_state_begin(st), 0);
	for (int i = 0; i < 200; i++) {
		op[0] = (char)('a' + i % 26);
		op[1] = (char)('a' + i / 26);
		add_job(st, repo, i, op);
	}
	assert_int_equal(kb_state_commit(st), 0);
	kb_state_close(st);
}

/*
 * Open must fail, and the log must name the file and a copy holding its
 * bytes; the file itself stays as it was. Returns the copy's path.
 */
static char *assert_refused(const struct fixture *f, const char *db_path, const struct strbuf *bytes)
{
	struct strbuf log_path = STRBUF_INIT, log = STRBUF_INIT, now = STRBUF_INIT, copy = STRBUF_INIT;
	struct kb_state *st = (struct kb_state *)&st; /* must be reset to NULL */
	const char *at, *end;
	char want[512], *copy_path;

	strbuf_addf(&log_path, "%s/log", f->dir);
	unlink(log_path.buf);
	assert_int_equal(log_open(log_path.buf), 0);
	assert_int_equal(kb_state_open(&st, f->state_dir), -1);
	log_close();
	assert_null(st);
	assert_int_equal(strbuf_read_file(&log, log_path.buf, 0), 0);
	xsnprintf(want, sizeof(want), "state database '%s' is damaged", db_path);
	assert_non_null(strstr(log.buf, want));
	assert_non_null(strstr(log.buf, "will not use it"));
	assert_non_null(strstr(log.buf, ".recover"));
	at = strstr(log.buf, "a copy of it is in '");
	assert_non_null(at);
	at += strlen("a copy of it is in '");
	end = strchr(at, '\'');
	assert_non_null(end);
	copy_path = xstrndup(at, (size_t)(end - at));
	xsnprintf(want, sizeof(want), "%s.corrupt-", db_path);
	assert_true(!strncmp(copy_path, want, strlen(want)));

	assert_int_equal(strbuf_read_file(&copy, copy_path, 0), 0);
	assert_int_equal(copy.len, bytes->len);
	assert_memory_equal(copy.buf, bytes->buf, bytes->len);
	assert_int_equal(strbuf_read_file(&now, db_path, 0), 0);
	assert_int_equal(now.len, bytes->len);
	assert_memory_equal(now.buf, bytes->buf, bytes->len);

	strbuf_release(&log_path);
	strbuf_release(&log);
	strbuf_release(&now);
	strbuf_release(&copy);
	return copy_path;
}

static void write_at(const char *path, size_t off, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

/*
 * Random bytes in the pages of a real database: quick_check at open finds
 * them. Then the first page (the header): "not a database". Both times the
 * file is refused, copied aside once, and never changed or deleted.
 */
static void test_damaged_file_refused(void **ctx)
{
	struct fixture *f = *ctx;
	struct strbuf db_path = STRBUF_INIT, bytes = STRBUF_INIT, side = STRBUF_INIT;
	struct kb_state *st = NULL;
	struct stat sst;
	unsigned char junk[64], *hdr;
	uint64_t rng = 0x5eedf00dULL;
	size_t page_size, pages;
	char *copy, *copy2, prefix[64];

	fill_database(f->state_dir);
	strbuf_addf(&db_path, "%s/" KB_STATE_DB_NAME, f->state_dir);
	strbuf_addf(&side, "%s-wal", db_path.buf);
	/* closed cleanly: every page is in the main file */
	assert_true(stat(side.buf, &sst) || sst.st_size == 0);
	assert_int_equal(strbuf_read_file(&bytes, db_path.buf, 0), 0);
	hdr = (unsigned char *)bytes.buf;
	page_size = (size_t)hdr[16] << 8 | hdr[17];
	if (page_size == 1)
		page_size = 65536;
	pages = bytes.len / page_size;
	assert_true(pages >= 8);

	/*
	 * 64 random bytes into each page of the second half, where the jobs'
	 * rows and index entries lie (the schema's pages come first: damage
	 * there fails the first query, a check or not)
	 */
	for (size_t p = pages / 2; p < pages; p++) {
		size_t off;

		for (size_t i = 0; i < sizeof(junk); i++) {
			rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
			junk[i] = (unsigned char)(rng >> 56);
		}
		off = p * page_size + (size_t)(rng >> 33) % (page_size / 2);
		if (p % 2)
			off = p * page_size; /* on every other page its header */
		write_at(db_path.buf, off, junk, sizeof(junk));
	}
	strbuf_reset(&bytes);
	assert_int_equal(strbuf_read_file(&bytes, db_path.buf, 0), 0);
	copy = assert_refused(f, db_path.buf, &bytes);

	/* refused again; an identical copy is not made twice */
	xsnprintf(prefix, sizeof(prefix), KB_STATE_DB_NAME ".corrupt-");
	assert_int_equal(count_copies(f->state_dir, prefix), 1);
	copy2 = assert_refused(f, db_path.buf, &bytes);
	assert_string_equal(copy, copy2);
	assert_int_equal(count_copies(f->state_dir, prefix), 1);
	free(copy2);

	/* the header too: SQLite calls it "not a database"; a new copy for new bytes */
	memset(junk, 0x5a, sizeof(junk));
	write_at(db_path.buf, 0, junk, sizeof(junk));
	strbuf_reset(&bytes);
	assert_int_equal(strbuf_read_file(&bytes, db_path.buf, 0), 0);
	copy2 = assert_refused(f, db_path.buf, &bytes);
	assert_string_not_equal(copy, copy2);
	assert_int_equal(count_copies(f->state_dir, prefix), 2);

	/* the advice works: with the file and its -wal and -shm out of the way, a new state */
	strbuf_reset(&side);
	strbuf_addf(&side, "%s.moved", db_path.buf);
	assert_int_equal(rename(db_path.buf, side.buf), 0);
	strbuf_reset(&side);
	strbuf_addf(&side, "%s-wal", db_path.buf);
	unlink(side.buf);
	strbuf_reset(&side);
	strbuf_addf(&side, "%s-shm", db_path.buf);
	unlink(side.buf);
	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	assert_int_equal(sql_int(kb_state_db(st), "SELECT count(*) FROM jobs"), 0);
	assert_integrity_ok(kb_state_db(st));
	kb_state_close(st);

	free(copy);
	free(copy2);
	strbuf_release(&db_path);
	strbuf_release(&bytes);
	strbuf_release(&side);
}

/* --- kernelbot status, through the real binary when tests/run.sh built it --- */

static int run_capture(const char *cmd, struct strbuf *out)
{
	FILE *p = popen(cmd, "r");
	int status;

	strbuf_reset(out);
	if (!p)
		return -1;
	strbuf_read_fd(out, fileno(p));
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_status_command(void **ctx)
{
	struct fixture *f = *ctx;
	const char *bin = getenv("KB_BIN");
	struct strbuf cfg = STRBUF_INIT, cmd = STRBUF_INIT, out = STRBUF_INIT, dbp = STRBUF_INIT;
	struct kb_state *st = NULL;
	cJSON *json, *item;
	int64_t repo, a;

	if (!bin || access(bin, X_OK))
		KB_SKIP("no kernelbot binary (KB_BIN unset or not built)");
	strbuf_addf(&cfg, "%s/config.ini", f->dir);
	strbuf_addf(&out, "[core]\nstate_dir = %s\n", f->state_dir);
	assert_int_equal(kb_write_file_atomic(cfg.buf, out.buf, out.len), 0);
	strbuf_addf(&dbp, "%s/" KB_STATE_DB_NAME, f->state_dir);

	/* no database yet: "no jobs", and status creates nothing */
	strbuf_addf(&cmd, "'%s' status -c '%s' 2>&1", bin, cfg.buf);
	assert_int_equal(run_capture(cmd.buf, &out), 0);
	assert_string_equal(out.buf, "no jobs\n");
	assert_false(kb_is_file(dbp.buf));

	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	repo = add_repo(st, "owner/repo");
	a = add_job(st, repo, 42, "ops/softmax.py");
	add_job(st, repo, 43, "ops/gelu.py");
	assert_int_equal(kb_state_job_set_state(st, a, KB_JOB_RUNNING, "evolve gen 3", NULL), 0);
	kb_state_close(st);

	assert_int_equal(run_capture(cmd.buf, &out), 0);
	assert_non_null(strstr(out.buf, "repository"));
	assert_non_null(strstr(out.buf, "owner/repo"));
	assert_non_null(strstr(out.buf, "ops/softmax.py"));
	assert_non_null(strstr(out.buf, "evolve gen 3"));
	assert_non_null(strstr(out.buf, "0123456789ab "));  /* 12 chars of the sha */
	assert_null(strstr(out.buf, "0123456789abc"));
	assert_non_null(strstr(out.buf, "running"));
	assert_non_null(strstr(out.buf, "queued"));

	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "'%s' status -c '%s' --state running --json", bin, cfg.buf);
	assert_int_equal(run_capture(cmd.buf, &out), 0);
	json = cJSON_Parse(out.buf);
	assert_non_null(json);
	assert_true(cJSON_IsArray(json));
	assert_int_equal(cJSON_GetArraySize(json), 1);
	item = cJSON_GetArrayItem(json, 0);
	assert_int_equal((int)cJSON_GetObjectItem(item, "id")->valuedouble, (int)a);
	assert_int_equal((int)cJSON_GetObjectItem(item, "pr")->valuedouble, 42);
	assert_string_equal(cJSON_GetObjectItem(item, "state")->valuestring, "running");
	assert_string_equal(cJSON_GetObjectItem(item, "head_sha")->valuestring,
			    "0123456789abcdef0123456789abcdef01234567");
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(item, "finished_at")));
	cJSON_Delete(json);

	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "'%s' status -c '%s' --state done 2>&1", bin, cfg.buf);
	assert_int_equal(run_capture(cmd.buf, &out), 0);
	assert_string_equal(out.buf, "no jobs\n");

	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "'%s' status -c '%s' --state bogus 2>&1", bin, cfg.buf);
	assert_int_equal(run_capture(cmd.buf, &out), 2);
	assert_non_null(strstr(out.buf, "bogus"));

	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "'%s' status --help", bin);
	assert_int_equal(run_capture(cmd.buf, &out), 0);
	assert_non_null(strstr(out.buf, "usage: kernelbot status"));

	strbuf_release(&cfg);
	strbuf_release(&cmd);
	strbuf_release(&out);
	strbuf_release(&dbp);
}

/* Every `kernelbot run` is a row that status lists beside the jobs; a dead one shows as died. */
static void test_status_lists_runs(void **ctx)
{
	struct fixture *f = *ctx;
	const char *bin = getenv("KB_BIN");
	struct strbuf cfg = STRBUF_INIT, cmd = STRBUF_INIT, out = STRBUF_INIT;
	struct kb_state *st = NULL;
	struct kb_run_row row = { .operator_path = (char *)"ops/relu.py", .backend = (char *)"cpu",
				  .pass = (char *)"forward", .job_id = 77 };
	int64_t done_id, live_id, dead_id;
	pid_t dead;
	cJSON *json;
	int nr_runs = 0;

	if (!bin || access(bin, X_OK))
		KB_SKIP("no kernelbot binary (KB_BIN unset or not built)");
	assert_int_equal(kb_state_open(&st, f->state_dir), 0);
	row.pid = getpid();
	assert_int_equal(kb_runs_db_start(st, &row, &done_id), 0);
	assert_int_equal(kb_runs_db_stage(st, done_id, "time 2/2", 1.5), 0);
	assert_int_equal(kb_runs_db_stage(st, done_id, "final check", NAN), 0); /* keeps 1.5 */
	assert_int_equal(kb_runs_db_finish(st, done_id, "done", NULL), 0);
	assert_int_equal(kb_runs_db_start(st, &row, &live_id), 0);
	assert_int_equal(kb_runs_db_stage(st, live_id, "verify 3/8", NAN), 0);
	/* a process that exited without ending its run */
	dead = fork();
	assert_true(dead >= 0);
	if (!dead)
		_exit(0);
	assert_int_equal(waitpid(dead, NULL, 0), dead);
	row.pid = dead;
	row.operator_path = (char *)"ops/dead.py";
	assert_int_equal(kb_runs_db_start(st, &row, &dead_id), 0);
	kb_state_close(st);

	strbuf_addf(&cfg, "%s/config.ini", f->dir);
	strbuf_addf(&out, "[core]\nstate_dir = %s\n", f->state_dir);
	assert_int_equal(kb_write_file_atomic(cfg.buf, out.buf, out.len), 0);
	strbuf_addf(&cmd, "'%s' status -c '%s' 2>&1", bin, cfg.buf);
	assert_int_equal(run_capture(cmd.buf, &out), 0);
	assert_non_null(strstr(out.buf, "no jobs\n\nrun  job  operator"));
	assert_non_null(strstr(out.buf, "final check  1.50x"));
	assert_non_null(strstr(out.buf, "running  verify 3/8"));
	assert_non_null(strstr(out.buf, "ops/dead.py  cpu      died"));
	/* the job id 77 names no job: recorded as none */
	assert_null(strstr(out.buf, "77"));

	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "'%s' status -c '%s' --json --state running", bin, cfg.buf);
	assert_int_equal(run_capture(cmd.buf, &out), 0);
	json = cJSON_Parse(out.buf);
	assert_true(cJSON_IsArray(json));
	for (int i = 0; i < cJSON_GetArraySize(json); i++) {
		const cJSON *item = cJSON_GetArrayItem(json, i);

		assert_string_equal(cJSON_GetObjectItem(item, "kind")->valuestring, "run");
		assert_string_equal(cJSON_GetObjectItem(item, "stage")->valuestring, "verify 3/8");
		nr_runs++;
	}
	assert_int_equal(nr_runs, 1);
	cJSON_Delete(json);
	strbuf_release(&cfg);
	strbuf_release(&cmd);
	strbuf_release(&out);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_open_migrates_empty),
		T(test_reopen_is_idempotent),
		T(test_future_version_refused),
		T(test_migrations_table),
		T(test_repo_upsert),
		T(test_job_add_duplicate),
		T(test_job_state_changes),
		T(test_jobs_foreach),
		T(test_claim_next),
		T(test_claim_two_processes),
		T(test_requeue_running),
		T(test_foreign_keys),
		T(test_explicit_transaction),
		T(test_kill_mid_write),
		T(test_two_processes),
		T(test_damaged_file_refused),
		T(test_status_command),
		T(test_status_lists_runs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
