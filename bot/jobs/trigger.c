#include "core/common.h"
#include "core/config.h"
#include "core/json.h"
#include "core/log.h"
#include "core/strvec.h"
#include "core/util.h"
#include "git/git.h"
#include "jobs/jobs_priv.h"
#include "report/markdown.h"

#include <cjson/cJSON.h>
#include <inttypes.h>

/*
 * Triggers: a labelled pull request becomes one trigger (the head sha
 * pinned) and one job per operator; a removed label or /kernelbot stop
 * cancels it; /kernelbot run replaces it with one on the current head.
 */

static int repo_id_of(struct kb_jobs *j, const char *repo, int64_t *id, bool create)
{
	if (create)
		return kb_state_repo_upsert(j->st, id, j->forge->name, repo);
	return jdb_repo_id(j->st, id, j->forge->name, repo);
}

/* The progress comment says why nothing runs. */
static void say_no_operator(struct kb_jobs *j, int64_t repo_id, const char *repo, int64_t pr,
			    const char *sha, const char *notes, const char *hints)
{
	struct strbuf body = STRBUF_INIT;
	struct jtrigger t = { 0 };

	strbuf_addf(&body, "### kernelbot: nothing to optimise\n\nNo operator at `%.12s`: no "
		    "changed file is a KernelBench operator (`class Model` and `get_inputs`) or a "
		    "robust-kbench task folder (`func_forward.py` and `config_forward.json`) or a "
		    "module with an `[operator NAME]` section in `.kernelbot.ini`, and `.kernelbot.ini` "
		    "lists none.\n", sha);
	if (notes && *notes) {
		strbuf_addstr(&body, "\nNotes:\n");
		jrender_list(&body, notes);
	}
	if (hints && *hints)
		strbuf_addf(&body, "\n%s", hints);
	strbuf_addch(&body, '\n');
	jrender_progress_marker(&body, pr);
	t.repo_id = repo_id;
	t.repo = (char *)repo;
	t.pr = pr;
	if (jpub_progress_of(j, &t, body.buf))
		log_warn("%s#%" PRId64 ": could not post the progress comment", repo, pr);
	strbuf_release(&body);
}

/* Stop this process's runners of trigger tid (before the store changes under them). */
static void stop_runners(struct kb_jobs *j, int64_t tid, const char *actor)
{
	int64_t *ids;
	size_t nr;

	if (jdb_trigger_job_ids(j->st, tid, false, &ids, &nr))
		return;
	for (size_t i = 0; i < nr; i++)
		if (jobs_runs(j, ids[i]))
			jobs_cancel_runner(j, ids[i], actor, false);
	free(ids);
}

/* A re-run searches again: both passes' steps (jobs.c, passes.c) are forgotten. */
static void forget_result(struct kb_jobs *j, int64_t job_id)
{
	static const char *const steps[] = { "result.json", "forward.json", "backward.json" };
	struct strbuf path = STRBUF_INIT;

	for (size_t i = 0; i < ARRAY_SIZE(steps); i++) {
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/jobs/%" PRId64 "/%s", j->cfg->state_dir, job_id, steps[i]);
		unlink(path.buf);
	}
	strbuf_release(&path);
}

/*
 * True when the pull request's latest trigger was cancelled at or after
 * labelled_at: a poll that still sees the label (a `/kernelbot stop` left
 * it on) must not start the job again; only a new labelling (or
 * `/kernelbot run`) does. labelled_at is the forge's clock, the
 * cancellation ours: a label re-added within the skew of the two clocks
 * may be missed (and re-adding it again starts the job).
 */
static bool stopped_since(struct kb_jobs *j, int64_t repo_id, int64_t pr, int64_t labelled_at)
{
	if (labelled_at <= 0)
		return false;
	return jdb_trigger_cancelled_since(j->st, repo_id, pr, labelled_at);
}

/*
 * Who asked (req->actor, else who added the label), and may they? 1 when
 * the request goes on, with *actor set; 0 when it is ignored (logged); -1.
 */
static int check_actor(struct kb_jobs *j, const struct kb_trigger_req *req, int64_t repo_id, char **actor)
{
	enum kb_forge_perm perm = KB_PERM_NONE;
	int rc;

	if (req->actor) {
		*actor = xstrdup(req->actor);
	} else {
		int64_t labelled_at = 0;

		rc = kb_forge_label_event(j->forge, actor, &labelled_at, req->repo, req->pr,
					  j->cfg->bot_label);
		if (rc == KB_ENOTFOUND) {
			log_info("%s#%" PRId64 ": nobody added label '%s'; ignored", req->repo, req->pr,
				 j->cfg->bot_label);
			return 0;
		}
		if (rc)
			return -1;
		if (!req->rerun && stopped_since(j, repo_id, req->pr, labelled_at)) {
			log_debug("%s#%" PRId64 ": stopped after it was labelled; waiting for a new "
				  "label or '/kernelbot run'", req->repo, req->pr);
			return 0;
		}
	}
	if (kb_forge_permission(j->forge, &perm, req->repo, *actor))
		return -1;
	if (perm < KB_PERM_WRITE) {
		log_info("%s#%" PRId64 ": '%s' has %s access, not write; ignored", req->repo, req->pr,
			 *actor, kb_forge_perm_name(perm));
		return 0;
	}
	return 1;
}

static bool has_label(const struct kb_forge_pr *pr, const char *label)
{
	for (size_t i = 0; i < pr->labels.nr; i++)
		if (!strcmp(pr->labels.v[i], label))
			return true;
	return false;
}

/*
 * The head sha at labelling (req->head_sha, else the pull request's head)
 * into *head, and the operators at that sha into ops (notes: why others
 * are not). 1 when the request goes on; 0 when the pull request is not
 * open or (unless req->label_optional) no longer carries the label
 * (logged); -1.
 */
static int find_operators(struct kb_jobs *j, const struct kb_trigger_req *req, struct kb_forge_pr *pr,
			  struct kb_git_repo **git, const char **head, struct strvec *ops,
			  struct strbuf *notes, struct strbuf *hints)
{
	int rc;

	if ((rc = kb_forge_get_pr(j->forge, pr, req->repo, req->pr))) {
		if (rc == KB_ENOTFOUND)
			error("no pull request %" PRId64 " in '%s'", req->pr, req->repo);
		return -1;
	}
	if (pr->state && strcmp(pr->state, "open")) {
		log_info("%s#%" PRId64 " is %s; ignored", req->repo, req->pr, pr->state);
		return 0;
	}
	/* the pull request as it is now, not the event that asked: it may be stale or replayed */
	if (!req->label_optional && !has_label(pr, j->cfg->bot_label)) {
		log_info("%s#%" PRId64 ": label '%s' is not on it (removed since?); ignored",
			 req->repo, req->pr, j->cfg->bot_label);
		return 0;
	}
	*head = req->head_sha && *req->head_sha ? req->head_sha : pr->head_sha;
	if (!*head || !**head) {
		error("pull request %" PRId64 " of '%s' has no head commit", req->pr, req->repo);
		return -1;
	}
	if (jgit_open(j, git, req->repo))
		return -1;
	if ((rc = kb_git_fetch_pr(*git, (int)req->pr, *head))) {
		if (rc == KB_ENOTFOUND)
			error("commit '%s' of pull request %" PRId64 " of '%s' is not in the repository",
			      *head, req->pr, req->repo);
		return -1;
	}
	if (jops_find(j, *git, req->repo, req->pr, *head, ops, notes, hints))
		return -1;
	return 1;
}

/*
 * One transaction: the trigger (replacing active_id when it is not 0) and
 * a job per operator, requeued when the same sha and operator ran before.
 * The number of jobs queued, with the trigger's id in *tid; -1.
 */
static int queue_jobs(struct kb_jobs *j, const struct kb_trigger_req *req, int64_t repo_id,
		      int64_t active_id, const char *head, const char *actor, const struct strvec *ops,
		      int64_t *tid)
{
	int64_t *requeued = NULL;
	size_t nr_requeued = 0;
	int rc, queued = 0;

	if (kb_state_begin(j->st))
		return -1;
	if (active_id && jdb_trigger_replace(j->st, active_id))
		goto rollback;
	if (jdb_trigger_add(j->st, tid, repo_id, req->pr, head, actor, req->source))
		goto rollback;
	for (size_t i = 0; i < ops->nr; i++) {
		int64_t job_id;

		rc = kb_state_job_add(j->st, &job_id, repo_id, req->pr, head, ops->v[i]);
		if (rc == KB_EEXISTS) {
			/* the same sha and operator again (re-run, or labelled again) */
			if (jdb_job_requeue(j->st, job_id))
				goto rollback;
			requeued = xrealloc(requeued, (nr_requeued + 1) * sizeof(*requeued));
			requeued[nr_requeued++] = job_id;
		} else if (rc) {
			goto rollback;
		}
		if (jdb_job_set_trigger(j->st, job_id, *tid))
			goto rollback;
		queued++;
	}
	if (kb_state_commit(j->st)) {
		queued = -1;
		goto out;
	}
	for (size_t i = 0; i < nr_requeued; i++)
		forget_result(j, requeued[i]);
	goto out;
rollback:
	kb_state_rollback(j->st);
	queued = -1;
out:
	free(requeued);
	return queued;
}

int kb_jobs_trigger(struct kb_jobs *j, const struct kb_trigger_req *req, int64_t *tid_out)
{
	struct jtrigger active = { 0 };
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct kb_git_repo *git = NULL;
	struct strvec ops = STRVEC_INIT;
	struct strbuf notes = STRBUF_INIT, hints = STRBUF_INIT;
	char *actor = NULL;
	const char *head = NULL;
	int64_t repo_id, tid = 0;
	bool have_active;
	int rc, queued;

	if (tid_out)
		*tid_out = 0;
	if (repo_id_of(j, req->repo, &repo_id, true))
		return -1;
	rc = jdb_trigger_active(j->st, &active, repo_id, req->pr);
	if (rc && rc != KB_ENOTFOUND)
		return -1;
	have_active = !rc;
	if (have_active && !req->rerun) {
		log_debug("%s#%" PRId64 " is already being handled (trigger %" PRId64 ")", req->repo,
			  req->pr, active.id);
		if (tid_out)
			*tid_out = active.id;
		rc = 0;
		goto out;
	}
	rc = check_actor(j, req, repo_id, &actor);
	if (rc <= 0)
		goto out;
	rc = find_operators(j, req, &pr, &git, &head, &ops, &notes, &hints);
	if (rc <= 0)
		goto out;

	if (have_active)
		stop_runners(j, active.id, actor);
	rc = queued = queue_jobs(j, req, repo_id, have_active ? active.id : 0, head, actor, &ops, &tid);
	if (queued < 0)
		goto out;
	log_info("%s#%" PRId64 ": labelled by '%s' at %.12s (%s): %d operator(s) queued", req->repo,
		 req->pr, actor, head, req->source, queued);
	if (tid_out)
		*tid_out = tid;
	/* the modules still without shapes: every progress comment of the trigger shows them */
	if (queued && jmodops_save_hints(j, tid, hints.buf))
		log_warn("%s#%" PRId64 ": the modules without shapes are left out of the progress comment",
			 req->repo, req->pr);
	if (!queued)
		say_no_operator(j, repo_id, req->repo, req->pr, head, notes.buf, hints.buf);
	else if (jpub_labels(j, repo_id, req->repo, req->pr, tid, 0, KB_JOB_QUEUED))
		log_warn("%s#%" PRId64 ": could not set labels", req->repo, req->pr);
out:
	free(actor);
	jtrigger_release(&active);
	kb_forge_pr_release(&pr);
	kb_git_repo_free(git);
	strvec_clear(&ops);
	strbuf_release(&notes);
	strbuf_release(&hints);
	return rc;
}

const char *kb_jobs_parse_command(const char *body)
{
	const char *p = body;
	size_t n;

	if (!p)
		return NULL;
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	if (strncmp(p, "/kernelbot", 10))
		return NULL;
	p += 10;
	if (*p != ' ' && *p != '\t')
		return NULL;
	while (*p == ' ' || *p == '\t')
		p++;
	n = strcspn(p, " \t\r\n");
	if (n == 4 && !strncmp(p, "stop", 4))
		return "stop";
	if (n == 3 && !strncmp(p, "run", 3))
		return "run";
	return NULL;
}

int kb_jobs_command(struct kb_jobs *j, const char *repo, int64_t pr, const char *actor,
		    const char *command)
{
	enum kb_forge_perm perm = KB_PERM_NONE;
	struct kb_trigger_req req;

	if (!actor || !*actor || !command)
		return 0;
	if (!strcmp(command, "run")) {
		/* on the current head; kb_jobs_trigger checks that actor may */
		memset(&req, 0, sizeof(req));
		req.repo = repo;
		req.pr = pr;
		req.actor = actor;
		req.source = "command";
		req.rerun = true;
		req.label_optional = true;
		return kb_jobs_trigger(j, &req, NULL);
	}
	if (strcmp(command, "stop"))
		return 0;
	if (kb_forge_permission(j->forge, &perm, repo, actor))
		return -1;
	if (perm < KB_PERM_WRITE) {
		log_info("%s#%" PRId64 ": '/kernelbot stop' from '%s', who has %s access, not write;"
			 " ignored", repo, pr, actor, kb_forge_perm_name(perm));
		return 0;
	}
	return kb_jobs_cancel(j, repo, pr, actor);
}

int kb_jobs_cancel(struct kb_jobs *j, const char *repo, int64_t pr, const char *actor)
{
	struct jtrigger t = { 0 };
	int64_t repo_id, *ids = NULL;
	size_t nr = 0;
	int rc, changes = 0;

	rc = repo_id_of(j, repo, &repo_id, false);
	if (rc == KB_ENOTFOUND)
		return 0;
	if (rc)
		return -1;
	rc = jdb_trigger_active(j->st, &t, repo_id, pr);
	if (rc == KB_ENOTFOUND)
		return 0;
	if (rc)
		return -1;
	if (jdb_trigger_job_ids(j->st, t.id, true, &ids, &nr))
		goto fail;
	/* the trigger first, so that nothing restarts its jobs meanwhile */
	if (kb_state_begin(j->st))
		goto fail;
	if (jdb_trigger_cancel(j->st, t.id, &changes)) {
		kb_state_rollback(j->st);
		goto fail;
	}
	if (kb_state_commit(j->st))
		goto fail;
	for (size_t i = 0; i < nr; i++)
		if (jobs_runs(j, ids[i]))
			jobs_cancel_runner(j, ids[i], actor, true);
	log_info("%s#%" PRId64 ": cancelled%s%s (%zu job(s))", repo, pr, actor ? " by " : "",
		 actor ? actor : "", nr);
	if (nr && jpub_progress_of(j, &t, NULL))
		log_warn("%s#%" PRId64 ": could not update the progress comment", repo, pr);
	if (jpub_labels(j, repo_id, repo, pr, t.id, 0, KB_JOB_QUEUED))
		log_warn("%s#%" PRId64 ": could not set labels", repo, pr);
	rc = (int)nr;
	goto out;
fail:
	rc = -1;
out:
	free(ids);
	jtrigger_release(&t);
	return rc;
}

int kb_jobs_trigger_pending(struct kb_jobs *j, int64_t tid)
{
	int64_t n = 0;

	if (jdb_trigger_pending(j->st, tid, &n))
		return -1;
	return (int)n;
}

int kb_jobs_trigger_outcome(struct kb_jobs *j, int64_t tid, struct strbuf *md,
			    struct strbuf *pr_url, double *speedup)
{
	struct jrow *rows = NULL;
	size_t nr = 0;
	int bad = 0, n = 0;

	*speedup = 0;
	if (jdb_trigger_rows(j->st, tid, &rows, &nr))
		return -1;
	strbuf_addstr(md, "## kernelbot\n\n| operator | state | speedup (own shapes) | pull request |\n"
			  "| --- | --- | ---: | --- |\n");
	for (size_t i = 0; i < nr; i++) {
		const char *op = rows[i].operator_path;
		const char *state = rows[i].state;
		const char *err = rows[i].error;
		const char *res = rows[i].result;
		cJSON *r = res ? cJSON_Parse(res) : NULL;
		const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "pr_url");
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "speedup");
		char buf[32];

		n++;
		if (!state || strcmp(state, "done"))
			bad = 1;
		strbuf_addstr(md, "| ");
		kb_md_code(md, op, true);
		strbuf_addstr(md, " | ");
		kb_md_escape(md, state);
		if (err) {
			strbuf_addstr(md, ": ");
			kb_md_escape_n(md, err, 300);
		}
		if (cJSON_IsNumber(s) && s->valuedouble > 0) {
			int64_t slower = kb_json_i64(r, "slower_configs", 0);

			kb_md_fmt_speedup(buf, sizeof(buf), s->valuedouble);
			strbuf_addf(md, " | %s", buf);
			/* the headline policy (bot/report/HEADLINE.md): a slower config is said */
			if (slower > 0)
				strbuf_addf(md, ", slower than eager on %" PRId64 " of %" PRId64 " configs",
					    slower, kb_json_i64(r, "timed_configs", 0));
			if (s->valuedouble > *speedup &&
			    (cJSON_IsString(u) && *u->valuestring))
				*speedup = s->valuedouble;
		} else {
			strbuf_addstr(md, " | -");
		}
		strbuf_addstr(md, " | ");
		if (cJSON_IsString(u) && *u->valuestring) {
			kb_md_escape(md, u->valuestring);
			if (!pr_url->len)
				strbuf_addstr(pr_url, u->valuestring);
		} else {
			strbuf_addstr(md, "-");
		}
		strbuf_addstr(md, " |\n");
		cJSON_Delete(r);
	}
	jrows_free(rows, nr);
	if (!n)
		strbuf_addstr(md, "| (no operator) | - | - | - |\n");
	return bad;
}
