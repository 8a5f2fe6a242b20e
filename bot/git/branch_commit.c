#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "git/git_priv.h"

/* The bot's commits: blobs and trees written straight into the object
 * database on top of the parent's tree; no work tree, no index. */

/* relative, '/'-separated, no empty, ".", ".." or ".git" component */
static bool valid_path(const char *path)
{
	const char *p = path;

	if (!*path)
		return false;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (!n || (n == 1 && p[0] == '.') || (n == 2 && !strncmp(p, "..", 2)) ||
		    (n == 4 && !strncasecmp(p, ".git", 4)))
			return false;
		if (!slash)
			return true;
		p = slash + 1;
	}
}

/* *out = base (may be NULL: empty) with blob at rest, where full is the
 * whole path for messages */
static int put_path(git_oid *out, git_repository *repo, const git_tree *base, const char *rest,
		    const git_oid *blob, git_filemode_t mode, const char *full)
{
	const char *slash = strchr(rest, '/');
	char *name = slash ? xstrndup(rest, (size_t)(slash - rest)) : xstrdup(rest);
	git_treebuilder *bld = NULL;
	git_tree *sub = NULL;
	const git_tree_entry *e;
	int rc = -1;

	if (git_treebuilder_new(&bld, repo, base) < 0) {
		rc = kb_git__error(NULL, "could not build the tree for '%s'", full);
		goto out;
	}
	e = git_treebuilder_get(bld, name);
	if (!slash) {
		if (e && git_tree_entry_type(e) == GIT_OBJECT_TREE) {
			rc = error("'%s' is a directory in the parent commit", full);
			goto out;
		}
		if (git_treebuilder_insert(NULL, bld, name, blob, mode) < 0) {
			rc = kb_git__error(NULL, "could not add '%s' to the tree", full);
			goto out;
		}
	} else {
		git_oid sub_oid;

		if (e && git_tree_entry_type(e) != GIT_OBJECT_TREE) {
			rc = error("'%.*s' is not a directory in the parent commit",
				   (int)(slash - full), full);
			goto out;
		}
		if (e && git_tree_lookup(&sub, repo, git_tree_entry_id(e)) < 0) {
			rc = kb_git__error(NULL, "could not read the tree '%s'", name);
			goto out;
		}
		if ((rc = put_path(&sub_oid, repo, sub, slash + 1, blob, mode, full)))
			goto out;
		rc = -1;
		if (git_treebuilder_insert(NULL, bld, name, &sub_oid, GIT_FILEMODE_TREE) < 0) {
			rc = kb_git__error(NULL, "could not add directory of '%s' to the tree", full);
			goto out;
		}
	}
	if (git_treebuilder_write(out, bld) < 0) {
		rc = kb_git__error(NULL, "could not write the tree for '%s'", full);
		goto out;
	}
	rc = 0;
out:
	git_tree_free(sub);
	git_treebuilder_free(bld);
	free(name);
	return rc;
}

int kb_git_commit_files(struct kb_git_repo *r, const char *branch, const char *parent_sha,
			const struct kb_git_file *files, size_t nr_files, const char *message,
			const char *author_name, const char *author_email, char *sha_out)
{
	struct strbuf refname = STRBUF_INIT, msg = STRBUF_INIT;
	git_commit *parent = NULL;
	git_tree *tree = NULL;
	git_signature *sig = NULL;
	git_reference *ref = NULL;
	git_oid tree_oid, commit_oid;
	int rc;

	if ((rc = kb_git__branch_ref(&refname, branch)))
		goto out;
	rc = -1;
	if (!message || !*message || !author_name || !*author_name || !author_email ||
	    !*author_email) {
		rc = error("commit to '%s' needs a message, an author name and an email", branch);
		goto out;
	}
	rc = kb_git__commit(&parent, r, parent_sha, "parent commit");
	if (rc == KB_ENOTFOUND)
		log_error("parent commit '%s' is not in the git cache '%s'", parent_sha, r->path);
	if (rc)
		goto out;
	rc = -1;
	if (git_commit_tree(&tree, parent) < 0) {
		rc = kb_git__error(NULL, "could not read the tree of '%s'", parent_sha);
		goto out;
	}
	git_oid_cpy(&tree_oid, git_tree_id(tree));
	for (size_t i = 0; i < nr_files; i++) {
		const struct kb_git_file *f = &files[i];
		git_filemode_t mode;
		git_oid blob;
		git_tree *next = NULL;

		if (!f->path || !valid_path(f->path)) {
			rc = error("invalid path '%s' for a commit", f->path ? f->path : "(null)");
			goto out;
		}
		if (f->mode == 0 || f->mode == 0644)
			mode = GIT_FILEMODE_BLOB;
		else if (f->mode == 0755)
			mode = GIT_FILEMODE_BLOB_EXECUTABLE;
		else {
			rc = error("unsupported mode %o for '%s'", f->mode, f->path);
			goto out;
		}
		if (git_blob_create_from_buffer(&blob, r->repo, f->len ? f->data : "", f->len) < 0) {
			rc = kb_git__error(NULL, "could not write '%s'", f->path);
			goto out;
		}
		if ((rc = put_path(&tree_oid, r->repo, tree, f->path, &blob, mode, f->path)))
			goto out;
		rc = -1;
		if (git_tree_lookup(&next, r->repo, &tree_oid) < 0) {
			rc = kb_git__error(NULL, "could not read the new tree");
			goto out;
		}
		git_tree_free(tree);
		tree = next;
	}
	if (git_signature_now(&sig, author_name, author_email) < 0) {
		rc = kb_git__error(NULL, "invalid author '%s <%s>'", author_name, author_email);
		goto out;
	}
	strbuf_addstr(&msg, message);
	if (msg.buf[msg.len - 1] != '\n')
		strbuf_addch(&msg, '\n');
	if (git_commit_create(&commit_oid, r->repo, NULL, sig, sig, NULL, msg.buf, tree, 1,
			      (const git_commit *[]){ parent }) < 0) {
		rc = kb_git__error(NULL, "could not create the commit for '%s'", branch);
		goto out;
	}
	if (git_reference_create(&ref, r->repo, refname.buf, &commit_oid, 1, "kernelbot: commit") <
	    0) {
		rc = kb_git__error(NULL, "could not update branch '%s'", branch);
		goto out;
	}
	kb_git__oid_hex(sha_out, &commit_oid);
	log_info("committed %zu file(s) to '%s' as %.12s", nr_files, branch, sha_out);
	rc = 0;
out:
	git_reference_free(ref);
	git_signature_free(sig);
	git_tree_free(tree);
	git_commit_free(parent);
	strbuf_release(&refname);
	strbuf_release(&msg);
	return rc;
}
