#include "core/common.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/local/local_priv.h"

#include <fcntl.h>
#include <git2.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/file.h>

/* The local forge: see local.h for the layout and the one-write-per-mutation rule. */

#define DOC_NAME "forge.json"
#define LOCK_NAME "forge.lock"
#define MAX_DOC_BYTES (256u * 1024 * 1024)
#define DEFAULT_ACTOR "kernelbot"

static const struct kb_forge_ops lf_ops;

static struct lf *lf_of(struct kb_forge *f)
{
	return (struct lf *)f;
}

bool kb_forge_is_local(const struct kb_forge *f)
{
	return f && f->ops == &lf_ops;
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

/* Set key to a string (NULL: JSON null), replacing what was there. */
static void set_str(cJSON *o, const char *key, const char *v)
{
	cJSON *item = v ? cJSON_CreateString(v) : cJSON_CreateNull();

	if (!cJSON_ReplaceItemInObjectCaseSensitive(o, key, item))
		cJSON_AddItemToObject(o, key, item);
}

static void set_int(cJSON *o, const char *key, int64_t v)
{
	cJSON *item = cJSON_CreateNumber((double)v);

	if (!cJSON_ReplaceItemInObjectCaseSensitive(o, key, item))
		cJSON_AddItemToObject(o, key, item);
}

static void set_bool(cJSON *o, const char *key, bool v)
{
	cJSON *item = cJSON_CreateBool(v);

	if (!cJSON_ReplaceItemInObjectCaseSensitive(o, key, item))
		cJSON_AddItemToObject(o, key, item);
}

/* The array member key, created empty when missing. */
static cJSON *array_of(cJSON *o, const char *key)
{
	cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);

	if (cJSON_IsArray(a))
		return a;
	a = cJSON_CreateArray();
	if (!cJSON_ReplaceItemInObjectCaseSensitive(o, key, a))
		cJSON_AddItemToObject(o, key, a);
	return a;
}

/* --- one repository's records --- */

struct lrepo {
	struct strbuf dir;
	const char *name;      /* "owner/name" */
	int lock_fd;           /* -1: read only */
	cJSON *doc;
	const char *git_dir;   /* points into doc */
};

static void repo_release(struct lrepo *r)
{
	if (r->lock_fd >= 0)
		close(r->lock_fd); /* drops the flock */
	r->lock_fd = -1;
	cJSON_Delete(r->doc);
	r->doc = NULL;
	strbuf_release(&r->dir);
}

static int take_lock(struct lrepo *r)
{
	struct strbuf path = STRBUF_INIT;
	int rc = 0;

	strbuf_addf(&path, "%s/" LOCK_NAME, r->dir.buf);
	r->lock_fd = open(path.buf, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (r->lock_fd < 0) {
		rc = error_errno("could not open '%s'", path.buf);
	} else {
		while (flock(r->lock_fd, LOCK_EX) && errno == EINTR)
			;
	}
	strbuf_release(&path);
	return rc;
}

/*
 * Load repo's records, under its lock when write is set (release with
 * repo_release). Unknown repositories are an error; with create (only
 * add_repo) an empty document is made instead.
 */
static int repo_load(struct lf *lf, struct lrepo *r, const char *repo, bool write, bool create)
{
	struct strbuf path = STRBUF_INIT, data = STRBUF_INIT;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	strbuf_init(&r->dir, 0);
	r->lock_fd = -1;
	r->name = repo;
	strbuf_addf(&r->dir, "%s/%s", lf->root, repo);
	if (create && kb_mkdir_p(r->dir.buf, 0755)) {
		error_errno("could not create '%s'", r->dir.buf);
		goto out;
	}
	if (write && kb_is_dir(r->dir.buf) && take_lock(r))
		goto out;
	strbuf_addf(&path, "%s/" DOC_NAME, r->dir.buf);
	lf->base.stats.requests++;
	if (!kb_is_file(path.buf)) {
		if (!create) {
			error("unknown repository '%s' in the local forge '%s'", repo, lf->root);
			goto out;
		}
		r->doc = cJSON_CreateObject();
		set_int(r->doc, "next_number", 1);
		set_int(r->doc, "next_id", 1);
		rc = 0;
		goto out;
	}
	if (strbuf_read_file(&data, path.buf, MAX_DOC_BYTES)) {
		error("could not read '%s'", path.buf);
		goto out;
	}
	r->doc = cJSON_ParseWithLength(data.buf, data.len);
	if (!cJSON_IsObject(r->doc)) {
		error("malformed records in '%s'", path.buf);
		goto out;
	}
	r->git_dir = kb_json_str(r->doc, "git_dir");
	rc = 0;
out:
	strbuf_release(&path);
	strbuf_release(&data);
	if (rc)
		repo_release(r);
	return rc;
}

/* The one write of a mutation. */
static int repo_save(struct lf *lf, struct lrepo *r)
{
	struct strbuf path = STRBUF_INIT;
	char *text = cJSON_Print(r->doc);
	int rc;

	if (!text)
		die("out of memory");
	strbuf_addf(&path, "%s/" DOC_NAME, r->dir.buf);
	lf->base.stats.requests++;
	rc = kb_write_file_atomic(path.buf, text, strlen(text));
	free(text);
	strbuf_release(&path);
	r->git_dir = kb_json_str(r->doc, "git_dir");
	return rc;
}

static int64_t take_id(cJSON *doc, const char *counter)
{
	int64_t id = kb_json_i64(doc, counter, 1);

	set_int(doc, counter, id + 1);
	return id;
}

static cJSON *find_pr(const struct lrepo *r, int64_t number)
{
	cJSON *pr;

	cJSON_ArrayForEach(pr, cJSON_GetObjectItemCaseSensitive(r->doc, "pulls"))
		if (kb_json_i64(pr, "number", 0) == number)
			return pr;
	return NULL;
}

/*
 * The head branch's tip, read from git each time (a push needs no forge
 * call). refs/pull/<n>/head is kept pointing there, like GitHub's, so the
 * git layer fetches a pull request the same way from both forges.
 */
static char *pr_head_sha(const struct lrepo *r, const cJSON *pr)
{
	char *sha = NULL;

	if (r->git_dir && kb_json_str(pr, "head") &&
	    !lf_git_head(r->git_dir, kb_json_str(pr, "head"), &sha) &&
	    lf_git_pull_ref(r->git_dir, kb_json_i64(pr, "number", 0), sha))
		log_warn("local forge: refs/pull/%" PRId64 "/head not updated in '%s'",
			 kb_json_i64(pr, "number", 0), r->name);
	return sha;
}

/* Re-render the views of pr (non-NULL), or of every pull request whose head is at sha. */
static void render(const struct lrepo *r, const cJSON *pr, const char *sha)
{
	const cJSON *p;

	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(r->doc, "pulls")) {
		char *head = NULL;

		if (pr && p != pr)
			continue;
		head = pr_head_sha(r, p);
		if (!pr && (!head || strcmp(head, sha))) {
			free(head);
			continue;
		}
		if (lf_render_pr(r->dir.buf, r->doc, p, head))
			log_warn("local forge: could not render pull request %" PRId64 " of '%s'",
				 kb_json_i64(p, "number", 0), r->name);
		free(head);
	}
}

/* Save, then refresh the markdown views (a view that fails only warns). */
static int commit(struct lf *lf, struct lrepo *r, const cJSON *pr, const char *sha)
{
	if (repo_save(lf, r))
		return -1;
	if (pr || sha)
		render(r, pr, sha);
	return 0;
}

static int no_pr(const struct lrepo *r, int64_t number)
{
	log_debug("local forge: no pull request %" PRId64 " in '%s'", number, r->name);
	return KB_ENOTFOUND;
}

static void pr_to_out(struct lf *lf, const struct lrepo *r, const cJSON *pr,
		      struct kb_forge_pr *out)
{
	const cJSON *l;
	struct strbuf url = STRBUF_INIT;

	kb_forge_pr_release(out);
	out->number = kb_json_i64(pr, "number", 0);
	out->title = dup_or_null(kb_json_str(pr, "title"));
	out->body = dup_or_null(kb_json_str(pr, "body"));
	out->state = dup_or_null(kb_json_str(pr, "state"));
	out->merged = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pr, "merged"));
	out->draft = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pr, "draft"));
	out->head_ref = dup_or_null(kb_json_str(pr, "head"));
	out->head_sha = pr_head_sha(r, pr);
	out->head_repo = xstrdup(r->name);
	out->base_ref = dup_or_null(kb_json_str(pr, "base"));
	out->author = dup_or_null(kb_json_str(pr, "author"));
	strbuf_addf(&url, "%s/pulls/%" PRId64 ".md", r->dir.buf, out->number);
	out->url = strbuf_detach(&url, NULL);
	cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(pr, "labels"))
		if (cJSON_IsString(l))
			strvec_push(&out->labels, l->valuestring);
	(void)lf;
}

static bool has_label(const cJSON *pr, const char *label)
{
	const cJSON *l;

	cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(pr, "labels"))
		if (cJSON_IsString(l) && !strcmp(l->valuestring, label))
			return true;
	return false;
}

static void add_event(struct lf *lf, cJSON *pr, const char *event, const char *label)
{
	cJSON *e = cJSON_CreateObject();

	cJSON_AddStringToObject(e, "event", event);
	cJSON_AddStringToObject(e, "label", label);
	cJSON_AddStringToObject(e, "actor", lf->actor);
	cJSON_AddNumberToObject(e, "created_at", (double)kb_wall_s());
	cJSON_AddItemToArray(array_of(pr, "events"), e);
}

/* --- the operations --- */

/* A poll's ETag: true (counted) when tag is the one the caller holds, else
 * the caller's becomes tag and the caller takes the new answer. */
static bool etag_unchanged(struct kb_forge *f, struct strbuf *etag, const char *tag)
{
	if (etag->len && !strcmp(etag->buf, tag)) {
		f->stats.not_modified++;
		return true;
	}
	strbuf_reset(etag);
	strbuf_addstr(etag, tag);
	return false;
}

static int lf_list_labelled_prs(struct kb_forge *f, struct kb_forge_pr_list *out,
				bool *not_modified, struct strbuf *etag, const char *repo,
				const char *label)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	struct kb_forge_pr_list list = KB_FORGE_PR_LIST_INIT;
	struct strbuf tag = STRBUF_INIT;
	uint64_t h = KB_FNV1A64_INIT;
	const cJSON *pr;

	if (repo_load(lf, &r, repo, false, false))
		return -1;
	cJSON_ArrayForEach(pr, cJSON_GetObjectItemCaseSensitive(r.doc, "pulls")) {
		const char *state = kb_json_str(pr, "state");
		char num[32];
		char *sha;

		if (!state || strcmp(state, "open") || !has_label(pr, label))
			continue;
		sha = pr_head_sha(&r, pr);
		if (!sha)
			continue; /* its branch is gone: nothing to run */
		if (list.nr == list.alloc) {
			list.alloc = list.alloc ? list.alloc * 2 : 8;
			list.v = xrealloc(list.v, list.alloc * sizeof(*list.v));
		}
		list.v[list.nr].number = kb_json_i64(pr, "number", 0);
		list.v[list.nr++].head_sha = sha;
		/* a new comment changes the poll's answer, as on GitHub (its comments count) */
		xsnprintf(num, sizeof(num), "%" PRId64 ":%d:", kb_json_i64(pr, "number", 0),
			  cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pr, "comments")));
		h = kb_fnv1a64_str(kb_fnv1a64_str(kb_fnv1a64_str(h, num), sha), ";");
	}
	/* the ETag is a hash of what the poll sees: equal means nothing to do */
	strbuf_addf(&tag, "\"%016" PRIx64 "\"", h);
	*not_modified = etag_unchanged(f, etag, tag.buf);
	if (!*not_modified) {
		kb_forge_pr_list_release(out);
		*out = list;
		memset(&list, 0, sizeof(list));
	}
	kb_forge_pr_list_release(&list);
	strbuf_release(&tag);
	repo_release(&r);
	return 0;
}

static int lf_label_actor(struct kb_forge *f, char **login_out, int64_t *at_out,
			  const char *repo, int64_t number, const char *label)
{
	struct lrepo r;
	const cJSON *pr, *e;
	const char *login = NULL;
	int64_t at = 0;
	int rc = 0;

	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	if (!(pr = find_pr(&r, number))) {
		rc = no_pr(&r, number);
		goto out;
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pr, "events")) {
		const char *ev = kb_json_str(e, "event"), *l = kb_json_str(e, "label");

		if (ev && l && !strcmp(ev, "labeled") && !strcmp(l, label)) {
			login = kb_json_str(e, "actor");
			at = kb_json_i64(e, "created_at", 0);
		}
	}
	if (login) {
		*login_out = xstrdup(login);
		if (at_out)
			*at_out = at;
	} else {
		rc = KB_ENOTFOUND;
	}
out:
	repo_release(&r);
	return rc;
}

static int lf_permission(struct kb_forge *f, enum kb_forge_perm *out, const char *repo,
			 const char *login)
{
	struct lrepo r;
	const char *role;
	size_t owner_len = strcspn(repo, "/");

	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	role = kb_json_str(cJSON_GetObjectItemCaseSensitive(r.doc, "permissions"), login);
	if (!role || kb_forge_perm_parse(role, out))
		*out = (strlen(login) == owner_len && !strncmp(login, repo, owner_len)) ?
			KB_PERM_ADMIN : KB_PERM_NONE;
	repo_release(&r);
	return 0;
}

static int lf_get_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
		     int64_t number)
{
	struct lrepo r;
	const cJSON *pr;
	int rc = 0;

	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	if ((pr = find_pr(&r, number)))
		pr_to_out(lf_of(f), &r, pr, out);
	else
		rc = no_pr(&r, number);
	repo_release(&r);
	return rc;
}

static int lf_pr_files(struct kb_forge *f, struct strvec *paths, const char *repo,
		       int64_t number)
{
	struct lrepo r;
	const cJSON *pr;
	int rc;

	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	if (!(pr = find_pr(&r, number)))
		rc = no_pr(&r, number);
	else if (!r.git_dir)
		rc = error("repository '%s' has no git directory", repo);
	else
		rc = lf_git_changed(r.git_dir, kb_json_str(pr, "base"), kb_json_str(pr, "head"), paths);
	repo_release(&r);
	return rc;
}

/* The open pull request with head branch, else the newest closed one; NULL when none. */
static const cJSON *pr_by_head(const struct lrepo *r, const char *branch)
{
	const cJSON *pr, *closed = NULL;

	cJSON_ArrayForEach(pr, cJSON_GetObjectItemCaseSensitive(r->doc, "pulls")) {
		const char *head = kb_json_str(pr, "head"), *state = kb_json_str(pr, "state");

		if (!head || strcmp(head, branch))
			continue;
		if (state && !strcmp(state, "open"))
			return pr;
		if (!closed || kb_json_i64(pr, "number", 0) > kb_json_i64(closed, "number", 0))
			closed = pr;
	}
	return closed;
}

static int lf_find_pr_by_head(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
			      const char *branch)
{
	struct lrepo r;
	const cJSON *pr;
	int rc = 0;

	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	if ((pr = pr_by_head(&r, branch)))
		pr_to_out(lf_of(f), &r, pr, out);
	else
		rc = KB_ENOTFOUND;
	repo_release(&r);
	return rc;
}

static int need_branch(const struct lrepo *r, const char *branch)
{
	char *sha = NULL;
	int rc;

	if (!r->git_dir)
		return error("repository '%s' has no git directory", r->name);
	rc = lf_git_head(r->git_dir, branch, &sha);
	free(sha);
	if (rc == KB_ENOTFOUND)
		return error("no branch '%s' in '%s'", branch, r->name);
	return rc;
}

static int lf_open_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
		      const struct kb_forge_new_pr *spec)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	const cJSON *existing;
	cJSON *pr;
	int64_t now = kb_wall_s();
	int rc = -1;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	existing = pr_by_head(&r, spec->head);
	if (existing && kb_json_str(existing, "state") && !strcmp(kb_json_str(existing, "state"), "open")) {
		pr_to_out(lf, &r, existing, out);
		log_info("local forge: a pull request for '%s' already exists in '%s'", spec->head,
			 repo);
		rc = KB_EEXISTS;
		goto out;
	}
	if (need_branch(&r, spec->head) || need_branch(&r, spec->base))
		goto out;
	pr = cJSON_CreateObject();
	set_int(pr, "number", take_id(r.doc, "next_number"));
	set_str(pr, "title", spec->title);
	set_str(pr, "body", spec->body ? spec->body : "");
	set_str(pr, "head", spec->head);
	set_str(pr, "base", spec->base);
	set_str(pr, "state", "open");
	set_bool(pr, "merged", false);
	set_bool(pr, "draft", spec->draft);
	set_str(pr, "author", lf->actor);
	set_int(pr, "created_at", now);
	set_int(pr, "updated_at", now);
	cJSON_AddItemToObject(pr, "labels", cJSON_CreateArray());
	cJSON_AddItemToArray(array_of(r.doc, "pulls"), pr);
	if (commit(lf, &r, pr, NULL))
		goto out;
	pr_to_out(lf, &r, pr, out);
	rc = 0;
out:
	repo_release(&r);
	return rc;
}

static int lf_update_pr(struct kb_forge *f, const char *repo, int64_t number, const char *title,
			const char *body)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *pr;
	int rc;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	if (!(pr = find_pr(&r, number))) {
		rc = error("no pull request '%s#%" PRId64 "' to update", repo, number);
	} else {
		if (title)
			set_str(pr, "title", title);
		if (body)
			set_str(pr, "body", body);
		set_int(pr, "updated_at", kb_wall_s());
		rc = commit(lf, &r, pr, NULL);
	}
	repo_release(&r);
	return rc;
}

static void comment_to_out(const cJSON *c, struct kb_forge_comment *out)
{
	kb_forge_comment_release(out);
	out->id = kb_json_i64(c, "id", 0);
	out->author = dup_or_null(kb_json_str(c, "author"));
	out->body = dup_or_null(kb_json_str(c, "body"));
	out->created_at = kb_json_i64(c, "created_at", 0);
	out->updated_at = kb_json_i64(c, "updated_at", 0);
}

static int lf_find_comment(struct kb_forge *f, struct kb_forge_comment *out, const char *repo,
			   int64_t issue, const char *marker)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	const cJSON *pr, *c;
	int rc = KB_ENOTFOUND;

	if (repo_load(lf, &r, repo, false, false))
		return -1;
	if (!(pr = find_pr(&r, issue))) {
		rc = no_pr(&r, issue);
		goto out;
	}
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(pr, "comments")) {
		const char *body = kb_json_str(c, "body"), *author = kb_json_str(c, "author");

		if (body && strstr(body, marker) && author && !strcmp(author, lf->actor)) {
			comment_to_out(c, out);
			rc = 0;
			break;
		}
	}
out:
	repo_release(&r);
	return rc;
}

static int lf_list_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
			    const char *repo, int64_t issue, int64_t since)
{
	struct lrepo r;
	const cJSON *pr, *c;
	int rc = 0;

	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	if (!(pr = find_pr(&r, issue))) {
		rc = no_pr(&r, issue);
		goto out;
	}
	/* like GitHub's since: created or updated at or after */
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(pr, "comments")) {
		if (kb_json_i64(c, "updated_at", 0) < since)
			continue;
		if (out->nr == out->alloc) {
			out->alloc = out->alloc ? out->alloc * 2 : 16;
			out->v = xrealloc(out->v, out->alloc * sizeof(*out->v));
		}
		memset(&out->v[out->nr], 0, sizeof(out->v[0]));
		comment_to_out(c, &out->v[out->nr++]);
	}
out:
	repo_release(&r);
	return rc;
}

/* (updated_at desc, id desc): GitHub's sort=updated&direction=desc */
static int cmp_comment_desc(const void *a, const void *b)
{
	const struct kb_forge_comment *x = a, *y = b;

	if (x->updated_at != y->updated_at)
		return x->updated_at < y->updated_at ? 1 : -1;
	return x->id < y->id ? 1 : x->id > y->id ? -1 : 0;
}

static int lf_list_repo_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
				 bool *not_modified, struct strbuf *etag, const char *repo,
				 int64_t since)
{
	struct lrepo r;
	struct kb_forge_comment_list list = KB_FORGE_COMMENT_LIST_INIT;
	struct strbuf tag = STRBUF_INIT;
	uint64_t h = KB_FNV1A64_INIT;
	const cJSON *pr, *c;

	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	cJSON_ArrayForEach(pr, cJSON_GetObjectItemCaseSensitive(r.doc, "pulls")) {
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(pr, "comments")) {
			if (kb_json_i64(c, "updated_at", 0) < since)
				continue;
			if (list.nr == list.alloc) {
				list.alloc = list.alloc ? list.alloc * 2 : 16;
				list.v = xrealloc(list.v, list.alloc * sizeof(*list.v));
			}
			memset(&list.v[list.nr], 0, sizeof(list.v[0]));
			comment_to_out(c, &list.v[list.nr]);
			list.v[list.nr++].issue = kb_json_i64(pr, "number", 0);
		}
	}
	if (list.nr)
		qsort(list.v, list.nr, sizeof(*list.v), cmp_comment_desc);
	/* the ETag is a hash of what the answer holds, as GitHub's is */
	for (size_t i = 0; i < list.nr; i++) {
		char buf[96];

		xsnprintf(buf, sizeof(buf), "%" PRId64 ":%" PRId64 ":%" PRId64 ";", list.v[i].issue,
			  list.v[i].id, list.v[i].updated_at);
		h = kb_fnv1a64_str(kb_fnv1a64_str(h, buf), list.v[i].body ? list.v[i].body : "");
	}
	strbuf_addf(&tag, "\"c%016" PRIx64 "\"", h);
	*not_modified = etag_unchanged(f, etag, tag.buf);
	if (!*not_modified) {
		kb_forge_comment_list_release(out);
		*out = list;
		memset(&list, 0, sizeof(list));
	}
	kb_forge_comment_list_release(&list);
	strbuf_release(&tag);
	repo_release(&r);
	return 0;
}

/* marker: unused, a write here either happens under the lock or fails; no reply is lost */
static int lf_post_comment(struct kb_forge *f, int64_t *id_out, const char *repo, int64_t issue,
			   const char *body, const char *marker)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *pr, *c;
	int64_t id, now = kb_wall_s();
	int rc = -1;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	if (!(pr = find_pr(&r, issue))) {
		error("no issue '%s#%" PRId64 "' to comment on", repo, issue);
		goto out;
	}
	id = take_id(r.doc, "next_id");
	c = cJSON_CreateObject();
	set_int(c, "id", id);
	set_str(c, "author", lf->actor);
	set_str(c, "body", body);
	set_int(c, "created_at", now);
	set_int(c, "updated_at", now);
	cJSON_AddItemToArray(array_of(pr, "comments"), c);
	if (commit(lf, &r, pr, NULL))
		goto out;
	if (id_out)
		*id_out = id;
	rc = 0;
out:
	repo_release(&r);
	return rc;
}

static int lf_edit_comment(struct kb_forge *f, const char *repo, int64_t comment_id,
			   const char *body)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *pr, *c;
	int rc = KB_ENOTFOUND;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	cJSON_ArrayForEach(pr, cJSON_GetObjectItemCaseSensitive(r.doc, "pulls")) {
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(pr, "comments")) {
			if (kb_json_i64(c, "id", 0) != comment_id)
				continue;
			set_str(c, "body", body);
			set_int(c, "updated_at", kb_wall_s());
			rc = commit(lf, &r, pr, NULL);
			goto out;
		}
	}
	log_debug("local forge: no comment %" PRId64 " in '%s'", comment_id, repo);
out:
	repo_release(&r);
	return rc;
}

static int lf_post_review(struct kb_forge *f, int64_t *id_out, const char *repo, int64_t number,
			  const struct kb_forge_review *review)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *pr, *rv;
	int64_t id;
	int rc = -1;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	if (!(pr = find_pr(&r, number))) {
		error("no pull request '%s#%" PRId64 "' to review", repo, number);
		goto out;
	}
	id = take_id(r.doc, "next_id");
	rv = cJSON_CreateObject();
	set_int(rv, "id", id);
	set_str(rv, "author", lf->actor);
	set_str(rv, "commit_id", review->commit_sha);
	set_str(rv, "body", review->body);
	if (review->path) {
		set_str(rv, "path", review->path);
		set_int(rv, "line", review->line);
	}
	set_int(rv, "created_at", kb_wall_s());
	cJSON_AddItemToArray(array_of(pr, "reviews"), rv);
	if (commit(lf, &r, pr, NULL))
		goto out;
	if (id_out)
		*id_out = id;
	rc = 0;
out:
	repo_release(&r);
	return rc;
}

static int lf_set_status(struct kb_forge *f, const char *repo, const struct kb_forge_status *st)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *s;
	int rc;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	s = cJSON_CreateObject();
	set_str(s, "sha", st->sha);
	set_str(s, "state", kb_forge_status_state_name(st->state));
	set_str(s, "context", st->context);
	if (st->description) {
		char *d = xstrndup(st->description, kb_forge_utf8_cut(st->description, 140));

		set_str(s, "description", d);
		free(d);
	}
	if (st->target_url)
		set_str(s, "target_url", st->target_url);
	set_str(s, "creator", lf->actor);
	set_int(s, "created_at", kb_wall_s());
	cJSON_AddItemToArray(array_of(r.doc, "statuses"), s);
	rc = commit(lf, &r, NULL, st->sha);
	repo_release(&r);
	return rc;
}

static int lf_check_run(struct kb_forge *f, int64_t *id_inout, const char *repo,
			const struct kb_forge_check *check)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *c = NULL, *e;
	const char *sha;
	int rc;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	if (*id_inout) {
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r.doc, "check_runs"))
			if (kb_json_i64(e, "id", 0) == *id_inout)
				c = e;
		if (!c) {
			repo_release(&r);
			return KB_ENOTFOUND;
		}
	} else {
		c = cJSON_CreateObject();
		set_int(c, "id", take_id(r.doc, "next_id"));
		set_str(c, "head_sha", check->head_sha);
		set_int(c, "created_at", kb_wall_s());
		cJSON_AddItemToArray(array_of(r.doc, "check_runs"), c);
	}
	set_str(c, "name", check->name);
	set_str(c, "status", kb_forge_check_status_name(check->status));
	set_str(c, "conclusion", kb_forge_check_conclusion_name(check->conclusion));
	set_str(c, "title", check->title ? check->title : check->name);
	set_str(c, "summary", check->summary);
	set_str(c, "text", check->text);
	set_str(c, "details_url", check->details_url);
	set_int(c, "updated_at", kb_wall_s());
	sha = kb_json_str(c, "head_sha");
	rc = commit(lf, &r, NULL, sha);
	if (!rc)
		*id_inout = kb_json_i64(c, "id", 0);
	repo_release(&r);
	return rc;
}

static int lf_add_labels(struct kb_forge *f, const char *repo, int64_t issue,
			 const char *const *labels, size_t nr)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *pr;
	bool changed = false;
	int rc = 0;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	if (!(pr = find_pr(&r, issue))) {
		rc = error("no issue '%s#%" PRId64 "' to label", repo, issue);
		goto out;
	}
	for (size_t i = 0; i < nr; i++) {
		if (has_label(pr, labels[i]))
			continue;
		cJSON_AddItemToArray(array_of(pr, "labels"), cJSON_CreateString(labels[i]));
		add_event(lf, pr, "labeled", labels[i]);
		changed = true;
	}
	if (changed) {
		set_int(pr, "updated_at", kb_wall_s());
		rc = commit(lf, &r, pr, NULL);
	}
out:
	repo_release(&r);
	return rc;
}

static int lf_remove_label(struct kb_forge *f, const char *repo, int64_t issue,
			   const char *label)
{
	struct lf *lf = lf_of(f);
	struct lrepo r;
	cJSON *pr, *labels;
	int rc = 0, i = 0;
	const cJSON *l;

	if (repo_load(lf, &r, repo, true, false))
		return -1;
	if (!(pr = find_pr(&r, issue))) {
		rc = error("no issue '%s#%" PRId64 "' to unlabel", repo, issue);
		goto out;
	}
	labels = array_of(pr, "labels");
	cJSON_ArrayForEach(l, labels) {
		if (cJSON_IsString(l) && !strcmp(l->valuestring, label)) {
			cJSON_DeleteItemFromArray(labels, i);
			add_event(lf, pr, "unlabeled", label);
			set_int(pr, "updated_at", kb_wall_s());
			rc = commit(lf, &r, pr, NULL);
			break;
		}
		i++;
	}
out:
	repo_release(&r);
	return rc;
}

static int lf_git_remote(struct kb_forge *f, struct kb_forge_remote *out, const char *repo)
{
	struct lrepo r;
	int rc = 0;

	kb_forge_remote_release(out);
	if (repo_load(lf_of(f), &r, repo, false, false))
		return -1;
	if (r.git_dir)
		out->url = xstrdup(r.git_dir);
	else
		rc = error("repository '%s' has no git directory", repo);
	repo_release(&r);
	return rc;
}

static int lf_whoami(struct kb_forge *f, char **login_out)
{
	*login_out = xstrdup(lf_of(f)->actor);
	return 0;
}

static void lf_free(struct kb_forge *f)
{
	struct lf *lf = lf_of(f);

	free(lf->root);
	free(lf->actor);
	free(lf);
	git_libgit2_shutdown();
}

static const struct kb_forge_ops lf_ops = {
	.list_labelled_prs = lf_list_labelled_prs,
	.label_actor = lf_label_actor,
	.permission = lf_permission,
	.get_pr = lf_get_pr,
	.pr_files = lf_pr_files,
	.find_pr_by_head = lf_find_pr_by_head,
	.open_pr = lf_open_pr,
	.update_pr = lf_update_pr,
	.find_comment = lf_find_comment,
	.list_comments = lf_list_comments,
	.list_repo_comments = lf_list_repo_comments,
	.post_comment = lf_post_comment,
	.edit_comment = lf_edit_comment,
	.post_review = lf_post_review,
	.set_status = lf_set_status,
	.check_run = lf_check_run,
	.add_labels = lf_add_labels,
	.remove_label = lf_remove_label,
	.git_remote = lf_git_remote,
	.whoami = lf_whoami,
	.free = lf_free,
};

/* --- local-only calls --- */

int kb_forge_local_new(struct kb_forge **out, const char *root)
{
	struct lf *lf;

	*out = NULL;
	if (!root || !*root)
		return error("local forge needs a directory");
	if (kb_mkdir_p(root, 0755))
		return error_errno("could not create '%s'", root);
	if (git_libgit2_init() < 0)
		return error("could not initialise libgit2");
	lf = xcalloc(1, sizeof(*lf));
	lf->base.ops = &lf_ops;
	lf->base.name = "local";
	lf->root = xstrdup(root);
	lf->actor = xstrdup(DEFAULT_ACTOR);
	*out = &lf->base;
	return 0;
}

static int need_local(struct kb_forge *f)
{
	if (!kb_forge_is_local(f))
		return error("not a local forge");
	return 0;
}

int kb_forge_local_set_actor(struct kb_forge *f, const char *login)
{
	if (need_local(f))
		return -1;
	if (!login || !*login || strpbrk(login, "/\r\n "))
		return error("invalid login '%s'", login ? login : "(null)");
	free(lf_of(f)->actor);
	lf_of(f)->actor = xstrdup(login);
	return 0;
}

int kb_forge_local_add_repo(struct kb_forge *f, const char *repo, const char *git_dir)
{
	struct lf *lf;
	struct lrepo r;
	char abs[PATH_MAX];
	int rc;

	if (need_local(f))
		return -1;
	lf = lf_of(f);
	if (!kb_forge_repo_valid(repo))
		return error("invalid repository name '%s'", repo ? repo : "(null)");
	if (!git_dir || !realpath(git_dir, abs))
		return error_errno("could not resolve git directory '%s'", git_dir ? git_dir : "");
	if (repo_load(lf, &r, repo, true, true))
		return -1;
	set_str(r.doc, "git_dir", abs);
	rc = repo_save(lf, &r);
	repo_release(&r);
	return rc;
}

int kb_forge_local_set_permission(struct kb_forge *f, const char *repo, const char *login,
				  enum kb_forge_perm perm)
{
	struct lrepo r;
	cJSON *perms;
	int rc;

	if (need_local(f))
		return -1;
	if (!kb_forge_repo_valid(repo) || !login || !*login || !kb_forge_perm_name(perm))
		return error("invalid permission for '%s' on '%s'", login ? login : "", repo);
	if (repo_load(lf_of(f), &r, repo, true, false))
		return -1;
	perms = cJSON_GetObjectItemCaseSensitive(r.doc, "permissions");
	if (!cJSON_IsObject(perms)) {
		cJSON_DeleteItemFromObjectCaseSensitive(r.doc, "permissions");
		perms = cJSON_AddObjectToObject(r.doc, "permissions");
	}
	set_str(perms, login, kb_forge_perm_name(perm));
	rc = repo_save(lf_of(f), &r);
	repo_release(&r);
	return rc;
}

int kb_forge_local_set_pr_state(struct kb_forge *f, const char *repo, int64_t number,
				const char *state)
{
	struct lrepo r;
	cJSON *pr;
	bool merged;
	int rc;

	if (need_local(f))
		return -1;
	if (!state || (strcmp(state, "open") && strcmp(state, "closed") && strcmp(state, "merged")))
		return error("invalid pull request state '%s'", state ? state : "(null)");
	if (!kb_forge_repo_valid(repo))
		return error("invalid repository name '%s'", repo ? repo : "(null)");
	if (repo_load(lf_of(f), &r, repo, true, false))
		return -1;
	if (!(pr = find_pr(&r, number))) {
		rc = error("no pull request '%s#%" PRId64 "'", repo, number);
	} else {
		merged = !strcmp(state, "merged");
		set_str(pr, "state", merged ? "closed" : state);
		set_bool(pr, "merged", merged);
		set_int(pr, "updated_at", kb_wall_s());
		rc = commit(lf_of(f), &r, pr, NULL);
	}
	repo_release(&r);
	return rc;
}

int kb_forge_local_pr_path(struct kb_forge *f, struct strbuf *out, const char *repo,
			   int64_t number)
{
	if (need_local(f))
		return -1;
	if (!kb_forge_repo_valid(repo))
		return error("invalid repository name '%s'", repo ? repo : "(null)");
	strbuf_reset(out);
	strbuf_addf(out, "%s/%s/pulls/%" PRId64 ".md", lf_of(f)->root, repo, number);
	return 0;
}
