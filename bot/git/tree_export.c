#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"
#include "git/git_priv.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

/* Reading operator files out of untrusted repositories. */

static int commit_tree(git_tree **out, struct kb_git_repo *r, const char *sha)
{
	git_commit *commit = NULL;
	int rc = kb_git__commit(&commit, r, sha, "commit");

	*out = NULL;
	if (rc == KB_ENOTFOUND)
		log_error("commit '%s' is not in the git cache '%s'", sha, r->path);
	if (rc)
		return rc;
	if (git_commit_tree(out, commit) < 0)
		rc = kb_git__error(NULL, "could not read the tree of commit '%s'", sha);
	git_commit_free(commit);
	return rc;
}

/* a tree entry name that stays inside its directory */
static bool safe_name(const char *name)
{
	return *name && strcmp(name, ".") && strcmp(name, "..") && strcasecmp(name, ".git") &&
	       !strchr(name, '/');
}

struct export {
	git_repository *repo;
	const char *dest;
	struct strbuf path;
	int rc;
};

static int export_entry(const char *root, const git_tree_entry *entry, void *payload)
{
	struct export *x = payload;
	const char *name = git_tree_entry_name(entry);
	git_filemode_t mode = git_tree_entry_filemode(entry);
	git_blob *blob = NULL;
	int fd = -1;

	strbuf_reset(&x->path);
	strbuf_addf(&x->path, "%s/%s%s", x->dest, root, name);
	if (!safe_name(name)) {
		x->rc = error("refusing tree entry '%s%s'", root, name);
		return -1;
	}
	if (mode == GIT_FILEMODE_TREE || mode == GIT_FILEMODE_COMMIT) {
		if (mkdir(x->path.buf, 0755)) {
			x->rc = error_errno("could not create directory '%s'", x->path.buf);
			return -1;
		}
		/* a submodule stays an empty directory */
		return mode == GIT_FILEMODE_COMMIT ? 1 : 0;
	}
	if (git_blob_lookup(&blob, x->repo, git_tree_entry_id(entry)) < 0) {
		x->rc = kb_git__error(NULL, "could not read blob '%s%s'", root, name);
		return -1;
	}
	/* O_EXCL | O_NOFOLLOW: every directory here was made by us just now
	 * and no link is ever written, so nothing can point outside dest */
	fd = open(x->path.buf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  mode == GIT_FILEMODE_BLOB_EXECUTABLE ? 0755 : 0644);
	if (fd < 0) {
		x->rc = error_errno("could not create '%s'", x->path.buf);
		goto out;
	}
	if (kb_write_all(fd, git_blob_rawcontent(blob), (size_t)git_blob_rawsize(blob))) {
		x->rc = error_errno("could not write '%s'", x->path.buf);
		goto out;
	}
	if (close(fd)) {
		fd = -1;
		x->rc = error_errno("could not write '%s'", x->path.buf);
		goto out;
	}
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	git_blob_free(blob);
	return x->rc ? -1 : 0;
}

static int prepare_dest(const char *dest)
{
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (!kb_is_dir(dest))
		return kb_mkdir_p(dest, 0755);
	d = opendir(dest);
	if (!d)
		return error_errno("could not open directory '%s'", dest);
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			rc = error("checkout directory '%s' is not empty", dest);
			break;
		}
	closedir(d);
	return rc;
}

int kb_git_checkout_tree(struct kb_git_repo *r, const char *sha, const char *dest_dir)
{
	struct export x = { .repo = r->repo, .dest = dest_dir, .path = STRBUF_INIT };
	git_tree *tree = NULL;
	int rc;

	if ((rc = commit_tree(&tree, r, sha)))
		goto out;
	if ((rc = prepare_dest(dest_dir)))
		goto out;
	if (git_tree_walk(tree, GIT_TREEWALK_PRE, export_entry, &x) < 0) {
		rc = x.rc ? x.rc : kb_git__error(NULL, "could not walk the tree of '%s'", sha);
		goto out;
	}
	git_error_clear();
	rc = 0;
out:
	strbuf_release(&x.path);
	git_tree_free(tree);
	return rc;
}

int kb_git_read_file(struct kb_git_repo *r, const char *sha, const char *path, struct strbuf *out,
		     size_t max)
{
	git_tree *tree = NULL;
	git_tree_entry *entry = NULL;
	git_blob *blob = NULL;
	int grc, rc;
	size_t size;

	if ((rc = commit_tree(&tree, r, sha)))
		goto out;
	grc = git_tree_entry_bypath(&entry, tree, path);
	if (grc == GIT_ENOTFOUND || (!grc && git_tree_entry_type(entry) != GIT_OBJECT_BLOB)) {
		git_error_clear();
		rc = KB_ENOTFOUND;
		goto out;
	}
	if (grc < 0) {
		rc = kb_git__error(NULL, "could not look up '%s' in commit '%s'", path, sha);
		goto out;
	}
	if (git_blob_lookup(&blob, r->repo, git_tree_entry_id(entry)) < 0) {
		rc = kb_git__error(NULL, "could not read '%s' in commit '%s'", path, sha);
		goto out;
	}
	size = (size_t)git_blob_rawsize(blob);
	if (size > max) {
		rc = KB_ETOOBIG;
		log_error("file '%s' in commit '%s' is larger than %zu bytes", path, sha, max);
		goto out;
	}
	rc = strbuf_add(out, git_blob_rawcontent(blob), size);
out:
	git_blob_free(blob);
	git_tree_entry_free(entry);
	git_tree_free(tree);
	return rc;
}

int kb_git_changed_files(struct kb_git_repo *r, const char *base_sha, const char *head_sha,
			 struct strvec *out)
{
	git_tree *base = NULL, *head = NULL;
	git_diff *diff = NULL;
	git_diff_find_options find;
	int rc;

	git_diff_find_options_init(&find, GIT_DIFF_FIND_OPTIONS_VERSION);
	if ((rc = commit_tree(&base, r, base_sha)) || (rc = commit_tree(&head, r, head_sha)))
		goto out;
	if (git_diff_tree_to_tree(&diff, r->repo, base, head, NULL) < 0) {
		rc = kb_git__error(NULL, "could not diff '%s' and '%s'", base_sha, head_sha);
		goto out;
	}
	find.flags = GIT_DIFF_FIND_RENAMES;
	if (git_diff_find_similar(diff, &find) < 0) {
		rc = kb_git__error(NULL, "could not find renames between '%s' and '%s'", base_sha,
				   head_sha);
		goto out;
	}
	for (size_t i = 0; i < git_diff_num_deltas(diff); i++) {
		const git_diff_delta *d = git_diff_get_delta(diff, i);

		switch (d->status) {
		case GIT_DELTA_ADDED:
		case GIT_DELTA_MODIFIED:
		case GIT_DELTA_RENAMED:
		case GIT_DELTA_COPIED:
		case GIT_DELTA_TYPECHANGE:
			strvec_push(out, d->new_file.path);
			break;
		default:
			break;
		}
	}
	rc = 0;
out:
	git_diff_free(diff);
	git_tree_free(base);
	git_tree_free(head);
	return rc;
}
