#ifndef KB_GIT_PRIV_H
#define KB_GIT_PRIV_H
/* Shared by the files of bot/git/ only. */
#include "core/common.h"
#include "git/git.h"

#include <git2.h>

struct kb_git_repo {
	git_repository *repo;
	char *path;     /* the cache's git directory */
	char *url;      /* the remote it mirrors */
	char *username; /* the credentials kb_git_sync was given */
	char *token;    /* NULL: none */
};

/* What the credential callback may send, and what happened (payload of
 * every remote operation). */
struct kb_git_auth {
	const char *url; /* the operation's remote URL: the token goes to its host only */
	const char *username;
	const char *token;
	int sent;           /* times the token was handed to libgit2 */
	bool rejected;      /* asked again after sending it: the server refused it */
	bool withheld;      /* asked, but we had none or would not send it */
	char why[128];      /* when withheld: why (no secret in it) */

	/* push: */
	const char *push_ref;   /* refs/heads/<branch> being pushed */
	const git_oid *lease;   /* expected remote tip (zero oid: absent), NULL: none */
	bool lease_broken;
	char *push_status;      /* the remote's reason for refusing, malloc'd */
};

void kb_git__auth_init(struct kb_git_auth *auth, const char *url, const struct kb_git_repo *repo,
		       const struct kb_git_cred *cred);
void kb_git__auth_release(struct kb_git_auth *auth);
/* Remote callbacks with auth as payload: credentials, push status, lease. */
void kb_git__callbacks(git_remote_callbacks *cb, struct kb_git_auth *auth);

/*
 * Log "<what>: <libgit2's last error>" with URLs' userinfo redacted and
 * clear it. Returns KB_GIT_EAUTH when auth shows the credentials were
 * refused or missing, else -1.
 */
int kb_git__error(const struct kb_git_auth *auth, const char *fmt, ...) KB_PRINTF(2, 3);

/* Parse a full hex sha; -1 (logged, naming what) when it is not one. */
int kb_git__parse_oid(git_oid *out, const char *sha, const char *what);
void kb_git__oid_hex(char *out, const git_oid *oid); /* KB_GIT_SHA_SIZE bytes */

/* "refs/heads/<branch>" into out when branch is a valid branch name. */
int kb_git__branch_ref(struct strbuf *out, const char *branch);

/* Fetch refspecs from url (NULL: the repository's) into the cache, no
 * tags, no FETCH_HEAD; prune deleted remote branches when asked. */
int kb_git__fetch(struct kb_git_repo *r, const char *url, const char **refspecs, size_t n,
		  bool prune, const struct kb_git_cred *cred);

/* An in-memory remote for url. url.<base>.insteadOf from the user's git
 * config is not applied: it could send the token elsewhere (and libgit2
 * 1.5 leaks while matching it). */
int kb_git__remote(git_remote **out, struct kb_git_repo *r, const char *url);

/* Look up a commit by sha; KB_ENOTFOUND (quiet) when the cache lacks it. */
int kb_git__commit(git_commit **out, struct kb_git_repo *r, const char *sha, const char *what);

#endif
