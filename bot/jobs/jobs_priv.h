#ifndef KB_JOBS_PRIV_H
#define KB_JOBS_PRIV_H
/* Private to bot/jobs/: the runner of one job, and the store helpers. */
#include "core/common.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "forge/forge.h"
#include "jobs/devices.h"
#include "jobs/jobs.h"
#include "report/wire.h"

#include <cjson/cJSON.h>

struct kb_config;
struct kb_git_repo;

/* A trigger row (table triggers), joined with its repository. */
struct jtrigger {
	int64_t id, repo_id, pr;
	char *repo;       /* owner/name */
	char *head_sha;
	char *actor;
	char *source;
	char *state;      /* active, cancelled, replaced */
};
void jtrigger_release(struct jtrigger *t);

/* A forge_objects row. */
struct jobject {
	int64_t id;
	char *remote_id;
	char *url;
	char *body_hash;
};
void jobject_release(struct jobject *o);

/* The columns migration 2 added to jobs. */
struct jextra {
	int64_t trigger_id;
	char *progress;    /* JSON or NULL */
	double best_speedup;     /* 0: none yet */
	double reviewed_speedup; /* 0: none yet */
	char *result;      /* JSON or NULL */
};
void jextra_release(struct jextra *x);

int jdb_trigger_get(struct kb_state *st, struct jtrigger *out, int64_t id);
/* The active trigger of a pull request; KB_ENOTFOUND (quiet) when none. */
int jdb_trigger_active(struct kb_state *st, struct jtrigger *out, int64_t repo_id, int64_t pr);

/* forge_objects by (repository, kind, marker); KB_ENOTFOUND (quiet) when none. */
int jdb_object_get(struct kb_state *st, struct jobject *out, int64_t repo_id,
		   const char *kind, const char *marker);
/* Insert or update (by repository, kind, marker); NULL fields keep their value. */
int jdb_object_put(struct kb_state *st, int64_t repo_id, int64_t job_id, const char *kind,
		   const char *marker, const char *remote_id, const char *url,
		   const char *body_hash);

int jdb_extra_get(struct kb_state *st, struct jextra *out, int64_t job_id);

/*
 * Every SQL statement of bot/jobs/ lives in jobs_db.c behind the calls
 * below. Each is one statement (or two that belong together) and joins a
 * transaction the caller holds (kb_state_begin); 0 or -1 (logged) unless
 * said otherwise.
 */

/* Id of repository repo on forge; KB_ENOTFOUND (quiet) when it is not stored. */
int jdb_repo_id(struct kb_state *st, int64_t *id, const char *forge, const char *repo);

/*
 * Ids of the running jobs of trigger tid (queued_too: queued and running),
 * oldest first, into *ids (free it) and *nr.
 */
int jdb_trigger_job_ids(struct kb_state *st, int64_t tid, bool queued_too, int64_t **ids,
			size_t *nr);
/*
 * True when the pull request's latest trigger is cancelled and was
 * updated at or after since; false otherwise and on an error (quiet).
 */
bool jdb_trigger_cancelled_since(struct kb_state *st, int64_t repo_id, int64_t pr, int64_t since);
/* Mark trigger tid replaced and cancel its queued and running jobs. */
int jdb_trigger_replace(struct kb_state *st, int64_t tid);
/* Insert an active trigger; *tid gets its id. */
int jdb_trigger_add(struct kb_state *st, int64_t *tid, int64_t repo_id, int64_t pr,
		    const char *head_sha, const char *actor, const char *source);
/* Mark trigger tid cancelled and cancel its queued jobs; *changes (may be NULL) gets how many. */
int jdb_trigger_cancel(struct kb_state *st, int64_t tid, int *changes);
/* *n: the queued and running jobs of trigger tid. */
int jdb_trigger_pending(struct kb_state *st, int64_t tid, int64_t *n);
/*
 * The jobs of trigger tid that are queued or running (*pending), failed
 * and done, counting job job_id (0: none) as being in state as.
 */
int jdb_trigger_counts(struct kb_state *st, int64_t tid, int64_t job_id, enum kb_job_state as,
		       int64_t *pending, int64_t *failed, int64_t *done);

/* One job of a trigger as the progress comment and the outcome read it. Strings owned, NULL: NULL. */
struct jrow {
	int64_t id;
	char *operator_path;
	char *state;
	char *stage;
	char *progress;       /* JSON */
	double best_speedup;  /* 0: NULL */
	char *error;
	char *result;         /* JSON */
	int64_t started_at, finished_at; /* 0: NULL */
	char *head_sha;
};
/* The jobs of trigger tid, oldest first, into *rows (jrows_free) and *nr. */
int jdb_trigger_rows(struct kb_state *st, int64_t tid, struct jrow **rows, size_t *nr);
void jrows_free(struct jrow *rows, size_t nr);

/* A job again queued on the same head: state, stage, error, progress, speedups and result reset. */
int jdb_job_requeue(struct kb_state *st, int64_t job_id);
int jdb_job_set_trigger(struct kb_state *st, int64_t job_id, int64_t tid);
/* jobs.stage and updated_at; not kb_state_job_set_state, which restarts started_at. */
int jdb_job_set_stage(struct kb_state *st, int64_t job_id, const char *stage);
/* The child's progress JSON and the best speedup so far. */
int jdb_job_set_progress(struct kb_state *st, int64_t job_id, const char *progress, double best);
/* The job's result JSON and its best speedup. */
int jdb_job_set_result(struct kb_state *st, int64_t job_id, const char *result, double best);
/*
 * Record the review comment of job_id at marker (forge_objects, once per
 * marker) and its reviewed_speedup; *changes is 0 when the marker was
 * already there.
 */
int jdb_job_reviewed(struct kb_state *st, int64_t job_id, int64_t repo_id, const char *marker,
		     double best, int *changes);

/* sha256 hex of a string (a body hash). */
void jhash(char out[65], const char *s);

/* What the branch takes besides the run's folder when the wiring check said "wired". */
struct jwired {
	struct strbuf module_path;    /* empty: not wired */
	struct strbuf module_text;
	struct kb_wire_file *files;   /* the build's files and __init__.py files the wiring changed or added */
	size_t nr_files;
};
#define JWIRED_INIT { STRBUF_INIT, STRBUF_INIT, NULL, 0 }
void jwired_release(struct jwired *w);

/* One job being run by this process. */
struct runner {
	struct kb_job job;
	struct jtrigger trig;
	struct kb_forge_pr pr;        /* the labelled pull request */
	struct kb_git_repo *git;
	struct strbuf slug, branch, dir, src, out, progress_path, child_log, notes;
	struct strbuf stage;          /* jobs.stage as this runner last wrote it */
	struct strbuf error;          /* why it failed */
	struct strbuf pr_url;         /* the bot's pull request once open */
	int64_t pr_number;
	struct kb_repo_config rcfg;
	struct child_process cp;
	bool child_running;
	int64_t child_started_ms, last_edit_ms;
	int64_t budget_s;             /* the job's time budget (config, .kernelbot.ini) */
	int64_t child_budget_s;       /* what was left of it when the child started (--time-budget) */
	int64_t progress_mtime_ns;
	double best, reviewed;        /* screening figures while searching; best: the headline once done */
	size_t slower, timed;         /* the final evidence: configs slower than eager beyond the band, of timed */
	bool both;                    /* the job searches the backward pass too (passes.c) */
	bool backward;                /* the child running, or next to start, is the backward pass's */
	bool preparing;               /* the child running is `kernelbot operator` (a module's operator file) */
	bool wiring;                  /* the child running is `kernelbot wire` (stage "wire", wire_job.c) */
	int64_t wire_limit_ms;        /* how long that child may run: the job's budget and grace left */
	struct jwired wired;          /* the wiring's outcome: the patched files the branch takes */
	struct strbuf modop;          /* that operator file, once made; empty: the job's own path */
	struct strbuf progress;       /* the child's last progress JSON */
	struct strvec devices;        /* the devices leased to the job (devices.h); empty: none */
	struct jdevices *leased_from; /* given back when the runner is freed */
	bool done;                    /* finished: remove from the active list */
};

/*
 * The labelled pull request's head, as last read into r->pr, is no longer
 * the sha the job was pinned to (and its kernel verified at): a push.
 */
static inline bool jhead_moved(const struct runner *r)
{
	return r->pr.head_sha && r->job.head_sha && strcasecmp(r->pr.head_sha, r->job.head_sha);
}

struct kb_jobs {
	struct kb_config *cfg;
	struct kb_state *st;
	struct kb_forge *forge;
	char *bin;                    /* kernelbot binary for the children */
	char *setpriv;                /* setpriv(1) for the parent-death signal, NULL: none */
	char *bot_login;              /* the forge's login of the bot, NULL: unknown */
	bool bot_login_known;
	struct runner **active;
	size_t nr_active, alloc_active;
	struct jdevices devices;      /* the leases of the runners' devices */
};

/* --- render.c: the text the bot puts on the forge (through report/) --- */

/* Each line of lines as a markdown list item, escaped (untrusted text), at most 500 characters. */
void jrender_list(struct strbuf *out, const char *lines);
/* The progress comment's marker for pull request pr (what find_comment looks for). */
void jrender_progress_marker(struct strbuf *out, int64_t pr);
/*
 * The progress comment of trigger t: every job of it, self (may be NULL)
 * as the runner holds it in memory. 0 or -1.
 */
int jrender_progress(struct kb_jobs *j, const struct jtrigger *t, struct runner *self,
		     struct strbuf *out);
/*
 * The bot's pull request from the child's output dir; kernel_path gets the
 * kernel's path in the branch. j gives [report] noise_band (NULL: the default).
 */
int jrender_pr(struct kb_jobs *j, struct runner *r, struct strbuf *title, struct strbuf *body,
	       struct strbuf *kernel_path);
/* A review comment on a new best. */
int jrender_review(struct kb_jobs *j, struct runner *r, struct strbuf *out, double best,
		   double previous);
/* Check run / status title and summary of the runner's job; faster: done and beats eager. */
int jrender_check(struct kb_jobs *j, struct runner *r, struct strbuf *title,
		  struct strbuf *summary, bool *faster);
/* s when it is a plain file name (no '/', not "", "." or ".."), else NULL: a name kernel.json gives. */
const char *jplain_name(const char *s);
/* dir/name parsed as JSON, NULL when missing or invalid. */
cJSON *jread_json(const char *dir, const char *name);

/* --- publish.c: forge side, each step idempotent --- */

/* Create or edit the progress comment of the runner's pull request. */
int jpub_progress(struct kb_jobs *j, struct runner *r, bool force);
/* The same for a trigger no runner holds (cancel, nothing found). */
int jpub_progress_of(struct kb_jobs *j, const struct jtrigger *t, const char *body);
/* Labels of the labelled pull request from its trigger's jobs, job_id (0: none) counted as state as. */
int jpub_labels(struct kb_jobs *j, int64_t repo_id, const char *repo, int64_t pr,
		int64_t trigger_id, int64_t job_id, enum kb_job_state as);
/* Commit status or check run of the job, for its state now. */
int jpub_status(struct kb_jobs *j, struct runner *r);
/* Review comment when the best improved by the margin (at most once per level). */
int jpub_review(struct kb_jobs *j, struct runner *r, double best);
/*
 * Branch, commit, push, pull request: r->pr_url and r->pr_number are set.
 * The labelled pull request is read again first (into r->pr): when its
 * head moved during the job, the kernel (verified at the pinned sha) is
 * still published, as a draft that says so, and a note tells the
 * progress comment.
 */
int jpub_result(struct kb_jobs *j, struct runner *r, double speedup);

/* --- passes.c: a job of both passes, forward then backward (README.md) --- */

/* out: the file or folder name in the job's folder (forward.json, backward.json, out-backward). */
void jpasses_path(struct strbuf *out, const struct runner *r, const char *name);
/*
 * Does the job search the backward pass too? .kernelbot.ini's passes when
 * set, else whether the operator is a task that ships a backward
 * (func_backward.py in the checkout).
 */
bool jpasses_both(const struct runner *r);
/* The forward child of a job of both passes ended well (forward.json): the backward's turn. */
bool jpasses_forward_done(const struct runner *r);
int jpasses_mark_forward_done(struct runner *r);
/* The child's --time-budget out of left, what is left of the job's: the forward of both gets half. */
int64_t jpasses_child_budget(const struct runner *r, int64_t left);
/*
 * The backward child ended (exit_code, < 0: the loop stopped it; why: its
 * log's last line, or why it was stopped): its
 * kernel and records into out/backward/ when the binding can call it,
 * out/binding.py rendered again (apply(): that kb_backward, else the
 * reference's backward), and backward.json. 0 or -1 (logged).
 */
int jpasses_finish(struct runner *r, int exit_code, const char *why);
/* The progress comment's notes on the backward pass (no kernel and why; a budget cut). */
void jpasses_notes(struct runner *r);

/* --- operators.c --- */

/*
 * The operators of pull request pr at head_sha: the repository's
 * .kernelbot.ini paths when it lists some, else changed files in a task
 * format; and its [operator NAME] sections whose file the pull request
 * changes (modops.c). Appended to ops (paths, folders without a trailing
 * '/', "PATH.py:NAME" for a section's module or function). notes gets
 * warnings worth showing the maintainer, hints (markdown) the modules of
 * the changed files that need a section and the lines to add.
 */
int jops_find(struct kb_jobs *j, struct kb_git_repo *git, const char *repo, int64_t pr,
	      const char *head_sha, struct strvec *ops, struct strbuf *notes, struct strbuf *hints);

/* --- modops.c: operators in ordinary code (README.md, "Modules of the repository") --- */

struct kb_repo_operator;
/*
 * The sections of rc whose file (or .kernelbot.ini) is among changed and
 * whose class or function is in it at sha: their job paths appended to ops.
 * hints gets markdown: a list of the sections whose file or class is
 * missing, and the .kernelbot.ini lines for the sections without shapes
 * and, when hint_unnamed, for the modules and @kernelbot.operator
 * functions of the changed files no section names. 0.
 */
int jmodops_find(struct kb_git_repo *git, const char *sha, const struct kb_repo_config *rc,
		 const struct strvec *changed, bool hint_unnamed, struct strvec *ops, struct strbuf *hints);
/* Keep (md empty: forget) and read back a trigger's hints, shown in its progress comment. */
int jmodops_save_hints(struct kb_jobs *j, int64_t tid, const char *md);
void jmodops_load_hints(struct kb_jobs *j, int64_t tid, struct strbuf *out);
/* The section a module job was made from (r->rcfg at the pinned sha); NULL when it is gone. */
const struct kb_repo_operator *jmod_section(const struct runner *r);
/* The job's operator is a section's "PATH.py:NAME". */
bool jmod_is_module_job(const struct runner *r);
/* Where `kernelbot operator` writes the job's operator file (the checkout's root); -1 without a section. */
int jmod_operator_file(const struct runner *r, struct strbuf *out);

/* --- wire_job.c: a module job's kernel wired into the module (bot/report/README.md) --- */

/*
 * Where the run's folder goes on the branch (its Python package): a module
 * job's module in a package gets it inside that package,
 * <root>/<pkg>/_kernelbot/<slug> (report/wire.h, kb_wire_op_dir); every
 * other job kernelbot/<slug>. publish.c commits it there, render.c names it.
 */
void jwire_op_dir(struct strbuf *out, const struct runner *r);
/*
 * The wiring runs as a child the loop polls (jobs.c, stage "wire"), in two
 * steps. First a module job's `kernelbot wire --check --write` command on
 * r->out and r->src is appended to args: 1. When no child is needed the
 * outcome is settled at once: 0, r->wired empty and, for a function or an
 * init argument that is no literal, a line in r->notes saying why (other
 * jobs: nothing). -1 on an error.
 */
int jwire_command(struct kb_jobs *j, struct runner *r, struct strvec *args);
/*
 * Then the child ended with exit_code (tail: the last line of its log that
 * says something), or was stopped or never ran (why_not: why, in words, as
 * "the wiring check was stopped by @alice"; exit_code is not looked at).
 * r->wired gets the patched module (and setup.py) when the check said
 * "wired"; otherwise a line in r->notes says why, and a child that left no
 * proof of its own leaves evidence.json's "wiring" saying not_wired and
 * why. 0 or -1 (logged).
 */
int jwire_ended(struct runner *r, int exit_code, const char *tail, const char *why_not);

/* --- jobs.c --- */

/*
 * Stop the runner of job_id if this process runs it, and finish it as
 * cancelled. stop: a stop request (not a re-run): a job wiring its kernel
 * into the module stops the wiring and publishes the kernel unwired.
 */
void jobs_cancel_runner(struct kb_jobs *j, int64_t job_id, const char *actor, bool stop);
/* True when this process runs job_id. */
bool jobs_runs(struct kb_jobs *j, int64_t job_id);

/* --- git glue (jobs.c) --- */

/* Sync the cached clone of repo; cred from the forge, URL maybe overridden. */
int jgit_open(struct kb_jobs *j, struct kb_git_repo **out, const char *repo);

#endif
