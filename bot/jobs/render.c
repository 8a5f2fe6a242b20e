#include "core/common.h"
#include "core/json.h"
#include "core/config.h"
#include "core/log.h"
#include "core/util.h"
#include "jobs/jobs_priv.h"
#include "report/comments.h"
#include "report/markdown.h"
#include "report/pr_body.h"
#include "run/kernel_json.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>

/*
 * From the job loop's state to the report layer's structs (report/): the
 * progress comment of a labelled pull request (every job of its trigger),
 * the bot's pull request, review comments and check summaries. The
 * runner passed as `self` is shown as it is in memory (its final state is
 * written to the store only after the forge was told).
 */

#define MAX_JSON_FILE (16 * 1024 * 1024)

cJSON *jread_json(const char *dir, const char *name)
{
	struct strbuf path = STRBUF_INIT, data = STRBUF_INIT;
	cJSON *j = NULL;

	strbuf_addf(&path, "%s/%s", dir, name);
	if (kb_is_file(path.buf) && !strbuf_read_file(&data, path.buf, MAX_JSON_FILE))
		j = cJSON_Parse(data.buf);
	strbuf_release(&path);
	strbuf_release(&data);
	return j;
}

void jrender_progress_marker(struct strbuf *out, int64_t pr)
{
	kb_progress_marker(out, pr);
}

/* The report's stage of a job from its state, stage and the child's progress. */
static enum kb_stage stage_of(enum kb_job_state state, const char *stage, const cJSON *progress)
{
	const char *ps = kb_json_str(progress, "stage");

	switch (state) {
	case KB_JOB_QUEUED:
		return KB_STAGE_QUEUED;
	case KB_JOB_DONE:
		return KB_STAGE_DONE;
	case KB_JOB_FAILED:
		return KB_STAGE_FAILED;
	case KB_JOB_CANCELLED:
		return KB_STAGE_CANCELLED;
	case KB_JOB_RUNNING:
		break;
	}
	if (!stage || !strcmp(stage, "fetch") || !strcmp(stage, "start"))
		return KB_STAGE_FETCHING;
	if (!strcmp(stage, "publish") || !strcmp(stage, "finished"))
		return KB_STAGE_OPENING_PR;
	if (!strcmp(stage, "wire"))
		return KB_STAGE_WIRING;
	if (!ps || !strcmp(ps, "analyse"))
		return KB_STAGE_ANALYSING;
	if (!strcmp(ps, "final check"))
		return KB_STAGE_VERIFYING;
	return KB_STAGE_TUNING;
}

/* One row of the progress table (strings point into keep, freed by the caller). */
struct prow {
	struct kb_progress_job pj;
	cJSON *progress, *result;
	char *op, *err, *stage;
	struct kb_archive_grid grid;
	bool has_grid;
};

/*
 * The LLM search's live status (bot/search: <out>/search.json, rewritten
 * after each generation): its archive cells, candidates and best so far.
 */
static void read_search_status(struct kb_jobs *j, struct prow *row)
{
	struct strbuf dir = STRBUF_INIT;
	cJSON *sj, *cells, *c;

	strbuf_addf(&dir, "%s/jobs/%" PRId64 "/out", j->cfg->state_dir, row->pj.job_id);
	sj = jread_json(dir.buf, "search.json");
	strbuf_release(&dir);
	if (!sj)
		return;
	cells = cJSON_GetObjectItemCaseSensitive(sj, "cells");
	cJSON_ArrayForEach(c, cells) {
		int cell = cJSON_IsNumber(c) ? c->valueint : -1;

		if (cell < 0 || cell >= 64)
			continue;
		row->grid.cell[cell / 16][(cell / 4) % 4][cell % 4] = 1;
		row->has_grid = true;
	}
	if (kb_json_num(sj, "candidates", 0) > (double)row->pj.candidates)
		row->pj.candidates = kb_i64_from_double(kb_json_num(sj, "candidates", 0));
	if (row->pj.best_speedup <= 0) {
		const cJSON *best = cJSON_GetObjectItemCaseSensitive(sj, "best");

		row->pj.best_speedup = kb_json_num(best, "speedup", 0);
	}
	cJSON_Delete(sj);
}

static void fill_row(struct prow *row, enum kb_job_state state, int64_t started, int64_t finished,
		     double best)
{
	struct kb_progress_job *pj = &row->pj;
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(row->result, "pr_url");
	int64_t now = kb_wall_s();

	pj->operator_path = row->op;
	pj->stage = stage_of(state, row->stage, row->progress);
	pj->backward_pass = row->stage && !strcmp(row->stage, "search-backward");
	if (pj->stage == KB_STAGE_TUNING) {
		pj->tune_done = kb_int_from_double(kb_json_num(row->progress, "done", 0));
		pj->tune_total = kb_int_from_double(kb_json_num(row->progress, "total", 0));
	}
	/* the backward pass's figures are against eager autograd: not the forward's best */
	pj->best_speedup = best > 0 || pj->backward_pass ? best : kb_json_num(row->progress, "best_speedup", 0);
	pj->candidates = kb_i64_from_double(kb_json_num(row->progress, "candidates", 0));
	if (started)
		pj->elapsed_s = (double)((finished && state != KB_JOB_RUNNING ? finished : now) - started);
	if (cJSON_IsString(u) && *u->valuestring) {
		pj->bot_pr_url = u->valuestring;
		pj->bot_pr_number = kb_i64_from_double(kb_json_num(row->result, "pr_number", 0));
	}
	pj->slower_configs = (size_t)kb_json_i64(row->result, "slower_configs", 0);
	pj->timed_configs = (size_t)kb_json_i64(row->result, "timed_configs", 0);
	if (state == KB_JOB_FAILED)
		pj->error = row->err;
}

void jrender_list(struct strbuf *out, const char *lines)
{
	for (const char *s = lines; *s;) {
		const char *nl = strchrnul(s, '\n');
		char *line = xstrndup(s, (size_t)(nl - s));

		strbuf_addstr(out, "- ");
		kb_md_escape_n(out, line, 500);
		strbuf_addch(out, '\n');
		free(line);
		s = *nl ? nl + 1 : nl;
	}
}

/*
 * Notes (repository config warnings, a branch left alone) and the
 * modules still without shapes (modops.c) go above the marker.
 */
static void put_notes(struct kb_jobs *j, const struct jtrigger *t, const struct runner *self,
		      struct strbuf *out)
{
	struct strbuf notes = STRBUF_INIT, tail = STRBUF_INIT, hints = STRBUF_INIT;
	struct kb_marker m;

	jmodops_load_hints(j, t->id, &hints);
	if (((self && self->notes.len) || hints.len) && !kb_marker_find(out->buf, "progress", &m)) {
		strbuf_addstr(&tail, out->buf + m.offset);
		strbuf_setlen(out, m.offset);
		if (self && self->notes.len)
			strbuf_addstr(&notes, "\nNotes:\n");
		if (self)
			jrender_list(&notes, self->notes.buf);
		if (hints.len)
			strbuf_addf(&notes, "\n%s", hints.buf);
		strbuf_addf(out, "%s\n%s", notes.buf, tail.buf);
	}
	strbuf_release(&notes);
	strbuf_release(&tail);
	strbuf_release(&hints);
}

int jrender_progress(struct kb_jobs *j, const struct jtrigger *t, struct runner *self,
		     struct strbuf *out)
{
	struct kb_forge_pr cur = KB_FORGE_PR_INIT;
	struct prow *rows = NULL;
	struct kb_progress_job *pjs = NULL;
	struct kb_progress p;
	struct jrow *jrows = NULL;
	size_t nr = 0, alloc = 0, nr_jrows = 0;
	int rc = -1;

	if (jdb_trigger_rows(j->st, t->id, &jrows, &nr_jrows))
		goto out;
	for (size_t k = 0; k < nr_jrows; k++) {
		const struct jrow *jr = &jrows[k];
		struct prow *row;
		enum kb_job_state state = KB_JOB_QUEUED;
		const char *s;
		int64_t id = jr->id;

		if (nr == alloc) {
			alloc = alloc ? 2 * alloc : 8;
			rows = xrealloc(rows, alloc * sizeof(*rows));
		}
		row = &rows[nr++];
		memset(row, 0, sizeof(*row));
		row->pj.job_id = id;
		s = jr->operator_path;
		row->op = xstrdup(s ? s : "?");
		kb_job_state_parse(jr->state, &state);
		s = jr->stage;
		row->stage = s ? xstrdup(s) : NULL;
		if (self && self->job.id == id) {
			/* the runner's own view is newer than its row */
			state = self->job.state;
			free(row->stage);
			row->stage = xstrdup(self->stage.buf);
			row->progress = self->progress.len ? cJSON_Parse(self->progress.buf) : NULL;
			row->err = self->error.len ? xstrdup(self->error.buf) : NULL;
			if (self->pr_url.len) {
				row->result = cJSON_CreateObject();
				cJSON_AddStringToObject(row->result, "pr_url", self->pr_url.buf);
				cJSON_AddNumberToObject(row->result, "pr_number", (double)self->pr_number);
			}
			fill_row(row, state, jr->started_at, kb_wall_s(), self->best);
			row->pj.slower_configs = self->slower;
			row->pj.timed_configs = self->timed;
			read_search_status(j, row);
			continue;
		}
		s = jr->progress;
		row->progress = s ? cJSON_Parse(s) : NULL;
		s = jr->error;
		row->err = s ? xstrdup(s) : NULL;
		s = jr->result;
		row->result = s ? cJSON_Parse(s) : NULL;
		fill_row(row, state, jr->started_at, jr->finished_at, jr->best_speedup);
		read_search_status(j, row);
	}
	if (!nr) {
		error("trigger %" PRId64 " has no jobs", t->id);
		goto out;
	}
	pjs = xcalloc(nr, sizeof(*pjs));
	for (size_t i = 0; i < nr; i++) {
		pjs[i] = rows[i].pj;
		/* rows moved while growing: point at the grid only now */
		pjs[i].grid = rows[i].has_grid ? &rows[i].grid : NULL;
	}
	memset(&p, 0, sizeof(p));
	p.repo = t->repo;
	p.pr_number = t->pr;
	p.head_sha = t->head_sha;
	p.label = j->cfg->bot_label;
	p.jobs = pjs;
	p.nr = nr;
	if (self && self->pr.head_sha)
		p.current_head_sha = self->pr.head_sha;
	if (kb_progress_comment(out, &p))
		goto out;
	put_notes(j, t, self, out);
	rc = 0;
out:
	jrows_free(jrows, nr_jrows);
	for (size_t i = 0; i < nr; i++) {
		cJSON_Delete(rows[i].progress);
		cJSON_Delete(rows[i].result);
		free(rows[i].op);
		free(rows[i].err);
		free(rows[i].stage);
	}
	free(rows);
	free(pjs);
	kb_forge_pr_release(&cur);
	return rc;
}

/* The best-speedup series the runner kept in history.json. */
static struct kb_speedup_point *read_history(struct runner *r, size_t *nr)
{
	cJSON *h = jread_json(r->dir.buf, "history.json"), *e;
	struct kb_speedup_point *pts = NULL;
	size_t n = 0;

	cJSON_ArrayForEach(e, h) {
		pts = xrealloc(pts, (n + 1) * sizeof(*pts));
		pts[n].t = kb_i64_from_double(kb_json_num(e, "t", 0));
		pts[n].speedup = kb_json_num(e, "speedup", 0);
		n++;
	}
	cJSON_Delete(h);
	*nr = n;
	return pts;
}

/* The bot's pull request's first words when the labelled head moved during the job. */
static void head_moved_notice(struct strbuf *out, const struct runner *r)
{
	char was[13], now[13];

	kb_strlcpy(was, r->job.head_sha, sizeof(was));
	kb_strlcpy(now, r->pr.head_sha, sizeof(now));
	strbuf_addf(out, "> [!WARNING]\n> The head of #%" PRId64 " moved from ", r->job.pr_number);
	kb_md_code(out, was, false);
	strbuf_addstr(out, " to ");
	kb_md_code(out, now, false);
	strbuf_addstr(out, " while kernelbot searched. This kernel was verified against the "
		      "operator at ");
	kb_md_code(out, was, false);
	strbuf_addf(out, " only, not against the new head: do not merge it as it is. To search "
		    "again on the new head, comment `/kernelbot run` on #%" PRId64 ".",
		    r->job.pr_number);
}

const char *jplain_name(const char *s)
{
	if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
		return NULL;
	return s;
}

/* The kernel's file name from kernel.json, "kernel.cu" when it gives none that is plain. */
static const char *kernel_file(const char *src)
{
	return jplain_name(src) ? src : "kernel.cu";
}

/*
 * A job of both passes: the backward kernel's evidence and file in the
 * branch (out/backward/, passes.c), or the note on why there is none.
 * *bev and *rec are the caller's to free.
 */
static void backward_report(struct runner *r, struct kb_passes_report *p, cJSON **bev, cJSON **rec,
			    struct strbuf *path)
{
	struct strbuf dir = STRBUF_INIT;
	struct kb_kernel_info kj;
	const cJSON *note;

	memset(p, 0, sizeof(*p));
	*rec = jread_json(r->dir.buf, "backward.json");
	*bev = NULL;
	note = cJSON_GetObjectItemCaseSensitive(*rec, "note");
	p->note = cJSON_IsString(note) && *note->valuestring ? note->valuestring : NULL;
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(*rec, "kernel")))
		return;
	kb_kernel_info_init(&kj);
	strbuf_addf(&dir, "%s/backward", r->out.buf);
	kb_kernel_json_read(dir.buf, &kj);
	*bev = jread_json(dir.buf, "evidence.json");
	p->backward = *bev;
	jwire_op_dir(&dir, r);
	strbuf_addf(path, "%s/backward/%s", dir.buf, kernel_file(kj.source));
	p->backward_kernel = path->buf;
	kb_kernel_info_release(&kj);
	strbuf_release(&dir);
}

int jrender_pr(struct kb_jobs *j, struct runner *r, struct strbuf *title, struct strbuf *body,
	       struct strbuf *kernel_path)
{
	cJSON *ev = jread_json(r->out.buf, "evidence.json");
	struct kb_kernel_info kj;
	struct strbuf binding = STRBUF_INIT, evpath = STRBUF_INIT, proposer = STRBUF_INIT;
	struct strbuf notice = STRBUF_INIT, bpath = STRBUF_INIT;
	struct kb_passes_report passes;
	cJSON *bev = NULL, *brec = NULL;
	struct kb_pr_report rep;
	struct kb_speedup_point *hist;
	const char *src;
	size_t nh = 0;
	int rc = -1;

	kb_kernel_info_init(&kj);
	kb_kernel_json_read(r->out.buf, &kj); /* missing or unreadable: the defaults */
	src = kernel_file(kj.source);
	hist = read_history(r, &nh);
	strbuf_reset(kernel_path);
	jwire_op_dir(&binding, r); /* the folder, which holds binding.py */
	strbuf_addf(kernel_path, "%s/%s", binding.buf, src);
	strbuf_addf(&evpath, "%s/evidence.json", binding.buf);
	memset(&rep, 0, sizeof(rep));
	rep.job.id = r->job.id;
	rep.job.repo = r->trig.repo;
	rep.job.pr_number = r->job.pr_number;
	rep.job.head_sha = r->job.head_sha;
	rep.job.operator_path = r->job.operator_path;
	rep.job.backend = kj.backend;
	rep.job.state = "done";
	rep.evidence = ev;
	if (kj.searched) {
		rep.search.candidates = kj.search.candidates;
		rep.search.verified = kj.search.verified;
		rep.search.generations = kj.search.generations;
		rep.search.wall_s = kj.search.wall_s;
		rep.search.llm_cost_usd = kj.search.llm_cost_usd;
		strbuf_addstr(&proposer, "LLM search");
		for (size_t i = 0; i < kj.search.models.nr; i++)
			strbuf_addf(&proposer, "%s%s", proposer.len == 10 ? " (" : ", ", kj.search.models.v[i]);
		if (proposer.len > 10)
			strbuf_addch(&proposer, ')');
		rep.search.proposer = proposer.buf;
		if (kj.search.cut_short)
			rep.search.cut_short_budget_s = r->budget_s > 0 ? r->budget_s : 1;
	} else {
		rep.search.candidates = kj.tuning.points_tried;
		rep.search.verified = kj.tuning.verified;
		rep.search.generations = kj.tuning.points_tried;
		rep.search.generations_label = "template points";
		rep.search.wall_s = kj.tuning.seconds;
		rep.search.proposer = "built-in templates";
		if (kj.tuning.cut_short)
			rep.search.cut_short_budget_s = r->budget_s > 0 ? r->budget_s : 1;
	}
	rep.history = hist;
	rep.history_nr = nh;
	rep.branch = r->branch.buf;
	rep.kernel_path = kernel_path->buf;
	rep.binding_dir = binding.buf;
	rep.evidence_path = evpath.buf;
	rep.noise_band = j ? j->cfg->report_noise_band : 0; /* NULL (fuzzing): the default */
	rep.screening_speedup = kj.screening_speedup;
	if (jhead_moved(r)) {
		head_moved_notice(&notice, r);
		rep.notice = notice.buf;
	}
	if (r->both) {
		backward_report(r, &passes, &bev, &brec, &bpath);
		rep.passes = &passes;
	}
	if (!ev) {
		error("job %" PRId64 ": no evidence.json in '%s'", r->job.id, r->out.buf);
		goto out;
	}
	if (kb_pr_title(title, &rep) || kb_pr_body(body, &rep, NULL))
		goto out;
	rc = 0;
out:
	cJSON_Delete(ev);
	cJSON_Delete(bev);
	cJSON_Delete(brec);
	strbuf_release(&bpath);
	kb_kernel_info_release(&kj);
	free(hist);
	strbuf_release(&binding);
	strbuf_release(&evpath);
	strbuf_release(&proposer);
	strbuf_release(&notice);
	return rc;
}

int jrender_review(struct kb_jobs *j, struct runner *r, struct strbuf *out, double best,
		   double previous)
{
	struct kb_review_info ri;

	memset(&ri, 0, sizeof(ri));
	ri.job_id = r->job.id;
	ri.operator_path = r->job.operator_path;
	ri.old_speedup = previous;
	ri.new_speedup = best;
	ri.url = r->pr_url.len ? r->pr_url.buf : NULL;
	ri.proposer = j->cfg->nr_llm_models ? "LLM search" : "built-in templates";
	return kb_review_body(out, &ri);
}

/* The report's view of the runner, for status descriptions and checks. */
static void self_job(struct runner *r, struct kb_progress_job *pj, cJSON **progress)
{
	memset(pj, 0, sizeof(*pj));
	*progress = r->progress.len ? cJSON_Parse(r->progress.buf) : NULL;
	pj->job_id = r->job.id;
	pj->operator_path = r->job.operator_path;
	pj->stage = stage_of(r->job.state, r->stage.buf, *progress);
	pj->backward_pass = !strcmp(r->stage.buf, "search-backward");
	if (pj->stage == KB_STAGE_TUNING) {
		pj->tune_done = kb_int_from_double(kb_json_num(*progress, "done", 0));
		pj->tune_total = kb_int_from_double(kb_json_num(*progress, "total", 0));
	}
	pj->best_speedup = r->best;
	pj->candidates = kb_i64_from_double(kb_json_num(*progress, "candidates", 0));
	pj->elapsed_s = r->job.started_at ? (double)(kb_wall_s() - r->job.started_at) : 0;
	pj->bot_pr_url = r->pr_url.len ? r->pr_url.buf : NULL;
	pj->bot_pr_number = r->pr_number;
	pj->error = r->error.len ? r->error.buf : NULL;
	pj->slower_configs = r->slower;
	pj->timed_configs = r->timed;
}

int jrender_check(struct kb_jobs *j, struct runner *r, struct strbuf *title,
		  struct strbuf *summary, bool *faster)
{
	struct kb_progress_job pj;
	cJSON *progress, *ev = NULL;
	int rc;

	self_job(r, &pj, &progress);
	if (r->job.state == KB_JOB_DONE)
		ev = jread_json(r->out.buf, "evidence.json");
	rc = kb_check_render(title, summary, &pj, r->job.head_sha, ev);
	*faster = kb_stage_faster(&pj);
	cJSON_Delete(progress);
	cJSON_Delete(ev);
	(void)j;
	return rc;
}
