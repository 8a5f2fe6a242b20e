#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/github/gh.h"

#include <inttypes.h>

/* Commit statuses (any token) and check runs (App tokens). */

#define STATUS_DESCRIPTION_MAX 140
#define CHECK_TEXT_MAX 65535

static void add_cut(cJSON *o, const char *key, const char *s, size_t max)
{
	char *cut = xstrndup(s, kb_forge_utf8_cut(s, max));

	cJSON_AddStringToObject(o, key, cut);
	free(cut);
}

int gh_set_status(struct kb_forge *f, const char *repo, const struct kb_forge_status *st)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	cJSON *o = cJSON_CreateObject();
	char *payload;
	int rc;

	cJSON_AddStringToObject(o, "state", kb_forge_status_state_name(st->state));
	cJSON_AddStringToObject(o, "context", st->context);
	if (st->description)
		add_cut(o, "description", st->description, STATUS_DESCRIPTION_MAX);
	if (st->target_url)
		cJSON_AddStringToObject(o, "target_url", st->target_url);
	payload = gh_jprint(o);
	cJSON_Delete(o);
	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/statuses/", repo);
	gh_add_escaped(&path, st->sha);
	req.method = "POST";
	req.path = path.buf;
	req.repo = repo;
	req.body = payload;
	rc = gh_call(gh_of(f), &req, &rep);
	if (rc == KB_ENOTFOUND)
		rc = error("github: no commit '%s' in '%s' for a status", st->sha, repo);
	free(payload);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

/* What a POST of a check run would have made, for gh_req.find. */
struct lost_check {
	const char *repo;
	const struct kb_forge_check *check;
	int64_t id;
};

/*
 * The newest run of that name on that commit with the external id. One
 * page of 100 (GitHub keeps a name's runs per commit, a handful here).
 */
static int find_lost_check(struct gh *gh, void *payload)
{
	struct lost_check *l = payload;
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	const cJSON *runs, *cr;
	cJSON *json = NULL;
	int rc;

	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/commits/", l->repo);
	gh_add_escaped(&path, l->check->head_sha);
	strbuf_addstr(&path, "/check-runs?check_name=");
	gh_add_escaped(&path, l->check->name);
	strbuf_addstr(&path, "&filter=all&per_page=100");
	req.path = path.buf;
	req.repo = l->repo;
	rc = gh_call(gh, &req, &rep);
	if (rc == KB_ENOTFOUND) { /* no such commit: nothing was made on it */
		rc = 0;
		goto out;
	}
	if (rc || !(json = gh_reply_json(&req, &rep, cJSON_Object))) {
		rc = -1;
		goto out;
	}
	runs = cJSON_GetObjectItemCaseSensitive(json, "check_runs");
	cJSON_ArrayForEach(cr, runs) {
		const char *ext = gh_jstr(cr, "external_id");
		int64_t id = gh_jint(cr, "id", 0);

		if (ext && !strcmp(ext, l->check->external_id) && id > l->id)
			l->id = id;
	}
	rc = l->id > 0;
out:
	cJSON_Delete(json);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

int gh_check_run(struct kb_forge *f, int64_t *id_inout, const char *repo,
		 const struct kb_forge_check *check)
{
	struct gh *gh = gh_of(f);
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	struct lost_check lost = { repo, check, 0 };
	cJSON *o, *out, *json = NULL;
	char *payload;
	int rc;

	if (gh->checks_unsupported)
		return KB_ENOTSUPPORTED;
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", check->name);
	if (!*id_inout)
		cJSON_AddStringToObject(o, "head_sha", check->head_sha);
	cJSON_AddStringToObject(o, "status", kb_forge_check_status_name(check->status));
	if (check->conclusion != KB_CONCLUSION_NONE)
		cJSON_AddStringToObject(o, "conclusion",
					kb_forge_check_conclusion_name(check->conclusion));
	if (check->details_url)
		cJSON_AddStringToObject(o, "details_url", check->details_url);
	if (check->external_id)
		cJSON_AddStringToObject(o, "external_id", check->external_id);
	if (check->title || check->summary) {
		out = cJSON_AddObjectToObject(o, "output");
		add_cut(out, "title", check->title ? check->title : check->name, 255);
		add_cut(out, "summary", check->summary ? check->summary : "", CHECK_TEXT_MAX);
		if (check->text)
			add_cut(out, "text", check->text, CHECK_TEXT_MAX);
	}
	payload = gh_jprint(o);
	cJSON_Delete(o);
	gh_reply_init(&rep);
	if (*id_inout) {
		strbuf_addf(&path, "/repos/%s/check-runs/%" PRId64, repo, *id_inout);
		req.method = "PATCH";
	} else {
		strbuf_addf(&path, "/repos/%s/check-runs", repo);
		req.method = "POST";
		if (check->external_id) {
			req.find = find_lost_check;
			req.find_payload = &lost;
		}
	}
	req.path = path.buf;
	req.repo = repo;
	req.body = payload;
	rc = gh_send(gh, &req, &rep);
	if (rc == GH_FOUND) { /* made, its reply lost */
		*id_inout = lost.id;
		rc = 0;
		goto out;
	}
	if (rc)
		goto out;
	if (rep.status == 403) {
		/* "Resource not accessible by personal access token", or an App without checks:write */
		log_info("github: check runs refused on '%s' (%s); using commit statuses", repo,
			 rep.message ? rep.message : "403");
		gh->checks_unsupported = true;
		rc = KB_ENOTSUPPORTED;
		goto out;
	}
	if (rep.status < 200 || rep.status >= 300) {
		rc = rep.status == 404 && *id_inout ? KB_ENOTFOUND : gh_reply_error(&req, &rep);
		goto out;
	}
	if (!*id_inout) {
		int64_t id;

		if (!(json = gh_reply_json(&req, &rep, cJSON_Object))) {
			rc = -1;
			goto out;
		}
		id = gh_jint(json, "id", 0);
		if (id <= 0) {
			rc = error("github: no check run id in reply to '%s'", path.buf);
			goto out;
		}
		*id_inout = id;
	}
out:
	cJSON_Delete(json);
	free(payload);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}
