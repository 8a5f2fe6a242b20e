#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/github/gh.h"
#include "forge/github/jwt.h"

#include <inttypes.h>
#include <time.h>

/*
 * Credentials per request. A token is used as is. A GitHub App signs a
 * fresh JWT for each /app call (cheap, and nothing long-lived to leak) and
 * trades it for an installation token, cached per installation until five
 * minutes before it expires. New installation tokens are registered with
 * log_add_secret; JWTs are not (they live ten minutes and no code path
 * prints request headers).
 */

bool gh_token_needs_renewal(int64_t expires_at, int64_t now_s)
{
	return now_s + GH_TOKEN_RENEW_S >= expires_at;
}

int gh_parse_time(const char *iso, int64_t *out)
{
	struct tm tm;
	int n = 0;
	const char *rest;
	time_t t;

	if (!iso)
		return -1;
	memset(&tm, 0, sizeof(tm));
	if (sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 || n != 19)
		return -1;
	rest = iso + n;
	if (*rest == '.') /* fractional seconds */
		for (rest++; *rest >= '0' && *rest <= '9'; rest++)
			;
	if (strcmp(rest, "Z") && strcmp(rest, "+00:00"))
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*out = (int64_t)t;
	return 0;
}

static struct gh_inst_token *find_token(struct gh *gh, int64_t id)
{
	for (size_t i = 0; i < gh->nr_tokens; i++)
		if (gh->tokens[i].installation_id == id)
			return &gh->tokens[i];
	return NULL;
}

static int64_t cached_installation(struct gh *gh, const char *repo)
{
	if (gh->installation_id)
		return gh->installation_id;
	for (size_t i = 0; repo && i < gh->nr_insts; i++)
		if (!strcasecmp(gh->insts[i].repo, repo))
			return gh->insts[i].installation_id;
	return 0;
}

static int installation_for(struct gh *gh, const char *repo, int64_t *id_out)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	cJSON *json = NULL;
	int64_t id;
	int rc;

	*id_out = cached_installation(gh, repo);
	if (*id_out)
		return 0;
	if (!repo)
		return error("github: no installation for this request (set installation_id)");
	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/installation", repo);
	req.path = path.buf;
	req.auth = GH_AUTH_APP_JWT;
	rc = gh_call(gh, &req, &rep);
	if (rc == KB_ENOTFOUND) {
		rc = error("github: the app is not installed on '%s'", repo);
		goto out;
	}
	if (rc)
		goto out;
	rc = -1;
	if (!(json = gh_reply_json(&req, &rep, cJSON_Object)))
		goto out;
	id = gh_jint(json, "id", 0);
	if (id <= 0) {
		error("github: no installation id in reply to '%s'", path.buf);
		goto out;
	}
	if (gh->nr_insts == gh->alloc_insts) {
		gh->alloc_insts = gh->alloc_insts ? gh->alloc_insts * 2 : 8;
		gh->insts = xrealloc(gh->insts, gh->alloc_insts * sizeof(*gh->insts));
	}
	gh->insts[gh->nr_insts].repo = xstrdup(repo);
	gh->insts[gh->nr_insts++].installation_id = id;
	*id_out = id;
	rc = 0;
out:
	cJSON_Delete(json);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

int gh_installation_token(struct gh *gh, const char *repo, const char **token_out)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	struct gh_inst_token *t;
	cJSON *json = NULL;
	const char *tok;
	int64_t id, expires;
	int rc;

	*token_out = NULL;
	if ((rc = installation_for(gh, repo, &id)))
		return rc;
	t = find_token(gh, id);
	if (t && !gh_token_needs_renewal(t->expires_at, kb_wall_s())) {
		*token_out = t->token;
		return 0;
	}
	gh_reply_init(&rep);
	strbuf_addf(&path, "/app/installations/%" PRId64 "/access_tokens", id);
	req.method = "POST";
	req.path = path.buf;
	req.auth = GH_AUTH_APP_JWT;
	if ((rc = gh_call(gh, &req, &rep)))
		goto out;
	rc = -1;
	if (!(json = gh_reply_json(&req, &rep, cJSON_Object)))
		goto out;
	tok = gh_jstr(json, "token");
	if (!tok || !*tok || gh_parse_time(gh_jstr(json, "expires_at"), &expires)) {
		error("github: no token or expiry in reply to '%s'", path.buf);
		goto out;
	}
	log_add_secret(tok);
	t = find_token(gh, id);
	if (!t) {
		if (gh->nr_tokens == gh->alloc_tokens) {
			gh->alloc_tokens = gh->alloc_tokens ? gh->alloc_tokens * 2 : 4;
			gh->tokens = xrealloc(gh->tokens, gh->alloc_tokens * sizeof(*gh->tokens));
		}
		t = &gh->tokens[gh->nr_tokens++];
		t->installation_id = id;
		t->token = NULL;
	}
	if (t->token) {
		explicit_bzero(t->token, strlen(t->token));
		free(t->token);
	}
	t->token = xstrdup(tok);
	t->expires_at = expires;
	*token_out = t->token;
	log_debug("github: new installation token for installation %" PRId64 ", expires %s",
		  id, gh_jstr(json, "expires_at"));
	rc = 0;
out:
	if (json) {
		/* the reply held the token in clear: wipe it before freeing */
		cJSON *tv = cJSON_GetObjectItemCaseSensitive(json, "token");

		if (cJSON_IsString(tv) && tv->valuestring)
			explicit_bzero(tv->valuestring, strlen(tv->valuestring));
		cJSON_Delete(json);
	}
	explicit_bzero(rep.body.buf, rep.body.len);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

void gh_auth_forget(struct gh *gh, const char *repo)
{
	int64_t id = cached_installation(gh, repo);
	struct gh_inst_token *t = id ? find_token(gh, id) : NULL;

	if (t)
		t->expires_at = 0; /* renewed on next use */
}

void gh_tokens_release(struct gh *gh)
{
	for (size_t i = 0; i < gh->nr_tokens; i++) {
		explicit_bzero(gh->tokens[i].token, strlen(gh->tokens[i].token));
		free(gh->tokens[i].token);
	}
	FREE_AND_NULL(gh->tokens);
	gh->nr_tokens = gh->alloc_tokens = 0;
	for (size_t i = 0; i < gh->nr_insts; i++)
		free(gh->insts[i].repo);
	FREE_AND_NULL(gh->insts);
	gh->nr_insts = gh->alloc_insts = 0;
}

int gh_auth_header(struct gh *gh, const struct gh_req *req, struct strbuf *line)
{
	strbuf_reset(line);
	switch (req->auth) {
	case GH_AUTH_NONE:
		return 0;
	case GH_AUTH_APP_JWT: {
		struct strbuf jwt = STRBUF_INIT, iss = STRBUF_INIT;
		int rc;

		if (!gh->key)
			return error("github: '%s' needs a GitHub App (app_id and private_key_file)",
				     req->path);
		strbuf_addf(&iss, "%" PRId64, gh->app_id);
		rc = gh_jwt_sign(&jwt, gh->key, iss.buf, kb_wall_s());
		if (!rc)
			strbuf_addf(line, "Authorization: Bearer %s", jwt.buf);
		explicit_bzero(jwt.buf, jwt.len);
		strbuf_release(&jwt);
		strbuf_release(&iss);
		return rc;
	}
	case GH_AUTH_REPO:
	default:
		if (gh->key) {
			const char *tok;
			int rc = gh_installation_token(gh, req->repo, &tok);

			if (rc)
				return rc;
			strbuf_addf(line, "Authorization: Bearer %s", tok);
		} else if (gh->token && *gh->token) {
			strbuf_addf(line, "Authorization: Bearer %s", gh->token);
		}
		return 0;
	}
}
