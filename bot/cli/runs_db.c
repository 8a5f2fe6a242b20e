#include "core/common.h"
#include "cli/runs_db.h"
#include "core/log.h"
#include "core/state.h"
#include "core/util.h"

#include <math.h>

void kb_run_row_release(struct kb_run_row *r)
{
	free(r->operator_path);
	free(r->backend);
	free(r->pass);
	free(r->out_dir);
	free(r->state);
	free(r->stage);
	free(r->error);
	memset(r, 0, sizeof(*r));
}

int kb_runs_db_start(struct kb_state *st, const struct kb_run_row *r, int64_t *id_out)
{
	int64_t now = kb_wall_s();

	/* a job id the state does not know (a hand-typed --job-id) records no job */
	if (kb_state_run(st, NULL, "record the run",
			 "INSERT INTO runs (job_id, operator, backend, pass, out_dir, pid, state, started_at,"
			 " updated_at) VALUES ((SELECT id FROM jobs WHERE id = ?), ?, ?, ?, ?, ?, 'running', ?, ?)",
			 "Ittttiii", r->job_id, r->operator_path, r->backend, r->pass, r->out_dir,
			 r->pid, now, now))
		return -1;
	*id_out = kb_state_last_insert_rowid(st);
	return 0;
}

int kb_runs_db_stage(struct kb_state *st, int64_t id, const char *stage, double best_speedup)
{
	return kb_state_run(st, NULL, "update the run",
			    "UPDATE runs SET stage = ?, best_speedup = coalesce(?, best_speedup), updated_at = ?"
			    " WHERE id = ?", "trii", stage, best_speedup, kb_wall_s(), id);
}

int kb_runs_db_finish(struct kb_state *st, int64_t id, const char *state, const char *why)
{
	int64_t now = kb_wall_s();

	return kb_state_run(st, NULL, "end the run",
			    "UPDATE runs SET state = ?, error = ?, updated_at = ?, finished_at = ? WHERE id = ?",
			    "ttiii", state, why, now, now, id);
}

static void read_row(sqlite3_stmt *stmt, struct kb_run_row *r)
{
	memset(r, 0, sizeof(*r));
	r->id = sqlite3_column_int64(stmt, 0);
	r->job_id = sqlite3_column_int64(stmt, 1);
	r->operator_path = kb_state_column_strdup(stmt, 2);
	r->backend = kb_state_column_strdup(stmt, 3);
	r->pass = kb_state_column_strdup(stmt, 4);
	r->out_dir = kb_state_column_strdup(stmt, 5);
	r->pid = sqlite3_column_int64(stmt, 6);
	r->state = kb_state_column_strdup(stmt, 7);
	r->stage = kb_state_column_strdup(stmt, 8);
	r->best_speedup = sqlite3_column_type(stmt, 9) == SQLITE_NULL ? NAN : sqlite3_column_double(stmt, 9);
	r->error = kb_state_column_strdup(stmt, 10);
	r->started_at = sqlite3_column_int64(stmt, 11);
	r->updated_at = sqlite3_column_int64(stmt, 12);
	r->finished_at = sqlite3_column_int64(stmt, 13);
}

int kb_runs_db_foreach(struct kb_state *st, int (*cb)(const struct kb_run_row *r, void *payload),
		       void *payload)
{
	sqlite3_stmt *stmt = NULL;
	struct kb_run_row *rows = NULL;
	size_t nr = 0, alloc = 0;
	int rc = -1, step;

	if (kb_state_prepare(st, &stmt, "SELECT id, job_id, operator, backend, pass, out_dir, pid, state, stage,"
				       " best_speedup, error, started_at, updated_at, finished_at"
				       " FROM runs ORDER BY started_at, id"))
		return error("could not list the runs in '%s': %s", kb_state_path(st), kb_state_errmsg(st));
	while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
		if (nr == alloc) {
			alloc = alloc ? 2 * alloc : 16;
			rows = xrealloc(rows, alloc * sizeof(*rows));
		}
		read_row(stmt, &rows[nr++]);
	}
	if (step != SQLITE_DONE) {
		error("could not list the runs in '%s': %s", kb_state_path(st), kb_state_errmsg(st));
		goto out;
	}
	/* the read ends before any callback runs: cb may write */
	sqlite3_finalize(stmt);
	stmt = NULL;
	rc = 0;
	for (size_t i = 0; i < nr && !rc; i++)
		rc = cb(&rows[i], payload);
out:
	sqlite3_finalize(stmt);
	for (size_t i = 0; i < nr; i++)
		kb_run_row_release(&rows[i]);
	free(rows);
	return rc;
}
