#ifndef KB_CLI_RUNS_DB_H
#define KB_CLI_RUNS_DB_H
/*
 * The runs table (state schema 5): one row per `kernelbot run`, standalone
 * or a job's child, so that `kernelbot status` shows every run beside the
 * jobs. A row is a record for people, never needed to resume: the tuning
 * cache and the search tables do that. Failures to write it are the
 * caller's to log and ignore.
 */
#include "core/common.h"

struct kb_state;

struct kb_run_row {
	int64_t id;
	int64_t job_id;          /* 0: a standalone run */
	char *operator_path;     /* as given */
	char *backend, *pass;
	char *out_dir;           /* NULL: none */
	int64_t pid;             /* of the `kernelbot run` process */
	char *state;             /* running, done, failed, cancelled */
	char *stage;             /* "verify 3/8", NULL: none yet */
	double best_speedup;     /* NAN: none yet */
	char *error;             /* why it failed, NULL: none */
	int64_t started_at, updated_at, finished_at; /* Unix seconds, 0: not set */
};

/* Free the strings a row owns and zero it; safe on a zeroed row. */
void kb_run_row_release(struct kb_run_row *r);

/* Insert r as a running run now (a job_id with no job: none); its id in *id_out. 0 or -1 (logged). */
int kb_runs_db_start(struct kb_state *st, const struct kb_run_row *r, int64_t *id_out);

/* The run's current stage and best speedup so far (NAN: keep the stored one). 0 or -1 (logged). */
int kb_runs_db_stage(struct kb_state *st, int64_t id, const char *stage, double best_speedup);

/* End the run: state done, failed or cancelled, with why (NULL: none). 0 or -1 (logged). */
int kb_runs_db_finish(struct kb_state *st, int64_t id, const char *state, const char *why);

/*
 * cb for every run, oldest first; the rows are read before the first call.
 * A non-zero return from cb stops the walk and is returned; -1 on a
 * database error (logged).
 */
int kb_runs_db_foreach(struct kb_state *st, int (*cb)(const struct kb_run_row *r, void *payload),
		       void *payload);

#endif
