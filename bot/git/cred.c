#include "core/common.h"

#include <ctype.h>

#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "git/git_priv.h"

#define DEFAULT_USER "x-access-token"

/* Where the authority (userinfo@host:port) of a URL ends. */
static size_t authority_len(const char *s)
{
	size_t n = 0;

	while (s[n] && !strchr("/?# \t\r\n'\"<>", s[n]))
		n++;
	return n;
}

void kb_git_redact_url(struct strbuf *out, const char *s)
{
	const char *p;

	while ((p = strstr(s, "://"))) {
		size_t n;
		const char *at = NULL;

		p += 3;
		strbuf_add(out, s, (size_t)(p - s));
		n = authority_len(p);
		for (size_t i = 0; i < n; i++)
			if (p[i] == '@')
				at = p + i;
		if (at) {
			strbuf_addstr(out, "***");
			strbuf_add(out, at, (size_t)(p + n - at));
		} else {
			strbuf_add(out, p, n);
		}
		s = p + n;
	}
	strbuf_addstr(out, s);
}

/* scheme and host[:port] of url, lower-cased, without userinfo */
static void url_origin(struct strbuf *out, const char *url)
{
	const char *p = strstr(url, "://");
	size_t n;
	const char *host;

	if (!p)
		return;
	strbuf_add(out, url, (size_t)(p - url));
	strbuf_addstr(out, "://");
	p += 3;
	n = authority_len(p);
	host = p;
	for (size_t i = 0; i < n; i++)
		if (p[i] == '@')
			host = p + i + 1;
	strbuf_add(out, host, (size_t)(p + n - host));
	for (size_t i = 0; i < out->len; i++)
		out->buf[i] = (char)tolower((unsigned char)out->buf[i]);
}

static bool is_loopback_origin(const char *origin)
{
	static const char *const hosts[] = { "127.0.0.1", "localhost", "[::1]" };
	const char *h = strstr(origin, "://");

	if (!h)
		return false;
	h += 3;
	for (size_t i = 0; i < ARRAY_SIZE(hosts); i++) {
		size_t n = strlen(hosts[i]);

		if (!strncmp(h, hosts[i], n) && (h[n] == '\0' || h[n] == ':'))
			return true;
	}
	return false;
}

void kb_git__auth_init(struct kb_git_auth *auth, const char *url, const struct kb_git_repo *repo,
		       const struct kb_git_cred *cred)
{
	memset(auth, 0, sizeof(*auth));
	auth->url = url;
	if (cred) {
		auth->username = cred->username;
		auth->token = cred->token;
		if (auth->token && *auth->token)
			log_add_secret(auth->token);
	} else if (repo) {
		auth->username = repo->username;
		auth->token = repo->token;
	}
	if (!auth->username || !*auth->username)
		auth->username = DEFAULT_USER;
	if (auth->token && !*auth->token)
		auth->token = NULL;
}

void kb_git__auth_release(struct kb_git_auth *auth)
{
	FREE_AND_NULL(auth->push_status);
}

static void withhold(struct kb_git_auth *a, const char *why)
{
	a->withheld = true;
	kb_strlcpy(a->why, why, sizeof(a->why));
}

/*
 * One token, sent once per operation: asked again means the server refused
 * it, and libgit2 would otherwise ask forever. The token goes only to the
 * host of the URL the operation was started with (not to a redirect's
 * target), and never in clear text except to loopback (tests).
 */
static int credentials_cb(git_credential **out, const char *url, const char *user_from_url,
			  unsigned int allowed, void *payload)
{
	struct kb_git_auth *a = payload;
	struct strbuf want = STRBUF_INIT, got = STRBUF_INIT;
	int rc = GIT_EAUTH;

	(void)user_from_url;
	if (!a->token) {
		withhold(a, "no token configured");
		goto out;
	}
	if (!(allowed & GIT_CREDENTIAL_USERPASS_PLAINTEXT)) {
		withhold(a, "the server asked for a kind of credential other than a token");
		goto out;
	}
	if (a->sent) {
		a->rejected = true;
		goto out;
	}
	url_origin(&want, a->url);
	url_origin(&got, url);
	if (!want.len || strcmp(want.buf, got.buf)) {
		withhold(a, "the request went to another host than the configured remote");
		goto out;
	}
	if (strncmp(got.buf, "https://", 8) && !is_loopback_origin(got.buf)) {
		withhold(a, "the remote is not https");
		goto out;
	}
	if (git_credential_userpass_plaintext_new(out, a->username, a->token) < 0)
		goto out;
	a->sent++;
	rc = 0;
out:
	strbuf_release(&want);
	strbuf_release(&got);
	return rc;
}

static int push_update_reference_cb(const char *refname, const char *status, void *payload)
{
	struct kb_git_auth *a = payload;

	if (status && !a->push_status) {
		struct strbuf sb = STRBUF_INIT;

		strbuf_addf(&sb, "%s: %s", refname, status);
		a->push_status = strbuf_detach(&sb, NULL);
	}
	return 0;
}

/* force-with-lease: the remote tip must still be the one we checked */
static int push_negotiation_cb(const git_push_update **updates, size_t len, void *payload)
{
	struct kb_git_auth *a = payload;

	if (!a->lease)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (!a->push_ref || strcmp(updates[i]->dst_refname, a->push_ref))
			continue;
		if (!git_oid_equal(&updates[i]->src, a->lease)) {
			a->lease_broken = true;
			return GIT_EUSER;
		}
	}
	return 0;
}

void kb_git__callbacks(git_remote_callbacks *cb, struct kb_git_auth *auth)
{
	git_remote_init_callbacks(cb, GIT_REMOTE_CALLBACKS_VERSION);
	cb->credentials = credentials_cb;
	cb->push_update_reference = push_update_reference_cb;
	cb->push_negotiation = push_negotiation_cb;
	cb->payload = auth;
}

int kb_git__error(const struct kb_git_auth *auth, const char *fmt, ...)
{
	const git_error *e = git_error_last();
	struct strbuf what = STRBUF_INIT, msg = STRBUF_INIT;
	int rc = -1;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&what, fmt, ap);
	va_end(ap);
	if (auth && auth->rejected) {
		strbuf_addstr(&what, ": the server refused the token");
		rc = KB_GIT_EAUTH;
	} else if (auth && auth->withheld) {
		strbuf_addf(&what, ": authentication required, token not sent (%s)", auth->why);
		rc = KB_GIT_EAUTH;
	} else if (e && e->message && *e->message) {
		strbuf_addf(&what, ": %s", e->message);
		/* libgit2 1.5 words it "unexpected http status code: 403" */
		if (e->klass == GIT_ERROR_HTTP &&
		    (strstr(e->message, "authentication") || strstr(e->message, "code: 401") ||
		     strstr(e->message, "code: 403")))
			rc = KB_GIT_EAUTH;
	}
	kb_git_redact_url(&msg, what.buf);
	strbuf_trim(&msg);
	while (msg.len && msg.buf[msg.len - 1] == '.')
		strbuf_setlen(&msg, msg.len - 1);
	log_error("%s", msg.buf);
	git_error_clear();
	strbuf_release(&what);
	strbuf_release(&msg);
	return rc;
}
