#include "core/common.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "git/git_priv.h"

#include <ctype.h>
#include <pthread.h>

/* the cache mirrors the remote's branches here; the bot's own branches
 * live in refs/heads, fetched pull request heads in refs/kernelbot */
#define SYNC_REFSPEC "+refs/heads/*:refs/remotes/origin/*"

int kb_git__parse_oid(git_oid *out, const char *sha, const char *what)
{
	if (!sha || strlen(sha) != GIT_OID_HEXSZ || git_oid_fromstr(out, sha) < 0) {
		git_error_clear();
		return error("%s '%s' is not a full commit sha", what, sha ? sha : "(null)");
	}
	return 0;
}

void kb_git__oid_hex(char *out, const git_oid *oid)
{
	git_oid_tostr(out, KB_GIT_SHA_SIZE, oid);
}

int kb_git__branch_ref(struct strbuf *out, const char *branch)
{
	int valid = 0;

	strbuf_reset(out);
	if (!branch || !*branch || branch[0] == '-')
		return error("invalid branch name '%s'", branch ? branch : "(null)");
	strbuf_addf(out, "refs/heads/%s", branch);
	if (git_reference_name_is_valid(&valid, out->buf) < 0 || !valid) {
		git_error_clear();
		return error("invalid branch name '%s'", branch);
	}
	return 0;
}

int kb_git__commit(git_commit **out, struct kb_git_repo *r, const char *sha, const char *what)
{
	git_oid oid;
	int grc;

	*out = NULL;
	if (kb_git__parse_oid(&oid, sha, what))
		return -1;
	grc = git_commit_lookup(out, r->repo, &oid);
	if (grc == GIT_ENOTFOUND) {
		git_error_clear();
		return KB_ENOTFOUND;
	}
	if (grc < 0)
		return kb_git__error(NULL, "could not read %s '%s'", what, sha);
	return 0;
}

int kb_git__remote(git_remote **out, struct kb_git_repo *r, const char *url)
{
	git_remote_create_options opts;

	git_remote_create_options_init(&opts, GIT_REMOTE_CREATE_OPTIONS_VERSION);
	opts.repository = r->repo;
	opts.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF | GIT_REMOTE_CREATE_SKIP_DEFAULT_FETCHSPEC;
	*out = NULL;
	if (git_remote_create_with_opts(out, url, &opts) < 0)
		return kb_git__error(NULL, "invalid remote '%s'", url);
	return 0;
}

int kb_git__fetch(struct kb_git_repo *r, const char *url, const char **refspecs, size_t n,
		  bool prune, const struct kb_git_cred *cred)
{
	git_fetch_options opts;
	git_strarray specs = { (char **)refspecs, n };
	struct kb_git_auth auth;
	git_remote *remote = NULL;
	int rc = -1;

	if (!url)
		url = r->url;
	kb_git__auth_init(&auth, url, r, cred);
	git_fetch_options_init(&opts, GIT_FETCH_OPTIONS_VERSION);
	kb_git__callbacks(&opts.callbacks, &auth);
	opts.prune = prune ? GIT_FETCH_PRUNE : GIT_FETCH_NO_PRUNE;
	opts.update_fetchhead = 0;
	opts.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_NONE;
	opts.follow_redirects = GIT_REMOTE_REDIRECT_INITIAL;
	if (kb_git__remote(&remote, r, url))
		goto out;
	if (git_remote_fetch(remote, &specs, &opts, "kernelbot: fetch") < 0) {
		rc = kb_git__error(&auth, "could not fetch from '%s'", url);
		goto out;
	}
	rc = 0;
out:
	git_remote_free(remote);
	kb_git__auth_release(&auth);
	return rc;
}

/*
 * libgit2 is set up once per process and never shut down: 1.5 frees its
 * user agent at shutdown without forgetting it, so an init, shutdown,
 * init cycle that sets it again frees it twice.
 */
static pthread_once_t libgit2_once = PTHREAD_ONCE_INIT;
static int libgit2_rc;

static void libgit2_setup(void)
{
	libgit2_rc = git_libgit2_init();
	if (libgit2_rc >= 0)
		libgit2_rc = git_libgit2_opts(GIT_OPT_SET_USER_AGENT, "kernelbot/" KB_VERSION);
}

/* <name>-<hash>.git: readable, and distinct for distinct URLs */
static void cache_name(struct strbuf *out, const char *url)
{
	struct strbuf clean = STRBUF_INIT, name = STRBUF_INIT;
	const char *p;
	uint32_t h;

	kb_git_redact_url(&clean, url);
	h = kb_fnv1a32(clean.buf, clean.len);
	p = strstr(clean.buf, "://");
	p = p ? p + 3 : clean.buf;
	if (!strncmp(p, "***@", 4))
		p += 4;
	for (; *p && name.len < 80; p++) {
		char c = isalnum((unsigned char)*p) || *p == '.' || *p == '-' ? *p : '_';

		if (c == '_' && name.len && name.buf[name.len - 1] == '_')
			continue;
		if (c == '.' && (!name.len || name.buf[name.len - 1] == '_'))
			continue; /* no leading dots, no "_.." */
		strbuf_addch(&name, c);
	}
	if (name.len > 4 && !strcmp(name.buf + name.len - 4, ".git"))
		strbuf_setlen(&name, name.len - 4);
	while (name.len && strchr("_.", name.buf[name.len - 1]))
		strbuf_setlen(&name, name.len - 1);
	strbuf_addf(out, "%s-%08x.git", name.len ? name.buf : "repo", (unsigned int)h);
	strbuf_release(&clean);
	strbuf_release(&name);
}

static int open_cache(git_repository **out, const char *path)
{
	if (kb_is_dir(path)) {
		if (git_repository_open_bare(out, path) >= 0)
			return 0;
		kb_git__error(NULL, "could not open git cache '%s', making it again", path);
		if (kb_rm_rf(path))
			return -1;
	}
	if (git_repository_init(out, path, 1) < 0)
		return kb_git__error(NULL, "could not create git cache '%s'", path);
	return 0;
}

int kb_git_sync(struct kb_git_repo **out, const char *cache_dir, const char *remote_url,
		const struct kb_git_cred *cred)
{
	struct kb_git_repo *r = NULL;
	struct strbuf path = STRBUF_INIT;
	const char *spec = SYNC_REFSPEC;
	int rc = -1;

	*out = NULL;
	if (!remote_url || !*remote_url)
		return error("no remote url given to sync");
	pthread_once(&libgit2_once, libgit2_setup);
	if (libgit2_rc < 0)
		return kb_git__error(NULL, "could not initialise libgit2");
	r = xcalloc(1, sizeof(*r));
	r->url = xstrdup(remote_url);
	r->username = xstrdup(cred && cred->username && *cred->username ? cred->username
									 : "x-access-token");
	if (cred && cred->token && *cred->token) {
		log_add_secret(cred->token);
		r->token = xstrdup(cred->token);
	}
	if (kb_mkdir_p(cache_dir, 0700))
		goto out;
	strbuf_addf(&path, "%s/", cache_dir);
	cache_name(&path, remote_url);
	r->path = strbuf_detach(&path, NULL);
	if (open_cache(&r->repo, r->path))
		goto out;
	rc = kb_git__fetch(r, NULL, &spec, 1, true, NULL);
	if (rc)
		goto out;
	*out = r;
	r = NULL;
out:
	kb_git_repo_free(r);
	strbuf_release(&path);
	return rc;
}

void kb_git_repo_free(struct kb_git_repo *r)
{
	if (!r)
		return;
	git_repository_free(r->repo);
	free(r->path);
	free(r->url);
	free(r->username);
	if (r->token) {
		/* not left in freed heap memory */
		volatile char *p = r->token;

		while (*p)
			*p++ = 0;
		free(r->token);
	}
	free(r);
}

const char *kb_git_repo_path(const struct kb_git_repo *r)
{
	return r->path;
}

int kb_git_resolve(struct kb_git_repo *r, const char *rev, char *sha_out)
{
	git_object *obj = NULL;
	int grc = git_revparse_single(&obj, r->repo, rev);
	git_object *commit = NULL;

	if (grc == GIT_ENOTFOUND) {
		git_error_clear();
		return KB_ENOTFOUND;
	}
	if (grc < 0)
		return kb_git__error(NULL, "could not resolve '%s'", rev);
	grc = git_object_peel(&commit, obj, GIT_OBJECT_COMMIT);
	git_object_free(obj);
	if (grc < 0)
		return kb_git__error(NULL, "'%s' does not name a commit", rev);
	kb_git__oid_hex(sha_out, git_object_id(commit));
	git_object_free(commit);
	return 0;
}

int kb_git_fetch_ref(struct kb_git_repo *r, const char *remote_ref, const char *expected_sha,
		     char *sha_out)
{
	struct strbuf src = STRBUF_INIT, dst = STRBUF_INIT, spec = STRBUF_INIT;
	git_reference *ref = NULL;
	git_commit *commit = NULL;
	const char *specp;
	git_oid expect;
	int valid = 0, grc, rc = -1;

	if (!remote_ref || !*remote_ref)
		return error("no ref given to fetch");
	if (expected_sha && kb_git__parse_oid(&expect, expected_sha, "expected head"))
		return -1;
	if (!strncmp(remote_ref, "refs/", 5))
		strbuf_addstr(&src, remote_ref);
	else
		strbuf_addf(&src, "refs/heads/%s", remote_ref);
	if (git_reference_name_is_valid(&valid, src.buf) < 0 || !valid) {
		git_error_clear();
		rc = error("invalid ref name '%s'", remote_ref);
		goto out;
	}
	strbuf_addf(&dst, "refs/kernelbot/fetched/%s", src.buf + 5);
	strbuf_addf(&spec, "+%s:%s", src.buf, dst.buf);

	/* a ref the remote lacks updates nothing: drop the old copy first */
	grc = git_reference_remove(r->repo, dst.buf);
	if (grc < 0 && grc != GIT_ENOTFOUND) {
		rc = kb_git__error(NULL, "could not remove '%s'", dst.buf);
		goto out;
	}
	git_error_clear();
	specp = spec.buf;
	if ((rc = kb_git__fetch(r, NULL, &specp, 1, false, NULL)))
		goto out;
	grc = git_reference_lookup(&ref, r->repo, dst.buf);
	if (grc == GIT_ENOTFOUND) {
		struct strbuf shown = STRBUF_INIT;

		git_error_clear();
		kb_git_redact_url(&shown, r->url);
		log_error("remote '%s' has no ref '%s'", shown.buf, src.buf);
		strbuf_release(&shown);
		rc = KB_ENOTFOUND;
		goto out;
	}
	if (grc < 0 || !git_reference_target(ref)) {
		rc = kb_git__error(NULL, "could not read '%s'", dst.buf);
		goto out;
	}
	if (sha_out)
		kb_git__oid_hex(sha_out, git_reference_target(ref));
	if (expected_sha) {
		rc = kb_git__commit(&commit, r, expected_sha, "commit");
		if (rc == KB_ENOTFOUND)
			log_error("commit '%s' not found after fetching '%s'", expected_sha, src.buf);
		if (rc)
			goto out;
	}
	rc = 0;
out:
	git_commit_free(commit);
	git_reference_free(ref);
	strbuf_release(&src);
	strbuf_release(&dst);
	strbuf_release(&spec);
	return rc;
}

int kb_git_fetch_pr(struct kb_git_repo *r, int pr_number, const char *expected_head_sha)
{
	char ref[64];

	if (pr_number <= 0)
		return error("invalid pull request number %d", pr_number);
	xsnprintf(ref, sizeof(ref), "refs/pull/%d/head", pr_number);
	return kb_git_fetch_ref(r, ref, expected_head_sha, NULL);
}
