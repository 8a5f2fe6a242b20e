#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/forge.h"
#include "forge/github/github.h"
#include "forge/local/local.h"

#include <inttypes.h>

/* The shared half of the forge interface: names, releases, argument checks. */

static const char *const perm_names[] = { "none", "read", "triage", "write", "maintain", "admin" };
static const char *const status_names[] = { "pending", "success", "failure", "error" };
static const char *const check_status_names[] = { "queued", "in_progress", "completed" };
static const char *const conclusion_names[] = { NULL, "success", "failure", "neutral",
						"cancelled", "timed_out", "skipped" };

const char *kb_forge_perm_name(enum kb_forge_perm perm)
{
	return (unsigned)perm < ARRAY_SIZE(perm_names) ? perm_names[perm] : NULL;
}

int kb_forge_perm_parse(const char *name, enum kb_forge_perm *out)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(perm_names); i++)
		if (!strcmp(name, perm_names[i])) {
			*out = (enum kb_forge_perm)i;
			return 0;
		}
	return -1;
}

const char *kb_forge_status_state_name(enum kb_forge_status_state s)
{
	return (unsigned)s < ARRAY_SIZE(status_names) ? status_names[s] : NULL;
}

const char *kb_forge_check_status_name(enum kb_forge_check_status s)
{
	return (unsigned)s < ARRAY_SIZE(check_status_names) ? check_status_names[s] : NULL;
}

const char *kb_forge_check_conclusion_name(enum kb_forge_check_conclusion c)
{
	return (unsigned)c < ARRAY_SIZE(conclusion_names) ? conclusion_names[c] : NULL;
}

size_t kb_forge_utf8_cut(const char *s, size_t max)
{
	size_t len = strlen(s);

	if (len <= max)
		return len;
	/* back off over continuation bytes to the start of the cut sequence */
	len = max;
	while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
		len--;
	return len;
}

void kb_forge_pr_list_release(struct kb_forge_pr_list *list)
{
	for (size_t i = 0; i < list->nr; i++)
		free(list->v[i].head_sha);
	free(list->v);
	list->v = NULL;
	list->nr = list->alloc = 0;
}

void kb_forge_pr_release(struct kb_forge_pr *pr)
{
	free(pr->title);
	free(pr->body);
	free(pr->state);
	free(pr->head_sha);
	free(pr->head_ref);
	free(pr->head_repo);
	free(pr->base_ref);
	free(pr->author);
	free(pr->url);
	strvec_clear(&pr->labels);
	memset(pr, 0, sizeof(*pr));
	strvec_init(&pr->labels);
}

void kb_forge_comment_release(struct kb_forge_comment *c)
{
	free(c->author);
	free(c->body);
	free(c->url);
	memset(c, 0, sizeof(*c));
}

void kb_forge_comment_list_release(struct kb_forge_comment_list *list)
{
	for (size_t i = 0; i < list->nr; i++)
		kb_forge_comment_release(&list->v[i]);
	free(list->v);
	list->v = NULL;
	list->nr = list->alloc = 0;
}

void kb_forge_remote_release(struct kb_forge_remote *r)
{
	free(r->url);
	free(r->username);
	if (r->password) {
		explicit_bzero(r->password, strlen(r->password));
		free(r->password);
	}
	memset(r, 0, sizeof(*r));
}

static bool name_part_valid(const char *s, size_t len)
{
	if (!len || len > 100)
		return false;
	if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

bool kb_forge_repo_valid(const char *repo)
{
	const char *slash = repo ? strchr(repo, '/') : NULL;

	return slash && name_part_valid(repo, (size_t)(slash - repo)) &&
	       name_part_valid(slash + 1, strlen(slash + 1));
}

int kb_forge_open(struct kb_forge **out, const char *kind, const struct kb_config *cfg)
{
	*out = NULL;
	if (!strcmp(kind, "github")) {
		struct kb_github_opts opts = KB_GITHUB_OPTS_INIT;

		kb_github_opts_from_config(&opts, cfg);
		return kb_forge_github_new(out, &opts);
	}
	if (!strcmp(kind, "local")) {
		struct strbuf root = STRBUF_INIT;
		int rc;

		strbuf_addf(&root, "%s/local-forge", cfg->state_dir);
		rc = kb_forge_local_new(out, root.buf);
		strbuf_release(&root);
		return rc;
	}
	return error("unknown forge '%s'", kind);
}

void kb_forge_free(struct kb_forge *f)
{
	if (f)
		f->ops->free(f);
}

/* --- wrappers --- */

static int check_repo(const char *repo)
{
	if (!kb_forge_repo_valid(repo))
		return error("invalid repository name '%s'", repo ? repo : "(null)");
	return 0;
}

static int check_number(const char *what, int64_t n)
{
	if (n <= 0)
		return error("invalid %s number '%" PRId64 "'", what, n);
	return 0;
}

static int check_text(const char *what, const char *s, bool may_be_null)
{
	if (!s)
		return may_be_null ? 0 : error("missing %s", what);
	if (strlen(s) > KB_FORGE_MAX_BODY) {
		log_error("%s is longer than %d bytes", what, KB_FORGE_MAX_BODY);
		return KB_ETOOBIG;
	}
	return 0;
}

static int check_word(const char *what, const char *s)
{
	if (!s || !*s)
		return error("missing %s", what);
	if (strlen(s) > 255 || strpbrk(s, "\r\n"))
		return error("invalid %s '%.64s'", what, s);
	return 0;
}

int kb_forge_list_labelled_prs(struct kb_forge *f, struct kb_forge_pr_list *out,
			       bool *not_modified, struct strbuf *etag,
			       const char *repo, const char *label)
{
	*not_modified = false;
	if (check_repo(repo) || check_word("label", label))
		return -1;
	if (strchr(label, ',')) /* the issues filter splits on commas */
		return error("label '%s' may not contain a comma", label);
	return f->ops->list_labelled_prs(f, out, not_modified, etag, repo, label);
}

int kb_forge_label_event(struct kb_forge *f, char **login_out, int64_t *at_out, const char *repo,
			 int64_t number, const char *label)
{
	*login_out = NULL;
	if (at_out)
		*at_out = 0;
	if (check_repo(repo) || check_number("pull request", number) || check_word("label", label))
		return -1;
	return f->ops->label_actor(f, login_out, at_out, repo, number, label);
}

int kb_forge_label_actor(struct kb_forge *f, char **login_out, const char *repo,
			 int64_t number, const char *label)
{
	return kb_forge_label_event(f, login_out, NULL, repo, number, label);
}

int kb_forge_permission(struct kb_forge *f, enum kb_forge_perm *out, const char *repo,
			const char *login)
{
	*out = KB_PERM_NONE;
	if (check_repo(repo) || check_word("login", login))
		return -1;
	return f->ops->permission(f, out, repo, login);
}

int kb_forge_get_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo, int64_t number)
{
	if (check_repo(repo) || check_number("pull request", number))
		return -1;
	return f->ops->get_pr(f, out, repo, number);
}

int kb_forge_pr_files(struct kb_forge *f, struct strvec *paths, const char *repo, int64_t number)
{
	if (check_repo(repo) || check_number("pull request", number))
		return -1;
	return f->ops->pr_files(f, paths, repo, number);
}

int kb_forge_find_pr_by_head(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
			     const char *branch)
{
	if (check_repo(repo) || check_word("branch", branch))
		return -1;
	return f->ops->find_pr_by_head(f, out, repo, branch);
}

int kb_forge_open_pr(struct kb_forge *f, struct kb_forge_pr *out, const char *repo,
		     const struct kb_forge_new_pr *spec)
{
	int rc;

	if (check_repo(repo) || check_word("head branch", spec->head) ||
	    check_word("base branch", spec->base) || check_word("title", spec->title))
		return -1;
	if ((rc = check_text("pull request body", spec->body, true)))
		return rc;
	return f->ops->open_pr(f, out, repo, spec);
}

int kb_forge_update_pr(struct kb_forge *f, const char *repo, int64_t number,
		       const char *title, const char *body)
{
	int rc;

	if (check_repo(repo) || check_number("pull request", number) ||
	    (title && check_word("title", title)))
		return -1;
	if ((rc = check_text("pull request body", body, true)))
		return rc;
	return f->ops->update_pr(f, repo, number, title, body);
}

int kb_forge_find_comment(struct kb_forge *f, struct kb_forge_comment *out, const char *repo,
			  int64_t issue, const char *marker)
{
	if (check_repo(repo) || check_number("issue", issue))
		return -1;
	if (!marker || !*marker)
		return error("missing comment marker");
	return f->ops->find_comment(f, out, repo, issue, marker);
}

int kb_forge_list_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
			   const char *repo, int64_t issue, int64_t since)
{
	if (check_repo(repo) || check_number("issue", issue))
		return -1;
	return f->ops->list_comments(f, out, repo, issue, since < 0 ? 0 : since);
}

int kb_forge_list_repo_comments(struct kb_forge *f, struct kb_forge_comment_list *out,
				bool *not_modified, struct strbuf *etag, const char *repo,
				int64_t since)
{
	*not_modified = false;
	if (check_repo(repo))
		return -1;
	return f->ops->list_repo_comments(f, out, not_modified, etag, repo, since < 0 ? 0 : since);
}

int kb_forge_post_marked_comment(struct kb_forge *f, int64_t *id_out, const char *repo,
				 int64_t issue, const char *marker, const char *body)
{
	int rc;

	if (id_out)
		*id_out = 0;
	if (check_repo(repo) || check_number("issue", issue))
		return -1;
	if ((rc = check_text("comment body", body, false)))
		return rc;
	if (marker && (!*marker || !strstr(body, marker)))
		return error("the comment body does not hold its marker '%s'", marker);
	return f->ops->post_comment(f, id_out, repo, issue, body, marker);
}

int kb_forge_post_comment(struct kb_forge *f, int64_t *id_out, const char *repo,
			  int64_t issue, const char *body)
{
	return kb_forge_post_marked_comment(f, id_out, repo, issue, NULL, body);
}

int kb_forge_edit_comment(struct kb_forge *f, const char *repo, int64_t comment_id,
			  const char *body)
{
	int rc;

	if (check_repo(repo) || check_number("comment", comment_id))
		return -1;
	if ((rc = check_text("comment body", body, false)))
		return rc;
	return f->ops->edit_comment(f, repo, comment_id, body);
}

int kb_forge_post_review(struct kb_forge *f, int64_t *id_out, const char *repo,
			 int64_t number, const struct kb_forge_review *review)
{
	int rc;

	if (id_out)
		*id_out = 0;
	if (check_repo(repo) || check_number("pull request", number) ||
	    check_word("commit", review->commit_sha))
		return -1;
	if ((rc = check_text("review body", review->body, false)))
		return rc;
	if (review->path && (check_word("path", review->path) || review->line < 1))
		return error("invalid review line '%s:%" PRId64 "'", review->path, review->line);
	if (review->marker && (!*review->marker || !strstr(review->body, review->marker)))
		return error("the review body does not hold its marker '%s'", review->marker);
	return f->ops->post_review(f, id_out, repo, number, review);
}

int kb_forge_set_status(struct kb_forge *f, const char *repo, const struct kb_forge_status *st)
{
	if (check_repo(repo) || check_word("commit", st->sha) || check_word("context", st->context))
		return -1;
	if (!kb_forge_status_state_name(st->state))
		return error("invalid status state '%d'", (int)st->state);
	return f->ops->set_status(f, repo, st);
}

int kb_forge_check_run(struct kb_forge *f, int64_t *id_inout, const char *repo,
		       const struct kb_forge_check *check)
{
	if (check_repo(repo) || check_word("check name", check->name) ||
	    check_word("commit", check->head_sha) ||
	    (check->external_id && check_word("check external id", check->external_id)))
		return -1;
	if (!kb_forge_check_status_name(check->status) ||
	    (unsigned)check->conclusion >= ARRAY_SIZE(conclusion_names))
		return error("invalid check run state for '%s'", check->name);
	if ((check->status == KB_CHECK_COMPLETED) != (check->conclusion != KB_CONCLUSION_NONE))
		return error("check run '%s': a conclusion goes with completed, and only then",
			     check->name);
	return f->ops->check_run(f, id_inout, repo, check);
}

int kb_forge_add_labels(struct kb_forge *f, const char *repo, int64_t issue,
			const char *const *labels, size_t nr)
{
	if (check_repo(repo) || check_number("issue", issue))
		return -1;
	for (size_t i = 0; i < nr; i++)
		if (check_word("label", labels[i]))
			return -1;
	if (!nr)
		return 0;
	return f->ops->add_labels(f, repo, issue, labels, nr);
}

int kb_forge_remove_label(struct kb_forge *f, const char *repo, int64_t issue, const char *label)
{
	if (check_repo(repo) || check_number("issue", issue) || check_word("label", label))
		return -1;
	return f->ops->remove_label(f, repo, issue, label);
}

int kb_forge_git_remote(struct kb_forge *f, struct kb_forge_remote *out, const char *repo)
{
	if (check_repo(repo))
		return -1;
	return f->ops->git_remote(f, out, repo);
}

int kb_forge_whoami(struct kb_forge *f, char **login_out)
{
	*login_out = NULL;
	return f->ops->whoami(f, login_out);
}

static enum kb_forge_status_state status_for(const struct kb_forge_check *c)
{
	if (c->status != KB_CHECK_COMPLETED)
		return KB_STATUS_PENDING;
	switch (c->conclusion) {
	case KB_CONCLUSION_SUCCESS:
	case KB_CONCLUSION_NEUTRAL:
	case KB_CONCLUSION_SKIPPED:
		return KB_STATUS_SUCCESS;
	case KB_CONCLUSION_FAILURE:
		return KB_STATUS_FAILURE;
	default:
		return KB_STATUS_ERROR;
	}
}

int kb_forge_report(struct kb_forge *f, int64_t *check_id, const char *repo,
		    const struct kb_forge_check *check)
{
	struct kb_forge_status st;
	int rc = kb_forge_check_run(f, check_id, repo, check);

	if (rc != KB_ENOTSUPPORTED)
		return rc;
	*check_id = 0;
	st.sha = check->head_sha;
	st.state = status_for(check);
	st.context = check->name;
	st.description = check->title ? check->title : check->name;
	st.target_url = check->details_url;
	return kb_forge_set_status(f, repo, &st);
}
