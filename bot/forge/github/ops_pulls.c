#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/github/gh.h"

#include <inttypes.h>

/* Pull requests: read, files, find by head, open, update, review. */

void gh_pr_from_json(struct kb_forge_pr *out, const cJSON *o)
{
	const cJSON *head = gh_jobj(o, "head"), *base = gh_jobj(o, "base");
	const cJSON *labels = cJSON_GetObjectItemCaseSensitive(o, "labels");
	const cJSON *merged = cJSON_GetObjectItemCaseSensitive(o, "merged");
	const cJSON *merged_at = cJSON_GetObjectItemCaseSensitive(o, "merged_at");
	const cJSON *l;

	kb_forge_pr_release(out);
	out->number = gh_jint(o, "number", 0);
	out->title = gh_jdup(o, "title");
	out->body = gh_jdup(o, "body");
	out->state = gh_jdup(o, "state");
	out->merged = cJSON_IsTrue(merged) || cJSON_IsString(merged_at);
	out->draft = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "draft"));
	out->head_sha = gh_jdup(head, "sha");
	out->head_ref = gh_jdup(head, "ref");
	out->head_repo = gh_jdup(gh_jobj(head, "repo"), "full_name");
	out->base_ref = gh_jdup(base, "ref");
	out->author = gh_jdup(gh_jobj(o, "user"), "login");
	out->url = gh_jdup(o, "html_url");
	cJSON_ArrayForEach(l, labels) {
		const char *name = cJSON_IsString(l) ? l->valuestring : gh_jstr(l, "name");

		if (name)
			strvec_push(&out->labels, name);
	}
}

/* The reply as a pull request; -1 (logged) when it is not one. */
static int pr_from_reply(struct kb_forge_pr *out, const struct gh_req *req,
			 const struct gh_reply *rep)
{
	cJSON *json = gh_reply_json(req, rep, cJSON_Object);

	if (!json)
		return -1;
	gh_pr_from_json(out, json);
	cJSON_Delete(json);
	if (out->number <= 0)
		return error("github: no pull request number in reply to '%s'", req->path);
	return 0;
}

int gh_get_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo, int64_t number)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	int rc;

	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/pulls/%" PRId64, repo, number);
	req.path = path.buf;
	req.repo = repo;
	rc = gh_call(gh_of(f), &req, &rep);
	if (!rc)
		rc = pr_from_reply(out, &req, &rep);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

static int collect_file(struct gh *gh, const cJSON *item, void *payload)
{
	const char *name = gh_jstr(item, "filename");
	const char *status = gh_jstr(item, "status");

	if (!name)
		return error("github: a changed file without a name");
	if (!status || strcmp(status, "removed"))
		strvec_push(payload, name);
	return 0;
}

int gh_pr_files(struct kb_forge *f, struct strvec *paths, const char *repo, int64_t number)
{
	struct gh_req req = GH_REQ_INIT;
	struct strbuf path = STRBUF_INIT;
	int rc;

	strbuf_addf(&path, "/repos/%s/pulls/%" PRId64 "/files?per_page=100", repo, number);
	req.path = path.buf;
	req.repo = repo;
	rc = gh_paginate(gh_of(f), &req, collect_file, paths, NULL, NULL);
	strbuf_release(&path);
	return rc;
}

struct head_search {
	struct kb_forge_pr *out;
	bool found_open;
	int64_t best_closed;
};

static int pick_pr(struct gh *gh, const cJSON *item, void *payload)
{
	struct head_search *s = payload;
	const char *state = gh_jstr(item, "state");
	int64_t n = gh_jint(item, "number", 0);

	if (n <= 0)
		return 0;
	if (state && !strcmp(state, "open")) {
		gh_pr_from_json(s->out, item);
		s->found_open = true;
		return 1;
	}
	if (n > s->best_closed) {
		gh_pr_from_json(s->out, item);
		s->best_closed = n;
	}
	return 0;
}

int gh_find_pr_by_head(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
		       const char *branch)
{
	struct gh_req req = GH_REQ_INIT;
	struct strbuf path = STRBUF_INIT, head = STRBUF_INIT;
	struct head_search s = { out, false, 0 };
	const char *slash = strchr(repo, '/');
	int rc;

	strbuf_add(&head, repo, (size_t)(slash - repo));
	strbuf_addf(&head, ":%s", branch);
	strbuf_addf(&path, "/repos/%s/pulls?head=", repo);
	gh_add_escaped(&path, head.buf);
	strbuf_addstr(&path, "&state=all&per_page=100");
	req.path = path.buf;
	req.repo = repo;
	rc = gh_paginate(gh_of(f), &req, pick_pr, &s, NULL, NULL);
	if (rc > 0)
		rc = 0;
	if (!rc && !s.found_open && !s.best_closed)
		rc = KB_ENOTFOUND;
	strbuf_release(&path);
	strbuf_release(&head);
	return rc;
}

/* What a POST of a pull request would have made, for gh_req.find. */
struct lost_pr {
	struct kb_forge *f;
	struct kb_forge_pr *out;
	const char *repo, *head;
};

static int find_lost_pr(struct gh *gh, void *payload)
{
	struct lost_pr *l = payload;
	int rc = gh_find_pr_by_head(l->f, l->out, l->repo, l->head);

	if (rc == KB_ENOTFOUND)
		return 0;
	if (rc)
		return -1;
	if (l->out->state && !strcmp(l->out->state, "open"))
		return 1;
	kb_forge_pr_release(l->out); /* a closed one is older than this request */
	return 0;
}

int gh_open_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
	       const struct kb_forge_new_pr *spec)
{
	struct lost_pr lost = { f, out, repo, spec->head };
	struct gh *gh = gh_of(f);
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	cJSON *o = cJSON_CreateObject();
	char *payload;
	int rc;

	cJSON_AddStringToObject(o, "title", spec->title);
	cJSON_AddStringToObject(o, "head", spec->head);
	cJSON_AddStringToObject(o, "base", spec->base);
	cJSON_AddStringToObject(o, "body", spec->body ? spec->body : "");
	cJSON_AddBoolToObject(o, "draft", spec->draft);
	payload = gh_jprint(o);
	cJSON_Delete(o);
	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/pulls", repo);
	req.method = "POST";
	req.path = path.buf;
	req.repo = repo;
	req.body = payload;
	req.find = find_lost_pr;
	req.find_payload = &lost;
	rc = gh_send(gh, &req, &rep);
	if (rc == GH_FOUND) { /* made, its reply lost: out holds it */
		rc = 0;
		goto out;
	}
	if (rc)
		goto out;
	if (rep.status == 201 || rep.status == 200) {
		rc = pr_from_reply(out, &req, &rep);
		goto out;
	}
	if (rep.status == 422 && rep.body.len && strcasestr(rep.body.buf, "already exists")) {
		/* a pull request for this head exists: not an error to retry */
		rc = gh_find_pr_by_head(f, out, repo, spec->head);
		if (rc && rc != KB_ENOTFOUND)
			goto out;
		log_info("github: a pull request for '%s' already exists in '%s'", spec->head, repo);
		rc = KB_EEXISTS;
		goto out;
	}
	rc = gh_reply_error(&req, &rep);
out:
	free(payload);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

int gh_update_pr(struct kb_forge *f, const char *repo, int64_t number, const char *title,
		 const char *body)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	cJSON *o;
	char *payload;
	int rc;

	if (!title && !body)
		return 0;
	o = cJSON_CreateObject();
	if (title)
		cJSON_AddStringToObject(o, "title", title);
	if (body)
		cJSON_AddStringToObject(o, "body", body);
	payload = gh_jprint(o);
	cJSON_Delete(o);
	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/pulls/%" PRId64, repo, number);
	req.method = "PATCH";
	req.path = path.buf;
	req.repo = repo;
	req.body = payload;
	rc = gh_call(gh_of(f), &req, &rep);
	if (rc == KB_ENOTFOUND)
		rc = error("github: no pull request '%s#%" PRId64 "' to update", repo, number);
	free(payload);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

/* What a POST of a review (or line comment) would have made, for gh_req.find. */
struct lost_review {
	const char *repo, *list_path;
	const struct kb_forge_review *review;
	int64_t id;
};

static int find_lost_review(struct gh *gh, void *payload)
{
	struct lost_review *l = payload;

	return gh_find_made(gh, &l->id, l->repo, l->list_path, l->review->marker,
			    l->review->body);
}

int gh_post_review(struct kb_forge *f, int64_t *id_out, const char *repo, int64_t number,
		   const struct kb_forge_review *review)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT, list = STRBUF_INIT;
	struct lost_review lost = { repo, NULL, review, 0 };
	cJSON *o = cJSON_CreateObject(), *json = NULL;
	char *payload;
	int rc;

	cJSON_AddStringToObject(o, "body", review->body);
	cJSON_AddStringToObject(o, "commit_id", review->commit_sha);
	if (review->path) {
		cJSON_AddStringToObject(o, "path", review->path);
		cJSON_AddNumberToObject(o, "line", (double)review->line);
		cJSON_AddStringToObject(o, "side", "RIGHT");
		strbuf_addf(&path, "/repos/%s/pulls/%" PRId64 "/comments", repo, number);
	} else {
		cJSON_AddStringToObject(o, "event", "COMMENT");
		strbuf_addf(&path, "/repos/%s/pulls/%" PRId64 "/reviews", repo, number);
	}
	payload = gh_jprint(o);
	cJSON_Delete(o);
	gh_reply_init(&rep);
	strbuf_addf(&list, "%s?per_page=100", path.buf); /* the list beside the POST's path */
	lost.list_path = list.buf;
	req.method = "POST";
	req.path = path.buf;
	req.repo = repo;
	req.body = payload;
	req.find = find_lost_review;
	req.find_payload = &lost;
	rc = gh_call(gh_of(f), &req, &rep);
	if (rc == KB_ENOTFOUND)
		rc = error("github: no pull request '%s#%" PRId64 "' to review", repo, number);
	if (rc == GH_FOUND) {
		rc = 0;
		if (id_out)
			*id_out = lost.id;
	} else if (!rc && id_out) {
		if (!(json = gh_reply_json(&req, &rep, cJSON_Object)) ||
		    (*id_out = gh_jint(json, "id", 0)) <= 0)
			rc = json ? error("github: no id in reply to '%s'", path.buf) : -1;
	}
	cJSON_Delete(json);
	free(payload);
	gh_reply_release(&rep);
	strbuf_release(&path);
	strbuf_release(&list);
	return rc;
}
