#ifndef KB_COMMENTS_H
#define KB_COMMENTS_H
/*
 * What the bot writes on the labelled pull request while it works: the
 * progress comment (one, edited in place, found again by its marker), a
 * review comment each time the best kernel improves, and the check run or
 * commit status summary. Pure functions from data to markdown, like
 * report/pr_body.h; the job loop sends them through the forge.
 *
 * Check run / status mapping the job loop uses (forge.h enums):
 *   queued                        -> KB_CHECK_QUEUED / KB_STATUS_PENDING
 *   fetching .. opening PR        -> KB_CHECK_IN_PROGRESS / KB_STATUS_PENDING (wiring too)
 *   done, faster (kb_stage_faster)-> completed SUCCESS / KB_STATUS_SUCCESS
 *   done, not faster              -> completed NEUTRAL / KB_STATUS_SUCCESS
 *   failed                        -> completed FAILURE / KB_STATUS_FAILURE
 *   cancelled                     -> completed CANCELLED / KB_STATUS_ERROR
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "report/markdown.h"

#include <cjson/cJSON.h>

enum kb_stage {
	KB_STAGE_QUEUED,
	KB_STAGE_FETCHING,
	KB_STAGE_ANALYSING,
	KB_STAGE_TUNING,
	KB_STAGE_VERIFYING,
	KB_STAGE_WIRING,        /* a module's kernel wired into it, checked (`kernelbot wire`) */
	KB_STAGE_OPENING_PR,
	KB_STAGE_DONE,
	KB_STAGE_FAILED,
	KB_STAGE_CANCELLED
};

/* "queued", "fetching", "analysing", "tuning", "verifying", "wiring", "opening-pr", "done", "failed",
 * "cancelled"; NULL out of range. */
const char *kb_stage_name(enum kb_stage stage);
/* Name to enum; -1 (nothing logged) when unknown. */
int kb_stage_parse(const char *name, enum kb_stage *out);
/* done, failed or cancelled */
bool kb_stage_final(enum kb_stage stage);

/*
 * Archive occupancy of the LLM search: cell[memory][compute][parallelism],
 * each behaviour axis scored 0-3 (KernelFoundry's axes); nonzero: filled.
 */
struct kb_archive_grid {
	int cell[4][4][4];
};

/* One job (one operator) as the progress texts show it. Strings are borrowed. */
struct kb_progress_job {
	int64_t job_id;
	const char *operator_path;
	enum kb_stage stage;
	int tune_done, tune_total;          /* tuning k/n; tune_total 0: not shown */
	double best_speedup;                /* while searching: the best screening figure (geomean vs
					     * eager); done: the headline (report/headline.h); <= 0: none yet */
	size_t slower_configs;              /* done: configs slower than eager beyond the noise band */
	size_t timed_configs;               /* done: of how many timed */
	int64_t candidates;                 /* candidates evaluated so far */
	double elapsed_s;
	const char *bot_pr_url;             /* the bot's pull request once open, else NULL */
	int64_t bot_pr_number;              /* 0: not open */
	const char *error;                  /* failed: why */
	const struct kb_archive_grid *grid; /* NULL: nothing shown (no archive) */
	bool backward_pass;                 /* a job of both passes searching its backward: the stage says so */
};

/* The progress comment of one labelled pull request. */
struct kb_progress {
	const char *repo;
	int64_t pr_number;
	const char *head_sha;          /* the sha being optimised, pinned at labelling */
	const char *current_head_sha;  /* the pull request's head now; NULL: unknown */
	const char *label;             /* the trigger label; NULL: "optimize-kernel" */
	const struct kb_progress_job *jobs;
	size_t nr;
};

/* Most jobs listed, and most archive grids shown, in one progress comment. */
#define KB_PROGRESS_MAX_JOBS 50
#define KB_PROGRESS_MAX_GRIDS 4

/* Append the progress marker `<!-- kernelbot:progress pr=<n> -->`: what find_comment looks for. */
void kb_progress_marker(struct strbuf *sb, int64_t pr_number);

/*
 * The progress comment into out (reset first), marker last: headline with
 * the stage, a table (operator | stage | best | candidates | elapsed |
 * pull request), failures, a note when the head moved after labelling,
 * the archive grids, how to re-run and stop. Bounded by construction
 * (at most KB_PROGRESS_MAX_JOBS rows, five failures, names and errors
 * cut): well under GitHub's limits. To skip an edit that changes nothing,
 * compare kb_body_hash of the new text with that of the comment read
 * back. 0, or -1 (logged) when there is no job.
 */
int kb_progress_comment(struct strbuf *out, const struct kb_progress *p);

/* Append the archive grid as a compact text block (nothing for NULL). */
void kb_archive_grid_render(struct strbuf *sb, const struct kb_archive_grid *grid);

/* A review comment posted when the best kernel improves. */
struct kb_review_info {
	int64_t job_id;
	int64_t candidate_id;       /* 0: not in the marker */
	const char *operator_path;
	double old_speedup;         /* <= 0: this is the first verified kernel */
	double new_speedup;
	size_t configs, seeds;      /* verified on; 0: not said */
	const char *kernel_source;  /* NULL: no excerpt */
	const char *kernel_path;    /* shown above the excerpt; its extension picks the fence language */
	const char *url;            /* the bot's pull request, NULL: not open yet */
	const char *proposer;       /* NULL: not said */
};

/* Lines and bytes of kernel source shown in a review comment. */
#define KB_REVIEW_EXCERPT_LINES 80
#define KB_REVIEW_EXCERPT_BYTES 12000

/*
 * The review body into out (reset first): operator, old -> new speedup
 * (screening figures: the comment says so, and that the pull request's
 * number comes from a fresh re-check), the kernel's first lines in a
 * collapsed block, the link, and the marker
 * `<!-- kernelbot:review job=<id> candidate=<id> -->`. 0 or -1.
 */
int kb_review_body(struct strbuf *out, const struct kb_review_info *r);

/*
 * Commit status description: at most KB_MD_STATUS_MAX_CHARS characters
 * and as many bytes, e.g. "softmax: tuning 3/8, best 1.42x (screening),
 * 17 candidates" or "softmax: 2.31x faster than eager, PR #34" (done: the
 * headline; "slower than eager on N of M configs" first when it is). Also
 * the check run's title. out is reset first.
 */
void kb_status_description(struct strbuf *out, const struct kb_progress_job *job);

/* True when the job is done, its headline beats eager (>= 1.005x) and no config is slower. */
bool kb_stage_faster(const struct kb_progress_job *job);

/*
 * Check run output: title (kb_status_description) and summary markdown
 * within KB_MD_CHECK_MAX_CHARS characters and as many bytes. evidence is
 * the best kernel's (NULL while there is none); its speedup table is
 * shown, cut to the rows that fit. 0, or KB_ETOOBIG (logged).
 */
int kb_check_render(struct strbuf *title, struct strbuf *summary,
		    const struct kb_progress_job *job, const char *head_sha,
		    const cJSON *evidence);

#endif
