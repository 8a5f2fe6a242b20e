#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strvec.h"
#include "core/util.h"
#include "git/git.h"
#include "jobs/jobs_priv.h"
#include "report/pr_body.h"

#include <dirent.h>
#include <sys/stat.h>
#include <inttypes.h>

/*
 * Everything the job loop puts on the forge, each step idempotent: an
 * object is looked up in forge_objects first, then on the forge by its
 * marker (the window between creating it and recording it), and only
 * then created; its record is written in its own transaction right after.
 * Review comments are the one thing the forge cannot look up by marker:
 * their record is written BEFORE they are posted, so a crash in between
 * loses one review instead of posting it twice.
 */


static int put_object(struct kb_jobs *j, const struct runner *r, const char *kind,
		      const char *marker, const char *remote_id, const char *url,
		      const char *hash)
{
	int rc;

	if (kb_state_begin(j->st))
		return -1;
	rc = jdb_object_put(j->st, r->job.repository_id, r->job.id, kind, marker, remote_id, url,
			    hash);
	if (rc) {
		kb_state_rollback(j->st);
		return -1;
	}
	return kb_state_commit(j->st);
}

/* Post or edit the comment with marker on pr; recorded in forge_objects. */
static int put_comment(struct kb_jobs *j, int64_t repo_id, int64_t job_id, const char *repo,
		       int64_t pr, const char *marker, const char *body)
{
	struct jobject obj = { 0 };
	struct kb_forge_comment found = KB_FORGE_COMMENT_INIT;
	char hash[65], idbuf[32];
	int64_t id = 0;
	int rc;

	kb_body_hash(body, hash);
	rc = jdb_object_get(j->st, &obj, repo_id, "comment", marker);
	if (rc && rc != KB_ENOTFOUND)
		goto out;
	if (!rc && obj.body_hash && !strcmp(obj.body_hash, hash)) {
		rc = 0; /* unchanged: no call */
		goto out;
	}
	if (!rc && obj.remote_id && !kb_parse_i64(obj.remote_id, &id) && id > 0) {
		rc = kb_forge_edit_comment(j->forge, repo, id, body);
		if (rc == KB_ENOTFOUND) { /* deleted by someone: post a new one */
			log_info("%s#%" PRId64 ": progress comment %" PRId64 " is gone; posting a new one",
				 repo, pr, id);
			id = 0;
		} else if (rc) {
			goto out;
		}
	} else {
		id = 0;
	}
	if (!id) {
		/* posted by an earlier run that died before recording it? */
		rc = kb_forge_find_comment(j->forge, &found, repo, pr, marker);
		if (!rc) {
			id = found.id;
			if ((rc = kb_forge_edit_comment(j->forge, repo, id, body)))
				goto out;
		} else if (rc == KB_ENOTFOUND) {
			/* marked: a reply lost in flight is found again, not posted twice */
			if ((rc = kb_forge_post_marked_comment(j->forge, &id, repo, pr, marker, body)))
				goto out;
		} else {
			goto out;
		}
	}
	xsnprintf(idbuf, sizeof(idbuf), "%" PRId64, id);
	if (kb_state_begin(j->st)) {
		rc = -1;
		goto out;
	}
	if (jdb_object_put(j->st, repo_id, job_id, "comment", marker, idbuf, found.url, hash)) {
		kb_state_rollback(j->st);
		rc = -1;
		goto out;
	}
	rc = kb_state_commit(j->st);
out:
	kb_forge_comment_release(&found);
	jobject_release(&obj);
	return rc;
}

int jpub_progress(struct kb_jobs *j, struct runner *r, bool force)
{
	struct strbuf marker = STRBUF_INIT, body = STRBUF_INIT;
	int64_t now = kb_now_ms();
	int rc = 0;

	if (!force && r->last_edit_ms &&
	    now - r->last_edit_ms < j->cfg->bot_progress_interval_s * 1000)
		goto out;
	jrender_progress_marker(&marker, r->job.pr_number);
	if ((rc = jrender_progress(j, &r->trig, r, &body)))
		goto out;
	rc = put_comment(j, r->job.repository_id, r->job.id, r->trig.repo, r->job.pr_number,
			 marker.buf, body.buf);
	if (!rc)
		r->last_edit_ms = now;
out:
	strbuf_release(&marker);
	strbuf_release(&body);
	return rc;
}

int jpub_progress_of(struct kb_jobs *j, const struct jtrigger *t, const char *body)
{
	struct strbuf marker = STRBUF_INIT, rendered = STRBUF_INIT;
	int rc;

	jrender_progress_marker(&marker, t->pr);
	if (!body) {
		if ((rc = jrender_progress(j, t, NULL, &rendered)))
			goto out;
		body = rendered.buf;
	}
	rc = put_comment(j, t->repo_id, 0, t->repo, t->pr, marker.buf, body);
out:
	strbuf_release(&marker);
	strbuf_release(&rendered);
	return rc;
}

int jpub_labels(struct kb_jobs *j, int64_t repo_id, const char *repo, int64_t pr,
		int64_t trigger_id, int64_t job_id, enum kb_job_state as)
{
	static const char *const names[] = { "kernelbot:running", "kernelbot:done",
					     "kernelbot:failed" };
	struct kb_forge_pr cur = KB_FORGE_PR_INIT;
	int64_t pending = 0, failed = 0, done = 0;
	int want = -1, rc;

	if (jdb_trigger_counts(j->st, trigger_id, job_id, as, &pending, &failed, &done))
		return -1;
	if (pending)
		want = 0;
	else if (failed)
		want = 2;
	else if (done)
		want = 1;
	(void)repo_id;
	if ((rc = kb_forge_get_pr(j->forge, &cur, repo, pr)))
		goto out;
	for (int i = 0; i < (int)ARRAY_SIZE(names); i++) {
		bool has = false;

		for (size_t k = 0; k < cur.labels.nr; k++)
			if (!strcmp(cur.labels.v[k], names[i]))
				has = true;
		if (i == want && !has)
			rc = kb_forge_add_labels(j->forge, repo, pr, &names[i], 1);
		else if (i != want && has)
			rc = kb_forge_remove_label(j->forge, repo, pr, names[i]);
		if (rc)
			goto out;
	}
out:
	kb_forge_pr_release(&cur);
	return rc;
}

int jpub_status(struct kb_jobs *j, struct runner *r)
{
	struct strbuf marker = STRBUF_INIT, name = STRBUF_INIT, title = STRBUF_INIT;
	struct strbuf summary = STRBUF_INIT;
	struct jobject obj = { 0 };
	struct kb_forge_check check;
	int64_t id = 0;
	char idbuf[32];
	bool faster = false;
	int rc;

	strbuf_addf(&marker, "check:%" PRId64, r->job.id);
	rc = jdb_object_get(j->st, &obj, r->job.repository_id, "check_run", marker.buf);
	if (rc && rc != KB_ENOTFOUND)
		goto out;
	if (!rc && obj.remote_id && kb_parse_i64(obj.remote_id, &id))
		id = 0;
	if ((rc = jrender_check(j, r, &title, &summary, &faster)))
		goto out;
	strbuf_addf(&name, "%s / %s", j->cfg->bot_check_name, r->slug.buf);
	memset(&check, 0, sizeof(check));
	check.name = name.buf;
	check.head_sha = r->job.head_sha;
	switch (r->job.state) {
	case KB_JOB_QUEUED:
		check.status = KB_CHECK_QUEUED;
		break;
	case KB_JOB_RUNNING:
		check.status = KB_CHECK_IN_PROGRESS;
		break;
	case KB_JOB_DONE:
		check.status = KB_CHECK_COMPLETED;
		check.conclusion = faster ? KB_CONCLUSION_SUCCESS : KB_CONCLUSION_NEUTRAL;
		break;
	case KB_JOB_FAILED:
		check.status = KB_CHECK_COMPLETED;
		check.conclusion = KB_CONCLUSION_FAILURE;
		break;
	case KB_JOB_CANCELLED:
		check.status = KB_CHECK_COMPLETED;
		check.conclusion = KB_CONCLUSION_CANCELLED;
		break;
	}
	check.title = title.buf;
	check.summary = summary.buf;
	check.details_url = r->pr_url.len ? r->pr_url.buf : r->pr.url;
	check.external_id = marker.buf; /* a create whose reply was lost is found by it */
	rc = kb_forge_report(j->forge, &id, r->trig.repo, &check);
	if (rc == KB_ENOTFOUND && id) { /* the check run is gone: make a new one */
		id = 0;
		rc = kb_forge_report(j->forge, &id, r->trig.repo, &check);
	}
	if (rc)
		goto out;
	if (id) {
		xsnprintf(idbuf, sizeof(idbuf), "%" PRId64, id);
		rc = put_object(j, r, "check_run", marker.buf, idbuf, NULL, NULL);
	}
out:
	jobject_release(&obj);
	strbuf_release(&marker);
	strbuf_release(&name);
	strbuf_release(&title);
	strbuf_release(&summary);
	return rc;
}

int jpub_review(struct kb_jobs *j, struct runner *r, double best)
{
	struct strbuf marker = STRBUF_INIT, body = STRBUF_INIT;
	struct kb_forge_review rev;
	double prev = r->reviewed;
	int64_t id = 0;
	char idbuf[32];
	int changes = 0, rc = 0;

	if (!(best > 1.0))
		return 0;
	if (prev > 0 && best < prev * (1.0 + j->cfg->bot_improve_margin))
		return 0;
	strbuf_addf(&marker, "review:%" PRId64 ":%.3f", r->job.id, best);
	/* recorded first: at most one review per level, even across a crash */
	if (kb_state_begin(j->st))
		goto fail;
	if (jdb_job_reviewed(j->st, r->job.id, r->job.repository_id, marker.buf, best, &changes)) {
		kb_state_rollback(j->st);
		goto fail;
	}
	if (kb_state_commit(j->st))
		goto fail;
	r->reviewed = best;
	if (!changes)
		goto out;
	if (jrender_review(j, r, &body, best, prev))
		goto fail;
	memset(&rev, 0, sizeof(rev));
	rev.commit_sha = r->job.head_sha;
	rev.body = body.buf;
	/* rev.marker NULL: its body (the job and both speedups) names it after a lost reply */
	rc = kb_forge_post_review(j->forge, &id, r->trig.repo, r->job.pr_number, &rev);
	if (!rc && id) {
		xsnprintf(idbuf, sizeof(idbuf), "%" PRId64, id);
		rc = put_object(j, r, "review_comment", marker.buf, idbuf, NULL, NULL);
	}
	goto out;
fail:
	rc = -1;
out:
	strbuf_release(&marker);
	strbuf_release(&body);
	return rc;
}

/* --- the result: branch, commit, push, pull request --- */

#define MAX_RESULT_FILES 64
#define MAX_RESULT_TOTAL (32 * 1024 * 1024)

struct rfile {
	char *rel;           /* path inside the output dir */
	struct strbuf data;
};

struct rfiles {
	struct rfile *v;
	size_t nr;
	size_t total;
};

static void rfiles_release(struct rfiles *fs)
{
	for (size_t i = 0; i < fs->nr; i++) {
		free(fs->v[i].rel);
		strbuf_release(&fs->v[i].data);
	}
	free(fs->v);
	memset(fs, 0, sizeof(*fs));
}

static int cmp_rfile(const void *a, const void *b)
{
	return strcmp(((const struct rfile *)a)->rel, ((const struct rfile *)b)->rel);
}

/*
 * Every regular file under dir/rel (the child's output: kernel, binding,
 * evidence, report, the ABI headers and the reference the binding loads),
 * hidden entries and links skipped, within the caps.
 */
static int walk(struct rfiles *fs, const char *dir, const char *rel, int depth)
{
	struct strbuf path = STRBUF_INIT;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	strbuf_addf(&path, "%s%s%s", dir, *rel ? "/" : "", rel);
	d = opendir(path.buf);
	if (!d) {
		rc = error_errno("could not read '%s'", path.buf);
		goto out;
	}
	while (!rc && (de = readdir(d))) {
		struct strbuf child = STRBUF_INIT, full = STRBUF_INIT;
		struct stat sb;

		if (de->d_name[0] == '.')
			continue;
		strbuf_addf(&child, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		strbuf_addf(&full, "%s/%s", dir, child.buf);
		if (lstat(full.buf, &sb)) {
			rc = error_errno("could not stat '%s'", full.buf);
		} else if (S_ISDIR(sb.st_mode) && depth < 4) {
			rc = walk(fs, dir, child.buf, depth + 1);
		} else if (S_ISREG(sb.st_mode)) {
			if (fs->nr >= MAX_RESULT_FILES || fs->total + (size_t)sb.st_size > MAX_RESULT_TOTAL) {
				rc = error("the result in '%s' has too many or too large files", dir);
			} else {
				fs->v = xrealloc(fs->v, (fs->nr + 1) * sizeof(*fs->v));
				strbuf_init(&fs->v[fs->nr].data, 0);
				if (strbuf_read_file(&fs->v[fs->nr].data, full.buf, MAX_RESULT_TOTAL)) {
					strbuf_release(&fs->v[fs->nr].data);
					rc = error("could not read '%s'", full.buf);
				} else {
					fs->total += fs->v[fs->nr].data.len;
					fs->v[fs->nr++].rel = strbuf_detach(&child, NULL);
				}
			}
		}
		strbuf_release(&child);
		strbuf_release(&full);
	}
	closedir(d);
out:
	strbuf_release(&path);
	return rc;
}

static int read_results(struct runner *r, struct rfiles *fs)
{
	if (walk(fs, r->out.buf, "", 0))
		return -1;
	qsort(fs->v, fs->nr, sizeof(*fs->v), cmp_rfile);
	/* the last line of defence: a registered secret never leaves in a commit */
	for (size_t i = 0; i < fs->nr; i++)
		if (log_contains_secret(fs->v[i].data.buf))
			return error("job %" PRId64 ": '%s' in the result holds a secret; nothing is published",
				     r->job.id, fs->v[i].rel);
	for (size_t i = 0; i < fs->nr; i++)
		if (!strncmp(fs->v[i].rel, "kernel.c", 8))
			return 0;
	return error("job %" PRId64 " produced no kernel in '%s'", r->job.id, r->out.buf);
}

/* The wired module (and the build's files, new __init__.py files) beside the folder's files in the commit. */
static void wired_files(struct kb_git_file *gf, size_t *nr, const struct jwired *w,
			struct strbuf *all)
{
	size_t first = *nr;

	gf[*nr].path = w->module_path.buf;
	gf[*nr].data = w->module_text.buf;
	gf[*nr].len = w->module_text.len;
	gf[(*nr)++].mode = 0644;
	for (size_t i = 0; i < w->nr_files; i++) {
		gf[*nr].path = w->files[i].path;
		gf[*nr].data = w->files[i].text.buf;
		gf[*nr].len = w->files[i].text.len;
		gf[(*nr)++].mode = 0644;
	}
	for (size_t i = first; i < *nr; i++) {
		strbuf_addf(all, "%s\n%zu\n", gf[i].path, gf[i].len);
		strbuf_add(all, gf[i].data, gf[i].len);
	}
}

static int publish_branch(struct kb_jobs *j, struct runner *r, double speedup,
			  struct strbuf *note)
{
	struct rfiles fs = { 0 };
	struct kb_git_file *gf = NULL;
	struct strbuf all = STRBUF_INIT, msg = STRBUF_INIT, dir = STRBUF_INIT;
	struct strvec paths = STRVEC_INIT;
	struct jobject obj = { 0 };
	struct kb_forge_remote rem = KB_FORGE_REMOTE_INIT;
	struct kb_git_cred cred;
	char hash[65], sha[KB_GIT_SHA_SIZE], remote[KB_GIT_SHA_SIZE];
	size_t nr;
	int rc;

	/*
	 * Credentials afresh: the clone's are as old as the job, and an App's
	 * installation token lives an hour (renewed by the forge meanwhile).
	 */
	if ((rc = kb_forge_git_remote(j->forge, &rem, r->trig.repo)))
		goto out;
	cred.username = rem.username;
	cred.token = rem.password;
	/* a module's job: ops.py and the proof joined the folder (jobs.c wired it first), the
	 * patched module joins the commit */
	if ((rc = read_results(r, &fs)))
		goto out;
	gf = xcalloc(fs.nr + 1 + r->wired.nr_files, sizeof(*gf));
	jwire_op_dir(&dir, r);
	for (size_t i = 0; i < fs.nr; i++) {
		const char *p = strvec_pushf(&paths, "%s/%s", dir.buf, fs.v[i].rel);

		gf[i].path = p;
		gf[i].data = fs.v[i].data.buf;
		gf[i].len = fs.v[i].data.len;
		gf[i].mode = 0644;
		strbuf_addf(&all, "%s\n%zu\n", p, fs.v[i].data.len);
		strbuf_add(&all, fs.v[i].data.buf, fs.v[i].data.len);
	}
	nr = fs.nr;
	if (r->wired.module_path.len)
		wired_files(gf, &nr, &r->wired, &all);
	strbuf_addf(&all, "parent %s\n", r->job.head_sha);
	jhash(hash, all.buf);

	/* already pushed this very content? (a restart after the push) */
	rc = jdb_object_get(j->st, &obj, r->job.repository_id, "branch", r->branch.buf);
	if (rc && rc != KB_ENOTFOUND)
		goto out;
	if (!rc && obj.body_hash && obj.remote_id && !strcmp(obj.body_hash, hash) &&
	    !kb_git_remote_branch_head(r->git, NULL, r->branch.buf, &cred, remote) &&
	    !strcmp(remote, obj.remote_id)) {
		log_info("job %" PRId64 ": branch '%s' already holds the result", r->job.id,
			 r->branch.buf);
		rc = 0;
		goto out;
	}
	strbuf_addf(&msg, "kernelbot: %s %.2fx faster\n\nKernel, torch binding and evidence for "
		    "%s at %s,\nfound and verified by kernelbot for #%" PRId64 ".\n",
		    r->slug.buf, speedup, r->job.operator_path, r->job.head_sha, r->job.pr_number);
	if ((rc = kb_git_commit_files(r->git, r->branch.buf, r->job.head_sha, gf, nr, msg.buf,
				      j->cfg->bot_author_name, j->cfg->bot_author_email, sha)))
		goto out;
	rc = kb_git_publish_branch(r->git, NULL, r->branch.buf, j->cfg->bot_author_email, &cred);
	if (rc == KB_GIT_ENOTOURS) {
		strbuf_addf(note, "Someone else committed to `%s`; kernelbot leaves that branch "
			    "alone and did not update it.", r->branch.buf);
		goto out;
	}
	if (rc)
		goto out;
	rc = put_object(j, r, "branch", r->branch.buf, sha, NULL, hash);
out:
	kb_forge_remote_release(&rem);
	rfiles_release(&fs);
	free(gf);
	strvec_clear(&paths);
	jobject_release(&obj);
	strbuf_release(&all);
	strbuf_release(&msg);
	strbuf_release(&dir);
	return rc;
}

/*
 * The labelled pull request as it is now, into r->pr (the base branch of
 * the bot's pull request and the head the texts compare with). A push
 * during the job moved the head away from the sha the kernel was verified
 * at: the kernel is still published, for it is correct for the operator
 * it was verified on, but as a draft that says so; re-running is one
 * comment away. The note reaches the progress comment.
 */
static int refresh_head(struct kb_jobs *j, struct runner *r)
{
	struct kb_forge_pr now = KB_FORGE_PR_INIT;
	int rc = kb_forge_get_pr(j->forge, &now, r->trig.repo, r->job.pr_number);

	if (rc) {
		kb_forge_pr_release(&now);
		if (rc == KB_ENOTFOUND)
			return error("job %" PRId64 ": pull request %s#%" PRId64 " is gone", r->job.id,
				     r->trig.repo, r->job.pr_number);
		return rc;
	}
	kb_forge_pr_release(&r->pr);
	r->pr = now; /* moved: r->pr owns it */
	if (!jhead_moved(r))
		return 0;
	log_info("job %" PRId64 ": the head of %s#%" PRId64 " moved from %.12s to %.12s; publishing "
		 "as a draft", r->job.id, r->trig.repo, r->job.pr_number, r->job.head_sha,
		 r->pr.head_sha);
	strbuf_addf(&r->notes, "The head moved from %.12s to %.12s during the search. The kernel was "
		    "verified against the operator at %.12s, not the new head: it is published for "
		    "review (a draft when its pull request is new), not to be merged as it is. Comment "
		    "/kernelbot run to search again on the new head.\n", r->job.head_sha,
		    r->pr.head_sha, r->job.head_sha);
	return 0;
}

int jpub_result(struct kb_jobs *j, struct runner *r, double speedup)
{
	struct strbuf marker = STRBUF_INIT, title = STRBUF_INIT, body = STRBUF_INIT;
	struct strbuf note = STRBUF_INIT, kernel_path = STRBUF_INIT;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct kb_forge_new_pr spec;
	struct jobject obj = { 0 };
	char hash[65], num[32];
	int64_t number = 0;
	const char *base;
	bool have = false;
	int rc;

	if ((rc = refresh_head(j, r)))
		goto out;
	rc = publish_branch(j, r, speedup, &note);
	if (rc == KB_GIT_ENOTOURS) {
		strbuf_addf(&r->notes, "%s\n", note.buf);
		goto out;
	}
	if (rc)
		goto out;

	/* the record's key; the body carries the report's own "pr" marker */
	strbuf_addf(&marker, "pr:%" PRId64 ":%s", r->job.pr_number, r->slug.buf);
	if ((rc = jrender_pr(j, r, &title, &body, &kernel_path)))
		goto out;
	kb_body_hash(body.buf, hash);
	rc = jdb_object_get(j->st, &obj, r->job.repository_id, "pull_request", marker.buf);
	if (rc && rc != KB_ENOTFOUND)
		goto out;
	if (!rc && obj.remote_id && !kb_parse_i64(obj.remote_id, &number) && number > 0) {
		rc = kb_forge_get_pr(j->forge, &pr, r->trig.repo, number);
		if (rc && rc != KB_ENOTFOUND)
			goto out;
		have = !rc && pr.state && !strcmp(pr.state, "open");
	}
	if (!have) {
		/* opened by an earlier run that died before recording it? */
		rc = kb_forge_find_pr_by_head(j->forge, &pr, r->trig.repo, r->branch.buf);
		if (rc && rc != KB_ENOTFOUND)
			goto out;
		have = !rc && pr.state && !strcmp(pr.state, "open");
	}
	if (have) {
		if (!obj.body_hash || strcmp(obj.body_hash, hash) || number != pr.number ||
		    !pr.title || strcmp(pr.title, title.buf)) {
			if ((rc = kb_forge_update_pr(j->forge, r->trig.repo, pr.number, title.buf,
						     body.buf)))
				goto out;
		}
	} else {
		/* same repository: onto the labelled branch; a fork's: onto its base */
		base = r->pr.head_repo && !strcasecmp(r->pr.head_repo, r->trig.repo) && r->pr.head_ref
			       ? r->pr.head_ref : r->pr.base_ref;
		memset(&spec, 0, sizeof(spec));
		spec.head = r->branch.buf;
		spec.base = base;
		spec.title = title.buf;
		spec.body = body.buf;
		spec.draft = jhead_moved(r); /* verified for an operator the head no longer holds */
		rc = kb_forge_open_pr(j->forge, &pr, r->trig.repo, &spec);
		if (rc == KB_EEXISTS && pr.number > 0)
			rc = kb_forge_update_pr(j->forge, r->trig.repo, pr.number, title.buf, body.buf);
		if (rc)
			goto out;
	}
	xsnprintf(num, sizeof(num), "%" PRId64, pr.number);
	rc = put_object(j, r, "pull_request", marker.buf, num, pr.url, hash);
	if (!rc) {
		strbuf_reset(&r->pr_url);
		strbuf_addstr(&r->pr_url, pr.url ? pr.url : "");
		r->pr_number = pr.number;
	}
out:
	kb_forge_pr_release(&pr);
	jobject_release(&obj);
	strbuf_release(&marker);
	strbuf_release(&title);
	strbuf_release(&body);
	strbuf_release(&note);
	strbuf_release(&kernel_path);
	return rc;
}
