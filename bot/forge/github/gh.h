#ifndef KB_GH_H
#define KB_GH_H
/*
 * Internals of the github backend, shared by its files:
 *   client.c     one call: auth header, conditional GET, retries, waits
 *   etag.c       the in-memory ETag store behind conditional GETs
 *   app_token.c  App JWT -> installation tokens, cached and renewed
 *   paginate.c   every page of a list, following Link rel="next"
 *   ops_*.c      the forge operations, grouped by resource
 *   github.c     construction and the ops table
 */
#include "core/common.h"
#include "core/http.h"
#include "core/strbuf.h"
#include "forge/forge.h"
#include "forge/github/github.h"
#include "forge/github/policy.h"

#include <cjson/cJSON.h>
#include <openssl/evp.h>

/* --- ETag store (etag.c) --- */

struct gh_etag_entry {
	char *url;
	char *etag;
	char *link;   /* the page's Link header, so a 304 page still paginates */
	char *body;
	size_t body_len;
};

/*
 * Responses to GETs by URL, for If-None-Match; oldest evicted first when
 * max_entries or max_bytes (bodies) would be passed. Lives as long as the
 * forge handle: the poll's own ETag is persisted by the caller instead.
 */
struct gh_etag_cache {
	struct gh_etag_entry *v;
	size_t nr, alloc;
	size_t bytes;
	size_t max_entries, max_bytes;
};

void gh_etag_cache_init(struct gh_etag_cache *c, size_t max_entries, size_t max_bytes);
void gh_etag_cache_release(struct gh_etag_cache *c);
const struct gh_etag_entry *gh_etag_get(const struct gh_etag_cache *c, const char *url);
/* Store (replacing an older entry for url); a body over max_bytes is not stored. */
void gh_etag_put(struct gh_etag_cache *c, const char *url, const char *etag, const char *link,
		 const char *body, size_t len);
void gh_etag_drop(struct gh_etag_cache *c, const char *url);

/* --- installation tokens (app_token.c) --- */

struct gh_inst_token {
	int64_t installation_id;
	char *token;
	int64_t expires_at;  /* Unix seconds */
};

struct gh_repo_inst {
	char *repo;
	int64_t installation_id;
};

/* Renew this long before a token expires. */
#define GH_TOKEN_RENEW_S 300

/* True when a token expiring at expires_at must be replaced at now_s. */
bool gh_token_needs_renewal(int64_t expires_at, int64_t now_s);
/* "2016-07-11T22:14:10Z" to Unix seconds; -1 when malformed. */
int gh_parse_time(const char *iso, int64_t *out);

/* --- the backend --- */

struct gh {
	struct kb_forge base;         /* first: the forge handle */
	char *api_url;                /* without a trailing '/' */
	char *origin;                 /* scheme://host[:port] of api_url */
	struct kb_http_client http;
	int64_t timeout_ms;           /* one exchange, whole */
	size_t max_body;              /* a reply's body cap */
	struct gh_policy policy;
	char *token;                  /* PAT mode */
	int64_t app_id;               /* App mode when non-zero */
	EVP_PKEY *key;
	int64_t installation_id;      /* configured, 0: per repository */
	struct gh_inst_token *tokens;
	size_t nr_tokens, alloc_tokens;
	struct gh_repo_inst *insts;
	size_t nr_insts, alloc_insts;
	struct gh_etag_cache etags;
	int64_t last_mutation_ms;     /* monotonic, when the last mutating reply arrived */
	int64_t rl_remaining, rl_reset; /* from the last installation/token reply */
	uint64_t rng;
	int (*sleep_fn)(void *payload, int64_t ms, enum kb_github_wait why);
	void *sleep_payload;
	char *login;                  /* the bot's login, once known */
	bool login_looked_up;
	bool checks_unsupported;      /* a check run was refused: do not ask again */
};

static inline struct gh *gh_of(struct kb_forge *f)
{
	return (struct gh *)f;
}

enum gh_auth {
	GH_AUTH_REPO,     /* the token, or the installation token for req->repo */
	GH_AUTH_APP_JWT,  /* the App's JWT (/app endpoints) */
	GH_AUTH_NONE
};

/*
 * A create whose reply was lost (a timeout or a dropped connection, a
 * 5xx) may still have been carried out: a blind retry makes a second
 * comment, review or check run. So before such a retry, and before
 * giving up after one, gh_send calls find(gh, find_payload), which looks
 * for what the request would have made (by its marker) and fills the
 * caller's output: > 0 found, 0 not there, < 0 failed (logged).
 */
typedef int (*gh_find_fn)(struct gh *gh, void *payload);

struct gh_req {
	const char *method;
	const char *path;          /* "/repos/..." under api_url, or an absolute URL of the same origin */
	const char *repo;          /* GH_AUTH_REPO in App mode: whose installation */
	enum gh_auth auth;
	const char *body;          /* JSON, NULL: none */
	const char *if_none_match; /* an ETag the caller keeps; the cache is not used then */
	gh_find_fn find;           /* a create: see gh_find_fn; NULL: retried blindly */
	void *find_payload;
};
#define GH_REQ_INIT { "GET", NULL, NULL, GH_AUTH_REPO, NULL, NULL, NULL, NULL }

/* gh_send: a lost reply's create was found by req->find; nothing more was sent. */
#define GH_FOUND 1

struct gh_reply {
	long status;
	bool not_modified;         /* the server answered 304 */
	struct strbuf body;        /* after a 304: the cached body, when there is one */
	char *etag;
	char *link;
	char *message;             /* "message" (+ first "errors" entry) of a JSON error reply */
};

void gh_reply_init(struct gh_reply *r);
void gh_reply_release(struct gh_reply *r);

/*
 * Send req with the retry policy. 0 when a final response arrived,
 * whatever its status (the caller looks at rep->status); GH_FOUND when
 * req->find found what a create whose reply was lost had made (rep is
 * empty, the caller's find output is filled); -1 (logged) when the
 * transfer failed, the body was too big, the retries ran out or a lost
 * create could not be looked for; KB_ECANCELLED when a stop was
 * requested during a wait.
 */
int gh_send(struct gh *gh, const struct gh_req *req, struct gh_reply *rep);
/*
 * gh_send that also wants 2xx (or 304): KB_ENOTFOUND (nothing logged) on
 * 404, -1 with "github: METHOD PATH: STATUS message" on other statuses.
 */
int gh_call(struct gh *gh, const struct gh_req *req, struct gh_reply *rep);
/* The error for a reply that was not wanted; always -1. */
int gh_reply_error(const struct gh_req *req, const struct gh_reply *rep);
/* Parse the reply body; NULL after logging "malformed JSON ..." (or when not an object/array as asked). */
cJSON *gh_reply_json(const struct gh_req *req, const struct gh_reply *rep, int want_type);

/* Sleep through the configured function; counts in the stats. 0 or KB_ECANCELLED. */
int gh_sleep(struct gh *gh, int64_t ms, enum gh_wait_reason why);
/* A uniform draw from [0, 1). */
double gh_random(struct gh *gh);

/* Append s percent-encoded for a path segment or a query value. */
void gh_add_escaped(struct strbuf *sb, const char *s);

/* Authorization header line for req ("Authorization: Bearer ..."), or empty for GH_AUTH_NONE. */
int gh_auth_header(struct gh *gh, const struct gh_req *req, struct strbuf *line);
/* Forget the cached installation token used for repo (after a 401). */
void gh_auth_forget(struct gh *gh, const char *repo);
/* The installation token for repo (App mode), fetched or renewed as needed. */
int gh_installation_token(struct gh *gh, const char *repo, const char **token_out);
void gh_tokens_release(struct gh *gh);

/* --- pagination (paginate.c) --- */

/* Called per element of every page; > 0 stops the walk (returned), < 0 fails it. */
typedef int (*gh_item_fn)(struct gh *gh, const cJSON *item, void *payload);

/*
 * GET first->path and each rel="next" page after it (same origin only, at
 * most GH_MAX_PAGES), calling fn for each element of each page's array.
 * With first->if_none_match set and a 304 for the first page,
 * *not_modified is set and nothing is called; etag_out (may be NULL)
 * receives the first page's ETag.
 */
#define GH_MAX_PAGES 100
int gh_paginate(struct gh *gh, const struct gh_req *first, gh_item_fn fn, void *payload,
		bool *not_modified, struct strbuf *etag_out);

/* --- JSON helpers (paginate.c) --- */

/* Member key as a string / an integer / an object; NULL or def when absent or of another type. */
const char *gh_jstr(const cJSON *o, const char *key);
int64_t gh_jint(const cJSON *o, const char *key, int64_t def);
const cJSON *gh_jobj(const cJSON *o, const char *key);
/* xstrdup of gh_jstr, NULL when absent. */
char *gh_jdup(const cJSON *o, const char *key);
/* Print a cJSON value compactly into a new string (dies on allocation failure). */
char *gh_jprint(const cJSON *v);

/* --- operations (ops_*.c) --- */

int gh_list_labelled_prs(struct kb_forge *f, struct kb_forge_pr_list *out, bool *not_modified,
			 struct strbuf *etag, const char *repo, const char *label);
int gh_label_actor(struct kb_forge *f, char **login_out, int64_t *at_out, const char *repo,
		   int64_t number, const char *label);
int gh_permission(struct kb_forge *f, enum kb_forge_perm *out, const char *repo,
		  const char *login);
int gh_get_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo, int64_t number);
int gh_pr_files(struct kb_forge *f, struct strvec *paths, const char *repo, int64_t number);
int gh_find_pr_by_head(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
		       const char *branch);
int gh_open_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
	       const struct kb_forge_new_pr *spec);
int gh_update_pr(struct kb_forge *f, const char *repo, int64_t number, const char *title,
		 const char *body);
int gh_find_comment(struct kb_forge *f, struct kb_forge_comment *out, const char *repo,
		    int64_t issue, const char *marker);
int gh_list_comments(struct kb_forge *f, struct kb_forge_comment_list *out, const char *repo,
		     int64_t issue, int64_t since);
int gh_list_repo_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
			  bool *not_modified, struct strbuf *etag, const char *repo, int64_t since);
int gh_post_comment(struct kb_forge *f, int64_t *id_out, const char *repo, int64_t issue,
		    const char *body, const char *marker);
int gh_edit_comment(struct kb_forge *f, const char *repo, int64_t comment_id, const char *body);
int gh_post_review(struct kb_forge *f, int64_t *id_out, const char *repo, int64_t number,
		   const struct kb_forge_review *review);
int gh_set_status(struct kb_forge *f, const char *repo, const struct kb_forge_status *st);
int gh_check_run(struct kb_forge *f, int64_t *id_inout, const char *repo,
		 const struct kb_forge_check *check);
int gh_add_labels(struct kb_forge *f, const char *repo, int64_t issue,
		  const char *const *labels, size_t nr);
int gh_remove_label(struct kb_forge *f, const char *repo, int64_t issue, const char *label);
int gh_git_remote(struct kb_forge *f, struct kb_forge_remote *out, const char *repo);
int gh_whoami(struct kb_forge *f, char **login_out);

/*
 * For a gh_find_fn: among the items of the list at path (every page),
 * the newest made by the bot whose body holds marker (NULL: whose body is
 * body, '\r' aside); its id in *id_out. 1 found, 0 not, -1 (ops_issues.c).
 */
int gh_find_made(struct gh *gh, int64_t *id_out, const char *repo, const char *path,
		 const char *marker, const char *body);

/* Fill a kb_forge_pr from a pulls API object (ops_pulls.c). */
void gh_pr_from_json(struct kb_forge_pr *out, const cJSON *o);

#endif
