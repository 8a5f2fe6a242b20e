#include "core/common.h"
#include "core/json.h"
#include "core/config.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/signals.h"
#include "core/util.h"
#include "git/git.h"
#include "jobs/jobs_priv.h"
#include "report/headline.h"
#include "report/markdown.h"
#include "run/kernel_json.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

/*
 * The runner of one job: claim -> fetch -> `kernelbot run` child ->
 * progress -> publish -> done. A job's stages are written to the store
 * as it goes; the forge is told before the store's final state is, so a
 * crash anywhere before the final transaction re-runs the finishing steps,
 * which are idempotent (publish.c), instead of leaving a stale comment.
 */

#define MAX_PROGRESS_FILE (64 * 1024)
#define CHILD_STOP_GRACE_MS 10000
/* the wiring check's limit, however much of the job's budget is left */
#define WIRE_MAX_S (20 * 60)

/*
 * The child stops searching when its budget ends and then verifies its
 * best kernel again in a fresh process (the final check, with every seed
 * and the torch.compile baseline): it is killed only when that too runs
 * past this grace period.
 */
static int64_t budget_grace_s(int64_t budget_s)
{
	int64_t g = 120 + budget_s / 10;

	return g > 1800 ? 1800 : g;
}

/* --- helpers --- */

/*
 * SIGTERM first, so that `kernelbot run` stops its own children (each in
 * a process group of its own), then SIGKILL what is left of its group.
 */
static void stop_child(struct runner *r)
{
	int64_t until = kb_now_ms() + CHILD_STOP_GRACE_MS;

	if (!r->child_running)
		return;
	kill(r->cp.pid, SIGTERM);
	while (child_alive(&r->cp) && kb_now_ms() < until) {
		struct timespec ts = { 0, 50 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	finish_command(&r->cp, 0);
	r->child_running = false;
}

static void runner_free(struct runner *r)
{
	if (!r)
		return;
	stop_child(r);
	/* the child is gone: its devices are free for the next job */
	if (r->leased_from)
		jdevices_give_back(r->leased_from, r);
	strvec_clear(&r->devices);
	child_process_release(&r->cp);
	kb_job_release(&r->job);
	jtrigger_release(&r->trig);
	kb_forge_pr_release(&r->pr);
	kb_git_repo_free(r->git);
	strbuf_release(&r->slug);
	strbuf_release(&r->branch);
	strbuf_release(&r->dir);
	strbuf_release(&r->src);
	strbuf_release(&r->out);
	strbuf_release(&r->progress_path);
	strbuf_release(&r->child_log);
	strbuf_release(&r->notes);
	strbuf_release(&r->progress);
	strbuf_release(&r->stage);
	strbuf_release(&r->error);
	strbuf_release(&r->pr_url);
	strbuf_release(&r->modop);
	jwired_release(&r->wired);
	kb_repo_config_release(&r->rcfg);
	free(r);
}

static struct runner *runner_new(void)
{
	struct runner *r = xcalloc(1, sizeof(*r));

	strbuf_init(&r->slug, 0);
	strbuf_init(&r->branch, 0);
	strbuf_init(&r->dir, 0);
	strbuf_init(&r->src, 0);
	strbuf_init(&r->out, 0);
	strbuf_init(&r->progress_path, 0);
	strbuf_init(&r->child_log, 0);
	strbuf_init(&r->notes, 0);
	strbuf_init(&r->progress, 0);
	strbuf_init(&r->stage, 0);
	strbuf_init(&r->error, 0);
	strbuf_init(&r->pr_url, 0);
	strbuf_init(&r->modop, 0);
	strbuf_init(&r->wired.module_path, 0);
	strbuf_init(&r->wired.module_text, 0);
	strvec_init(&r->devices);
	child_process_init(&r->cp);
	return r;
}

int jgit_open(struct kb_jobs *j, struct kb_git_repo **out, const char *repo)
{
	struct kb_forge_remote rem = KB_FORGE_REMOTE_INIT;
	struct strbuf url = STRBUF_INIT, cache = STRBUF_INIT;
	struct kb_git_cred cred;
	int rc;

	*out = NULL;
	if ((rc = kb_forge_git_remote(j->forge, &rem, repo)))
		goto out;
	if (*j->cfg->bot_git_url) {
		strbuf_addstr(&url, j->cfg->bot_git_url);
		while (url.len && url.buf[url.len - 1] == '/')
			strbuf_setlen(&url, url.len - 1);
		strbuf_addf(&url, "/%s.git", repo);
	} else {
		strbuf_addstr(&url, rem.url);
	}
	cred.username = rem.username;
	cred.token = rem.password;
	strbuf_addf(&cache, "%s/git", j->cfg->state_dir);
	rc = kb_git_sync(out, cache.buf, url.buf, &cred);
out:
	kb_forge_remote_release(&rem);
	strbuf_release(&url);
	strbuf_release(&cache);
	return rc;
}

/* One state transition in its own transaction. */
static int set_state(struct kb_jobs *j, struct runner *r, enum kb_job_state state,
		     const char *stage, const char *err)
{
	int rc = kb_state_job_set_state(j->st, r->job.id, state, stage, err);

	if (rc)
		return -1;
	r->job.state = state;
	if (stage) {
		strbuf_reset(&r->stage);
		strbuf_addstr(&r->stage, stage);
	}
	return 0;
}

/*
 * The stage of a running job (its own transaction). Not through
 * kb_state_job_set_state: that restarts started_at, and the elapsed time
 * shown counts from the claim.
 */
static int set_stage(struct kb_jobs *j, struct runner *r, const char *stage)
{
	strbuf_reset(&r->stage);
	strbuf_addstr(&r->stage, stage);
	if (kb_state_begin(j->st))
		return -1;
	if (jdb_job_set_stage(j->st, r->job.id, stage)) {
		kb_state_rollback(j->st);
		return -1;
	}
	return kb_state_commit(j->st);
}

/* Two operators of one trigger with the same slug get a hash suffix each. */
static int make_slug(struct kb_jobs *j, struct runner *r)
{
	struct strbuf other = STRBUF_INIT;
	struct jrow *rows;
	size_t nr;
	bool clash = false;

	kb_jobs_operator_slug(&r->slug, r->job.operator_path);
	if (jdb_trigger_rows(j->st, r->trig.id, &rows, &nr))
		return -1;
	for (size_t i = 0; i < nr; i++) {
		const char *op = rows[i].operator_path;

		if (rows[i].id == r->job.id || !op || !strcmp(op, r->job.operator_path))
			continue;
		kb_jobs_operator_slug(&other, op);
		if (!strcmp(other.buf, r->slug.buf))
			clash = true;
	}
	jrows_free(rows, nr);
	strbuf_release(&other);
	if (clash) {
		char hash[65];

		jhash(hash, r->job.operator_path);
		strbuf_addf(&r->slug, "-%.6s", hash);
	}
	return 0;
}

/* The child's config: the daemon's, bounded by what the repository asked. */
static int write_child_config(struct kb_jobs *j, struct runner *r, const char *path)
{
	struct kb_config copy = *j->cfg;
	struct strbuf devices = STRBUF_INIT;
	char *text = NULL;
	size_t len = 0;
	FILE *fp;
	int rc;

	if (r->rcfg.atol > 0)
		copy.atol_fp32 = r->rcfg.atol;
	if (r->rcfg.rtol > 0)
		copy.rtol_fp32 = r->rcfg.rtol;
	if (r->rcfg.max_configs > 0)
		copy.max_configs = r->rcfg.max_configs;
	if (r->rcfg.error_factor_set)
		copy.error_factor = r->rcfg.error_factor;
	copy.log_file = (char *)""; /* the child's log is the job's log file */
	/* its harness pins workers to the config's list before CUDA_VISIBLE_DEVICES */
	if (r->devices.nr) {
		jdevices_join(&r->devices, &devices);
		copy.devices = devices.buf;
	}
	fp = open_memstream(&text, &len);
	if (!fp) {
		rc = error_errno("could not write the config of job %" PRId64, r->job.id);
		goto out;
	}
	kb_config_print_for_child(&copy, fp);
	if (fclose(fp)) {
		rc = error_errno("could not write the config of job %" PRId64, r->job.id);
		goto out;
	}
	rc = kb_write_file_atomic(path, text, len);
out:
	free(text);
	strbuf_release(&devices);
	return rc;
}

static int64_t budget_s(struct kb_jobs *j, struct runner *r)
{
	int64_t b = j->cfg->bot_time_budget_s;

	if (r->rcfg.budget_s > 0)
		b = r->rcfg.budget_s;
	return b;
}

/* Re-read .kernelbot.ini at the pinned sha: its budget and tolerances. */
static void load_repo_config(struct kb_jobs *j, struct runner *r)
{
	struct strbuf ini = STRBUF_INIT, why = STRBUF_INIT;

	kb_repo_config_release(&r->rcfg);
	if (!kb_git_read_file(r->git, r->job.head_sha, ".kernelbot.ini", &ini, 64 * 1024))
		kb_repo_config_parse(&r->rcfg, ini.buf, j->cfg, &why);
	for (const char *p = why.buf; *p;) {
		const char *nl = strchrnul(p, '\n');

		strbuf_addf(&r->notes, "`.kernelbot.ini`: %.*s\n", (int)(nl - p), p);
		p = *nl ? nl + 1 : nl;
	}
	strbuf_release(&ini);
	strbuf_release(&why);
}

/*
 * A child's first words: its output goes to the job's log file, not to
 * pipes nobody reads between ticks; setpriv makes the kernel send it
 * SIGTERM when this process dies, however it dies.
 */
static void child_prefix(struct kb_jobs *j, struct runner *r)
{
	child_process_release(&r->cp);
	child_process_init(&r->cp);
	strvec_pushl(&r->cp.args, "/bin/sh", "-c", "exec \"$@\" >>\"$0\" 2>&1",
		     r->child_log.buf, NULL);
	if (j->setpriv)
		strvec_pushl(&r->cp.args, j->setpriv, "--pdeathsig", "TERM", "--", NULL);
	jdevices_child_env(&r->devices, &r->cp.env);
}

static int64_t budget_left(struct runner *r)
{
	int64_t used = r->job.started_at ? kb_wall_s() - r->job.started_at : 0;

	return r->budget_s - (used > 0 ? used : 0);
}

/*
 * A module job's first child: `kernelbot operator` writes the operator
 * file of its [operator NAME] section into the checkout (recording the
 * shapes from the tests in the sandbox when the section names tests;
 * shapes.json keeps them across restarts). child_ended then starts the
 * search on that file.
 */
static int start_prepare(struct kb_jobs *j, struct runner *r)
{
	struct strbuf cfg_path = STRBUF_INIT, shapes = STRBUF_INIT, budget = STRBUF_INIT;
	int rc = -1;

	strbuf_addf(&cfg_path, "%s/run.ini", r->dir.buf);
	strbuf_addf(&shapes, "%s/shapes.json", r->dir.buf);
	if (write_child_config(j, r, cfg_path.buf))
		goto out;
	child_prefix(j, r);
	/* the tests get a quarter of what is left, 30 s to 5 minutes: the search is the job */
	r->child_budget_s = budget_left(r) / 4;
	if (r->child_budget_s > 300)
		r->child_budget_s = 300;
	if (r->child_budget_s < 30)
		r->child_budget_s = 30;
	strbuf_addf(&budget, "%" PRId64, r->child_budget_s);
	strvec_pushl(&r->cp.args, j->bin, "operator", "-c", cfg_path.buf, "--repo", r->src.buf,
		     "--shapes", shapes.buf, "--timeout", budget.buf, "--head", r->job.head_sha,
		     r->job.operator_path, NULL);
	if (start_command(&r->cp))
		goto out;
	r->child_running = r->preparing = true;
	r->child_started_ms = kb_now_ms();
	log_info("job %" PRId64 ": making the operator file of '%s' (pid %d, log '%s')", r->job.id,
		 r->job.operator_path, (int)r->cp.pid, r->child_log.buf);
	rc = 0;
out:
	strbuf_release(&cfg_path);
	strbuf_release(&shapes);
	strbuf_release(&budget);
	return rc;
}

static int start_child(struct kb_jobs *j, struct runner *r)
{
	struct strbuf cfg_path = STRBUF_INIT, op = STRBUF_INIT, budget = STRBUF_INIT;
	struct strbuf out_dir = STRBUF_INIT;
	int rc = -1;

	if (r->backward)
		jpasses_path(&out_dir, r, "out-backward");
	else
		strbuf_addstr(&out_dir, r->out.buf);
	if (kb_rm_rf(out_dir.buf))
		goto out;
	unlink(r->progress_path.buf);
	strbuf_addf(&cfg_path, "%s/run.ini", r->dir.buf);
	if (write_child_config(j, r, cfg_path.buf))
		goto out;
	if (r->modop.len)
		strbuf_addstr(&op, r->modop.buf);
	else if (!strcmp(r->job.operator_path, "."))
		strbuf_addstr(&op, r->src.buf);
	else
		strbuf_addf(&op, "%s/%s", r->src.buf, r->job.operator_path);

	child_prefix(j, r);
	/* what is left of the budget since the claim (fetch, checkout, a forward pass spent some) */
	r->child_budget_s = jpasses_child_budget(r, budget_left(r));
	strbuf_addf(&budget, "%" PRId64, r->child_budget_s);
	strvec_pushl(&r->cp.args, j->bin, "run", "-c", cfg_path.buf, "--out", out_dir.buf,
		     "--progress-file", r->progress_path.buf, "--time-budget", budget.buf, NULL);
	if (r->backward)
		strvec_pushl(&r->cp.args, "--pass", "backward", NULL);
	/* the run's row (kernelbot status) and the search's rows refer to the job */
	strvec_pushf(&r->cp.args, "--job-id=%" PRId64, r->job.id);
	strvec_push(&r->cp.args, op.buf);
	for (size_t i = 0; i < j->cfg->nr_llm_models; i++) {
		const char *key = j->cfg->llm_models[i].api_key;

		if (key && *key)
			strvec_pushf(&r->cp.env, "%s%zu=%s", KB_CHILD_LLM_KEY_ENV, i, key);
	}
	if (start_command(&r->cp))
		goto out;
	r->child_running = true;
	r->child_started_ms = kb_now_ms();
	r->progress_mtime_ns = 0;
	log_info("job %" PRId64 ": searching '%s' of %s#%" PRId64 ", %s pass, budget %" PRId64
		 " s (pid %d, log '%s')", r->job.id, r->job.operator_path, r->trig.repo,
		 r->job.pr_number, r->backward ? "backward" : "forward", r->child_budget_s,
		 (int)r->cp.pid, r->child_log.buf);
	rc = 0;
out:
	strbuf_release(&out_dir);
	strbuf_release(&cfg_path);
	strbuf_release(&op);
	strbuf_release(&budget);
	return rc;
}

/* Append a point to history.json (the chart of best speedup over time). */
static void add_history(struct runner *r, double best)
{
	cJSON *h = jread_json(r->dir.buf, "history.json"), *e;
	struct strbuf path = STRBUF_INIT;
	char *text;

	if (!cJSON_IsArray(h)) {
		cJSON_Delete(h);
		h = cJSON_CreateArray();
	}
	e = cJSON_CreateObject();
	cJSON_AddNumberToObject(e, "t", (double)kb_wall_s());
	cJSON_AddNumberToObject(e, "speedup", best);
	cJSON_AddItemToArray(h, e);
	text = cJSON_PrintUnformatted(h);
	strbuf_addf(&path, "%s/history.json", r->dir.buf);
	if (text && kb_write_file_atomic(path.buf, text, strlen(text)))
		log_warn("job %" PRId64 ": could not write '%s'", r->job.id, path.buf);
	free(text);
	cJSON_Delete(h);
	strbuf_release(&path);
}

/* Read the progress file when it changed; true when it did. */
static bool read_progress(struct kb_jobs *j, struct runner *r)
{
	struct strbuf data = STRBUF_INIT;
	struct stat sb;
	cJSON *p = NULL;
	int64_t mt;
	bool changed = false;

	if (stat(r->progress_path.buf, &sb))
		return false;
	mt = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	if (mt == r->progress_mtime_ns)
		return false;
	if (strbuf_read_file(&data, r->progress_path.buf, MAX_PROGRESS_FILE) ||
	    !(p = cJSON_Parse(data.buf)) || !cJSON_IsObject(p))
		goto out; /* junk: the next change is read again */
	r->progress_mtime_ns = mt;
	if (!strcmp(data.buf, r->progress.buf))
		goto out;
	strbuf_reset(&r->progress);
	strbuf_add(&r->progress, data.buf, data.len);
	/* the backward pass's figures are against eager autograd: not the forward's best */
	if (!r->backward && kb_json_num(p, "best_speedup", 0) > r->best) {
		r->best = kb_json_num(p, "best_speedup", 0);
		add_history(r, r->best);
	}
	if (!kb_state_begin(j->st)) {
		if (jdb_job_set_progress(j->st, r->job.id, r->progress.buf, r->best))
			kb_state_rollback(j->st);
		else
			kb_state_commit(j->st);
	}
	changed = true;
out:
	cJSON_Delete(p);
	strbuf_release(&data);
	return changed;
}

/*
 * The finished result's headline (report/headline.h: the speedup on the
 * operator's own shapes, from the final re-check's evidence) into h; its
 * speedup, or 0 when there is none.
 */
static double result_headline(struct kb_jobs *j, struct runner *r, struct kb_headline *h)
{
	cJSON *ev = jread_json(r->out.buf, "evidence.json");
	double s;

	kb_headline_of(h, ev, j->cfg->report_noise_band);
	s = h->speedup;
	h->evidence = NULL; /* freed below: no pointer into it stays */
	h->worst = NULL;
	cJSON_Delete(ev);
	return isfinite(s) && s > 0 ? s : 0;
}

/*
 * A line that says nothing about what failed: "Try 'kernelbot run
 * --help'.", or a debug or info line of the log ("2026-01-02T03:04:05Z
 * debug harness worker stopped") that a verbose log_level puts after it.
 */
static bool says_nothing(const char *line)
{
	static const char stamp[] = "0000-00-00T00:00:00Z ";
	size_t i;

	if (!strncmp(line, "Try '", 5))
		return true;
	for (i = 0; i < sizeof(stamp) - 1; i++)
		if (stamp[i] == '0' ? !isdigit((unsigned char)line[i]) : line[i] != stamp[i])
			return false;
	return !strncmp(line + i, "debug ", 6) || !strncmp(line + i, "info ", 5);
}

/* Last non-empty line of the child's log that says something, for the failure message. */
static void log_tail(struct runner *r, struct strbuf *out)
{
	char buf[4097];
	size_t n = 0;
	const char *end, *start;
	FILE *fp = fopen(r->child_log.buf, "r");

	if (fp) {
		if (fseek(fp, -4096, SEEK_END))
			rewind(fp);
		n = fread(buf, 1, sizeof(buf) - 1, fp);
		fclose(fp);
	}
	buf[n] = '\0';
	end = buf + n;
	while (end > buf && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\r'))
		end--;
	for (;;) {
		start = end;
		while (start > buf && start[-1] != '\n')
			start--;
		if (start == buf || !says_nothing(start))
			break;
		end = start - 1;
		while (end > buf && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\r'))
			end--;
	}
	if (end > start)
		strbuf_add(out, start, (size_t)(end - start) > 300 ? 300 : (size_t)(end - start));
}

/* --- finishing: forge first, the store's final state last --- */

static void finish(struct kb_jobs *j, struct runner *r, enum kb_job_state final, const char *err)
{
	struct strbuf result = STRBUF_INIT;

	r->job.state = final;
	strbuf_reset(&r->stage);
	strbuf_addstr(&r->stage, "finished");
	strbuf_reset(&r->error);
	/* shown in comments and the step summary, stored with the job: it may
	 * quote the child's log, which quotes reasons and model replies */
	if (err) {
		strbuf_addstr(&r->error, err);
		kb_redact(&r->error, KB_REDACT_MESSAGE_MAX);
	}
	if (jpub_progress(j, r, true))
		log_warn("job %" PRId64 ": could not update the progress comment", r->job.id);
	if (jpub_status(j, r))
		log_warn("job %" PRId64 ": could not set the status", r->job.id);
	if (jpub_labels(j, r->job.repository_id, r->trig.repo, r->job.pr_number, r->trig.id,
			r->job.id, final))
		log_warn("job %" PRId64 ": could not set the labels of %s#%" PRId64, r->job.id,
			 r->trig.repo, r->job.pr_number);

	strbuf_addstr(&result, "{\"pr_url\": \"");
	strbuf_add_json_escaped(&result, r->pr_url.buf);
	strbuf_addf(&result, "\", \"pr_number\": %" PRId64 ", \"speedup\": %.6g, \"slower_configs\": %zu, "
		    "\"timed_configs\": %zu, \"branch\": \"", r->pr_number, r->best, r->slower, r->timed);
	strbuf_add_json_escaped(&result, r->branch.buf);
	strbuf_addstr(&result, "\"}");
	if (!kb_state_begin(j->st)) {
		if (jdb_job_set_result(j->st, r->job.id, result.buf, r->best) ||
		    kb_state_job_set_state(j->st, r->job.id, final, "finished", err ? r->error.buf : NULL))
			kb_state_rollback(j->st);
		else
			kb_state_commit(j->st);
	}
	log_info("job %" PRId64 ": %s (%s#%" PRId64 " %s)%s%s", r->job.id, kb_job_state_name(final),
		 r->trig.repo, r->job.pr_number, r->job.operator_path, err ? ": " : "",
		 r->error.buf);
	r->done = true;
	strbuf_release(&result);
}

static void fail(struct kb_jobs *j, struct runner *r, const char *err)
{
	finish(j, r, KB_JOB_FAILED, err);
}

/* Did the child's time budget stop its search early (kernel.json tuning.cut_short)? */
static bool cut_short(struct runner *r)
{
	struct kb_kernel_info kj;
	bool cut;

	kb_kernel_info_init(&kj);
	kb_kernel_json_read(r->out.buf, &kj);
	cut = kj.tuning.cut_short;
	kb_kernel_info_release(&kj);
	return cut;
}

/* The forge, then the final state: the kernel and, when the wiring said so, the patched module. */
static void publish_result(struct kb_jobs *j, struct runner *r)
{
	struct kb_headline h;
	double s = result_headline(j, r, &h);
	int rc;

	set_stage(j, r, "publish");
	if (jpub_progress(j, r, true))
		log_warn("job %" PRId64 ": could not update the progress comment", r->job.id);
	rc = jpub_result(j, r, s);
	if (rc == KB_GIT_ENOTOURS)
		fail(j, r, "the bot's branch has commits by someone else; it was left alone");
	else if (rc)
		fail(j, r, "could not publish the kernel (see the bot's log)");
	else
		finish(j, r, KB_JOB_DONE, NULL);
}

/*
 * A module job's kernel is wired into its module before it is published
 * (wire_job.c) by a `kernelbot wire` child, polled like the search: the
 * check runs the repository's tests, and the loop goes on meanwhile. It
 * gets what is left of the job's budget and its final check's grace, 20
 * minutes at most. 1: the child runs (stage "wire"); 0: publish now (no
 * child needed, or none could run: r->notes says why); -1: an error.
 */
static int start_wire(struct kb_jobs *j, struct runner *r)
{
	int64_t left_s = budget_left(r) + budget_grace_s(r->budget_s);
	int rc;

	child_prefix(j, r);
	if ((rc = jwire_command(j, r, &r->cp.args)) != 1)
		return rc;
	if (left_s <= 0)
		return jwire_ended(r, 0, NULL, "the job's time budget was spent before the wiring check");
	rc = start_command(&r->cp);
	if (rc == KB_ECANCELLED)
		return 1; /* the daemon is stopping: the next start wires it (result.json) */
	if (rc)
		return jwire_ended(r, 0, NULL, "`kernelbot wire` could not be started");
	r->child_running = r->wiring = true;
	r->child_started_ms = kb_now_ms();
	r->wire_limit_ms = (left_s < WIRE_MAX_S ? left_s : WIRE_MAX_S) * 1000;
	log_info("job %" PRId64 ": wiring check started (pid %d, at most %" PRId64 " s, log '%s')",
		 r->job.id, (int)r->cp.pid, r->wire_limit_ms / 1000, r->child_log.buf);
	set_stage(j, r, "wire");
	if (jpub_progress(j, r, true))
		log_warn("job %" PRId64 ": could not update the progress comment", r->job.id);
	return 1;
}

/*
 * The wiring child ended, or is stopped now (why_not: why, in words):
 * its outcome, then the publish goes on, wired or not.
 */
static void wire_done(struct kb_jobs *j, struct runner *r, const char *why_not)
{
	struct strbuf tail = STRBUF_INIT;

	if (why_not)
		stop_child(r);
	r->wiring = false;
	if (!why_not && r->cp.exit_code)
		log_tail(r, &tail);
	if (jwire_ended(r, r->cp.exit_code, tail.buf, why_not))
		fail(j, r, "could not publish the kernel (see the bot's log)");
	else
		publish_result(j, r);
	strbuf_release(&tail);
}

static void publish(struct kb_jobs *j, struct runner *r)
{
	struct kb_headline h;
	double s = result_headline(j, r, &h);
	int rc;

	if (s > 0)
		r->best = s; /* the final check's headline is the one reported, not a screening figure */
	r->slower = h.slower;
	r->timed = h.timed;
	if (cut_short(r)) {
		char dur[32];

		kb_md_fmt_duration(dur, sizeof(dur), (double)r->budget_s);
		strbuf_addf(&r->notes, "The time budget (%s) cut the search short: the result is the "
			    "best kernel found by then.\n", dur);
	}
	if (r->both)
		jpasses_notes(r);
	set_stage(j, r, "publish");
	if (!kb_headline_propose(&h, j->cfg->bot_min_speedup, j->cfg->report_slower_configs,
				 &r->notes)) {
		finish(j, r, KB_JOB_DONE, NULL);
		return;
	}
	rc = start_wire(j, r);
	if (rc < 0)
		fail(j, r, "could not wire the kernel into the module (see the bot's log)");
	else if (!rc)
		publish_result(j, r);
}

/* --- starting a claimed job --- */

static int result_marker(struct runner *r, struct strbuf *path)
{
	strbuf_reset(path);
	strbuf_addf(path, "%s/result.json", r->dir.buf);
	return 0;
}

static void runner_start(struct kb_jobs *j, struct runner *r)
{
	struct jextra x = { 0 };
	struct strbuf path = STRBUF_INIT;
	int rc;

	if (jdb_extra_get(j->st, &x, r->job.id) || !x.trigger_id ||
	    jdb_trigger_get(j->st, &r->trig, x.trigger_id)) {
		set_state(j, r, KB_JOB_FAILED, "start", "the job has no trigger");
		r->done = true;
		goto out;
	}
	r->best = x.best_speedup;
	r->reviewed = x.reviewed_speedup;
	if (x.progress)
		strbuf_addstr(&r->progress, x.progress);
	if (strcmp(r->trig.state, "active")) {
		set_state(j, r, KB_JOB_CANCELLED, "start", NULL);
		r->done = true;
		goto out;
	}
	if (make_slug(j, r)) {
		fail(j, r, "internal error (see the bot's log)");
		goto out;
	}
	strbuf_addf(&r->branch, "%s/pr-%" PRId64 "/%s", j->cfg->bot_branch_prefix,
		    r->job.pr_number, r->slug.buf);
	strbuf_addf(&r->dir, "%s/jobs/%" PRId64, j->cfg->state_dir, r->job.id);
	strbuf_addf(&r->src, "%s/src", r->dir.buf);
	strbuf_addf(&r->out, "%s/out", r->dir.buf);
	strbuf_addf(&r->progress_path, "%s/progress.json", r->dir.buf);
	strbuf_addf(&r->child_log, "%s/run.log", r->dir.buf);
	if (kb_mkdir_p(r->dir.buf, 0700)) {
		fail(j, r, "could not create the job's directory");
		goto out;
	}
	log_info("job %" PRId64 ": %s %s#%" PRId64 " '%s' at %.12s (attempt %" PRId64 ")",
		 r->job.id, r->job.attempts ? "resuming" : "starting", r->trig.repo, r->job.pr_number,
		 r->job.operator_path, r->job.head_sha, r->job.attempts + 1);
	set_stage(j, r, "fetch");

	if ((rc = kb_forge_get_pr(j->forge, &r->pr, r->trig.repo, r->job.pr_number))) {
		fail(j, r, rc == KB_ENOTFOUND ? "the pull request is gone"
					      : "could not read the pull request");
		goto out;
	}
	if (jpub_progress(j, r, true))
		log_warn("job %" PRId64 ": could not post the progress comment", r->job.id);
	if (jpub_labels(j, r->job.repository_id, r->trig.repo, r->job.pr_number, r->trig.id, 0,
			KB_JOB_RUNNING))
		log_warn("job %" PRId64 ": could not set labels", r->job.id);
	if (jpub_status(j, r))
		log_warn("job %" PRId64 ": could not set the status", r->job.id);

	if (jgit_open(j, &r->git, r->trig.repo)) {
		fail(j, r, "could not fetch the repository");
		goto out;
	}
	rc = kb_git_fetch_pr(r->git, (int)r->job.pr_number, r->job.head_sha);
	if (rc) {
		fail(j, r, rc == KB_ENOTFOUND ? "the commit pinned at labelling is gone"
					      : "could not fetch the pull request");
		goto out;
	}
	load_repo_config(j, r);
	r->budget_s = budget_s(j, r);
	if (kb_rm_rf(r->src.buf) || kb_git_checkout_tree(r->git, r->job.head_sha, r->src.buf)) {
		fail(j, r, "could not check out the pull request");
		goto out;
	}
	r->both = jpasses_both(r);
	result_marker(r, &path);
	if (kb_is_file(path.buf)) {
		/* the child finished before a restart: publish what it left */
		publish(j, r);
		goto out;
	}
	if (jmod_is_module_job(r)) {
		/* a module of the repository: its operator file first (start_prepare) */
		if (!jmod_section(r))
			fail(j, r, "its [operator] section is gone from .kernelbot.ini at this commit, or has errors");
		else if (set_stage(j, r, "prepare") || start_prepare(j, r))
			fail(j, r, "could not start making the operator file");
		goto out;
	}
	r->backward = r->both && jpasses_forward_done(r);
	set_stage(j, r, r->backward ? "search-backward" : "search");
	if (start_child(j, r)) {
		fail(j, r, "could not start the search");
		goto out;
	}
out:
	jextra_release(&x);
	strbuf_release(&path);
}

/* --- a running job --- */

/* Both passes done, or the one: result.json, then publish. */
static void record_and_publish(struct kb_jobs *j, struct runner *r)
{
	struct strbuf path = STRBUF_INIT;

	result_marker(r, &path);
	if (kb_write_file_atomic(path.buf, "{\"exit_code\": 0}\n", 17))
		fail(j, r, "could not record the result");
	else
		publish(j, r);
	strbuf_release(&path);
}

/*
 * `kernelbot operator` ended: the search starts on the file it wrote, or
 * the job fails with its last line (what was wrong with the section, the
 * module or the tests).
 */
static void prepared(struct kb_jobs *j, struct runner *r)
{
	struct strbuf err = STRBUF_INIT, tail = STRBUF_INIT;

	r->preparing = false;
	if (r->cp.exit_code || jmod_operator_file(r, &r->modop) || !kb_is_file(r->modop.buf)) {
		strbuf_reset(&r->modop);
		log_tail(r, &tail);
		strbuf_addf(&err, "could not make the operator of `%s` (exit %d)", r->job.operator_path,
			    r->cp.exit_code);
		if (tail.len)
			strbuf_addf(&err, ": %s", tail.buf);
		fail(j, r, err.buf);
	} else {
		r->backward = r->both && jpasses_forward_done(r);
		if (set_stage(j, r, r->backward ? "search-backward" : "search") || start_child(j, r))
			fail(j, r, "could not start the search");
	}
	strbuf_release(&err);
	strbuf_release(&tail);
}

/*
 * The child ended. A forward that failed fails the job (nothing to
 * publish); one that ended well is published, or, in a job of both
 * passes, followed by the backward child. Whatever the backward ends in,
 * the forward kernel is published: with its backward kernel, or with the
 * reference's backward and a note saying why (passes.c).
 */
static void child_ended(struct kb_jobs *j, struct runner *r)
{
	struct strbuf err = STRBUF_INIT, tail = STRBUF_INIT;

	if (r->preparing) {
		prepared(j, r);
		return;
	}
	if (r->wiring) {
		wire_done(j, r, NULL);
		return;
	}
	if (r->cp.exit_code)
		log_tail(r, &tail);
	if (r->backward) {
		if (jpasses_finish(r, r->cp.exit_code, tail.buf))
			fail(j, r, "could not put the backward kernel beside the forward one (see the bot's log)");
		else
			record_and_publish(j, r);
	} else if (r->cp.exit_code == 0 && r->both) {
		r->backward = true;
		if (jpasses_mark_forward_done(r) || set_stage(j, r, "search-backward") || start_child(j, r))
			fail(j, r, "could not start the backward search");
	} else if (r->cp.exit_code == 0) {
		record_and_publish(j, r);
	} else {
		strbuf_addf(&err, "the %ssearch failed (exit %d)", r->both ? "forward " : "", r->cp.exit_code);
		if (tail.len)
			strbuf_addf(&err, ": %s", tail.buf);
		if (r->both)
			strbuf_addstr(&err, "; the backward pass was not searched");
		fail(j, r, err.buf);
	}
	strbuf_release(&err);
	strbuf_release(&tail);
}

static void runner_poll(struct kb_jobs *j, struct runner *r)
{
	/* the child keeps its budget itself; this is the backstop should it not */
	int64_t limit_ms = (r->child_budget_s + budget_grace_s(r->child_budget_s)) * 1000;
	bool alive;

	if (!r->child_running)
		return;
	if (r->wiring)
		limit_ms = r->wire_limit_ms;
	alive = child_alive(&r->cp);
	if (read_progress(j, r)) {
		if (jpub_review(j, r, r->best))
			log_warn("job %" PRId64 ": could not post the review comment", r->job.id);
		if (jpub_progress(j, r, false))
			log_warn("job %" PRId64 ": could not update the progress comment", r->job.id);
	}
	if (alive && kb_now_ms() - r->child_started_ms > limit_ms && r->wiring) {
		log_warn("job %" PRId64 ": the wiring check ran past the job's time budget; stopping it",
			 r->job.id);
		wire_done(j, r, "the job's time budget ran out during the wiring check");
		return;
	}
	if (alive && kb_now_ms() - r->child_started_ms > limit_ms) {
		log_warn("job %" PRId64 ": the search ran %" PRId64 " s past its budget; stopping it",
			 r->job.id, budget_grace_s(r->child_budget_s));
		stop_child(r);
		if (r->preparing)
			fail(j, r, "making the operator file (its tests) ran past the time budget");
		else if (!r->backward)
			fail(j, r, "the search and its final check ran past the time budget");
		else if (jpasses_finish(r, -1, "it and its final check ran past the time budget"))
			fail(j, r, "could not put the backward kernel beside the forward one (see the bot's log)");
		else /* the forward kernel stands on its own */
			record_and_publish(j, r);
		return;
	}
	if (alive)
		return;
	finish_command(&r->cp, 0);
	r->child_running = false;
	read_progress(j, r);
	child_ended(j, r);
}

/* --- the handle --- */

static char *find_setpriv(void)
{
	static const char *const where[] = { "/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv" };

	for (size_t i = 0; i < ARRAY_SIZE(where); i++)
		if (!access(where[i], X_OK))
			return xstrdup(where[i]);
	return NULL;
}

int kb_jobs_new(struct kb_jobs **out, struct kb_config *cfg, struct kb_state *st,
		struct kb_forge *f, const struct kb_jobs_opts *opts)
{
	struct kb_jobs *j;
	char self[4096];
	ssize_t n;

	*out = NULL;
	j = xcalloc(1, sizeof(*j));
	j->cfg = cfg;
	j->st = st;
	j->forge = f;
	if (opts && opts->kernelbot_bin) {
		j->bin = xstrdup(opts->kernelbot_bin);
	} else {
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0) {
			free(j);
			return error_errno("could not find the kernelbot binary");
		}
		self[n] = '\0';
		j->bin = xstrdup(self);
	}
	if (jdevices_init(&j->devices, cfg, getenv("CUDA_VISIBLE_DEVICES"), "/proc")) {
		free(j->bin);
		free(j);
		return -1;
	}
	j->setpriv = find_setpriv();
	if (!j->setpriv)
		log_warn("setpriv(1) not found: a search may outlive a killed daemon");
	*out = j;
	return 0;
}

void kb_jobs_free(struct kb_jobs *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->nr_active; i++) {
		if (j->active[i]->child_running)
			log_info("job %" PRId64 ": stopping its %s; it resumes at the next start",
				 j->active[i]->job.id, j->active[i]->wiring ? "wiring check" : "search");
		runner_free(j->active[i]);
	}
	free(j->active);
	jdevices_release(&j->devices);
	free(j->bin);
	free(j->setpriv);
	free(j->bot_login);
	free(j);
}

/* Runner of job id in this process, NULL when none. */
static struct runner *find_runner(struct kb_jobs *j, int64_t job_id)
{
	for (size_t i = 0; i < j->nr_active; i++)
		if (j->active[i]->job.id == job_id)
			return j->active[i];
	return NULL;
}

static void drop_done(struct kb_jobs *j)
{
	size_t k = 0;

	for (size_t i = 0; i < j->nr_active; i++) {
		if (j->active[i]->done)
			runner_free(j->active[i]);
		else
			j->active[k++] = j->active[i];
	}
	j->nr_active = k;
}

static void log_devices(struct runner *r)
{
	struct strbuf list = STRBUF_INIT;

	if (!r->devices.nr)
		return;
	jdevices_join(&r->devices, &list);
	log_info("job %" PRId64 ": devices %s, its own until it ends", r->job.id, list.buf);
	strbuf_release(&list);
}

int kb_jobs_tick(struct kb_jobs *j)
{
	for (size_t i = 0; i < j->nr_active; i++)
		if (!kb_stop_requested())
			runner_poll(j, j->active[i]);
	drop_done(j);
	while (!kb_stop_requested() && j->nr_active < (size_t)j->cfg->bot_max_jobs) {
		struct runner *r = runner_new();
		int rc;

		/* the devices first: a job waits in the queue until it can have its own */
		if (jdevices_take(&j->devices, r, &r->devices)) {
			runner_free(r);
			break;
		}
		r->leased_from = &j->devices;
		rc = kb_state_job_claim_next(j->st, &r->job);
		if (rc) {
			runner_free(r);
			if (rc == KB_ENOTFOUND)
				break;
			return -1;
		}
		log_devices(r);
		runner_start(j, r);
		if (r->done) {
			runner_free(r);
			continue;
		}
		if (j->nr_active == j->alloc_active) {
			j->alloc_active = j->alloc_active ? 2 * j->alloc_active : 4;
			j->active = xrealloc(j->active, j->alloc_active * sizeof(*j->active));
		}
		j->active[j->nr_active++] = r;
	}
	return (int)j->nr_active;
}

void jobs_cancel_runner(struct kb_jobs *j, int64_t job_id, const char *actor, bool stop)
{
	struct runner *r = find_runner(j, job_id);
	struct strbuf why = STRBUF_INIT;

	if (!r)
		return;
	if (r->wiring && stop) {
		/* the kernel is verified: a stop ends the wiring check, not the result */
		strbuf_addf(&why, "the wiring check was stopped by %s%s", actor ? "@" : "a stop request",
			    actor ? actor : "");
		wire_done(j, r, why.buf);
		strbuf_release(&why);
		drop_done(j);
		return;
	}
	stop_child(r);
	if (actor)
		strbuf_addf(&r->notes, "Cancelled by @%s.\n", actor);
	finish(j, r, KB_JOB_CANCELLED, NULL);
	drop_done(j);
}

bool jobs_runs(struct kb_jobs *j, int64_t job_id)
{
	return find_runner(j, job_id) != NULL;
}

void kb_jobs_set_forge(struct kb_jobs *j, struct kb_forge *f)
{
	j->forge = f;
}
