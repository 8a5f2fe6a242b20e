#ifndef KB_PR_BODY_H
#define KB_PR_BODY_H
/*
 * The bot's pull request: title and body rendered from the final evidence
 * and the search figures, plus the hidden markers every posted text
 * carries so that a restarted bot finds it again and can tell whether it
 * changed. Pure functions: data in, markdown out; nothing is sent.
 *
 *   struct kb_pr_report r = { .job = {...}, .evidence = ev, ... };
 *   kb_pr_title(&title, &r);
 *   kb_pr_body(&body, &r, NULL);          // GitHub's limits
 *   if (!kb_marker_find(old_body, "pr", &m) &&
 *       !strcmp(m.body_sha, new_hash)) ... // unchanged: no PATCH
 *
 * Markers: `<!-- kernelbot:<kind> key=value ... -->`, written as the last
 * thing in the text. Values are [A-Za-z0-9._-]+. Kinds: "pr" (job, state,
 * body-sha), "progress" (pr), "review" (job, candidate). Untrusted text in
 * a body is escaped (report/markdown.h), so it cannot hold a marker
 * outside a code block; kb_marker_find takes the last one all the same.
 *
 * Title rule (the headline policy, bot/report/HEADLINE.md; report/headline.h
 * computes it): `kernelbot: <operator> <x.xx>x faster on its own shapes`
 * when the headline (the speedup over eager on the operator's own shapes),
 * printed with two decimals, is above 1.00; otherwise `kernelbot:
 * <operator>, no faster kernel found (<x.xx>x on its own shapes)`; "over
 * all configs" in place of "on its own shapes" when none of those was
 * timed. A kernel slower than eager beyond the noise band on some config
 * starts with it: `kernelbot: slower than eager on N of M configs: ...`.
 * `kernelbot: <operator> verified kernel (not timed)` without timings and
 * `kernelbot: <operator>, no verified kernel` when the verdict is not
 * "verified". <operator> is the operator's file name without ".py" (a
 * robust-kbench task: its folder's name), at most 80 characters.
 *
 * The body leads with the headline, then the geometric mean over all
 * configs and the worst config (a job of both passes: the forward and
 * backward section next, report/passes.h); warnings for slower configs and a single
 * config (weak evidence); the screening figure beside the final one when
 * they differ beyond the band; every config the verifier left out, with
 * the reason; and a Reproduce command (`kernelbot bench` with the same
 * seeds and configs) that prints the same table, with the band its
 * speedups are promised to land within.
 *
 * Size: the body stays within the limits given (default: fewer than
 * 65,536 code points, GitHub's limit, and at most 65,536 bytes, what the
 * forge accepts). When the full body is larger, details blocks go first,
 * least important first (timing details, config notes, per-config
 * errors, the chart, then the configs left out), then every table keeps
 * only its first rows and says "… N more configs". Rows and multi-byte characters
 * are never cut. A note near the end says what was left out.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "report/markdown.h"
#include "report/passes.h"

#include <cjson/cJSON.h>

/* What the forge accepts (forge.h KB_FORGE_MAX_BODY). */
#define KB_PR_BODY_MAX_BYTES 65536

/* One point of the best-speedup-over-time series. */
struct kb_speedup_point {
	int64_t t;        /* Unix seconds */
	double speedup;   /* best geomean speedup over eager at t */
};

/* The job a text belongs to. Strings are borrowed. */
struct kb_report_job {
	int64_t id;
	const char *repo;           /* "owner/name" */
	int64_t pr_number;          /* the labelled pull request */
	const char *head_sha;       /* the sha optimised (pinned at labelling) */
	const char *operator_path;  /* the operator, a path in the repository */
	const char *backend;        /* "cuda" / "cpu"; NULL: the evidence's */
	const char *state;          /* job state for the marker ("running", "done", ...; [A-Za-z0-9._-]); NULL: "done" */
};

/* What the search did. */
struct kb_search_figures {
	int64_t candidates;            /* candidates tried (evaluated or rejected before) */
	int64_t verified;              /* of those, verified */
	int64_t generations;           /* generations, or template points */
	const char *generations_label; /* NULL: "generations" */
	double wall_s;                 /* wall time of the search */
	double llm_cost_usd;           /* 0: no LLM used */
	const char *proposer;          /* "built-in templates" or model names; NULL: "built-in templates" */
	int64_t cut_short_budget_s;    /* > 0: this time budget (seconds) cut the search short */
};

struct kb_pr_report {
	struct kb_report_job job;
	const cJSON *evidence;                  /* the best kernel's evidence (verifier/evidence.h) */
	struct kb_search_figures search;
	const struct kb_speedup_point *history; /* oldest first; NULL: no chart */
	size_t history_nr;
	const char *branch;         /* the bot's branch, e.g. "kernelbot/pr-12/softmax" */
	const char *kernel_path;    /* the kernel file in that branch */
	const char *binding_dir;    /* folder holding binding.py; NULL: kernel_path's folder */
	const char *evidence_path;  /* the evidence file in that branch; NULL: not named */
	double noise_band;          /* [report] noise_band, the band's floor; <= 0: KB_NOISE_BAND_DEFAULT */
	double screening_speedup;   /* the kernel's figure while searching (kernel.json "screening"); <= 0: unknown */
	const char *notice;         /* markdown the reader must see first (the head moved); NULL: none */
	/* a job of both passes (report/passes.h): the forward+backward table, the backward's
	 * Reproduce command, what apply() differentiates with; NULL: a forward job */
	const struct kb_passes_report *passes;
};

/* The operator's short name (see the title rule) into out (reset first). */
void kb_pr_operator_name(struct strbuf *out, const char *operator_path);

/* The title (see the rule above) into out (reset first). -1 when r has no evidence. */
int kb_pr_title(struct strbuf *out, const struct kb_pr_report *r);

/*
 * The body, marker last, into out (reset first). lim NULL: GitHub's
 * (KB_MD_BODY_MAX_CHARS code points, KB_PR_BODY_MAX_BYTES bytes).
 * 0; -1 when r has no evidence; KB_ETOOBIG (logged) when even the
 * smallest form does not fit lim.
 */
int kb_pr_body(struct strbuf *out, const struct kb_pr_report *r, const struct kb_md_limits *lim);

/*
 * SHA-256 (hex) of body without its marker: the last well-formed
 * `<!-- kernelbot:<kind> key=value ... -->` is left out (look-alikes in
 * the text, quoted or cut, are hashed like any text), and so is every
 * '\r' (an edit in the web page turns newlines into CRLF). The pr marker's body-sha is this hash of the rest
 * of the body: compare it with the hash of a fresh rendering to skip a
 * PATCH, or with kb_body_hash of the body read back to see whether
 * someone edited it.
 */
void kb_body_hash(const char *body, char hex[65]);

/* A marker parsed back. Absent fields are 0 / "". */
struct kb_marker {
	int64_t job;
	int64_t pr;
	int64_t candidate;
	char state[32];
	char body_sha[65];
	size_t offset, len;   /* where the marker is in the body, in bytes */
};

/*
 * Find the last `<!-- kernelbot:<kind> ... -->` in body and parse its
 * fields (unknown keys are ignored). 0; KB_ENOTFOUND (nothing logged)
 * when there is none; -1 (logged) when it is malformed (no end, a value
 * that is not a number or too long, a body-sha that is not 64 hex digits).
 */
int kb_marker_find(const char *body, const char *kind, struct kb_marker *out);

/*
 * Append a marker: fields that are 0 / NULL are left out. kind and state
 * must be made of [A-Za-z0-9._-] (-1, logged, and nothing appended else).
 */
int kb_marker_add(struct strbuf *sb, const char *kind, int64_t job, int64_t pr,
		  int64_t candidate, const char *state, const char *body_sha);

#endif
