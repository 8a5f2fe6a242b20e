#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "report/comments.h"
#include "report/pr_body.h"

#include <inttypes.h>
#include <math.h>

static const char *const stage_names[] = {
	[KB_STAGE_QUEUED] = "queued",
	[KB_STAGE_FETCHING] = "fetching",
	[KB_STAGE_ANALYSING] = "analysing",
	[KB_STAGE_TUNING] = "tuning",
	[KB_STAGE_VERIFYING] = "verifying",
	[KB_STAGE_WIRING] = "wiring",
	[KB_STAGE_OPENING_PR] = "opening-pr",
	[KB_STAGE_DONE] = "done",
	[KB_STAGE_FAILED] = "failed",
	[KB_STAGE_CANCELLED] = "cancelled",
};

const char *kb_stage_name(enum kb_stage stage)
{
	if ((unsigned)stage >= ARRAY_SIZE(stage_names))
		return NULL;
	return stage_names[stage];
}

int kb_stage_parse(const char *name, enum kb_stage *out)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(stage_names); i++) {
		if (!strcmp(stage_names[i], name)) {
			*out = (enum kb_stage)i;
			return 0;
		}
	}
	return -1;
}

bool kb_stage_final(enum kb_stage stage)
{
	return stage == KB_STAGE_DONE || stage == KB_STAGE_FAILED || stage == KB_STAGE_CANCELLED;
}

bool kb_stage_faster(const struct kb_progress_job *job)
{
	return job->stage == KB_STAGE_DONE && isfinite(job->best_speedup) &&
	       job->best_speedup >= 1.005 && !job->slower_configs;
}

static void add_stage_name(struct strbuf *sb, const struct kb_progress_job *j)
{
	switch (j->stage) {
	case KB_STAGE_TUNING:
		strbuf_addstr(sb, "tuning");
		if (j->tune_total > 0)
			strbuf_addf(sb, " %d/%d", j->tune_done, j->tune_total);
		return;
	case KB_STAGE_OPENING_PR:
		strbuf_addstr(sb, "opening PR");
		return;
	case KB_STAGE_WIRING:
		strbuf_addstr(sb, "wiring into the module");
		return;
	default:
		strbuf_addstr(sb, kb_stage_name(j->stage) ? kb_stage_name(j->stage) : "unknown");
	}
}

/* "tuning 3/8", "opening PR", "verifying (backward pass)", ...: the stage as people read it. */
static void add_stage(struct strbuf *sb, const struct kb_progress_job *j)
{
	bool searching = j->stage == KB_STAGE_ANALYSING || j->stage == KB_STAGE_TUNING ||
			 j->stage == KB_STAGE_VERIFYING;

	add_stage_name(sb, j);
	if (j->backward_pass && searching)
		strbuf_addstr(sb, " (backward pass)");
}

static bool has_best(const struct kb_progress_job *j)
{
	return isfinite(j->best_speedup) && j->best_speedup > 0;
}

/* Same commit: equal up to the shorter (an abbreviated sha matches its full form). */
static bool same_sha(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), n = la < lb ? la : lb;

	return n >= 7 && !strncasecmp(a, b, n);
}

static void add_short_sha(struct strbuf *sb, const char *sha)
{
	char buf[13];

	kb_strlcpy(buf, sha, sizeof(buf));
	kb_md_code(sb, buf, false);
}

void kb_progress_marker(struct strbuf *sb, int64_t pr_number)
{
	strbuf_addf(sb, "<!-- kernelbot:progress pr=%" PRId64 " -->", pr_number);
}

void kb_archive_grid_render(struct strbuf *sb, const struct kb_archive_grid *grid)
{
	struct strbuf text = STRBUF_INIT;
	int filled = 0;

	if (!grid)
		return;
	for (int m = 0; m < 4; m++)
		for (int c = 0; c < 4; c++)
			for (int p = 0; p < 4; p++)
				filled += grid->cell[m][c][p] != 0;
	/* one 4x4 block (memory rows x compute columns) per parallelism level */
	strbuf_addstr(&text, "        par 0  par 1  par 2  par 3\n");
	strbuf_addstr(&text, "        c0123  c0123  c0123  c0123\n");
	for (int m = 0; m < 4; m++) {
		strbuf_addf(&text, "mem %d  ", m);
		for (int p = 0; p < 4; p++) {
			strbuf_addstr(&text, "  ");
			for (int c = 0; c < 4; c++)
				strbuf_addch(&text, grid->cell[m][c][p] ? '#' : '.');
			strbuf_addstr(&text, p < 3 ? " " : "");
		}
		strbuf_addch(&text, '\n');
	}
	strbuf_addf(sb, "Archive cells filled: **%d/64** (# filled; memory x compute x "
		    "parallelism, each scored 0-3):\n\n", filled);
	kb_md_fence(sb, "text", text.buf, text.len);
	strbuf_release(&text);
}

static const char *overall_headline(const struct kb_progress *p, struct strbuf *tmp)
{
	size_t done = 0, failed = 0, cancelled = 0;

	strbuf_reset(tmp);
	if (p->nr == 1) {
		add_stage(tmp, &p->jobs[0]);
		return tmp->buf;
	}
	for (size_t i = 0; i < p->nr; i++) {
		done += p->jobs[i].stage == KB_STAGE_DONE;
		failed += p->jobs[i].stage == KB_STAGE_FAILED;
		cancelled += p->jobs[i].stage == KB_STAGE_CANCELLED;
	}
	if (done + failed + cancelled == p->nr)
		strbuf_addf(tmp, "finished: %zu done, %zu failed, %zu cancelled", done, failed, cancelled);
	else
		strbuf_addf(tmp, "%zu of %zu operators finished", done + failed + cancelled, p->nr);
	return tmp->buf;
}

/* While a job searches, its best speedup is a screening figure: say so (bot/report/HEADLINE.md). */
static void screening_note(struct strbuf *out, const struct kb_progress *p)
{
	for (size_t i = 0; i < p->nr; i++) {
		if (kb_stage_final(p->jobs[i].stage) || !has_best(&p->jobs[i]))
			continue;
		strbuf_addstr(out, "Best speedups of running jobs are screening figures: the search's "
			      "own timing (geometric mean over the configs, one seed, in its long-lived "
			      "harness worker, the best of many candidates). The pull request's number "
			      "comes from a fresh re-check of the final kernel and can be lower.\n\n");
		return;
	}
}

int kb_progress_comment(struct strbuf *out, const struct kb_progress *p)
{
	static const char *const head[] = { "operator", "stage", "best speedup", "candidates",
					     "elapsed", "pull request" };
	const char *label = p->label ? p->label : "optimize-kernel";
	struct strbuf tmp = STRBUF_INIT;
	size_t shown = 0, grids = 0;
	bool any_failed = false;

	strbuf_reset(out);
	if (!p->nr || !p->jobs)
		return error("no job for the progress comment of pull request #%" PRId64, p->pr_number);
	strbuf_addf(out, "### kernelbot: %s\n\n", overall_headline(p, &tmp));
	strbuf_addstr(out, "Optimising ");
	if (p->nr == 1) {
		kb_md_code_n(out, p->jobs[0].operator_path ? p->jobs[0].operator_path : "?", 200, false);
	} else {
		strbuf_addf(out, "%zu operators", p->nr);
	}
	if (p->head_sha) {
		strbuf_addstr(out, " at ");
		add_short_sha(out, p->head_sha);
		strbuf_addstr(out, ", the head when the label was added");
	}
	strbuf_addstr(out, ".\n\n");

	kb_md_table_head(out, head, ARRAY_SIZE(head), "llrrrl");
	for (size_t i = 0; i < p->nr; i++) {
		const struct kb_progress_job *j = &p->jobs[i];
		struct strbuf cell[3] = { STRBUF_INIT, STRBUF_INIT, STRBUF_INIT };
		char best[32], cand[32], el[32];
		const char *cells[6];

		any_failed |= j->stage == KB_STAGE_FAILED && j->error;
		if (shown == KB_PROGRESS_MAX_JOBS)
			continue;
		kb_md_code_n(&cell[0], j->operator_path ? j->operator_path : "?", 80, true);
		add_stage(&cell[1], j);
		if (has_best(j))
			kb_md_fmt_speedup(best, sizeof(best), j->best_speedup);
		else
			snprintf(best, sizeof(best), "none yet");
		snprintf(cand, sizeof(cand), "%" PRId64, j->candidates);
		kb_md_fmt_duration(el, sizeof(el), j->elapsed_s);
		if (j->bot_pr_url || j->bot_pr_number) {
			char text[32];

			snprintf(text, sizeof(text), "#%" PRId64, j->bot_pr_number);
			if (j->bot_pr_url)
				kb_md_link(&cell[2], j->bot_pr_number ? text : "open", j->bot_pr_url);
			else
				strbuf_addstr(&cell[2], text);
		} else {
			strbuf_addstr(&cell[2], "-");
		}
		cells[0] = cell[0].buf;
		cells[1] = cell[1].buf;
		cells[2] = best;
		cells[3] = cand;
		cells[4] = el;
		cells[5] = cell[2].buf;
		kb_md_table_row(out, cells, 6);
		for (int k = 0; k < 3; k++)
			strbuf_release(&cell[k]);
		shown++;
	}
	if (p->nr > shown)
		strbuf_addf(out, "\n… %zu more operators\n", p->nr - shown);
	strbuf_addch(out, '\n');
	screening_note(out, p);

	if (any_failed) {
		size_t n = 0;

		for (size_t i = 0; i < p->nr && n < 5; i++) {
			const struct kb_progress_job *j = &p->jobs[i];

			if (j->stage != KB_STAGE_FAILED || !j->error)
				continue;
			strbuf_addstr(out, "- ");
			kb_md_code_n(out, j->operator_path ? j->operator_path : "?", 80, false);
			strbuf_addstr(out, " failed: ");
			kb_md_escape_n(out, j->error, 300);
			strbuf_addch(out, '\n');
			n++;
		}
		strbuf_addch(out, '\n');
	}

	if (p->head_sha && p->current_head_sha && !same_sha(p->head_sha, p->current_head_sha)) {
		strbuf_addstr(out, "> [!NOTE]\n> The head moved to ");
		add_short_sha(out, p->current_head_sha);
		strbuf_addstr(out, " after labelling. New commits after labelling are not optimised; comment "
			      "`/kernelbot run` to start again on the new head.\n\n");
	}

	for (size_t i = 0; i < p->nr && grids < KB_PROGRESS_MAX_GRIDS; i++) {
		if (!p->jobs[i].grid)
			continue;
		if (p->nr > 1) {
			kb_md_code_n(out, p->jobs[i].operator_path ? p->jobs[i].operator_path : "?",
				     120, false);
			strbuf_addstr(out, ": ");
		}
		kb_archive_grid_render(out, p->jobs[i].grid);
		strbuf_addch(out, '\n');
		grids++;
	}

	strbuf_addstr(out, "<sub>Run again: comment `/kernelbot run`, or remove and re-add the ");
	kb_md_code_n(out, label, 60, false);
	strbuf_addstr(out, " label. Stop: comment `/kernelbot stop`. Only people with write "
		      "access can do either. This comment is updated in place.</sub>\n\n");
	kb_progress_marker(out, p->pr_number);
	strbuf_release(&tmp);
	return 0;
}

/* Fence language from the kernel's file name. */
static const char *fence_lang(const char *path)
{
	const char *dot = path ? strrchr(path, '.') : NULL;

	if (!dot)
		return NULL;
	if (!strcmp(dot, ".cu") || !strcmp(dot, ".cuh"))
		return "cuda";
	if (!strcmp(dot, ".cpp") || !strcmp(dot, ".cc") || !strcmp(dot, ".h") || !strcmp(dot, ".hpp"))
		return "cpp";
	if (!strcmp(dot, ".c"))
		return "c";
	if (!strcmp(dot, ".py"))
		return "python";
	return NULL;
}

int kb_review_body(struct strbuf *out, const struct kb_review_info *r)
{
	char oldv[32], newv[32];

	strbuf_reset(out);
	if (!isfinite(r->new_speedup))
		return error("no speedup for the review comment on '%s'",
			     r->operator_path ? r->operator_path : "?");
	kb_md_fmt_speedup(newv, sizeof(newv), r->new_speedup);
	strbuf_addstr(out, "**kernelbot**: new best kernel for ");
	kb_md_code_n(out, r->operator_path ? r->operator_path : "?", 200, false);
	if (isfinite(r->old_speedup) && r->old_speedup > 0) {
		kb_md_fmt_speedup(oldv, sizeof(oldv), r->old_speedup);
		strbuf_addf(out, ": **%s → %s** vs PyTorch eager", oldv, newv);
	} else {
		strbuf_addf(out, ": first verified kernel, **%s** vs PyTorch eager", newv);
	}
	strbuf_addstr(out, " (screening figure: geometric mean");
	if (r->configs) {
		strbuf_addf(out, " over %zu configs", r->configs);
		if (r->seeds)
			strbuf_addf(out, "; verified on %zu configs × %zu seeds", r->configs, r->seeds);
	}
	strbuf_addstr(out, ")");
	if (r->proposer) {
		strbuf_addstr(out, "; proposed by ");
		kb_md_escape_n(out, r->proposer, 100);
	}
	strbuf_addstr(out, ".\n\n");
	strbuf_addstr(out, "Screening figures are the search's own timing: one seed and few "
		      "repetitions in its long-lived harness worker, the best of many candidates. The "
		      "pull request's number comes from a fresh re-check of the final kernel, with "
		      "every seed, and can be lower; when it differs, the pull request shows both.\n\n");

	if (r->kernel_source) {
		const char *src = r->kernel_source;
		size_t len = strlen(src), total = 0, lines = 0, cut = 0;
		char summary[256];

		for (size_t i = 0; i < len; i++)
			total += src[i] == '\n';
		if (len && src[len - 1] != '\n')
			total++;
		/* whole lines, up to the line and byte caps */
		while (cut < len && lines < KB_REVIEW_EXCERPT_LINES) {
			const char *nl = memchr(src + cut, '\n', len - cut);
			size_t next = nl ? (size_t)(nl - src) + 1 : len;

			if (next > KB_REVIEW_EXCERPT_BYTES) {
				if (!lines)  /* one huge first line: cut it on a character boundary */
					cut = kb_utf8_prefix(src, len, SIZE_MAX, KB_REVIEW_EXCERPT_BYTES);
				break;
			}
			cut = next;
			lines++;
		}
		if (cut == len)
			snprintf(summary, sizeof(summary), "Kernel (%zu lines)", total);
		else
			snprintf(summary, sizeof(summary), "Kernel excerpt (first %zu of %zu lines)",
				 lines ? lines : 1, total);
		{
			struct strbuf s = STRBUF_INIT;

			strbuf_addstr(&s, summary);
			if (r->kernel_path) {
				strbuf_addstr(&s, ": ");
				strbuf_add(&s, r->kernel_path,
					   kb_utf8_prefix(r->kernel_path, strlen(r->kernel_path), 150, SIZE_MAX));
			}
			kb_md_details_begin(out, s.buf);
			strbuf_release(&s);
		}
		kb_md_fence(out, fence_lang(r->kernel_path), src, cut);
		kb_md_details_end(out);
	}
	if (r->url) {
		kb_md_link(out, "The pull request", r->url);
		strbuf_addstr(out, " has the full kernel, its evidence and the speedup table.\n\n");
	} else {
		strbuf_addstr(out, "The pull request with the full kernel and its evidence follows when "
			      "the search ends.\n\n");
	}
	return kb_marker_add(out, "review", r->job_id, 0, r->candidate_id, NULL, NULL);
}

/* Append s cut so that sb stays within max bytes, with "…" when cut. */
static void add_capped(struct strbuf *sb, const char *s, size_t max)
{
	size_t len = strlen(s), room, keep;

	if (sb->len >= max)
		return;
	room = max - sb->len;
	if (len <= room) {
		strbuf_addstr(sb, s);
		return;
	}
	keep = kb_utf8_prefix(s, len, SIZE_MAX, room >= 3 ? room - 3 : 0);
	strbuf_add(sb, s, keep);
	if (room >= 3)
		strbuf_addstr(sb, "…");
}

void kb_status_description(struct strbuf *out, const struct kb_progress_job *job)
{
	struct strbuf name = STRBUF_INIT, text = STRBUF_INIT, clean = STRBUF_INIT;
	char v[32], el[32];

	strbuf_reset(out);
	kb_pr_operator_name(&name, job->operator_path);
	if (name.len > 40)
		strbuf_setlen(&name, kb_utf8_prefix(name.buf, name.len, 40, 40));
	strbuf_addf(&text, "%s: ", name.buf);
	kb_md_fmt_speedup(v, sizeof(v), job->best_speedup);
	kb_md_fmt_duration(el, sizeof(el), job->elapsed_s);
	switch (job->stage) {
	case KB_STAGE_DONE:
		if (has_best(job) && job->slower_configs)
			strbuf_addf(&text, "slower than eager on %zu of %zu configs; headline %s",
				    job->slower_configs, job->timed_configs, v);
		else if (kb_stage_faster(job))
			strbuf_addf(&text, "%s faster than eager", v);
		else if (has_best(job))
			strbuf_addf(&text, "no faster kernel found (best %s)", v);
		else
			strbuf_addstr(&text, "done, no verified kernel");
		if (job->bot_pr_number)
			strbuf_addf(&text, ", PR #%" PRId64, job->bot_pr_number);
		break;
	case KB_STAGE_FAILED:
		strbuf_addstr(&text, "failed");
		if (job->error)
			strbuf_addf(&text, ": %s", job->error);
		break;
	case KB_STAGE_CANCELLED:
		strbuf_addstr(&text, "cancelled");
		break;
	default:
		add_stage(&text, job);
		if (has_best(job))
			strbuf_addf(&text, ", best %s (screening)", v);
		if (job->candidates)
			strbuf_addf(&text, ", %" PRId64 " candidates", job->candidates);
		if (job->stage != KB_STAGE_QUEUED)
			strbuf_addf(&text, ", %s", el);
	}
	/* one line of valid UTF-8 */
	kb_md_add_utf8(&clean, text.buf, text.len);
	for (size_t i = 0; i < clean.len; i++)
		if ((unsigned char)clean.buf[i] < 0x20)
			clean.buf[i] = ' ';
	add_capped(out, clean.buf, KB_MD_STATUS_MAX_CHARS);
	strbuf_release(&name);
	strbuf_release(&text);
	strbuf_release(&clean);
}

static void check_summary(struct strbuf *sb, const struct kb_progress_job *job, const char *head_sha,
			  const cJSON *evidence, size_t max_rows)
{
	char v[32], el[32];

	strbuf_reset(sb);
	strbuf_addstr(sb, "**kernelbot** ");
	switch (job->stage) {
	case KB_STAGE_DONE:
		strbuf_addstr(sb, "finished ");
		break;
	case KB_STAGE_FAILED:
		strbuf_addstr(sb, "failed on ");
		break;
	case KB_STAGE_CANCELLED:
		strbuf_addstr(sb, "was stopped on ");
		break;
	default:
		strbuf_addstr(sb, "is working on ");
	}
	kb_md_code_n(sb, job->operator_path ? job->operator_path : "?", 200, false);
	if (head_sha) {
		strbuf_addstr(sb, " at ");
		add_short_sha(sb, head_sha);
	}
	strbuf_addstr(sb, ": ");
	add_stage(sb, job);
	kb_md_fmt_speedup(v, sizeof(v), job->best_speedup);
	kb_md_fmt_duration(el, sizeof(el), job->elapsed_s);
	if (has_best(job))
		strbuf_addf(sb, ", best **%s** vs eager%s", v,
			    job->stage == KB_STAGE_DONE ? " on the operator's own shapes"
							: " (a screening figure; the final one comes from a "
							  "fresh re-check)");
	strbuf_addf(sb, ", %" PRId64 " candidates, %s.\n\n", job->candidates, el);
	if (job->stage == KB_STAGE_DONE && job->slower_configs)
		strbuf_addf(sb, "> [!WARNING]\n> **Slower than PyTorch eager on %zu of %zu configs** "
			    "beyond the noise band: see the table.\n\n", job->slower_configs,
			    job->timed_configs);
	if (job->bot_pr_url) {
		kb_md_link(sb, "The kernelbot pull request", job->bot_pr_url);
		strbuf_addstr(sb, " has the kernel, its evidence and how to use it.\n\n");
	}
	if (job->stage == KB_STAGE_FAILED && job->error) {
		size_t len = strlen(job->error);

		kb_md_fence(sb, "text", job->error,
			    kb_utf8_prefix(job->error, len, 4000, 16000));
		strbuf_addch(sb, '\n');
	}
	if (evidence) {
		strbuf_addstr(sb, has_best(job) && !kb_stage_final(job->stage)
			      ? "#### Best kernel so far\n\n" : "#### Best kernel\n\n");
		kb_md_ev_speedup_table(sb, evidence, max_rows, NULL);
	}
}

int kb_check_render(struct strbuf *title, struct strbuf *summary,
		    const struct kb_progress_job *job, const char *head_sha,
		    const cJSON *evidence)
{
	static const struct kb_md_limits lim = { KB_MD_CHECK_MAX_CHARS, KB_MD_CHECK_MAX_CHARS };
	size_t lo = 0, hi;

	kb_status_description(title, job);
	check_summary(summary, job, head_sha, evidence, SIZE_MAX);
	if (kb_md_fits(summary, &lim))
		return 0;
	hi = (size_t)cJSON_GetArraySize(kb_md_ev_arr(evidence, "configs"));
	check_summary(summary, job, head_sha, evidence, 0);
	if (!kb_md_fits(summary, &lim)) {
		strbuf_reset(summary);
		log_error("check run summary for '%s' does not fit", job->operator_path ? job->operator_path : "?");
		return KB_ETOOBIG;
	}
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;

		check_summary(summary, job, head_sha, evidence, mid);
		if (kb_md_fits(summary, &lim))
			lo = mid;
		else
			hi = mid - 1;
	}
	check_summary(summary, job, head_sha, evidence, lo);
	return 0;
}
