/*
 * The github backend reading GitHub's replies (forge/github: client.c,
 * paginate.c, ops_*.c, app_token.c) through the whole client: retries,
 * waits, the ETag cache, pagination, error messages, every operation's
 * JSON. The network is replaced by core/http's fake hook, which serves the
 * replies of the input in turn:
 *
 *   byte 0-1  the operations to run (each byte % the number of them);
 *             byte 0 bit 7: App mode (installation tokens) instead of a PAT
 *   then      replies separated by "\n%%\n", each
 *             "HTTP/1.1 <status>" [header lines] "" <body>,
 *             or "TIMEOUT" (a transfer that failed and may be retried)
 *
 * Invariants: every wait the client asks for is in [0, max_wait_ms] (65
 * min), whatever the headers say; after a 403/429 with Retry-After: N
 * (seconds), the next request comes only after N seconds of sleep (so an
 * N beyond max_wait_ms ends the operation).
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"
#include "forge/forge.h"
#include "forge/github/gh.h"
#include "forge/github/github.h"
#include "fuzz.h"

#include <openssl/pem.h>

#define REPO "acme/ops"
#define MAX_WAIT_MS (65LL * 60 * 1000)

struct feed {
	struct kb_fuzz_parts replies;
	size_t next;
	int64_t owed_ms;  /* sleep the last Retry-After asked for and not yet slept */
};

static int no_sleep(void *payload, int64_t ms, enum kb_github_wait why)
{
	struct feed *f = payload;

	FUZZ_CHECK(ms >= 0 && ms <= MAX_WAIT_MS);
	f->owed_ms -= ms;
	return 0;
}

/* What a Retry-After of plain digits asks for, saturated; 0 for anything else. */
static int64_t owed_for(const struct kb_http_response *resp)
{
	const char *v = kb_http_response_header(resp, "retry-after");
	int64_t s = 0;

	if ((resp->status != 403 && resp->status != 429) || !v || !*v)
		return 0;
	for (; *v; v++) {
		if (*v < '0' || *v > '9')
			return 0;
		s = kb_sat_add_i64(kb_sat_mul_i64(s, 10), *v - '0');
	}
	return kb_sat_mul_i64(s, 1000);
}

/* One line into the header callback, as curl hands it over (with its CRLF). */
static void header_line(struct kb_http_response *resp, const char *line, size_t len)
{
	char *copy = xmalloc(len + 2);

	memcpy(copy, line, len);
	memcpy(copy + len, "\r\n", 2);
	kb_http_response_header_cb(copy, 1, len + 2, resp);
	free(copy);
}

static int serve(void *payload, const struct kb_http_request *req, struct kb_http_response *resp)
{
	struct feed *f = payload;
	const char *r, *p, *end;

	FUZZ_CHECK(f->owed_ms <= 0);
	if (f->next >= f->replies.nr) {
		resp->error = KB_HTTP_OTHER;
		return -1;
	}
	r = f->replies.v[f->next];
	end = r + f->replies.len[f->next];
	f->next++;
	if (!strncmp(r, "TIMEOUT", 7)) {
		resp->error = KB_HTTP_TIMEOUT;
		return -1;
	}
	if (strncmp(r, "HTTP/", 5) || !strchr(r, ' ')) {
		resp->error = KB_HTTP_OTHER;
		return -1;
	}
	resp->status = strtol(strchr(r, ' ') + 1, NULL, 10);
	for (p = r; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (len && p[len - 1] == '\r')
			len--;
		if (!len) {
			p = nl ? nl + 1 : end;
			break;
		}
		header_line(resp, p, len);
		p = nl ? nl + 1 : end;
	}
	if (p < end && !kb_http_response_body_cb((char *)p, 1, (size_t)(end - p), resp)) {
		resp->error = resp->too_big ? KB_HTTP_TOOBIG : KB_HTTP_OTHER;
		return -1;
	}
	resp->error = KB_HTTP_OK;
	f->owed_ms = owed_for(resp);
	return 0;
}

static const char *app_key(void)
{
	static struct strbuf path = STRBUF_INIT;
	EVP_PKEY *key;
	FILE *fp;

	if (path.len)
		return path.buf;
	strbuf_addf(&path, "%s/app.pem", kb_fuzz_dir());
	key = EVP_RSA_gen(2048);
	fp = fopen(path.buf, "w");
	if (!key || !fp || !PEM_write_PrivateKey(fp, key, NULL, NULL, 0, NULL, NULL))
		die("could not make the App's key");
	fclose(fp);
	EVP_PKEY_free(key);
	return path.buf;
}

static void run_op(struct kb_forge *f, struct feed *feed, unsigned op)
{
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct kb_forge_pr_list prs = KB_FORGE_PR_LIST_INIT;
	struct kb_forge_comment c = KB_FORGE_COMMENT_INIT;
	struct kb_forge_comment_list cl = KB_FORGE_COMMENT_LIST_INIT;
	struct kb_forge_remote remote = KB_FORGE_REMOTE_INIT;
	struct strvec paths = STRVEC_INIT;
	struct strbuf etag = STRBUF_INIT;
	enum kb_forge_perm perm;
	const char *labels[] = { "optimize-kernel", "kernelbot:done" };
	struct kb_forge_new_pr spec = { "kernelbot/pr-1/relu", "main", "title", "body", false };
	struct kb_forge_review review = { "0123456789abcdef0123456789abcdef01234567", "text", NULL, 0, NULL };
	struct kb_forge_status st = { "0123456789abcdef0123456789abcdef01234567", KB_STATUS_SUCCESS,
				      "kernelbot", "done", NULL };
	struct kb_forge_check check = { "kernelbot", "0123456789abcdef0123456789abcdef01234567",
					KB_CHECK_COMPLETED, KB_CONCLUSION_SUCCESS, "t", "s", NULL, NULL, NULL };
	bool nm = false;
	char *login = NULL;
	int64_t id = 0, at = 0;

	feed->owed_ms = 0; /* a new operation may send at once */
	switch (op % 20) {
	case 0: kb_forge_list_labelled_prs(f, &prs, &nm, &etag, REPO, "optimize-kernel"); break;
	case 1: kb_forge_label_event(f, &login, &at, REPO, 7, "optimize-kernel"); break;
	case 2: kb_forge_permission(f, &perm, REPO, "octocat"); break;
	case 3: kb_forge_get_pr(f, &pr, REPO, 7); break;
	case 4: kb_forge_pr_files(f, &paths, REPO, 7); break;
	case 5: kb_forge_find_pr_by_head(f, &pr, REPO, "kernelbot/pr-1/relu"); break;
	case 6: kb_forge_open_pr(f, &pr, REPO, &spec); break;
	case 7: kb_forge_update_pr(f, REPO, 7, "title", "body"); break;
	case 8: kb_forge_find_comment(f, &c, REPO, 7, "<!-- kernelbot:progress pr=7 -->"); break;
	case 9: kb_forge_list_comments(f, &cl, REPO, 7, 1700000000); break;
	case 10: kb_forge_list_repo_comments(f, &cl, &nm, &etag, REPO, 1700000000); break;
	case 11: kb_forge_post_comment(f, &id, REPO, 7, "hello"); break;
	case 12: kb_forge_edit_comment(f, REPO, 42, "hello again"); break;
	case 13: kb_forge_post_review(f, &id, REPO, 7, &review); break;
	case 14: kb_forge_set_status(f, REPO, &st); break;
	case 15: kb_forge_report(f, &id, REPO, &check); break;
	case 16: kb_forge_add_labels(f, REPO, 7, labels, 2); break;
	case 17: kb_forge_remove_label(f, REPO, 7, "optimize-kernel"); break;
	case 18: kb_forge_git_remote(f, &remote, REPO); break;
	default: kb_forge_whoami(f, &login); break;
	}
	for (size_t i = 0; i < prs.nr; i++)
		FUZZ_CHECK(prs.v[i].head_sha);
	kb_forge_pr_release(&pr);
	kb_forge_pr_list_release(&prs);
	kb_forge_comment_release(&c);
	kb_forge_comment_list_release(&cl);
	kb_forge_remote_release(&remote);
	strvec_clear(&paths);
	strbuf_release(&etag);
	free(login);
}

int kb_fuzz_github_rest(const uint8_t *data, size_t size)
{
	struct kb_github_opts opts = KB_GITHUB_OPTS_INIT;
	struct kb_forge *f = NULL;
	struct feed feed;

	kb_fuzz_init();
	if (size < 2)
		return 0;
	opts.token = "ghp_fuzz0123456789";
	if (data[0] & 0x80) {
		opts.app_id = 4242;
		opts.private_key_file = app_key();
	}
	opts.max_body = 1 << 16;
	opts.sleep_fn = no_sleep;
	if (kb_forge_github_new(&f, &opts))
		die("could not create the github backend");
	kb_fuzz_split(&feed.replies, data + 2, size - 2, KB_FUZZ_MAX_PARTS);
	feed.next = 0;
	feed.owed_ms = 0;
	gh_of(f)->sleep_payload = &feed;
	gh_of(f)->http.fake = serve;
	gh_of(f)->http.fake_payload = &feed;
	run_op(f, &feed, data[0] & 0x7f);
	run_op(f, &feed, data[1]);
	kb_forge_free(f);
	kb_fuzz_parts_release(&feed.replies);
	return 0;
}

KB_FUZZ_ENTRY(github_rest)
