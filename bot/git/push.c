#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "git/git_priv.h"

/* Pushing the bot's branches, and never over a human's commits. */

int kb_git_remote_branch_head(struct kb_git_repo *r, const char *remote_url, const char *branch,
			      const struct kb_git_cred *cred, char *sha_out)
{
	struct strbuf refname = STRBUF_INIT;
	git_remote_callbacks cb;
	struct kb_git_auth auth;
	git_remote *remote = NULL;
	const git_remote_head **heads;
	size_t n;
	int rc;

	if (!remote_url)
		remote_url = r->url;
	kb_git__auth_init(&auth, remote_url, r, cred);
	if ((rc = kb_git__branch_ref(&refname, branch)))
		goto out;
	kb_git__callbacks(&cb, &auth);
	if ((rc = kb_git__remote(&remote, r, remote_url)))
		goto out;
	if (git_remote_connect(remote, GIT_DIRECTION_FETCH, &cb, NULL, NULL) < 0 ||
	    git_remote_ls(&heads, &n, remote) < 0) {
		rc = kb_git__error(&auth, "could not list the refs of '%s'", remote_url);
		goto out;
	}
	rc = KB_ENOTFOUND;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(heads[i]->name, refname.buf)) {
			kb_git__oid_hex(sha_out, &heads[i]->oid);
			rc = 0;
			break;
		}
out:
	if (remote)
		git_remote_disconnect(remote);
	git_remote_free(remote);
	kb_git__auth_release(&auth);
	strbuf_release(&refname);
	return rc;
}

static bool is_bot(const git_signature *sig, const char *bot_email)
{
	return sig && sig->email && !strcasecmp(sig->email, bot_email);
}

static int check_ours(struct kb_git_repo *r, const char *remote_url, const char *branch,
		      const char *bot_email, const char *remote_sha, const struct kb_git_cred *cred)
{
	struct strbuf refname = STRBUF_INIT, spec = STRBUF_INIT;
	git_commit *tip = NULL, *c = NULL;
	git_reference *local = NULL;
	size_t n;
	int grc, rc;

	if ((rc = kb_git__branch_ref(&refname, branch)))
		goto out;
	rc = -1;
	if (!bot_email || !*bot_email) {
		rc = error("no bot email to check branch '%s' against", branch);
		goto out;
	}
	rc = kb_git__commit(&tip, r, remote_sha, "remote head");
	if (rc == KB_ENOTFOUND) {
		const char *specp;

		/* the human's commits are on the remote only: fetch them */
		strbuf_addf(&spec, "+%s:refs/kernelbot/remote/%s", refname.buf,
			    refname.buf + strlen("refs/"));
		specp = spec.buf;
		if ((rc = kb_git__fetch(r, remote_url, &specp, 1, false, cred)))
			goto out;
		rc = kb_git__commit(&tip, r, remote_sha, "remote head");
		if (rc == KB_ENOTFOUND) {
			log_error("remote head '%s' of branch '%s' is gone: the branch moved", remote_sha,
				  branch);
			rc = KB_GIT_EREJECTED;
		}
	}
	if (rc)
		goto out;
	grc = git_reference_lookup(&local, r->repo, refname.buf);
	if (grc < 0 && grc != GIT_ENOTFOUND) {
		rc = kb_git__error(NULL, "could not read local branch '%s'", branch);
		goto out;
	}
	git_error_clear();
	/*
	 * The bot's branch is its commit(s) on a base (the pull request head
	 * it was built on). Walk first parents from the tip while the commits
	 * are the bot's: the first other commit is that base, unless it is the
	 * tip itself (a human's commit, merge, amend or rebase on top). The
	 * base's own history is not the branch's, so a pull request that was
	 * rebased since does not look like a human commit. Stop early where
	 * the local branch already holds the commit: nothing is lost there.
	 */
	for (c = tip, tip = NULL, n = 0;; n++) {
		const git_oid *id = git_commit_id(c);
		const git_signature *author = git_commit_author(c), *committer = git_commit_committer(c);
		git_commit *parent = NULL;

		if (local && git_reference_target(local) &&
		    (git_oid_equal(git_reference_target(local), id) ||
		     git_graph_descendant_of(r->repo, git_reference_target(local), id) == 1))
			break;
		git_error_clear();
		if (!is_bot(author, bot_email) || !is_bot(committer, bot_email)) {
			const git_signature *who = is_bot(author, bot_email) ? committer : author;
			char hex[KB_GIT_SHA_SIZE];

			if (n > 0)
				break; /* the base */
			kb_git__oid_hex(hex, id);
			log_warn("branch '%s' has commit %.12s by '%s <%s>', not by the bot: leaving it alone",
				 branch, hex, who->name, who->email);
			rc = KB_GIT_ENOTOURS;
			goto out;
		}
		if (!git_commit_parentcount(c))
			break;
		if (git_commit_parent(&parent, c, 0) < 0) {
			rc = kb_git__error(NULL, "could not read a commit of branch '%s'", branch);
			goto out;
		}
		git_commit_free(c);
		c = parent;
	}
	rc = 0;
out:
	git_reference_free(local);
	git_commit_free(c);
	git_commit_free(tip);
	strbuf_release(&refname);
	strbuf_release(&spec);
	return rc;
}

int kb_git_branch_is_ours(struct kb_git_repo *r, const char *remote_url, const char *branch,
			  const char *bot_email, const char *remote_sha)
{
	return check_ours(r, remote_url, branch, bot_email, remote_sha, NULL);
}

/* push refs/heads/<branch>; lease: the remote tip it must still have
 * (zero: must not exist), NULL: whatever it has */
static int push(struct kb_git_repo *r, const char *remote_url, const char *branch, bool force,
		const git_oid *lease, const struct kb_git_cred *cred)
{
	git_push_options opts;
	struct strbuf refname = STRBUF_INIT, spec = STRBUF_INIT, shown = STRBUF_INIT;
	struct kb_git_auth auth;
	git_remote *remote = NULL;
	char *specp;
	git_strarray specs = { &specp, 1 };
	int grc, rc;

	if (!remote_url)
		remote_url = r->url;
	kb_git_redact_url(&shown, remote_url); /* for our own messages */
	kb_git__auth_init(&auth, remote_url, r, cred);
	git_push_options_init(&opts, GIT_PUSH_OPTIONS_VERSION);
	if ((rc = kb_git__branch_ref(&refname, branch)))
		goto out;
	rc = -1;
	strbuf_addf(&spec, "%s%s:%s", force ? "+" : "", refname.buf, refname.buf);
	specp = spec.buf;
	auth.push_ref = refname.buf;
	auth.lease = lease;
	kb_git__callbacks(&opts.callbacks, &auth);
	opts.follow_redirects = GIT_REMOTE_REDIRECT_INITIAL;
	if ((rc = kb_git__remote(&remote, r, remote_url)))
		goto out;
	grc = git_remote_push(remote, &specs, &opts);
	if (auth.lease_broken) {
		git_error_clear();
		log_error("branch '%s' on '%s' moved since it was checked: not pushed", branch,
			  shown.buf);
		rc = KB_GIT_EREJECTED;
		goto out;
	}
	if (grc == GIT_ENONFASTFORWARD) {
		rc = kb_git__error(&auth, "could not push '%s' to '%s'", branch, remote_url);
		rc = rc == KB_GIT_EAUTH ? rc : KB_GIT_EREJECTED;
		goto out;
	}
	if (grc < 0) {
		rc = kb_git__error(&auth, "could not push '%s' to '%s'", branch, remote_url);
		goto out;
	}
	if (auth.push_status) {
		struct strbuf sb = STRBUF_INIT;

		kb_git_redact_url(&sb, auth.push_status);
		log_error("remote '%s' refused '%s'", shown.buf, sb.buf);
		strbuf_release(&sb);
		rc = KB_GIT_EREJECTED;
		goto out;
	}
	log_info("pushed '%s' to '%s'%s", branch, shown.buf, force ? " (forced)" : "");
	rc = 0;
out:
	git_remote_free(remote);
	kb_git__auth_release(&auth);
	strbuf_release(&refname);
	strbuf_release(&spec);
	strbuf_release(&shown);
	return rc;
}

int kb_git_push_branch(struct kb_git_repo *r, const char *remote_url, const char *branch,
		       bool force, const struct kb_git_cred *cred)
{
	return push(r, remote_url, branch, force, NULL, cred);
}

int kb_git_publish_branch(struct kb_git_repo *r, const char *remote_url, const char *branch,
			  const char *bot_email, const struct kb_git_cred *cred)
{
	struct strbuf refname = STRBUF_INIT;
	char remote_hex[KB_GIT_SHA_SIZE], local_hex[KB_GIT_SHA_SIZE];
	git_oid remote_oid, local_oid;
	int rc;

	if ((rc = kb_git__branch_ref(&refname, branch)))
		goto out;
	if ((rc = kb_git_resolve(r, refname.buf, local_hex))) {
		if (rc == KB_ENOTFOUND)
			rc = error("no local branch '%s' to publish", branch);
		goto out;
	}
	git_oid_fromstr(&local_oid, local_hex);
	rc = kb_git_remote_branch_head(r, remote_url, branch, cred, remote_hex);
	if (rc == KB_ENOTFOUND) {
		memset(&remote_oid, 0, sizeof(remote_oid));
		rc = push(r, remote_url, branch, false, &remote_oid, cred);
		goto out;
	}
	if (rc)
		goto out;
	git_oid_fromstr(&remote_oid, remote_hex);
	if (git_oid_equal(&remote_oid, &local_oid)) {
		log_info("branch '%s' is up to date on the remote", branch);
		goto out;
	}
	/* a fast-forward needs no ownership check: nothing is lost */
	if (git_graph_descendant_of(r->repo, &local_oid, &remote_oid) == 1) {
		rc = push(r, remote_url, branch, false, &remote_oid, cred);
		goto out;
	}
	git_error_clear();
	if ((rc = check_ours(r, remote_url, branch, bot_email, remote_hex, cred)))
		goto out;
	rc = push(r, remote_url, branch, true, &remote_oid, cred);
out:
	strbuf_release(&refname);
	return rc;
}
