#ifndef KB_JOBS_H
#define KB_JOBS_H
/*
 * The job loop: what joins the forge, git, the built-in proposer
 * (`kernelbot run`, a child process) and the state store.
 *
 *   trigger (a labelled pull request, head sha pinned at labelling)
 *     -> one job per operator (changed files in a task format, or the
 *        repository's .kernelbot.ini [operators] paths; a changed module
 *        of an [operator NAME] section: "PATH.py:NAME", whose job makes
 *        its operator file with `kernelbot operator` first)
 *     -> claim -> fetch (libgit2) -> `kernelbot run` child with a progress
 *        file -> progress comment edited in place, review comment on each
 *        new best (by improve_margin) -> branch PREFIX/pr-N/<slug>, commit
 *        kernel, binding, evidence -> publish -> open or update the bot's
 *        pull request -> status / check run -> labels
 *
 * The child gets what is left of the job's time budget (`kernelbot run
 * --time-budget`): when it ends, the search stops and the best kernel so
 * far gets its final check and is published, marked as cut short. The
 * loop kills a child only when it runs a grace period past that.
 *
 * Every transition is one transaction in the state store, and everything
 * put on the forge is recorded in forge_objects by a marker that is also
 * in the object itself, so a runner killed at any point resumes where it
 * stood: it finds its branch, pull request and comments again and updates
 * them; nothing is posted twice. The child gets SIGTERM when its parent
 * dies (PR_SET_PDEATHSIG), so a killed daemon leaves no search behind.
 *
 * The loop never blocks on a child: kb_jobs_tick() reaps, reads progress
 * and starts queued jobs, and returns; the daemon calls it from its cron,
 * `kernelbot action` in a loop until its trigger is finished. One struct
 * kb_jobs per process, used by one thread.
 */
#include "core/common.h"

struct kb_config;
struct kb_state;
struct kb_forge;
struct strbuf;
struct kb_repo_operator;

struct kb_jobs;

struct kb_jobs_opts {
	const char *kernelbot_bin; /* binary for `run` children; NULL: this executable */
	const char *config_path;   /* for messages only; may be NULL */
};

/*
 * cfg, st and f are borrowed and must outlive the handle (cfg may be
 * reloaded in place between ticks). Running jobs left by a previous
 * process are NOT requeued here: the daemon does that once at startup
 * (kb_state_requeue_running).
 */
int kb_jobs_new(struct kb_jobs **out, struct kb_config *cfg, struct kb_state *st,
		struct kb_forge *f, const struct kb_jobs_opts *opts);
/* Kills running children (their jobs stay "running" in the store: resumed later). */
void kb_jobs_free(struct kb_jobs *j);
/* Use f from now on (a config reload reopened the forge); the old one may be freed. */
void kb_jobs_set_forge(struct kb_jobs *j, struct kb_forge *f);

/* Where a trigger comes from. */
struct kb_trigger_req {
	const char *repo;      /* owner/name */
	int64_t pr;
	const char *head_sha;  /* seen at labelling; NULL: the pull request's current head */
	const char *actor;     /* who labelled or asked; NULL: the label's last adder (forge) */
	const char *source;    /* "poll", "webhook", "command", "action" */
	bool rerun;            /* /kernelbot run: replace an active trigger, re-run finished jobs */
	/*
	 * /kernelbot run: the command is the request, the label need not be
	 * on. Otherwise a job starts only while the label is on the pull
	 * request as the API shows it now: an event (a replayed webhook, a
	 * queued Actions run) may be older than the label's removal.
	 */
	bool label_optional;
};

/*
 * A labelled pull request: check the actor's permission (write, maintain
 * or admin) and that the label is still on it (unless label_optional),
 * pin the head sha, find the operators and queue one job each, all in one
 * transaction. Returns the number of jobs queued (>= 0): 0 when the pull
 * request already has an active trigger (a later push does not re-run
 * it), when the actor may not, when the label is gone, when it has no
 * operator (the progress comment then says so), or, for a poll (actor NULL), when its
 * latest trigger was cancelled after the label was last added (a
 * `/kernelbot stop` leaves the label on; only a new labelling or
 * `/kernelbot run` starts it again). *trigger_id_out (may be NULL) gets
 * the trigger, 0 when none was made. -1 on errors.
 */
int kb_jobs_trigger(struct kb_jobs *j, const struct kb_trigger_req *req, int64_t *trigger_id_out);

/*
 * "stop" or "run" when body's first non-blank line is `/kernelbot stop`
 * or `/kernelbot run` (anything may follow); NULL otherwise.
 */
const char *kb_jobs_parse_command(const char *body);

/*
 * A slash command (kb_jobs_parse_command) from actor on pull request pr,
 * whether it came by webhook or by polling the comments: ignored (0)
 * unless actor has write access; "stop" is kb_jobs_cancel, "run" is
 * kb_jobs_trigger with rerun and label_optional set on the current head
 * (source "command"; a comment is acted on once, by its id, however often
 * it is delivered).
 * Returns what those return (>= 0), 0 when ignored, -1 on errors.
 */
int kb_jobs_command(struct kb_jobs *j, const char *repo, int64_t pr, const char *actor,
		    const char *command);

/*
 * Cancel the active trigger of a pull request (label removed, or
 * /kernelbot stop from a writer; the caller checked): queued jobs are
 * cancelled, running children killed, comments and labels updated.
 * actor may be NULL. Returns how many jobs were cancelled (>= 0), or -1.
 */
int kb_jobs_cancel(struct kb_jobs *j, const char *repo, int64_t pr, const char *actor);

/*
 * One step of the loop: reap and read the children, publish progress,
 * start queued jobs up to max_jobs (resuming those a previous process
 * left). Returns the number of jobs running in this process after the
 * step (>= 0); -1 only when the store itself fails.
 */
int kb_jobs_tick(struct kb_jobs *j);

/* Jobs of trigger_id still queued or running (>= 0), or -1. */
int kb_jobs_trigger_pending(struct kb_jobs *j, int64_t trigger_id);

/*
 * The outcome of a finished trigger for `kernelbot action`: markdown for
 * the step summary (appended to md, capped by the caller), the URL of the
 * first bot pull request (empty when none) and the best speedup (0 when
 * none). Returns 0 when every job is done, 1 when one failed or was
 * cancelled, -1 on errors.
 */
int kb_jobs_trigger_outcome(struct kb_jobs *j, int64_t trigger_id, struct strbuf *md,
			    struct strbuf *pr_url, double *speedup);

/* --- pieces shared with the daemon and the tests --- */

/*
 * "ops/relu.py" -> "relu", "tasks/softmax/" -> "softmax": lower case,
 * [a-z0-9._-] only, at most 48 bytes; "op" when nothing is left.
 */
void kb_jobs_operator_slug(struct strbuf *out, const char *operator_path);

/* [kernelbot] passes: which passes a job searches (bot/jobs/README.md, "Forward and backward"). */
enum kb_repo_passes {
	KB_PASSES_AUTO,          /* unset: both for a task that ships a backward (func_backward.py) */
	KB_PASSES_FORWARD,       /* "forward" */
	KB_PASSES_BOTH           /* "forward,backward" */
};

/* A .kernelbot.ini, parsed (inih) and bounded by the daemon's config. */
struct kb_repo_config {
	char **paths;          /* [operators] paths, NULL-terminated; NULL when none */
	size_t nr_paths;
	int64_t budget_s;      /* [kernelbot] budget_s, clamped to max_time_budget_s; 0: unset */
	double atol, rtol;     /* [kernelbot] atol/rtol for fp32, never looser than the daemon's; 0: unset */
	double error_factor;   /* [kernelbot] error_factor, never above the daemon's */
	bool error_factor_set;
	int64_t max_configs;   /* [kernelbot] max_configs, at most the daemon's; 0: unset */
	enum kb_repo_passes passes; /* [kernelbot] passes */
	struct kb_repo_operator *ops; /* [operator NAME] sections (jobs/repo_operators.h) */
	size_t nr_ops;
};
void kb_repo_config_release(struct kb_repo_config *rc);
/*
 * Parse text (a .kernelbot.ini) into out. Unknown keys and bad values are
 * warnings in why (one line each), never fatal: a repository's typo must
 * not stop the job; values beyond the daemon's bounds are clamped (and
 * said so in why). Returns 0, or -1 when the text is not INI at all.
 */
int kb_repo_config_parse(struct kb_repo_config *out, const char *text,
			 const struct kb_config *cfg, struct strbuf *why);

#endif
