#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/github/gh.h"

/* Repository-level calls: a user's role, the clone URL, who the bot is. */

int gh_permission(struct kb_forge *f, enum kb_forge_perm *out, const char *repo,
		  const char *login)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	cJSON *json = NULL;
	int rc;

	*out = KB_PERM_NONE;
	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/collaborators/", repo);
	gh_add_escaped(&path, login);
	strbuf_addstr(&path, "/permission");
	req.path = path.buf;
	req.repo = repo;
	rc = gh_call(gh_of(f), &req, &rep);
	if (rc == KB_ENOTFOUND) { /* no such user: no rights */
		rc = 0;
		goto out;
	}
	if (rc)
		goto out;
	if (!(json = gh_reply_json(&req, &rep, cJSON_Object))) {
		rc = -1;
		goto out;
	}
	/*
	 * role_name tells maintain and triage apart; a custom role falls back
	 * to permission, the base role it extends.
	 */
	if (kb_forge_perm_parse(gh_jstr(json, "role_name"), out) &&
	    kb_forge_perm_parse(gh_jstr(json, "permission"), out)) {
		*out = KB_PERM_NONE;
		log_warn("github: unknown permission for '%s' on '%s'", login, repo);
	}
out:
	cJSON_Delete(json);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

int gh_git_remote(struct kb_forge *f, struct kb_forge_remote *out, const char *repo)
{
	struct gh *gh = gh_of(f);
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	cJSON *json = NULL;
	const char *url, *token = gh->token;
	int rc;

	kb_forge_remote_release(out);
	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s", repo);
	req.path = path.buf;
	req.repo = repo;
	if ((rc = gh_call(gh, &req, &rep))) {
		if (rc == KB_ENOTFOUND)
			rc = error("github: no repository '%s'", repo);
		goto out;
	}
	rc = -1;
	if (!(json = gh_reply_json(&req, &rep, cJSON_Object)))
		goto out;
	url = gh_jstr(json, "clone_url");
	if (!url || (strncmp(url, "https://", 8) && strncmp(url, "http://", 7))) {
		error("github: no https clone URL for '%s'", repo);
		goto out;
	}
	if (gh->key && gh_installation_token(gh, repo, &token))
		goto out;
	out->url = xstrdup(url);
	if (token && *token) {
		out->username = xstrdup("x-access-token");
		out->password = xstrdup(token);
	}
	rc = 0;
out:
	cJSON_Delete(json);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

/*
 * An App acts as "<slug>[bot]" (GET /app); a personal token as its user
 * (GET /user). The Actions GITHUB_TOKEN may do neither: then the login is
 * unknown, and callers match by marker alone.
 */
int gh_whoami(struct kb_forge *f, char **login_out)
{
	struct gh *gh = gh_of(f);
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	cJSON *json = NULL;
	int rc;

	*login_out = NULL;
	if (gh->login_looked_up) {
		*login_out = gh->login ? xstrdup(gh->login) : NULL;
		return 0;
	}
	gh_reply_init(&rep);
	req.path = gh->key ? "/app" : "/user";
	req.auth = gh->key ? GH_AUTH_APP_JWT : GH_AUTH_REPO;
	if ((rc = gh_send(gh, &req, &rep)))
		goto out;
	gh->login_looked_up = true;
	if (rep.status == 200 || rep.status == 304) {
		const char *name;

		if (!(json = gh_reply_json(&req, &rep, cJSON_Object))) {
			rc = -1;
			goto out;
		}
		name = gh_jstr(json, gh->key ? "slug" : "login");
		if (name && gh->key) {
			struct strbuf sb = STRBUF_INIT;

			strbuf_addf(&sb, "%s[bot]", name);
			gh->login = strbuf_detach(&sb, NULL);
		} else if (name) {
			gh->login = xstrdup(name);
		}
	} else {
		log_info("github: cannot tell the bot's login (%s: %ld)", req.path, rep.status);
	}
	*login_out = gh->login ? xstrdup(gh->login) : NULL;
out:
	cJSON_Delete(json);
	gh_reply_release(&rep);
	return rc;
}
