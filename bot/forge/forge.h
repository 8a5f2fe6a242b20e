#ifndef KB_FORGE_H
#define KB_FORGE_H
/*
 * The forge interface: everything the bot asks of GitHub (or of the local
 * stand-in) goes through one struct of operations, so the job loop never
 * knows which backend it talks to (curl's vtls layout: backends in
 * subfolders, bot/forge/github/ and bot/forge/local/).
 *
 *   struct kb_forge *f;
 *   if (kb_forge_open(&f, "github", cfg)) ...
 *   rc = kb_forge_get_pr(f, &pr, "owner/repo", 42);
 *   ...
 *   kb_forge_free(f);
 *
 * Conventions for every operation:
 *  - repo is "owner/name"; it is checked once here ([A-Za-z0-9._-] on each
 *    side of one '/'), so backends never see a name that could escape a
 *    URL path or a directory.
 *  - Returns 0, -1 after logging a message, or a named code (util.h) where
 *    a caller branches: KB_ENOTFOUND (nothing logged), KB_EEXISTS,
 *    KB_ENOTSUPPORTED, KB_ETOOBIG, KB_ECANCELLED (a stop was requested
 *    while waiting out a rate limit).
 *  - Output parameters come first and are owned by the caller: release
 *    them with the matching *_release even after a failure.
 *  - One handle per thread. Tokens never reach a log line or an error
 *    message (they are registered with log_add_secret).
 *  - Bodies (pull request, comment, review) are at most
 *    KB_FORGE_MAX_BODY bytes; longer ones are refused with KB_ETOOBIG
 *    before anything is sent.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

struct kb_config;

/* GitHub's limit on a pull request, issue or comment body. */
#define KB_FORGE_MAX_BODY 65536

/* Repository roles, weakest first; a job starts only from KB_PERM_WRITE up. */
enum kb_forge_perm {
	KB_PERM_NONE,
	KB_PERM_READ,
	KB_PERM_TRIAGE,
	KB_PERM_WRITE,
	KB_PERM_MAINTAIN,
	KB_PERM_ADMIN
};

/* "none", "read", ...; NULL when out of range. */
const char *kb_forge_perm_name(enum kb_forge_perm perm);
/* Name to enum; -1 (nothing logged) when unknown. */
int kb_forge_perm_parse(const char *name, enum kb_forge_perm *out);

/* A labelled pull request seen by a poll. */
struct kb_forge_pr_head {
	int64_t number;
	char *head_sha;
};

struct kb_forge_pr_list {
	struct kb_forge_pr_head *v;
	size_t nr, alloc;
};
#define KB_FORGE_PR_LIST_INIT { NULL, 0, 0 }
void kb_forge_pr_list_release(struct kb_forge_pr_list *list);

/* One pull request. Strings are owned; absent ones are NULL. */
struct kb_forge_pr {
	int64_t number;
	char *title;
	char *body;
	char *state;       /* "open" or "closed" */
	bool merged;
	bool draft;
	char *head_sha;
	char *head_ref;    /* branch name, without refs/heads/ */
	char *head_repo;   /* "owner/name" holding the head branch (a fork's), NULL when deleted */
	char *base_ref;
	char *author;      /* login */
	char *url;         /* web page of the pull request (local: the markdown file) */
	struct strvec labels;
};
#define KB_FORGE_PR_INIT { 0, NULL, NULL, NULL, false, false, NULL, NULL, NULL, NULL, NULL, NULL, STRVEC_INIT }
void kb_forge_pr_release(struct kb_forge_pr *pr);

/* An issue or pull request comment. */
struct kb_forge_comment {
	int64_t id;
	char *author;
	char *body;
	char *url;
	int64_t created_at, updated_at; /* Unix seconds */
	int64_t issue;     /* the issue or pull request it is on (list_repo_comments); 0: not known */
};
#define KB_FORGE_COMMENT_INIT { 0, NULL, NULL, NULL, 0, 0, 0 }
void kb_forge_comment_release(struct kb_forge_comment *c);

struct kb_forge_comment_list {
	struct kb_forge_comment *v;
	size_t nr, alloc;
};
#define KB_FORGE_COMMENT_LIST_INIT { NULL, 0, 0 }
void kb_forge_comment_list_release(struct kb_forge_comment_list *list);

/* What open_pr sends. */
struct kb_forge_new_pr {
	const char *head;  /* branch in the same repository */
	const char *base;  /* branch it merges into */
	const char *title;
	const char *body;  /* may be NULL */
	bool draft;
};

/*
 * A review: with path set, a comment on that line of the diff at
 * commit_sha (side RIGHT); without, a review of event COMMENT whose body
 * is the text.
 */
struct kb_forge_review {
	const char *commit_sha;
	const char *body;
	const char *path;  /* NULL: a review with no line comment */
	int64_t line;      /* with path: the line in the new file, >= 1 */
	const char *marker; /* text of body naming this review, found again after a lost reply; NULL: the whole body */
};

enum kb_forge_status_state {
	KB_STATUS_PENDING,
	KB_STATUS_SUCCESS,
	KB_STATUS_FAILURE,
	KB_STATUS_ERROR
};

/* A commit status (works with any token). */
struct kb_forge_status {
	const char *sha;
	enum kb_forge_status_state state;
	const char *context;      /* e.g. "kernelbot" */
	const char *description;  /* cut to 140 bytes (GitHub's limit) on a UTF-8 boundary */
	const char *target_url;   /* NULL: none */
};

enum kb_forge_check_status { KB_CHECK_QUEUED, KB_CHECK_IN_PROGRESS, KB_CHECK_COMPLETED };

enum kb_forge_check_conclusion {
	KB_CONCLUSION_NONE,       /* only while not completed */
	KB_CONCLUSION_SUCCESS,
	KB_CONCLUSION_FAILURE,
	KB_CONCLUSION_NEUTRAL,
	KB_CONCLUSION_CANCELLED,
	KB_CONCLUSION_TIMED_OUT,
	KB_CONCLUSION_SKIPPED
};

/* A check run (GitHub App tokens only; a PAT gets KB_ENOTSUPPORTED). */
struct kb_forge_check {
	const char *name;
	const char *head_sha;
	enum kb_forge_check_status status;
	enum kb_forge_check_conclusion conclusion; /* required when completed */
	const char *title;        /* output title, NULL: name */
	const char *summary;      /* markdown, cut to 65,535 bytes on a UTF-8 boundary */
	const char *text;         /* markdown, NULL: none; cut the same way */
	const char *details_url;  /* NULL: none */
	const char *external_id;  /* the caller's marker, set on create; a create whose reply was lost finds its run by it. NULL: none (retried blindly) */
};

/* Where the git layer fetches and pushes, and with what. */
struct kb_forge_remote {
	char *url;       /* https clone URL, or a local path (local forge) */
	char *username;  /* "x-access-token", NULL: no credentials */
	char *password;  /* the token (a secret: registered for redaction), NULL: none */
};
#define KB_FORGE_REMOTE_INIT { NULL, NULL, NULL }
void kb_forge_remote_release(struct kb_forge_remote *r);

/* Counters for tests and the polling benchmark. */
struct kb_forge_stats {
	int64_t requests;      /* requests sent (github) or records read/written (local) */
	int64_t not_modified;  /* 304 replies: no quota spent */
	int64_t retries;       /* attempts after the first */
	int64_t rate_limited;  /* waits caused by 403/429 rate limits */
	int64_t slept_ms;      /* total asked of the sleep function */
};

struct kb_forge;

/*
 * The operations. Each backend fills every slot. Callers use the
 * kb_forge_* wrappers below, which check the arguments common to all
 * backends first.
 */
struct kb_forge_ops {
	/*
	 * Open pull requests carrying label. etag is in/out: the value from
	 * the previous poll (empty: none) goes in; when nothing changed,
	 * *not_modified is set, out stays empty and (github) the poll cost no
	 * quota; else out holds each pull request with its current head sha
	 * and etag the new value to store.
	 */
	int (*list_labelled_prs)(struct kb_forge *f, struct kb_forge_pr_list *out,
				 bool *not_modified, struct strbuf *etag,
				 const char *repo, const char *label);
	/*
	 * Login of whoever added label last (the latest "labeled" event) and
	 * when (Unix seconds, the forge's clock; at_out may be NULL);
	 * KB_ENOTFOUND when never.
	 */
	int (*label_actor)(struct kb_forge *f, char **login_out, int64_t *at_out,
			   const char *repo, int64_t number, const char *label);
	/* The role login has on repo (KB_PERM_NONE for a stranger). */
	int (*permission)(struct kb_forge *f, enum kb_forge_perm *out, const char *repo,
			  const char *login);
	/* KB_ENOTFOUND when there is no such pull request. */
	int (*get_pr)(struct kb_forge *f, struct kb_forge_pr *out, const char *repo, int64_t number);
	/* Paths the pull request adds or modifies (removed files are left out), every page. */
	int (*pr_files)(struct kb_forge *f, struct strvec *paths, const char *repo, int64_t number);
	/*
	 * The pull request whose head is branch of repo itself: the open one
	 * if any, else the newest closed one; KB_ENOTFOUND when none.
	 */
	int (*find_pr_by_head)(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
			       const char *branch);
	/*
	 * Open a pull request. When one already exists for that head,
	 * KB_EEXISTS (not retried, nothing logged) with out filled from the
	 * existing one where it can be found.
	 */
	int (*open_pr)(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
		       const struct kb_forge_new_pr *spec);
	/* Set title and/or body (NULL: keep). */
	int (*update_pr)(struct kb_forge *f, const char *repo, int64_t number,
			 const char *title, const char *body);
	/*
	 * The oldest comment on issue (or pull request) whose body contains
	 * marker, written by the bot itself where the backend can tell who
	 * that is; every page is searched. KB_ENOTFOUND when none.
	 */
	int (*find_comment)(struct kb_forge *f, struct kb_forge_comment *out, const char *repo,
			    int64_t issue, const char *marker);
	/* Comments on issue created or updated at or after since (0: all), oldest first. */
	int (*list_comments)(struct kb_forge *f, struct kb_forge_comment_list *out,
			     const char *repo, int64_t issue, int64_t since);
	/*
	 * Comments on every issue and pull request of repo updated at or
	 * after since (0: all), most recently updated first, every page;
	 * each with its issue number. etag is in/out as for
	 * list_labelled_prs: when nothing changed since the answer etag came
	 * from (asked with the same since), *not_modified is set, out stays
	 * empty and (github) the call cost no quota. This is how a polling
	 * daemon reads slash commands.
	 */
	int (*list_repo_comments)(struct kb_forge *f, struct kb_forge_comment_list *out,
				  bool *not_modified, struct strbuf *etag, const char *repo,
				  int64_t since);
	/*
	 * Post a comment; its id in *id_out (may be NULL). marker (a text of
	 * body, NULL: the whole body) names it: when GitHub may have made it
	 * but its reply was lost, the bot's comments are searched for it
	 * before the post is retried, so that it is not made twice.
	 */
	int (*post_comment)(struct kb_forge *f, int64_t *id_out, const char *repo,
			    int64_t issue, const char *body, const char *marker);
	/* Replace a comment's body; KB_ENOTFOUND when it is gone. */
	int (*edit_comment)(struct kb_forge *f, const char *repo, int64_t comment_id,
			    const char *body);
	/* Post a review or line comment; its id in *id_out (may be NULL). Found again by review->marker as above. */
	int (*post_review)(struct kb_forge *f, int64_t *id_out, const char *repo,
			   int64_t number, const struct kb_forge_review *review);
	int (*set_status)(struct kb_forge *f, const char *repo, const struct kb_forge_status *st);
	/*
	 * Create (*id_inout == 0) or update (*id_inout, the id returned by
	 * the create) a check run. KB_ENOTSUPPORTED (nothing logged) when the
	 * credentials cannot (a personal access token): fall back to a
	 * commit status, see kb_forge_report. A create whose reply was lost
	 * finds its run by check->external_id before it is retried.
	 */
	int (*check_run)(struct kb_forge *f, int64_t *id_inout, const char *repo,
			 const struct kb_forge_check *check);
	/* Add labels (a label already there is fine). */
	int (*add_labels)(struct kb_forge *f, const char *repo, int64_t issue,
			  const char *const *labels, size_t nr);
	/* Remove one label; one that is not there is fine. */
	int (*remove_label)(struct kb_forge *f, const char *repo, int64_t issue, const char *label);
	/* Clone URL and credentials for repo, valid for at least five minutes. */
	int (*git_remote)(struct kb_forge *f, struct kb_forge_remote *out, const char *repo);
	/* The bot's own login (NULL in *out when it cannot be told; still 0). */
	int (*whoami)(struct kb_forge *f, char **login_out);
	void (*free)(struct kb_forge *f);
};

/* The handle every backend embeds first. */
struct kb_forge {
	const struct kb_forge_ops *ops;
	const char *name;               /* "github" or "local" */
	struct kb_forge_stats stats;
};

/*
 * Open the backend named kind ("github" or "local") from the config:
 * github uses the [github] keys; local keeps its records under
 * <state_dir>/local-forge (see bot/forge/local/local.h).
 */
int kb_forge_open(struct kb_forge **out, const char *kind, const struct kb_config *cfg);
/* Free the handle; NULL is fine. */
void kb_forge_free(struct kb_forge *f);

/* True when repo is "owner/name" made of [A-Za-z0-9._-], neither part "." or "..". */
bool kb_forge_repo_valid(const char *repo);

/* The wrappers: argument checks, then the backend. See the ops above. */
int kb_forge_list_labelled_prs(struct kb_forge *f, struct kb_forge_pr_list *out,
			       bool *not_modified, struct strbuf *etag,
			       const char *repo, const char *label);
int kb_forge_label_actor(struct kb_forge *f, char **login_out, const char *repo,
			 int64_t number, const char *label);
/* label_actor with the time of that labelling in *at_out. */
int kb_forge_label_event(struct kb_forge *f, char **login_out, int64_t *at_out, const char *repo,
			 int64_t number, const char *label);
int kb_forge_permission(struct kb_forge *f, enum kb_forge_perm *out, const char *repo,
			const char *login);
int kb_forge_get_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo, int64_t number);
int kb_forge_pr_files(struct kb_forge *f, struct strvec *paths, const char *repo, int64_t number);
int kb_forge_find_pr_by_head(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
			     const char *branch);
int kb_forge_open_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
		     const struct kb_forge_new_pr *spec);
int kb_forge_update_pr(struct kb_forge *f, const char *repo, int64_t number,
		       const char *title, const char *body);
int kb_forge_find_comment(struct kb_forge *f, struct kb_forge_comment *out, const char *repo,
			  int64_t issue, const char *marker);
int kb_forge_list_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
			   const char *repo, int64_t issue, int64_t since);
int kb_forge_list_repo_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
				bool *not_modified, struct strbuf *etag, const char *repo,
				int64_t since);
int kb_forge_post_comment(struct kb_forge *f, int64_t *id_out, const char *repo,
			  int64_t issue, const char *body);
/* post_comment named by marker, which body must hold (the bot's hidden markers). */
int kb_forge_post_marked_comment(struct kb_forge *f, int64_t *id_out, const char *repo,
				 int64_t issue, const char *marker, const char *body);
int kb_forge_edit_comment(struct kb_forge *f, const char *repo, int64_t comment_id,
			  const char *body);
int kb_forge_post_review(struct kb_forge *f, int64_t *id_out, const char *repo,
			 int64_t number, const struct kb_forge_review *review);
int kb_forge_set_status(struct kb_forge *f, const char *repo, const struct kb_forge_status *st);
int kb_forge_check_run(struct kb_forge *f, int64_t *id_inout, const char *repo,
		       const struct kb_forge_check *check);
int kb_forge_add_labels(struct kb_forge *f, const char *repo, int64_t issue,
			const char *const *labels, size_t nr);
int kb_forge_remove_label(struct kb_forge *f, const char *repo, int64_t issue, const char *label);
int kb_forge_git_remote(struct kb_forge *f, struct kb_forge_remote *out, const char *repo);
int kb_forge_whoami(struct kb_forge *f, char **login_out);

/*
 * Publish a result on a commit: a check run when the credentials allow
 * (created, or updated when *check_id is non-zero), else a commit status
 * with context check->name, description check->title and the state that
 * matches status/conclusion. *check_id stays 0 on the status path.
 */
int kb_forge_report(struct kb_forge *f, int64_t *check_id, const char *repo,
		    const struct kb_forge_check *check);

/* Names used on the wire: "pending"..., "queued"..., "success"...; NULL out of range. */
const char *kb_forge_status_state_name(enum kb_forge_status_state s);
const char *kb_forge_check_status_name(enum kb_forge_check_status s);
const char *kb_forge_check_conclusion_name(enum kb_forge_check_conclusion c);

/* Length of the longest prefix of s (at most max bytes) that does not split a UTF-8 sequence. */
size_t kb_forge_utf8_cut(const char *s, size_t max);

#endif
