#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/github/gh.h"

#include <inttypes.h>
#include <time.h>

/* Issues: the labelled-PR poll, label events, comments, labels. */

struct numbers {
	int64_t *v;
	size_t nr, alloc;
};

static void numbers_push(struct numbers *n, int64_t v)
{
	if (n->nr == n->alloc) {
		n->alloc = n->alloc ? n->alloc * 2 : 16;
		n->v = xrealloc(n->v, n->alloc * sizeof(*n->v));
	}
	n->v[n->nr++] = v;
}

static int collect_pr_number(struct gh *gh, const cJSON *item, void *payload)
{
	int64_t n = gh_jint(item, "number", 0);

	/* issues that are pull requests carry a pull_request key */
	if (n > 0 && cJSON_GetObjectItemCaseSensitive(item, "pull_request"))
		numbers_push(payload, n);
	return 0;
}

int gh_list_labelled_prs(struct kb_forge *f, struct kb_forge_pr_list *out, bool *not_modified,
			 struct strbuf *etag, const char *repo, const char *label)
{
	struct gh *gh = gh_of(f);
	struct gh_req req = GH_REQ_INIT;
	struct strbuf path = STRBUF_INIT, new_etag = STRBUF_INIT;
	struct numbers nums = { NULL, 0, 0 };
	struct kb_forge_pr_list list = KB_FORGE_PR_LIST_INIT;
	int rc;

	/* sorted by update: a label change moves the issue to the first page */
	strbuf_addf(&path, "/repos/%s/issues?labels=", repo);
	gh_add_escaped(&path, label);
	strbuf_addstr(&path, "&state=open&sort=updated&direction=desc&per_page=100");
	req.path = path.buf;
	req.repo = repo;
	req.if_none_match = etag->len ? etag->buf : NULL;
	rc = gh_paginate(gh, &req, collect_pr_number, &nums, not_modified, &new_etag);
	if (rc || *not_modified)
		goto out;

	for (size_t i = 0; i < nums.nr; i++) {
		struct kb_forge_pr pr = KB_FORGE_PR_INIT;

		rc = gh_get_pr(f, &pr, repo, nums.v[i]);
		if (rc == KB_ENOTFOUND) { /* gone between the two calls */
			kb_forge_pr_release(&pr);
			continue;
		}
		if (rc || !pr.head_sha) {
			kb_forge_pr_release(&pr);
			rc = rc ? rc : error("github: pull request '%s#%" PRId64 "' has no head sha",
					     repo, nums.v[i]);
			goto out;
		}
		if (list.nr == list.alloc) {
			list.alloc = list.alloc ? list.alloc * 2 : 8;
			list.v = xrealloc(list.v, list.alloc * sizeof(*list.v));
		}
		list.v[list.nr].number = pr.number;
		list.v[list.nr].head_sha = pr.head_sha;
		pr.head_sha = NULL;
		list.nr++;
		kb_forge_pr_release(&pr);
	}
	kb_forge_pr_list_release(out);
	*out = list;
	list.v = NULL;
	list.nr = list.alloc = 0;
	strbuf_reset(etag);
	strbuf_add(etag, new_etag.buf, new_etag.len);
out:
	kb_forge_pr_list_release(&list);
	free(nums.v);
	strbuf_release(&path);
	strbuf_release(&new_etag);
	return rc;
}

struct actor_search {
	const char *label;
	char *login;
	int64_t at;
};

static int find_labeled(struct gh *gh, const cJSON *item, void *payload)
{
	struct actor_search *s = payload;
	const char *ev = gh_jstr(item, "event");
	const char *name = gh_jstr(gh_jobj(item, "label"), "name");
	const char *login = gh_jstr(gh_jobj(item, "actor"), "login");

	/* events come oldest first: the last match is the latest labelling */
	if (ev && !strcmp(ev, "labeled") && name && !strcmp(name, s->label) && login) {
		free(s->login);
		s->login = xstrdup(login);
		if (gh_parse_time(gh_jstr(item, "created_at"), &s->at))
			s->at = 0;
	}
	return 0;
}

int gh_label_actor(struct kb_forge *f, char **login_out, int64_t *at_out, const char *repo,
		   int64_t number, const char *label)
{
	struct gh_req req = GH_REQ_INIT;
	struct strbuf path = STRBUF_INIT;
	struct actor_search s = { label, NULL, 0 };
	int rc;

	strbuf_addf(&path, "/repos/%s/issues/%" PRId64 "/events?per_page=100", repo, number);
	req.path = path.buf;
	req.repo = repo;
	rc = gh_paginate(gh_of(f), &req, find_labeled, &s, NULL, NULL);
	if (!rc && !s.login)
		rc = KB_ENOTFOUND;
	if (!rc) {
		*login_out = s.login;
		s.login = NULL;
		if (at_out)
			*at_out = s.at;
	}
	free(s.login);
	strbuf_release(&path);
	return rc;
}

/* --- comments --- */

/* ".../issues/123" -> 123; 0 when the URL does not end that way. */
static int64_t issue_of(const char *issue_url)
{
	const char *slash = issue_url ? strrchr(issue_url, '/') : NULL;
	int64_t n;

	if (!slash || slash - issue_url < 7 || strncmp(slash - 7, "/issues", 7) ||
	    kb_parse_i64(slash + 1, &n) || n <= 0)
		return 0;
	return n;
}

/* since as GitHub's ISO 8601 time, "&since=..." */
static void add_since(struct strbuf *path, int64_t since)
{
	time_t t = (time_t)since;
	struct tm tm;
	char when[32];

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	strbuf_addf(path, "&since=%s", when);
}

static void comment_from_json(struct kb_forge_comment *c, const cJSON *o)
{
	int64_t t;

	kb_forge_comment_release(c);
	c->id = gh_jint(o, "id", 0);
	c->author = gh_jdup(gh_jobj(o, "user"), "login");
	c->body = gh_jdup(o, "body");
	c->url = gh_jdup(o, "html_url");
	if (!gh_parse_time(gh_jstr(o, "created_at"), &t))
		c->created_at = t;
	if (!gh_parse_time(gh_jstr(o, "updated_at"), &t))
		c->updated_at = t;
	c->issue = issue_of(gh_jstr(o, "issue_url"));
}

struct comment_search {
	const char *marker;
	const char *login; /* NULL: any author */
	struct kb_forge_comment *out;
	bool found;
};

static int match_comment(struct gh *gh, const cJSON *item, void *payload)
{
	struct comment_search *s = payload;
	const char *body = gh_jstr(item, "body");
	const char *login = gh_jstr(gh_jobj(item, "user"), "login");

	if (!body || !strstr(body, s->marker))
		return 0;
	if (s->login && (!login || strcasecmp(login, s->login)))
		return 0;
	comment_from_json(s->out, item);
	s->found = true;
	return 1; /* oldest first: the first match wins */
}

int gh_find_comment(struct kb_forge *f, struct kb_forge_comment *out, const char *repo,
		    int64_t issue, const char *marker)
{
	struct gh_req req = GH_REQ_INIT;
	struct strbuf path = STRBUF_INIT;
	struct comment_search s = { marker, NULL, out, false };
	char *me = NULL;
	int rc;

	if ((rc = gh_whoami(f, &me)))
		return rc;
	s.login = me;
	strbuf_addf(&path, "/repos/%s/issues/%" PRId64 "/comments?per_page=100", repo, issue);
	req.path = path.buf;
	req.repo = repo;
	rc = gh_paginate(gh_of(f), &req, match_comment, &s, NULL, NULL);
	if (rc > 0)
		rc = 0;
	if (!rc && !s.found)
		rc = KB_ENOTFOUND;
	free(me);
	strbuf_release(&path);
	return rc;
}

static int collect_comment(struct gh *gh, const cJSON *item, void *payload)
{
	struct kb_forge_comment_list *list = payload;

	if (list->nr == list->alloc) {
		list->alloc = list->alloc ? list->alloc * 2 : 16;
		list->v = xrealloc(list->v, list->alloc * sizeof(*list->v));
	}
	memset(&list->v[list->nr], 0, sizeof(list->v[0]));
	comment_from_json(&list->v[list->nr++], item);
	return 0;
}

int gh_list_comments(struct kb_forge *f, struct kb_forge_comment_list *out, const char *repo,
		     int64_t issue, int64_t since)
{
	struct gh_req req = GH_REQ_INIT;
	struct strbuf path = STRBUF_INIT;
	int rc;

	strbuf_addf(&path, "/repos/%s/issues/%" PRId64 "/comments?per_page=100", repo, issue);
	if (since > 0)
		add_since(&path, since);
	req.path = path.buf;
	req.repo = repo;
	rc = gh_paginate(gh_of(f), &req, collect_comment, out, NULL, NULL);
	strbuf_release(&path);
	return rc;
}

/*
 * Newest update first: a new or edited comment lands on the first page,
 * so the first page's ETag alone tells whether anything changed.
 */
int gh_list_repo_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
			  bool *not_modified, struct strbuf *etag, const char *repo, int64_t since)
{
	struct gh_req req = GH_REQ_INIT;
	struct strbuf path = STRBUF_INIT, new_etag = STRBUF_INIT;
	struct kb_forge_comment_list list = KB_FORGE_COMMENT_LIST_INIT;
	int rc;

	strbuf_addf(&path, "/repos/%s/issues/comments?sort=updated&direction=desc&per_page=100",
		    repo);
	if (since > 0)
		add_since(&path, since);
	req.path = path.buf;
	req.repo = repo;
	req.if_none_match = etag->len ? etag->buf : NULL;
	rc = gh_paginate(gh_of(f), &req, collect_comment, &list, not_modified, &new_etag);
	if (rc || *not_modified)
		goto out;
	kb_forge_comment_list_release(out);
	*out = list;
	memset(&list, 0, sizeof(list));
	strbuf_reset(etag);
	strbuf_add(etag, new_etag.buf, new_etag.len);
out:
	kb_forge_comment_list_release(&list);
	strbuf_release(&path);
	strbuf_release(&new_etag);
	return rc;
}

struct made_search {
	const char *login;  /* NULL: any author (the bot's login is not known) */
	const char *marker; /* NULL: the whole body */
	const char *body;
	int64_t id;
};

/* Equal but for '\r' (GitHub's web editor turns newlines into CRLF). */
static bool same_text(const char *a, const char *b)
{
	for (;;) {
		while (*a == '\r')
			a++;
		while (*b == '\r')
			b++;
		if (*a != *b)
			return false;
		if (!*a)
			return true;
		a++;
		b++;
	}
}

static int match_made(struct gh *gh, const cJSON *item, void *payload)
{
	struct made_search *s = payload;
	const char *body = gh_jstr(item, "body");
	const char *login = gh_jstr(gh_jobj(item, "user"), "login");
	int64_t id = gh_jint(item, "id", 0);

	if (!body || id <= 0 || (s->login && (!login || strcasecmp(login, s->login))))
		return 0;
	if (s->marker ? !strstr(body, s->marker) : !same_text(body, s->body))
		return 0;
	if (id > s->id) /* the newest: an older twin is not what the lost request made */
		s->id = id;
	return 0;
}

int gh_find_made(struct gh *gh, int64_t *id_out, const char *repo, const char *path,
		 const char *marker, const char *body)
{
	struct gh_req req = GH_REQ_INIT;
	struct made_search s = { NULL, marker, body, 0 };
	char *me = NULL;
	int rc;

	if (gh_whoami(&gh->base, &me))
		return -1;
	s.login = me;
	req.path = path;
	req.repo = repo;
	rc = gh_paginate(gh, &req, match_made, &s, NULL, NULL);
	free(me);
	if (rc == KB_ENOTFOUND) /* the issue is gone: nothing was made there */
		return 0;
	if (rc)
		return -1;
	if (!s.id)
		return 0;
	*id_out = s.id;
	return 1;
}

/* What a POST of a comment would have made, for gh_req.find. */
struct lost_comment {
	const char *repo;
	int64_t issue;
	const char *marker, *body;
	int64_t *id_out;
};

static int find_lost_comment(struct gh *gh, void *payload)
{
	struct lost_comment *l = payload;
	struct strbuf path = STRBUF_INIT;
	int rc;

	strbuf_addf(&path, "/repos/%s/issues/%" PRId64 "/comments?per_page=100", l->repo, l->issue);
	rc = gh_find_made(gh, l->id_out, l->repo, path.buf, l->marker, l->body);
	strbuf_release(&path);
	return rc;
}

/*
 * POST or PATCH {"body": body} to path; the reply's id in *id_out. lost
 * (a POST's, may be NULL) finds the comment when the reply was lost.
 */
static int send_body(struct gh *gh, int64_t *id_out, const char *method, const char *repo,
		     const char *path, const char *body, struct lost_comment *lost)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	cJSON *o = cJSON_CreateObject(), *json = NULL;
	char *payload;
	int rc;

	cJSON_AddStringToObject(o, "body", body);
	payload = gh_jprint(o);
	cJSON_Delete(o);
	gh_reply_init(&rep);
	req.method = method;
	req.path = path;
	req.repo = repo;
	req.body = payload;
	if (lost) {
		req.find = find_lost_comment;
		req.find_payload = lost;
	}
	rc = gh_call(gh, &req, &rep);
	if (rc == GH_FOUND) { /* lost->id_out is id_out, filled */
		rc = 0;
	} else if (!rc && id_out) {
		if (!(json = gh_reply_json(&req, &rep, cJSON_Object)) ||
		    (*id_out = gh_jint(json, "id", 0)) <= 0)
			rc = json ? error("github: no id in reply to %s '%s'", method, path) : -1;
	}
	cJSON_Delete(json);
	free(payload);
	gh_reply_release(&rep);
	return rc;
}

int gh_post_comment(struct kb_forge *f, int64_t *id_out, const char *repo, int64_t issue,
		    const char *body, const char *marker)
{
	struct strbuf path = STRBUF_INIT;
	int64_t id = 0;
	struct lost_comment lost = { repo, issue, marker, body, &id };
	int rc;

	strbuf_addf(&path, "/repos/%s/issues/%" PRId64 "/comments", repo, issue);
	rc = send_body(gh_of(f), &id, "POST", repo, path.buf, body, &lost);
	if (rc == KB_ENOTFOUND)
		rc = error("github: no issue '%s#%" PRId64 "' to comment on", repo, issue);
	if (!rc && id_out)
		*id_out = id;
	strbuf_release(&path);
	return rc;
}

int gh_edit_comment(struct kb_forge *f, const char *repo, int64_t comment_id, const char *body)
{
	struct strbuf path = STRBUF_INIT;
	int rc;

	strbuf_addf(&path, "/repos/%s/issues/comments/%" PRId64, repo, comment_id);
	rc = send_body(gh_of(f), NULL, "PATCH", repo, path.buf, body, NULL);
	strbuf_release(&path);
	return rc;
}

/* --- labels --- */

int gh_add_labels(struct kb_forge *f, const char *repo, int64_t issue,
		  const char *const *labels, size_t nr)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	cJSON *o = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(o, "labels");
	char *payload;
	int rc;

	for (size_t i = 0; i < nr; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(labels[i]));
	payload = gh_jprint(o);
	cJSON_Delete(o);
	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/issues/%" PRId64 "/labels", repo, issue);
	req.method = "POST";
	req.path = path.buf;
	req.repo = repo;
	req.body = payload;
	rc = gh_call(gh_of(f), &req, &rep);
	if (rc == KB_ENOTFOUND)
		rc = error("github: no issue '%s#%" PRId64 "' to label", repo, issue);
	free(payload);
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}

int gh_remove_label(struct kb_forge *f, const char *repo, int64_t issue, const char *label)
{
	struct gh_req req = GH_REQ_INIT;
	struct gh_reply rep;
	struct strbuf path = STRBUF_INIT;
	int rc;

	gh_reply_init(&rep);
	strbuf_addf(&path, "/repos/%s/issues/%" PRId64 "/labels/", repo, issue);
	gh_add_escaped(&path, label);
	req.method = "DELETE";
	req.path = path.buf;
	req.repo = repo;
	rc = gh_call(gh_of(f), &req, &rep);
	if (rc == KB_ENOTFOUND) /* the label was not there: the wanted end state */
		rc = 0;
	gh_reply_release(&rep);
	strbuf_release(&path);
	return rc;
}
