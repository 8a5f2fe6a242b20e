#include "core/common.h"
#include "core/util.h"
#include "forge/local/local_priv.h"

#include <git2.h>
#include <inttypes.h>

static const char *git_reason(void)
{
	const git_error *e = git_error_last();

	return e && e->message ? e->message : "unknown reason";
}

static int open_repo(git_repository **out, const char *git_dir)
{
	if (git_repository_open(out, git_dir))
		return error("could not open git repository '%s': %s", git_dir, git_reason());
	return 0;
}

static int branch_oid(git_oid *out, git_repository *repo, const char *branch)
{
	struct strbuf ref = STRBUF_INIT;
	int rc;

	strbuf_addf(&ref, "refs/heads/%s", branch);
	rc = git_reference_name_to_id(out, repo, ref.buf);
	strbuf_release(&ref);
	if (rc == GIT_ENOTFOUND || rc == GIT_EINVALIDSPEC)
		return KB_ENOTFOUND;
	if (rc)
		return error("could not read branch '%s': %s", branch, git_reason());
	return 0;
}

int lf_git_head(const char *git_dir, const char *branch, char **sha_out)
{
	git_repository *repo = NULL;
	git_oid oid;
	char hex[GIT_OID_HEXSZ + 1];
	int rc;

	*sha_out = NULL;
	if ((rc = open_repo(&repo, git_dir)))
		return rc;
	rc = branch_oid(&oid, repo, branch);
	if (!rc) {
		git_oid_tostr(hex, sizeof(hex), &oid);
		*sha_out = xstrdup(hex);
	}
	git_repository_free(repo);
	return rc;
}

int lf_git_pull_ref(const char *git_dir, int64_t number, const char *sha)
{
	git_repository *repo = NULL;
	git_reference *ref = NULL;
	git_oid oid, have;
	char name[64];
	int rc = 0;

	if (git_oid_fromstr(&oid, sha))
		return error("invalid sha '%s'", sha);
	if ((rc = open_repo(&repo, git_dir)))
		return rc;
	xsnprintf(name, sizeof(name), "refs/pull/%" PRId64 "/head", number);
	if (!git_reference_name_to_id(&have, repo, name) && git_oid_equal(&have, &oid))
		goto out; /* already there: no write */
	if (git_reference_create(&ref, repo, name, &oid, 1, "local forge: pull request head"))
		rc = error("could not set '%s' in '%s': %s", name, git_dir, git_reason());
out:
	git_reference_free(ref);
	git_repository_free(repo);
	return rc;
}

static int commit_tree(git_tree **out, git_repository *repo, const git_oid *oid)
{
	git_commit *c = NULL;
	int rc = 0;

	if (git_commit_lookup(&c, repo, oid) || git_commit_tree(out, c))
		rc = error("could not read a commit's tree: %s", git_reason());
	git_commit_free(c);
	return rc;
}

int lf_git_changed(const char *git_dir, const char *base, const char *head, struct strvec *paths)
{
	git_repository *repo = NULL;
	git_tree *old_tree = NULL, *new_tree = NULL;
	git_diff *diff = NULL;
	git_oid base_oid, head_oid, mb;
	int rc;

	if ((rc = open_repo(&repo, git_dir)))
		return rc;
	if ((rc = branch_oid(&head_oid, repo, head))) {
		if (rc == KB_ENOTFOUND)
			rc = error("no branch '%s' in '%s'", head, git_dir);
		goto out;
	}
	if ((rc = branch_oid(&base_oid, repo, base))) {
		if (rc == KB_ENOTFOUND)
			rc = error("no branch '%s' in '%s'", base, git_dir);
		goto out;
	}
	/* GitHub compares against the merge base: what the pull request changes */
	if (git_merge_base(&mb, repo, &base_oid, &head_oid))
		git_oid_cpy(&mb, &base_oid);
	if ((rc = commit_tree(&old_tree, repo, &mb)) || (rc = commit_tree(&new_tree, repo, &head_oid)))
		goto out;
	if (git_diff_tree_to_tree(&diff, repo, old_tree, new_tree, NULL)) {
		rc = error("could not diff '%s' against '%s': %s", head, base, git_reason());
		goto out;
	}
	for (size_t i = 0; i < git_diff_num_deltas(diff); i++) {
		const git_diff_delta *d = git_diff_get_delta(diff, i);

		if (d->status != GIT_DELTA_DELETED)
			strvec_push(paths, d->new_file.path);
	}
out:
	git_diff_free(diff);
	git_tree_free(old_tree);
	git_tree_free(new_tree);
	git_repository_free(repo);
	return rc;
}
