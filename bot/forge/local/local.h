#ifndef KB_FORGE_LOCAL_H
#define KB_FORGE_LOCAL_H
/*
 * The local forge: the whole bot runs without GitHub (like Renovate's
 * local platform). A "repository" is a git repository on disk; pull
 * request heads and bases are its branches (head shas and changed files
 * come from git itself, through libgit2, and refs/pull/<n>/head is kept at
 * the head branch's tip as on GitHub, so the git layer fetches a pull
 * request the same way from both forges); everything else -- pull
 * requests, labels and their events, comments, reviews, statuses, check
 * runs, permissions -- is a record.
 *
 * Layout under root (kb_forge_open uses <state_dir>/local-forge):
 *
 *   <owner>/<name>/forge.json        every record of the repository
 *   <owner>/<name>/forge.lock        flock(2) taken by each mutation
 *   <owner>/<name>/pulls/<n>.md      each pull request rendered as markdown
 *
 * Decision: one JSON document per repository, and each mutation is one
 * atomic file write (lock, read, change, write a temp file, fsync,
 * rename, unlock). So a mutation is all or nothing even when the process
 * is killed halfway, readers never see half a record and need no lock,
 * and several processes (the daemon, a demo script, a test) can act on
 * the same repository. The markdown views are derived: re-rendered after
 * each mutation, never read back. SQLite would add nothing here: the
 * records are small, and the bot's own state must not live in the same
 * store as the "remote" it talks to, or a restart test could not tell
 * what the bot remembered from what the forge holds.
 *
 * Who acts: each handle has an actor login (default "kernelbot", the
 * bot). Pull requests opened, labels added (the "labeled" event's actor),
 * comments and reviews are attributed to it, and find_comment looks only
 * at the actor's own comments. A test or the demo opens a second handle
 * with kb_forge_local_set_actor(f, "alice") to play the maintainer.
 *
 * Permissions: the repository owner (the part before '/') is admin;
 * anyone else has what kb_forge_local_set_permission gave, or none.
 */
#include "forge/forge.h"

/* Open a local forge rooted at root (created when missing). */
int kb_forge_local_new(struct kb_forge **out, const char *root);

/*
 * Register repo ("owner/name") as the git repository at git_dir (a path;
 * stored absolute). Registering again updates git_dir and keeps records.
 */
int kb_forge_local_add_repo(struct kb_forge *f, const char *repo, const char *git_dir);

/* Act as login from now on (see above). f must be a local forge. */
int kb_forge_local_set_actor(struct kb_forge *f, const char *login);

/* Give login a role on repo. */
int kb_forge_local_set_permission(struct kb_forge *f, const char *repo, const char *login,
				  enum kb_forge_perm perm);

/* Close ("closed"), merge ("merged") or reopen ("open") a pull request. */
int kb_forge_local_set_pr_state(struct kb_forge *f, const char *repo, int64_t number,
				const char *state);

/* Path of the markdown file that shows pull request number. */
int kb_forge_local_pr_path(struct kb_forge *f, struct strbuf *out, const char *repo,
			   int64_t number);

/* True when f is a local forge. */
bool kb_forge_is_local(const struct kb_forge *f);

#endif
