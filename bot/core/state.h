#ifndef KB_STATE_H
#define KB_STATE_H
/*
 * The state store: one SQLite database, `<state_dir>/kernelbot.db`, in WAL
 * mode with foreign keys on. Everything the bot must remember across a
 * restart lives here: repositories and their poll ETags, jobs, candidates,
 * archive cells, prompts, forge objects, LLM calls, webhook deliveries and
 * cached timings.
 *
 * Writers: every state change is one writer transaction opened with BEGIN
 * IMMEDIATE, so writers queue on the write lock (up to the busy timeout)
 * instead of deadlocking when a reader tries to upgrade. A function below
 * called while the caller holds kb_state_begin() runs inside the caller's
 * transaction (as a savepoint) and commits with it.
 *
 * Damage: a file that fails the integrity check at open is refused, never
 * repaired or replaced silently (kb_state_open).
 *
 * Schema: PRAGMA user_version plus the ordered migrations in
 * state_schema.c. Opening applies every missing migration, each in its own
 * transaction together with the user_version bump; a database newer than
 * this binary knows is refused. Later issues add columns and tables by
 * appending a migration, never by editing an old one.
 *
 * One struct kb_state per thread (or process); never use one across fork().
 * Timestamps are Unix seconds (UTC); 0 in a struct means "not set" (NULL).
 */
#include "core/common.h"

#include <sqlite3.h>

struct kb_state;

/* File name of the database inside state_dir. */
#define KB_STATE_DB_NAME "kernelbot.db"

enum kb_job_state {
	KB_JOB_QUEUED,
	KB_JOB_RUNNING,
	KB_JOB_DONE,
	KB_JOB_FAILED,
	KB_JOB_CANCELLED
};

/* "queued", "running", ...; NULL for an out-of-range value. */
const char *kb_job_state_name(enum kb_job_state state);
/* Name to enum; -1 (nothing logged) when name is not a job state. */
int kb_job_state_parse(const char *name, enum kb_job_state *out);

/* One row of jobs, joined with its repository. Strings are owned. */
struct kb_job {
	int64_t id;
	int64_t repository_id;
	char *forge;          /* "github" or "local" */
	char *repository;     /* full_name, e.g. "owner/repo" */
	int64_t pr_number;
	char *head_sha;
	char *operator_path;  /* operator: path in the repository */
	enum kb_job_state state;
	char *stage;          /* free-form progress step, or NULL */
	int64_t attempts;     /* runs interrupted by a restart */
	char *error;          /* why it failed, or NULL */
	int64_t best_candidate_id; /* 0: none */
	int64_t created_at, updated_at, started_at, finished_at;
};

#define KB_JOB_INIT { 0 }

/* Free the strings a job owns and zero it; safe on a zeroed job. */
void kb_job_release(struct kb_job *job);

/*
 * Open (creating state_dir and the database when missing), check it and
 * migrate to the latest schema. On failure *out is NULL and a message was
 * logged.
 *
 * The check is PRAGMA quick_check (every page read once, about a second
 * per GB). A damaged file (the check fails, or SQLite reports it corrupt
 * or not a database while opening or migrating) is refused: it is copied
 * aside as "<path>.corrupt-<UTC time>" (with "-wal" beside it when there is
 * a WAL; an identical earlier copy is reused) and left in place untouched,
 * and the error names both files and what to do. Nothing is deleted.
 */
int kb_state_open(struct kb_state **out, const char *state_dir);
/* Close and free; NULL is fine. An open transaction is rolled back. */
void kb_state_close(struct kb_state *st);

/* The database path, for messages. */
const char *kb_state_path(const struct kb_state *st);

/*
 * Statements for the modules that own tables (each module's *_db.c: jobs,
 * daemon, search, llm usage, templates). The raw handle stays inside
 * core/state: a module prepares its SQL here, then binds, steps and
 * finalizes the sqlite3_stmt itself. These calls do not log unless they
 * say so; the caller words the message, with kb_state_error() or
 * kb_state_errmsg() for SQLite's part.
 */
/* Prepare one statement; -1 with *stmt NULL when SQLite refuses it. */
int kb_state_prepare(struct kb_state *st, sqlite3_stmt **stmt, const char *sql);
/* Run one or more statements that return no rows; -1 on failure. */
int kb_state_exec(struct kb_state *st, const char *sql);
/* SQLite's message for the last failed call on st. */
const char *kb_state_errmsg(struct kb_state *st);
/*
 * Step a statement that returns at most one row: 1 with a row to read,
 * KB_ENOTFOUND without one, -1 on failure, logged as "could not <what>
 * in '<state path>': <SQLite's message>". The caller finalizes stmt.
 */
int kb_state_step_one(struct kb_state *st, sqlite3_stmt *stmt, const char *what);
/* Rows changed by the last INSERT, UPDATE or DELETE. */
int kb_state_changes(struct kb_state *st);
/* Row id of the last successful INSERT. */
int64_t kb_state_last_insert_rowid(struct kb_state *st);
/* True while a transaction is open on st (kb_state_begin, BEGIN, SAVEPOINT). */
bool kb_state_in_transaction(struct kb_state *st);
/* Bind s (copied), or NULL when s is NULL. */
void kb_state_bind_text(sqlite3_stmt *stmt, int i, const char *s);
/* Bind id, or NULL when id <= 0 (a reference to no row). */
void kb_state_bind_id(sqlite3_stmt *stmt, int i, int64_t id);

/* --- statement helpers shared by the *_db.c files (state_stmt.c) --- */

/* Log "<what> in '<state path>': <SQLite's message>"; returns -1. */
int kb_state_error(struct kb_state *st, const char *what);
/* kb_state_prepare, logged as kb_state_error(st, what) when SQLite refuses it. */
int kb_state_prepare_logged(struct kb_state *st, sqlite3_stmt **stmt, const char *sql,
			    const char *what);
/* Column col as a new string, or NULL for an SQL NULL. */
char *kb_state_column_strdup(sqlite3_stmt *stmt, int col);
/* Bind v, or NULL when v is not finite (NAN: "not measured"). */
void kb_state_bind_real(sqlite3_stmt *stmt, int i, double v);
/*
 * Bind the arguments from parameter 1 on, one letter of types each:
 * 'i' int64_t, 'I' int64_t id (kb_state_bind_id), 'd' double, 'r' double
 * (kb_state_bind_real), 't' const char * (copied; NULL binds NULL).
 * -1 (logged) for an unknown letter, a letter count other than the
 * statement's parameter count, or a value SQLite refuses.
 */
int kb_state_vbind(struct kb_state *st, sqlite3_stmt *stmt, const char *types, va_list ap);
/*
 * One statement that returns no rows: prepare sql, bind the arguments
 * (kb_state_vbind), step it, finalize it. *changes (may be NULL) gets the
 * rows changed. 0, or -1 logged as "could not <what> in '<state path>':
 * <SQLite's message>".
 */
int kb_state_run(struct kb_state *st, int *changes, const char *what, const char *sql,
		 const char *types, ...);
/*
 * Prepare sql, bind the arguments (kb_state_vbind) and step to its first
 * row: 1 with *stmt on that row, KB_ENOTFOUND (nothing logged) without
 * one, -1 logged as kb_state_run does. The caller finalizes *stmt in every
 * case (it may be NULL).
 */
int kb_state_query_row(struct kb_state *st, sqlite3_stmt **stmt, const char *what,
		       const char *sql, const char *types, ...);
/*
 * The first column of a one-row query as int64 into *out: 0, KB_ENOTFOUND
 * (nothing logged) without a row, -1 logged as kb_state_run does.
 */
int kb_state_query_int(struct kb_state *st, int64_t *out, const char *what, const char *sql,
		       const char *types, ...);

/*
 * Step stmt to its end, each row read by read_row into the next element
 * (elem_size bytes) of a growing array: *out (free it) and *n. read_row
 * returns 0, or -1 (logged) to stop. On failure every element read so far,
 * the one read_row failed on included, goes to release, *out is NULL and
 * *n 0; -1, logged as kb_state_run does for a failed step. The caller
 * finalizes stmt.
 */
int kb_state_read_rows(struct kb_state *st, sqlite3_stmt *stmt, const char *what,
		       size_t elem_size, void **out, size_t *n,
		       int (*read_row)(sqlite3_stmt *stmt, void *elem, void *payload),
		       void (*release)(void *elem), void *payload);

/*
 * A writing helper's own transaction: BEGIN IMMEDIATE when none is open,
 * else a savepoint inside the caller's, so that a failed step undoes only
 * itself. kb_state_txn_leave commits unless rc is KB_ERROR (named codes
 * changed nothing, and commit) and returns rc, or -1 when it rolled back.
 */
int kb_state_txn_enter(struct kb_state *st, bool *own);
int kb_state_txn_leave(struct kb_state *st, bool own, int rc);

/* user_version of the open database (>= 0), or -1 after an error. */
int kb_state_schema_version(struct kb_state *st);
/* The newest schema version this binary knows. */
int kb_state_schema_latest(void);

/*
 * An explicit writer transaction around several calls (BEGIN IMMEDIATE).
 * Nesting is an error. kb_state_commit is -1 (and the transaction is rolled
 * back) when the commit fails; kb_state_rollback always ends it.
 */
int kb_state_begin(struct kb_state *st);
int kb_state_commit(struct kb_state *st);
int kb_state_rollback(struct kb_state *st);

/* Insert the repository unless (forge, full_name) exists; its id either way. */
int kb_state_repo_upsert(struct kb_state *st, int64_t *id_out,
			 const char *forge, const char *full_name);

/*
 * Queue a job. When (repository, pr, head_sha, operator) is already there,
 * returns KB_EEXISTS (nothing logged) with that job's id in *id_out.
 */
int kb_state_job_add(struct kb_state *st, int64_t *id_out, int64_t repo_id,
		     int64_t pr_number, const char *head_sha, const char *operator_path);

/*
 * Move a job to state. stage NULL keeps the current stage; err is stored
 * as given (NULL clears it). Sets updated_at, started_at on running,
 * finished_at on done/failed/cancelled (and clears it on queued/running).
 * KB_ENOTFOUND (nothing logged) when no job has that id.
 */
int kb_state_job_set_state(struct kb_state *st, int64_t id, enum kb_job_state state,
			   const char *stage, const char *err);

/* Fill *out (release it afterwards). KB_ENOTFOUND (nothing logged) when absent. */
int kb_state_job_get(struct kb_state *st, int64_t id, struct kb_job *out);

/*
 * Call cb for every job in state_filter ("queued", ...; NULL: all), oldest
 * first. The rows are read first and no statement is open during the
 * callbacks, so cb may write to the store. A non-zero return from cb stops
 * the walk and is returned; -1 on a database error or an unknown filter.
 */
int kb_state_jobs_foreach(struct kb_state *st, const char *state_filter,
			  int (*cb)(const struct kb_job *job, void *payload), void *payload);

/*
 * Atomically move the oldest queued job to running and fill *out with it
 * (release it afterwards). KB_ENOTFOUND (nothing logged) when none is
 * queued. Two processes claiming at once get two different jobs.
 */
int kb_state_job_claim_next(struct kb_state *st, struct kb_job *out);

/*
 * Crash recovery at startup: every running job goes back to queued with
 * attempts + 1. Returns how many (>= 0), or -1. Only the one runner that
 * owns this state_dir may call it: it cannot tell a dead runner's jobs
 * from a live one's.
 */
int kb_state_requeue_running(struct kb_state *st);

/* --- schema (state_schema.c), for state.c and the tests --- */

struct kb_state_migration {
	int version;      /* 1, 2, 3, ... in order, no gaps */
	const char *name; /* shown in errors */
	const char *sql;  /* one or more statements, run inside the migration's transaction */
};

extern const struct kb_state_migration kb_state_migrations[];
extern const size_t kb_state_nr_migrations;

#endif
