#ifndef KB_GIT_H
#define KB_GIT_H
/*
 * The bot's git side, on libgit2: a cached bare clone per repository, pull
 * request heads fetched into it, the bot's commits built from blobs and
 * trees (no work tree), and pushes of the bot's own branches over smart
 * HTTP(S) with a token.
 *
 *   struct kb_git_cred cred = { .token = token };
 *   struct kb_git_repo *repo;
 *   char sha[KB_GIT_SHA_SIZE];
 *
 *   if (kb_git_sync(&repo, cache_dir, url, &cred)) ...
 *   if (kb_git_fetch_pr(repo, 12, head_sha)) ...     // sha seen at labelling
 *   kb_git_checkout_tree(repo, head_sha, workdir);   // operators to read
 *   kb_git_commit_files(repo, "kernelbot/pr-12/op", head_sha, files, n,
 *                       msg, "kernelbot", "bot@example.com", sha);
 *   rc = kb_git_publish_branch(repo, NULL, "kernelbot/pr-12/op",
 *                              "bot@example.com", NULL);
 *   if (rc == KB_GIT_ENOTOURS) ... // a human committed: stop, say so
 *   kb_git_repo_free(repo);
 *
 * Remotes: https:// or http:// URLs, or a local path / file:// URL (the
 * local forge; no credentials). The token is sent as the password of user
 * "x-access-token" (GitHub's convention) through libgit2's credential
 * callback, once per operation, only to the scheme, host and port of the
 * URL the operation was started with, and over plain http only to
 * loopback (tests). It is registered with log_add_secret and never
 * appears in a message: URLs in our messages and in libgit2's have their
 * userinfo replaced by "***". The user's url.<base>.insteadOf settings
 * are not applied.
 *
 * All functions return 0, -1 with a logged message, or a code below (or
 * from core/util.h) that a caller branches on. One repository handle is
 * used by one thread at a time; two processes should not share a cache
 * directory.
 */
#include "core/common.h"
#include "core/util.h"

struct strbuf;
struct strvec;

/* hex object id and its NUL */
#define KB_GIT_SHA_SIZE 41

/* The remote branch has a commit not made by the bot: leave it alone.
 * (Below core/util.h's codes so the two never collide.) */
#define KB_GIT_ENOTOURS (-32)
/* The push was refused: the remote moved since it was checked, or it
 * rejected the update (non-fast-forward, hook, permissions). */
#define KB_GIT_EREJECTED (-33)
/* The server refused the credentials (HTTP 401/403), or asked for some
 * and none were given. */
#define KB_GIT_EAUTH (-34)

struct kb_git_cred {
	const char *username; /* NULL: "x-access-token" */
	const char *token;    /* NULL or "": none (anonymous) */
};

struct kb_git_repo;

/* One file of a commit: path relative to the tree root ("a/b/c.cu"),
 * bytes, and mode 0644 (or 0) or 0755. */
struct kb_git_file {
	const char *path;
	const void *data;
	size_t len;
	unsigned int mode;
};

/*
 * Open (or create) the cached bare clone of remote_url under cache_dir and
 * fetch its branches into refs/remotes/origin/, pruning deleted ones (no
 * tags). The handle keeps a copy of cred for later fetches. A cache that
 * cannot be opened is removed and made again. *out is NULL on failure.
 */
int kb_git_sync(struct kb_git_repo **out, const char *cache_dir, const char *remote_url,
		const struct kb_git_cred *cred);
void kb_git_repo_free(struct kb_git_repo *repo);

/* The cache's git directory (for the git CLI or diagnostics). */
const char *kb_git_repo_path(const struct kb_git_repo *repo);

/*
 * Fetch refs/pull/<pr_number>/head (GitHub) into
 * refs/kernelbot/fetched/pull/N/head
 * and check that expected_head_sha (full hex) is a commit in the cache:
 * the job runs the sha seen at labelling even when the branch moved since.
 * KB_ENOTFOUND when the ref or the commit is missing.
 */
int kb_git_fetch_pr(struct kb_git_repo *repo, int pr_number, const char *expected_head_sha);

/*
 * Fetch any remote ref ("refs/heads/x", "refs/pull/3/head", or a branch
 * name "x") into refs/kernelbot/fetched/<ref without refs/>. When
 * expected_sha is given it must be a commit afterwards (KB_ENOTFOUND if
 * not); sha_out (KB_GIT_SHA_SIZE, may be NULL) gets the ref's new tip.
 * KB_ENOTFOUND also when the remote has no such ref.
 */
int kb_git_fetch_ref(struct kb_git_repo *repo, const char *remote_ref, const char *expected_sha,
		     char *sha_out);

/* Resolve a revision ("refs/remotes/origin/main", a sha, ...) to a commit
 * sha. KB_ENOTFOUND when it names nothing. */
int kb_git_resolve(struct kb_git_repo *repo, const char *rev, char *sha_out);

/*
 * Write the tree of commit sha into dest_dir, which must not exist or be
 * empty (it is created). Regular files get 0644 or 0755. The repository is
 * untrusted: symbolic links are written as small regular files holding
 * their target (git's core.symlinks=false), submodules as empty
 * directories, and entry names that could leave dest_dir are refused.
 */
int kb_git_checkout_tree(struct kb_git_repo *repo, const char *sha, const char *dest_dir);

/* Append the blob at path in commit sha to out (at most max bytes, else
 * KB_ETOOBIG). KB_ENOTFOUND when there is no file there. */
int kb_git_read_file(struct kb_git_repo *repo, const char *sha, const char *path,
		     struct strbuf *out, size_t max);

/* Paths added, modified, renamed or type-changed from base_sha to
 * head_sha (deleted ones are left out), appended to out in tree order. */
int kb_git_changed_files(struct kb_git_repo *repo, const char *base_sha, const char *head_sha,
			 struct strvec *out);

/*
 * Make a commit whose tree is parent_sha's tree plus files (added or
 * replaced; nested directories made as needed), with author and committer
 * author_name <author_email> at the current time, and point the local
 * branch refs/heads/<branch> at it (moved if it exists). The bot's commit
 * always sits directly on parent_sha, so re-running a job replaces its
 * commit instead of stacking more. sha_out: KB_GIT_SHA_SIZE bytes.
 */
int kb_git_commit_files(struct kb_git_repo *repo, const char *branch, const char *parent_sha,
			const struct kb_git_file *files, size_t nr_files, const char *message,
			const char *author_name, const char *author_email, char *sha_out);

/*
 * ls-remote for one branch: sha_out gets the tip of refs/heads/<branch> on
 * remote_url (NULL: the repository's own URL). KB_ENOTFOUND when the
 * remote has no such branch. cred NULL: the handle's.
 */
int kb_git_remote_branch_head(struct kb_git_repo *repo, const char *remote_url, const char *branch,
			      const struct kb_git_cred *cred, char *sha_out);

/*
 * Is the remote branch, whose tip is remote_sha, the bot's own? Fetches it
 * from remote_url (NULL: the repository's) when remote_sha is not in the
 * cache. The bot's branch is its commit(s) on a base (the pull request head
 * it built on): from the tip down the first parents, every commit until
 * the base must have author AND committer email equal to bot_email
 * (case-insensitive), and the tip must be one of them. So a human's
 * commit, merge, amend or rebase on the branch makes it theirs, while a
 * pull request rebased since (an old base the local branch lacks) does
 * not. Commits the local branch refs/heads/<branch> already holds end the
 * walk (nothing there is lost by pushing). 0 when ours, KB_GIT_ENOTOURS
 * (logged, naming the foreign commit) when not.
 */
int kb_git_branch_is_ours(struct kb_git_repo *repo, const char *remote_url, const char *branch,
			  const char *bot_email, const char *remote_sha);

/*
 * Push local refs/heads/<branch> to the same name on remote_url (NULL: the
 * repository's own URL; cred NULL: the handle's). Without force only a
 * fast-forward (or a new branch) is pushed; force replaces whatever the
 * remote has, so callers use kb_git_publish_branch instead. Returns
 * KB_GIT_EREJECTED when the remote refused the update, KB_GIT_EAUTH when
 * the credentials were refused.
 */
int kb_git_push_branch(struct kb_git_repo *repo, const char *remote_url, const char *branch,
		       bool force, const struct kb_git_cred *cred);

/*
 * The safe push: create the remote branch, fast-forward it, or, when it
 * diverged, force-update it only if kb_git_branch_is_ours says so, and
 * only if its tip is still the one checked (force-with-lease). Nothing is
 * sent when the remote already has the local tip. KB_GIT_ENOTOURS when a
 * human committed to it (nothing pushed: the caller stops touching the
 * branch and says so), KB_GIT_EREJECTED when the remote moved meanwhile.
 */
int kb_git_publish_branch(struct kb_git_repo *repo, const char *remote_url, const char *branch,
			  const char *bot_email, const struct kb_git_cred *cred);

/* Copy url into out with any "user:password@" replaced by "***@". */
void kb_git_redact_url(struct strbuf *out, const char *url);

#endif
