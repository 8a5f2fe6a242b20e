#ifndef KB_FORGE_LOCAL_PRIV_H
#define KB_FORGE_LOCAL_PRIV_H
/*
 * Internals of the local forge:
 *   local.c   the records (forge.json), their lock, the operations
 *   lgit.c    what comes from git: branch heads, changed files
 *   render.c  the markdown view of a pull request
 */
#include "core/common.h"
#include "core/json.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "forge/local/local.h"

#include <cjson/cJSON.h>

struct lf {
	struct kb_forge base;  /* first: the forge handle */
	char *root;
	char *actor;
};

/* Hex sha of refs/heads/<branch>; KB_ENOTFOUND (nothing logged) when no such branch. */
int lf_git_head(const char *git_dir, const char *branch, char **sha_out);
/* Point refs/pull/<number>/head at sha (as GitHub does), when it is not there already. */
int lf_git_pull_ref(const char *git_dir, int64_t number, const char *sha);
/*
 * Paths that head adds or changes against its merge base with base
 * (deleted paths left out), in git's order.
 */
int lf_git_changed(const char *git_dir, const char *base, const char *head, struct strvec *paths);

/*
 * Write <dir>/pulls/<n>.md for the pull request record pr of document
 * doc; head_sha (may be NULL) selects the statuses and check runs shown.
 */
int lf_render_pr(const char *dir, const cJSON *doc, const cJSON *pr, const char *head_sha);

#endif
