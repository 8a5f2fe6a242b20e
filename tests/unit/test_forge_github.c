/*
 * The github forge end to end against the GitHub simulator
 * (tests/sim/github_sim.py, started here on a loopback port): the
 * labelled-PR poll with ETag (a second poll is a free 304), label actor and
 * permission, pull request and paginated files, find/open with "already
 * exists", a comment found by marker on page two and edited in place,
 * reviews, statuses, labels, check runs with an App token and the status
 * fallback with a PAT, installation tokens cached and renewed, primary and
 * secondary rate limits, 5xx, a malformed body, timeouts and dropped
 * connections, the body cap, GitHub Enterprise's /api/v3 layout.
 *
 * Sleeps go through an injected function that records what was asked and
 * sleeps at most a few milliseconds, so rate-limit waits of a minute cost
 * nothing. Skipped when python3 or openssl is missing.
 */
#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "forge/forge.h"
#include "forge/github/github.h"

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <openssl/pem.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define REPO "acme/ops"
#define TOKEN "test-token-0123456789"
#define APP_ID 4242
#define LABEL "optimize-kernel"
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* One simulator for the whole file; state is reset before each test. */
static struct child_process sim = CHILD_PROCESS_INIT;
static char sim_url[128];
static char tmpdir[64];
static char key_path[128];
static bool sim_up;

/* What the client asked of the sleep function, by reason. */
struct sleeps {
	int count[3];
	int64_t total[3];
	int64_t last[3];
};
static struct sleeps slept;

static int record_sleep(void *payload, int64_t ms, enum kb_github_wait why)
{
	struct sleeps *s = payload;
	struct timespec ts = { 0, 2 * 1000000L };

	s->count[why]++;
	s->total[why] += ms;
	s->last[why] = ms;
	nanosleep(&ts, NULL);
	return 0;
}

/* --- the simulator's control API, over libcurl --- */

static size_t collect(char *data, size_t size, size_t nmemb, void *userdata)
{
	strbuf_add(userdata, data, size * nmemb);
	return size * nmemb;
}

static long http(const char *method, const char *path, const char *body, const char *auth,
		 struct strbuf *out)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	struct strbuf url = STRBUF_INIT, authline = STRBUF_INIT;
	long status = 0;

	strbuf_addf(&url, "%s%s", sim_url, path);
	h = curl_slist_append(h, "Content-Type: application/json");
	if (auth) {
		strbuf_addf(&authline, "Authorization: token %s", auth);
		h = curl_slist_append(h, authline.buf);
	}
	curl_easy_setopt(c, CURLOPT_URL, url.buf);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	strbuf_release(&url);
	strbuf_release(&authline);
	return status;
}

/* A control call that must succeed; the parsed reply (free with cJSON_Delete). */
static cJSON *ctl(const char *method, const char *path, const char *body)
{
	struct strbuf out = STRBUF_INIT, p = STRBUF_INIT;
	long status;
	cJSON *j;

	strbuf_addf(&p, "/_sim/%s", path);
	status = http(method, p.buf, body ? body : (strcmp(method, "GET") ? "{}" : NULL), NULL,
		      &out);
	if (status != 200)
		fail_msg("sim %s %s: %ld %s", method, path, status, out.buf);
	j = cJSON_Parse(out.buf);
	assert_non_null(j);
	strbuf_release(&out);
	strbuf_release(&p);
	return j;
}

static void ctlf(const char *method, const char *path, const char *fmt, ...) KB_PRINTF(3, 4);
static void ctlf(const char *method, const char *path, const char *fmt, ...)
{
	struct strbuf body = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&body, fmt, ap);
	va_end(ap);
	cJSON_Delete(ctl(method, path, body.buf));
	strbuf_release(&body);
}

/* Requests the simulator logged for method and a path matching part (and its status, -1: any). */
static int logged(const char *method, const char *part, long status)
{
	cJSON *j = ctl("GET", "requests", NULL), *e;
	int n = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "requests")) {
		const char *m = cJSON_GetObjectItem(e, "method")->valuestring;
		const char *p = cJSON_GetObjectItem(e, "path")->valuestring;
		cJSON *st = cJSON_GetObjectItem(e, "status");

		if (strcmp(m, method) || !strstr(p, part))
			continue;
		if (status >= 0 && (!cJSON_IsNumber(st) || (long)st->valuedouble != status))
			continue;
		n++;
	}
	cJSON_Delete(j);
	return n;
}

static int64_t quota_used(void)
{
	struct strbuf out = STRBUF_INIT;
	cJSON *j;
	int64_t used;

	assert_int_equal(http("GET", "/rate_limit", NULL, TOKEN, &out), 200);
	j = cJSON_Parse(out.buf);
	used = (int64_t)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rate"), "used")->valuedouble;
	cJSON_Delete(j);
	strbuf_release(&out);
	return used;
}

static cJSON *repo_state(void)
{
	cJSON *j = ctl("GET", "state", NULL);
	cJSON *r = cJSON_DetachItemFromObject(cJSON_GetObjectItem(j, "repos"), "acme/ops");

	cJSON_Delete(j);
	assert_non_null(r);
	return r;
}

/* --- lifecycle --- */

static const char *python(void)
{
	return access("/usr/bin/python3", X_OK) ? "python3" : "/usr/bin/python3";
}

static int group_setup(void **state)
{
	const char *top = getenv("KB_TOP");
	struct strbuf cmd = STRBUF_INIT, line = STRBUF_INIT, pub = STRBUF_INIT;
	EVP_PKEY *key;
	FILE *fp;
	int rc = 0;

	if (!top || !*top)
		top = ".";
	kb_strlcpy(tmpdir, "/tmp/kb-test-ghforge-XXXXXX", sizeof(tmpdir));
	if (!mkdtemp(tmpdir))
		return -1;
	xsnprintf(key_path, sizeof(key_path), "%s/app.pem", tmpdir);
	strbuf_addf(&pub, "%s/app.pub", tmpdir);
	key = EVP_RSA_gen(2048);
	fp = fopen(key_path, "w");
	PEM_write_PrivateKey(fp, key, NULL, NULL, 0, NULL, NULL);
	fclose(fp);
	fp = fopen(pub.buf, "w");
	PEM_write_PUBKEY(fp, key);
	fclose(fp);
	EVP_PKEY_free(key);

	strbuf_addf(&cmd, "%s/tests/sim/github_sim.py", top);
	if (!kb_is_file(cmd.buf) || access("/usr/bin/openssl", X_OK))
		goto out; /* every test skips */
	/* the "listening" line comes on stdout: hand stdout to the result pipe */
	strvec_pushl(&sim.args, "/bin/sh", "-c",
		     "exec \"$0\" \"$1\" --port 0 --token \"$2\" --app-id \"$3\" --app-key-pub \"$4\" >&3",
		     python(), cmd.buf, TOKEN ":kernelbot", "4242", pub.buf, NULL);
	sim.result_fd_child = 3;
	sim.err_cap = 1 << 20;
	if (start_command(&sim)) {
		rc = -1;
		goto out;
	}
	if (child_read_line(&sim, &line, 20000) || strncmp(line.buf, "listening ", 10)) {
		kill_command(&sim);
		fprintf(stderr, "github_sim did not start: %s\n", sim.err.buf);
		rc = -1;
		goto out;
	}
	kb_strlcpy(sim_url, line.buf + 10, sizeof(sim_url));
	sim_up = true;
out:
	strbuf_release(&cmd);
	strbuf_release(&line);
	strbuf_release(&pub);
	return rc;
}

static int group_teardown(void **state)
{
	if (sim_up) {
		kill(sim.pid, SIGTERM); /* our child: lets it remove its key file */
		finish_command(&sim, 5000);
	}
	child_process_release(&sim);
	kb_rm_rf(tmpdir);
	return 0;
}

/*
 * Fresh state: acme/ops (installation 7) with alice (write), mallory
 * (read), max (maintain), nobody (none); pull request 1 by carol, head
 * "relu" at SHA_A, labelled by alice.
 */
static int setup(void **state)
{
	if (!sim_up)
		return 0;
	cJSON_Delete(ctl("POST", "reset", NULL));
	ctlf("POST", "repos", "{\"full_name\": \"%s\", \"installation_id\": 7, \"collaborators\":"
	     " {\"alice\": \"write\", \"mallory\": \"read\", \"max\": \"maintain\","
	     " \"nobody\": \"none\"}}", REPO);
	ctlf("POST", "repos/acme/ops/pulls", "{\"title\": \"add relu\", \"user\": \"carol\","
	     " \"body\": \"please\", \"head\": {\"ref\": \"relu\", \"sha\": \"%s\"},"
	     " \"files\": [\"ops/relu.py\"], \"labels\": [\"%s\"], \"labeled_by\": \"alice\"}",
	     SHA_A, LABEL);
	cJSON_Delete(ctl("DELETE", "requests", NULL));
	memset(&slept, 0, sizeof(slept));
	return 0;
}

static struct kb_forge *forge_with(const struct kb_github_opts *extra)
{
	struct kb_github_opts o = KB_GITHUB_OPTS_INIT;
	struct kb_forge *f = NULL;

	if (extra)
		o = *extra;
	if (!o.api_url || !strcmp(o.api_url, "https://api.github.com"))
		o.api_url = sim_url;
	if (!o.token && !o.app_id)
		o.token = TOKEN;
	o.sleep_fn = record_sleep;
	o.sleep_payload = &slept;
	assert_int_equal(kb_forge_github_new(&f, &o), 0);
	return f;
}

static struct kb_forge *pat_forge(void)
{
	return forge_with(NULL);
}

#define NEED_SIM() do { if (!sim_up) { KB_SKIP("the GitHub simulator did not start (python3 missing?)"); return; } } while (0)

/* --- tests --- */

static void test_poll_etag(void **state)
{
	struct kb_forge *f;
	struct kb_forge_pr_list list = KB_FORGE_PR_LIST_INIT;
	struct strbuf etag = STRBUF_INIT;
	bool nm;
	int64_t used;

	NEED_SIM();
	f = pat_forge();
	/* an issue (not a pull request) with the label is not listed */
	ctlf("POST", "repos/acme/ops/issues", "{\"title\": \"bug\", \"labels\": [\"%s\"]}", LABEL);
	assert_int_equal(kb_forge_list_labelled_prs(f, &list, &nm, &etag, REPO, LABEL), 0);
	assert_false(nm);
	assert_int_equal(list.nr, 1);
	assert_int_equal(list.v[0].number, 1);
	assert_string_equal(list.v[0].head_sha, SHA_A);
	assert_true(etag.len > 0);
	kb_forge_pr_list_release(&list);

	/* the second poll: If-None-Match, a 304, no quota */
	used = quota_used();
	assert_int_equal(kb_forge_list_labelled_prs(f, &list, &nm, &etag, REPO, LABEL), 0);
	assert_true(nm);
	assert_int_equal(list.nr, 0);
	assert_int_equal(quota_used(), used);
	assert_int_equal(logged("GET", "/repos/acme/ops/issues", 304), 1);
	assert_int_equal(f->stats.not_modified, 1);

	/* a newly labelled pull request changes the listing */
	ctlf("POST", "repos/acme/ops/pulls", "{\"title\": \"softmax\", \"head\": {\"ref\": \"sm\","
	     " \"sha\": \"%s\"}, \"labels\": [\"%s\"], \"labeled_by\": \"max\"}", SHA_B, LABEL);
	assert_int_equal(kb_forge_list_labelled_prs(f, &list, &nm, &etag, REPO, LABEL), 0);
	assert_false(nm);
	assert_int_equal(list.nr, 2);
	kb_forge_pr_list_release(&list);
	strbuf_release(&etag);
	kb_forge_free(f);
}

static void test_label_actor_permission(void **state)
{
	struct kb_forge *f;
	enum kb_forge_perm perm;
	char *login = NULL;

	NEED_SIM();
	f = pat_forge();
	/* 104 more events: the one that counts is on the second page */
	for (int i = 0; i < 52; i++) {
		ctlf("DELETE", "repos/acme/ops/issues/1/labels/" LABEL, "{\"actor\": \"mallory\"}");
		ctlf("POST", "repos/acme/ops/issues/1/labels",
		     "{\"labels\": [\"%s\"], \"actor\": \"%s\"}", LABEL, i == 51 ? "max" : "mallory");
	}
	assert_int_equal(kb_forge_label_actor(f, &login, REPO, 1, LABEL), 0);
	assert_string_equal(login, "max");
	free(login);
	/* with the time of that labelling (the simulator's clock: now) */
	{
		int64_t at = 0;

		assert_int_equal(kb_forge_label_event(f, &login, &at, REPO, 1, LABEL), 0);
		assert_string_equal(login, "max");
		assert_true(at > kb_wall_s() - 120 && at <= kb_wall_s() + 5);
		free(login);
	}
	assert_int_equal(logged("GET", "/events", 200), 2);
	assert_int_equal(kb_forge_label_actor(f, &login, REPO, 1, "other"), KB_ENOTFOUND);

	assert_int_equal(kb_forge_permission(f, &perm, REPO, "alice"), 0);
	assert_int_equal(perm, KB_PERM_WRITE);
	assert_int_equal(kb_forge_permission(f, &perm, REPO, "max"), 0);
	assert_int_equal(perm, KB_PERM_MAINTAIN);
	assert_int_equal(kb_forge_permission(f, &perm, REPO, "mallory"), 0);
	assert_int_equal(perm, KB_PERM_READ);
	assert_int_equal(kb_forge_permission(f, &perm, REPO, "nobody"), 0);
	assert_int_equal(perm, KB_PERM_NONE);
	assert_int_equal(kb_forge_permission(f, &perm, REPO, "acme"), 0);
	assert_int_equal(perm, KB_PERM_ADMIN);
	assert_int_equal(kb_forge_permission(f, &perm, REPO, "ghost-user"), 0); /* 404 */
	assert_int_equal(perm, KB_PERM_NONE);
	kb_forge_free(f);
}

static void test_pr_and_paginated_files(void **state)
{
	struct kb_forge *f;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct strvec paths = STRVEC_INIT;
	struct strbuf body = STRBUF_INIT;

	NEED_SIM();
	f = pat_forge();
	strbuf_addstr(&body, "{\"files\": [");
	for (int i = 0; i < 250; i++)
		strbuf_addf(&body, "%s{\"filename\": \"ops/op%03d.py\", \"status\": \"%s\"}",
			    i ? ", " : "", i, i % 50 == 7 ? "removed" : "added");
	strbuf_addstr(&body, "]}");
	cJSON_Delete(ctl("PATCH", "repos/acme/ops/pulls/1", body.buf));

	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	assert_int_equal(pr.number, 1);
	assert_string_equal(pr.title, "add relu");
	assert_string_equal(pr.body, "please");
	assert_string_equal(pr.state, "open");
	assert_string_equal(pr.head_sha, SHA_A);
	assert_string_equal(pr.head_ref, "relu");
	assert_string_equal(pr.head_repo, REPO);
	assert_string_equal(pr.base_ref, "main");
	assert_string_equal(pr.author, "carol");
	assert_false(pr.merged);
	assert_false(pr.draft);
	assert_int_equal(pr.labels.nr, 1);
	assert_string_equal(pr.labels.v[0], LABEL);
	kb_forge_pr_release(&pr);

	assert_int_equal(kb_forge_pr_files(f, &paths, REPO, 1), 0);
	assert_int_equal(paths.nr, 245); /* five removed files left out */
	assert_string_equal(paths.v[0], "ops/op000.py");
	assert_string_equal(paths.v[244], "ops/op249.py");
	strvec_clear(&paths);
	/* three pages; the later ones by the Link URLs (/repositories/ID/...) */
	assert_int_equal(logged("GET", "/files", 200), 3);
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 99), KB_ENOTFOUND);
	kb_forge_pr_release(&pr);
	strbuf_release(&body);
	kb_forge_free(f);
}

static void test_find_and_open_pr(void **state)
{
	struct kb_forge *f;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct kb_forge_new_pr spec = { "kernelbot/pr-1/relu", "relu", "kernelbot: relu 1.80x faster",
					"body v1", false };
	int64_t n;
	cJSON *r;

	NEED_SIM();
	f = pat_forge();
	assert_int_equal(kb_forge_find_pr_by_head(f, &pr, REPO, spec.head), KB_ENOTFOUND);
	ctlf("POST", "repos/acme/ops/refs", "{\"ref\": \"heads/%s\", \"sha\": \"%s\"}", spec.head,
	     SHA_B);
	assert_int_equal(kb_forge_open_pr(f, &pr, REPO, &spec), 0);
	n = pr.number;
	assert_int_equal(n, 2);
	assert_string_equal(pr.head_sha, SHA_B);
	assert_string_equal(pr.base_ref, "relu");
	assert_string_equal(pr.author, "kernelbot");
	kb_forge_pr_release(&pr);

	assert_int_equal(kb_forge_find_pr_by_head(f, &pr, REPO, spec.head), 0);
	assert_int_equal(pr.number, n);
	kb_forge_pr_release(&pr);

	/* "already exists": found, not retried */
	assert_int_equal(kb_forge_open_pr(f, &pr, REPO, &spec), KB_EEXISTS);
	assert_int_equal(pr.number, n);
	kb_forge_pr_release(&pr);
	assert_int_equal(logged("POST", "/repos/acme/ops/pulls", -1), 2);
	assert_int_equal(logged("POST", "/repos/acme/ops/pulls", 422), 1);

	assert_int_equal(kb_forge_update_pr(f, REPO, n, NULL, "body v2"), 0);
	r = repo_state();
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "issues"),
				"2"), "body")->valuestring, "body v2");
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "issues"),
				"2"), "title")->valuestring, spec.title);
	cJSON_Delete(r);

	/* two mutations back to back: the second waited for the gap */
	assert_true(slept.count[KB_GITHUB_WAIT_MUTATION_GAP] >= 1);
	assert_true(slept.last[KB_GITHUB_WAIT_MUTATION_GAP] > 0 &&
		    slept.last[KB_GITHUB_WAIT_MUTATION_GAP] <= 1000);
	kb_forge_free(f);
}

static int count_bot_comments(void)
{
	cJSON *r = repo_state(), *c;
	int n = 0;

	cJSON_ArrayForEach(c, cJSON_GetObjectItem(r, "comments"))
		n += !strcmp(cJSON_GetObjectItem(c, "user")->valuestring, "kernelbot");
	cJSON_Delete(r);
	return n;
}

static void test_comment_marker_paginated(void **state)
{
	struct kb_forge *f;
	struct kb_forge_comment c = KB_FORGE_COMMENT_INIT;
	struct kb_forge_comment_list list = KB_FORGE_COMMENT_LIST_INIT;
	const char *marker = "<!-- kernelbot:progress -->";
	int64_t id = 0;

	NEED_SIM();
	f = pat_forge();
	/* someone quotes the marker early: not the bot's */
	ctlf("POST", "repos/acme/ops/issues/1/comments",
	     "{\"user\": \"mallory\", \"body\": \"%s fake\"}", marker);
	for (int i = 0; i < 129; i++)
		ctlf("POST", "repos/acme/ops/issues/1/comments",
		     "{\"user\": \"carol\", \"body\": \"comment %d\"}", i);
	assert_int_equal(kb_forge_find_comment(f, &c, REPO, 1, marker), KB_ENOTFOUND);
	assert_int_equal(kb_forge_post_comment(f, &id, REPO, 1, "<!-- kernelbot:progress -->\nstep 1"),
			 0);
	assert_true(id > 0);
	assert_int_equal(kb_forge_find_comment(f, &c, REPO, 1, marker), 0);
	assert_int_equal(c.id, id);
	assert_string_equal(c.author, "kernelbot");
	kb_forge_comment_release(&c);
	assert_int_equal(kb_forge_edit_comment(f, REPO, id, "<!-- kernelbot:progress -->\nstep 2"),
			 0);
	assert_int_equal(kb_forge_find_comment(f, &c, REPO, 1, marker), 0);
	assert_int_equal(c.id, id);
	assert_non_null(strstr(c.body, "step 2"));
	kb_forge_comment_release(&c);
	assert_int_equal(count_bot_comments(), 1);
	assert_int_equal(logged("PATCH", "/issues/comments/", 200), 1);

	/* every comment, across pages; the command is the last one */
	ctlf("POST", "repos/acme/ops/issues/1/comments",
	     "{\"user\": \"alice\", \"body\": \"/kernelbot stop\"}");
	assert_int_equal(kb_forge_list_comments(f, &list, REPO, 1, 0), 0);
	assert_int_equal(list.nr, 132);
	assert_string_equal(list.v[131].body, "/kernelbot stop");
	assert_string_equal(list.v[131].author, "alice");
	assert_true(list.v[131].created_at > 1600000000);
	kb_forge_comment_list_release(&list);
	assert_int_equal(kb_forge_list_comments(f, &list, REPO, 1, kb_wall_s() + 3600), 0);
	assert_int_equal(list.nr, 0);
	kb_forge_comment_list_release(&list);
	log_set_level(KB_LOG_OFF);
	assert_int_equal(kb_forge_edit_comment(f, REPO, 987654, "x"), KB_ENOTFOUND);
	log_set_level(KB_LOG_INFO);
	kb_forge_free(f);
}

/* The repository-wide listing behind slash commands by polling. */
static void test_repo_comments_etag_since_pages(void **state)
{
	struct kb_forge *f;
	struct kb_forge_comment_list list = KB_FORGE_COMMENT_LIST_INIT;
	struct strbuf etag = STRBUF_INIT;
	int64_t before, since;
	bool nm;

	NEED_SIM();
	f = pat_forge();
	ctlf("POST", "repos/acme/ops/issues", "{\"title\": \"a plain issue\"}");
	/* 150 comments: two pages of 100, the newest first */
	for (int i = 0; i < 150; i++)
		ctlf("POST", i % 2 ? "repos/acme/ops/issues/1/comments" : "repos/acme/ops/issues/2/comments",
		     "{\"user\": \"carol\", \"body\": \"comment %d\"}", i);
	ctlf("POST", "repos/acme/ops/issues/1/comments",
	     "{\"user\": \"alice\", \"body\": \"/kernelbot stop\"}");
	before = quota_used();
	assert_int_equal(kb_forge_list_repo_comments(f, &list, &nm, &etag, REPO, 0), 0);
	assert_false(nm);
	assert_int_equal(list.nr, 151);
	assert_string_equal(list.v[0].body, "/kernelbot stop");
	assert_string_equal(list.v[0].author, "alice");
	assert_int_equal(list.v[0].issue, 1);
	assert_int_equal(list.v[150].issue, 2);
	assert_true(etag.len > 0);
	assert_int_equal(logged("GET", "/repos/acme/ops/issues/comments", 200), 1);
	assert_int_equal(logged("GET", "/repositories/", 200), 1); /* page 2 by its Link */
	assert_int_equal(quota_used() - before, 2);
	kb_forge_comment_list_release(&list);

	/* nothing new: one 304, free */
	before = quota_used();
	assert_int_equal(kb_forge_list_repo_comments(f, &list, &nm, &etag, REPO, 0), 0);
	assert_true(nm);
	assert_int_equal(list.nr, 0);
	assert_int_equal(quota_used() - before, 0);
	assert_int_equal(logged("GET", "/issues/comments", 304), 1);

	/* since: only what was updated at or after it, and its query on the wire */
	since = kb_wall_s() + 3600;
	strbuf_reset(&etag);
	assert_int_equal(kb_forge_list_repo_comments(f, &list, &nm, &etag, REPO, since), 0);
	assert_false(nm);
	assert_int_equal(list.nr, 0);
	{
		cJSON *j = ctl("GET", "requests", NULL), *e, *last = NULL;

		cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "requests"))
			last = e;
		assert_non_null(strstr(cJSON_GetObjectItem(last, "query")->valuestring, "since="));
		assert_non_null(strstr(cJSON_GetObjectItem(last, "query")->valuestring,
				       "sort=updated"));
		cJSON_Delete(j);
	}
	strbuf_release(&etag);
	kb_forge_free(f);
}

static void test_review_status_labels(void **state)
{
	struct kb_forge *f;
	struct kb_forge_review rv = { SHA_A, "1.8x: see the table", NULL, 0, NULL };
	struct kb_forge_status st = { SHA_A, KB_STATUS_SUCCESS, "kernelbot", NULL, NULL };
	const char *labels[] = { "kernelbot:running", "kernelbot:done" };
	struct strbuf desc = STRBUF_INIT;
	int64_t id1 = 0, id2 = 0;
	cJSON *r, *e;
	int reviews = 0;

	NEED_SIM();
	f = pat_forge();
	assert_int_equal(kb_forge_post_review(f, &id1, REPO, 1, &rv), 0);
	rv.path = "ops/relu.py";
	rv.line = 3;
	rv.body = "this loop is the hot spot";
	assert_int_equal(kb_forge_post_review(f, &id2, REPO, 1, &rv), 0);
	assert_true(id1 > 0 && id2 > 0 && id1 != id2);
	/* a description over 140 bytes is cut, on a character boundary */
	strbuf_addstr(&desc, "x");
	for (int i = 0; i < 70; i++)
		strbuf_addstr(&desc, "\xc3\xa9"); /* 141 bytes: byte 140 is inside an é */
	st.description = desc.buf;
	st.target_url = "https://example.com/run/1";
	assert_int_equal(kb_forge_set_status(f, REPO, &st), 0);
	assert_int_equal(kb_forge_add_labels(f, REPO, 1, labels, 2), 0);
	assert_int_equal(kb_forge_remove_label(f, REPO, 1, "kernelbot:running"), 0);
	assert_int_equal(kb_forge_remove_label(f, REPO, 1, "never-there"), 0);

	r = repo_state();
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(r, "reviews"))
		reviews++;
	assert_int_equal(reviews, 2);
	e = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "statuses"), 0);
	assert_string_equal(cJSON_GetObjectItem(e, "state")->valuestring, "success");
	assert_string_equal(cJSON_GetObjectItem(e, "context")->valuestring, "kernelbot");
	assert_int_equal(strlen(cJSON_GetObjectItem(e, "description")->valuestring), 139);
	e = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "issues"), "1"),
				"labels");
	assert_int_equal(cJSON_GetArraySize(e), 2);
	assert_string_equal(cJSON_GetArrayItem(e, 0)->valuestring, LABEL);
	assert_string_equal(cJSON_GetArrayItem(e, 1)->valuestring, "kernelbot:done");
	cJSON_Delete(r);
	strbuf_release(&desc);
	kb_forge_free(f);
}

static void test_check_run_pat_falls_back_to_status(void **state)
{
	struct kb_forge *f;
	struct kb_forge_check ck = { "kernelbot", SHA_A, KB_CHECK_COMPLETED, KB_CONCLUSION_FAILURE,
				     "no faster kernel", "details", NULL, NULL, NULL };
	int64_t id = 0;
	cJSON *r;

	NEED_SIM();
	f = pat_forge();
	assert_int_equal(kb_forge_check_run(f, &id, REPO, &ck), KB_ENOTSUPPORTED);
	assert_int_equal(kb_forge_report(f, &id, REPO, &ck), 0);
	assert_int_equal(kb_forge_report(f, &id, REPO, &ck), 0);
	assert_int_equal(id, 0);
	/* refused once, then not asked again */
	assert_int_equal(logged("POST", "/check-runs", 403), 1);
	assert_int_equal(logged("POST", "/statuses/", 201), 2);
	r = repo_state();
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "statuses")), 2);
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "statuses"),
				0), "state")->valuestring, "failure");
	cJSON_Delete(r);
	kb_forge_free(f);
}

static void test_app_check_run_and_tokens(void **state)
{
	struct kb_github_opts o = KB_GITHUB_OPTS_INIT;
	struct kb_forge *f;
	struct kb_forge_check ck = { "kernelbot", SHA_A, KB_CHECK_IN_PROGRESS, KB_CONCLUSION_NONE,
				     "searching", "generation 1", NULL, NULL, NULL };
	struct kb_forge_remote rem = KB_FORGE_REMOTE_INIT;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	int64_t id = 0, id2;
	char *me;
	cJSON *r, *cr;

	NEED_SIM();
	o.app_id = APP_ID;
	o.private_key_file = key_path;
	f = forge_with(&o);
	assert_int_equal(kb_forge_check_run(f, &id, REPO, &ck), 0);
	assert_true(id > 0);
	ck.status = KB_CHECK_COMPLETED;
	ck.conclusion = KB_CONCLUSION_SUCCESS;
	ck.title = "1.8x faster";
	id2 = id;
	assert_int_equal(kb_forge_report(f, &id2, REPO, &ck), 0);
	assert_int_equal(id2, id);
	r = repo_state();
	cr = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "check_runs"), 0);
	assert_non_null(cr);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "check_runs")), 1);
	assert_string_equal(cJSON_GetObjectItem(cr, "status")->valuestring, "completed");
	assert_string_equal(cJSON_GetObjectItem(cr, "conclusion")->valuestring, "success");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "statuses")), 0);
	cJSON_Delete(r);

	/* installation looked up once, one token for every call */
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	kb_forge_pr_release(&pr);
	assert_int_equal(logged("GET", "/repos/acme/ops/installation", 200), 1);
	assert_int_equal(logged("POST", "/app/installations/7/access_tokens", 201), 1);
	/* git gets the installation token; whoami is the App's bot */
	assert_int_equal(kb_forge_git_remote(f, &rem, REPO), 0);
	assert_string_equal(rem.username, "x-access-token");
	assert_true(!strncmp(rem.password, "ghs_", 4));
	assert_non_null(strstr(rem.url, "acme/ops.git"));
	assert_true(log_contains_secret(rem.password));
	kb_forge_remote_release(&rem);
	assert_int_equal(kb_forge_whoami(f, &me), 0);
	assert_string_equal(me, "kernelbot[bot]");
	free(me);
	kb_forge_free(f);

	/* an installation token GitHub no longer takes: one 401, a new token, the call again */
	f = forge_with(&o);
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	kb_forge_pr_release(&pr);
	cJSON_Delete(ctl("DELETE", "requests", NULL));
	{
		cJSON *x = ctl("POST", "tokens/expire", "{\"kind\": \"installation\"}");

		assert_true(cJSON_GetObjectItem(x, "expired")->valuedouble >= 1);
		cJSON_Delete(x);
	}
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	kb_forge_pr_release(&pr);
	assert_int_equal(logged("GET", "/pulls/1", 401), 1);
	assert_int_equal(logged("POST", "/access_tokens", 201), 1);
	/* answered: from the ETag store (304) or afresh */
	assert_int_equal(logged("GET", "/pulls/1", 304) + logged("GET", "/pulls/1", 200), 1);
	kb_forge_free(f);

	/* tokens that live under five minutes are renewed on every use */
	ctlf("POST", "config", "{\"token_ttl\": 200}");
	cJSON_Delete(ctl("DELETE", "requests", NULL));
	f = forge_with(&o);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
		kb_forge_pr_release(&pr);
	}
	assert_int_equal(logged("POST", "/access_tokens", 201), 3);
	ctlf("POST", "config", "{\"token_ttl\": 3600}");
	kb_forge_free(f);
}

static void test_rate_limits(void **state)
{
	struct kb_forge *f;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	int64_t id;

	NEED_SIM();
	f = pat_forge();
	/* primary: waits until x-ratelimit-reset, then succeeds */
	ctlf("POST", "faults", "{\"kind\": \"primary\", \"path\": \"/pulls/1$\", \"reset_in\": 30}");
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	kb_forge_pr_release(&pr);
	assert_int_equal(slept.count[KB_GITHUB_WAIT_RATE_LIMIT], 1);
	assert_true(slept.last[KB_GITHUB_WAIT_RATE_LIMIT] >= 29000 &&
		    slept.last[KB_GITHUB_WAIT_RATE_LIMIT] <= 32000);
	assert_int_equal(f->stats.rate_limited, 1);

	/* secondary with retry-after: that many seconds; the comment is made once */
	ctlf("POST", "faults", "{\"kind\": \"secondary\", \"method\": \"POST\","
	     " \"path\": \"/comments$\", \"retry_after\": 3}");
	assert_int_equal(kb_forge_post_comment(f, &id, REPO, 1, "hello"), 0);
	assert_int_equal(slept.last[KB_GITHUB_WAIT_RATE_LIMIT], 3000);
	assert_int_equal(count_bot_comments(), 1);

	/* secondary without retry-after: at least a minute */
	ctlf("POST", "faults", "{\"kind\": \"secondary\", \"path\": \"/pulls/1$\","
	     " \"retry_after\": null}");
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	kb_forge_pr_release(&pr);
	assert_true(slept.last[KB_GITHUB_WAIT_RATE_LIMIT] >= 60000);
	assert_int_equal(slept.count[KB_GITHUB_WAIT_RATE_LIMIT], 3);

	/* a quota spent for good: remaining 0 on every reply; gives up after max attempts */
	ctlf("POST", "ratelimit", "{\"token\": \"%s\", \"remaining\": 0, \"reset_in\": 20}", TOKEN);
	log_set_level(KB_LOG_OFF);
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), -1);
	log_set_level(KB_LOG_INFO);
	kb_forge_pr_release(&pr);
	kb_forge_free(f);
}

static void test_5xx_malformed_timeout(void **state)
{
	struct kb_github_opts o = KB_GITHUB_OPTS_INIT;
	struct kb_forge *f;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct strbuf logpath = STRBUF_INIT, text = STRBUF_INIT;

	NEED_SIM();
	o.timeout_ms = 400;
	o.max_attempts = 4;
	f = forge_with(&o);
	/* 502 twice: retried with backoff, then fine */
	ctlf("POST", "faults", "{\"kind\": \"error\", \"status\": 502, \"path\": \"/pulls/1$\","
	     " \"count\": 2}");
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	kb_forge_pr_release(&pr);
	assert_int_equal(f->stats.retries, 2);
	assert_int_equal(slept.count[KB_GITHUB_WAIT_BACKOFF], 2);
	assert_true(slept.total[KB_GITHUB_WAIT_BACKOFF] >= 500 + 1000);

	/*
	 * dropped connections and a slow reply: retried (curl itself resends
	 * once on a reused connection the server closed, so two drops make
	 * sure one reaches the policy)
	 */
	ctlf("POST", "faults", "{\"kind\": \"drop\", \"path\": \"/pulls/1$\", \"count\": 2}");
	ctlf("POST", "faults", "{\"kind\": \"slow\", \"path\": \"/pulls/1$\", \"delay\": 1.0}");
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), 0);
	kb_forge_pr_release(&pr);
	assert_true(f->stats.retries >= 4);
	{
		cJSON *fl = ctl("GET", "faults", NULL);

		assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(fl, "faults")), 0);
		cJSON_Delete(fl);
	}
	assert_int_equal(logged("GET", "/repos/acme/ops/pulls/1", 0), 2);

	/* errors go to a log file we can read; the token never shows */
	strbuf_addf(&logpath, "%s/forge.log", tmpdir);
	assert_int_equal(log_open(logpath.buf), 0);
	ctlf("POST", "faults", "{\"kind\": \"error\", \"status\": 500, \"path\": \"/pulls/1$\","
	     " \"count\": 10}");
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), -1);
	kb_forge_pr_release(&pr);
	cJSON_Delete(ctl("DELETE", "faults", NULL));
	assert_int_equal(logged("GET", "/repos/acme/ops/pulls/1", 500), 4); /* max_attempts */
	/* a malformed body: a clear error, no crash */
	ctlf("POST", "faults", "{\"kind\": \"malformed\", \"path\": \"/pulls/1$\"}");
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), -1);
	kb_forge_pr_release(&pr);
	/* always slow: timeouts retried, then an error */
	ctlf("POST", "faults", "{\"kind\": \"slow\", \"path\": \"/pulls/1$\", \"delay\": 0.8,"
	     " \"count\": 4}");
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), -1);
	kb_forge_pr_release(&pr);
	log_open(NULL);
	assert_int_equal(strbuf_read_file(&text, logpath.buf, 0), 0);
	assert_non_null(strstr(text.buf, "github: GET /repos/acme/ops/pulls/1: 500, failed after every retry"));
	assert_non_null(strstr(text.buf, "github: malformed JSON in reply to GET '/repos/acme/ops/pulls/1'"));
	assert_non_null(strstr(text.buf, "timeout or connection failure"));
	assert_null(strstr(text.buf, TOKEN));
	strbuf_release(&text);
	strbuf_release(&logpath);
	kb_forge_free(f);
}

/* Comments of the bot's whose body holds text. */
static int bot_comments_with(const char *text)
{
	cJSON *r = repo_state(), *c;
	int n = 0;

	cJSON_ArrayForEach(c, cJSON_GetObjectItem(r, "comments"))
		n += !strcmp(cJSON_GetObjectItem(c, "user")->valuestring, "kernelbot") &&
		     strstr(cJSON_GetObjectItem(c, "body")->valuestring, text);
	cJSON_Delete(r);
	return n;
}

static int count_of(const char *what)
{
	cJSON *r = repo_state();
	int n = cJSON_GetArraySize(cJSON_GetObjectItem(r, what));

	cJSON_Delete(r);
	return n;
}

/*
 * GitHub made it, but the reply came after the client's timeout (or was
 * a 502, or the connection dropped): the retry finds it by its marker
 * instead of making a second one.
 */
static void test_lost_replies_are_found_not_remade(void **state)
{
	struct kb_github_opts o = KB_GITHUB_OPTS_INIT;
	struct kb_forge *f;
	const char *marker = "<!-- kernelbot:progress pr=1 -->";
	struct kb_forge_review rv = { SHA_A, "new best: 1.8x\n<!-- kernelbot:review job=1 -->", NULL,
				      0, "<!-- kernelbot:review job=1 -->" };
	struct kb_forge_check ck = { "kernelbot / relu", SHA_A, KB_CHECK_IN_PROGRESS,
				     KB_CONCLUSION_NONE, "searching", "generation 1", NULL, NULL,
				     "check:1" };
	struct kb_forge_new_pr spec = { "kernelbot/pr-1/relu", "relu", "kernelbot: relu 1.80x faster",
					"body", false };
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct kb_forge_comment c = KB_FORGE_COMMENT_INIT;
	int64_t id = 0, id2 = 0, rid = 0, cid = 0;

	NEED_SIM();
	o.timeout_ms = 400;
	o.max_attempts = 3;
	f = forge_with(&o);
	/* the progress comment, answered after the timeout */
	ctlf("POST", "faults", "{\"kind\": \"slow\", \"after\": true, \"method\": \"POST\","
	     " \"path\": \"/issues/1/comments$\", \"delay\": 1.0}");
	assert_int_equal(kb_forge_post_marked_comment(f, &id, REPO, 1, marker,
						      "working on it\n<!-- kernelbot:progress pr=1 -->"), 0);
	assert_int_equal(bot_comments_with(marker), 1);
	assert_int_equal(kb_forge_find_comment(f, &c, REPO, 1, marker), 0);
	assert_int_equal(c.id, id);
	kb_forge_comment_release(&c);
	assert_int_equal(logged("POST", "/issues/1/comments", -1), 1);
	assert_true(f->stats.retries >= 1);
	/* a comment without a marker: its body names it; a 502 after it was made */
	ctlf("POST", "faults", "{\"kind\": \"error\", \"status\": 502, \"after\": true,"
	     " \"method\": \"POST\", \"path\": \"/issues/1/comments$\"}");
	assert_int_equal(kb_forge_post_comment(f, &id2, REPO, 1, "done"), 0);
	assert_true(id2 > id);
	assert_int_equal(count_bot_comments(), 2);
	/* an older twin is not taken for the new one: the newest wins */
	ctlf("POST", "faults", "{\"kind\": \"slow\", \"after\": true, \"method\": \"POST\","
	     " \"path\": \"/issues/1/comments$\", \"delay\": 1.0}");
	assert_int_equal(kb_forge_post_comment(f, &id, REPO, 1, "done"), 0);
	assert_true(id > id2);
	assert_int_equal(count_bot_comments(), 3);
	/* a review: the reply lost after the timeout */
	ctlf("POST", "faults", "{\"kind\": \"slow\", \"after\": true, \"method\": \"POST\","
	     " \"path\": \"/pulls/1/reviews$\", \"delay\": 1.0}");
	assert_int_equal(kb_forge_post_review(f, &rid, REPO, 1, &rv), 0);
	assert_true(rid > 0);
	assert_int_equal(count_of("reviews"), 1);
	/* a line comment: the connection dropped after it was made */
	rv.path = "ops/relu.py";
	rv.line = 2;
	ctlf("POST", "faults", "{\"kind\": \"drop\", \"after\": true, \"method\": \"POST\","
	     " \"path\": \"/pulls/1/comments$\"}");
	assert_int_equal(kb_forge_post_review(f, &rid, REPO, 1, &rv), 0);
	assert_true(rid > 0);
	assert_int_equal(count_of("review_comments"), 1);
	/* the bot's pull request: found by its branch */
	cJSON_Delete(ctl("DELETE", "requests", NULL));
	ctlf("POST", "faults", "{\"kind\": \"slow\", \"after\": true, \"method\": \"POST\","
	     " \"path\": \"/pulls$\", \"delay\": 1.0}");
	assert_int_equal(kb_forge_open_pr(f, &pr, REPO, &spec), 0);
	assert_int_equal(pr.number, 2);
	assert_string_equal(pr.state, "open");
	kb_forge_pr_release(&pr);
	assert_int_equal(logged("POST", "/repos/acme/ops/pulls", -1), 1);
	kb_forge_free(f);

	/* a check run (an App's): found by its external id */
	memset(&o, 0, sizeof(o));
	o.app_id = APP_ID;
	o.private_key_file = key_path;
	o.timeout_ms = 400;
	o.max_attempts = 3;
	f = forge_with(&o);
	ctlf("POST", "faults", "{\"kind\": \"slow\", \"after\": true, \"method\": \"POST\","
	     " \"path\": \"/check-runs$\", \"delay\": 1.0}");
	assert_int_equal(kb_forge_check_run(f, &cid, REPO, &ck), 0);
	assert_true(cid > 0);
	assert_int_equal(count_of("check_runs"), 1);
	assert_int_equal(logged("GET", "/commits/" SHA_A "/check-runs", 200), 1);
	kb_forge_free(f);
}

static void test_body_cap_and_enterprise_layout(void **state)
{
	struct kb_github_opts o = KB_GITHUB_OPTS_INIT;
	struct kb_forge *f;
	struct kb_forge_pr pr = KB_FORGE_PR_INIT;
	struct strvec paths = STRVEC_INIT;
	struct strbuf url = STRBUF_INIT, body = STRBUF_INIT;

	NEED_SIM();
	o.max_body = 1024; /* a pull request's JSON is several KiB */
	f = forge_with(&o);
	log_set_level(KB_LOG_OFF);
	assert_int_equal(kb_forge_get_pr(f, &pr, REPO, 1), KB_ETOOBIG);
	log_set_level(KB_LOG_INFO);
	kb_forge_pr_release(&pr);
	assert_int_equal(logged("GET", "/pulls/1", -1), 1); /* not retried */
	kb_forge_free(f);

	/* GitHub Enterprise: https://HOST/api/v3, pagination stays under it */
	strbuf_addf(&url, "%s/api/v3/", sim_url);
	memset(&o, 0, sizeof(o));
	o.api_url = url.buf;
	f = forge_with(&o);
	strbuf_addstr(&body, "{\"files\": [");
	for (int i = 0; i < 120; i++)
		strbuf_addf(&body, "%s\"f%d.py\"", i ? ", " : "", i);
	strbuf_addstr(&body, "]}");
	cJSON_Delete(ctl("PATCH", "repos/acme/ops/pulls/1", body.buf));
	assert_int_equal(kb_forge_pr_files(f, &paths, REPO, 1), 0);
	assert_int_equal(paths.nr, 120);
	strvec_clear(&paths);
	kb_forge_free(f);

	/* an api_url that would send the token in clear to another host is refused */
	memset(&o, 0, sizeof(o));
	o.api_url = "http://example.com/api/v3";
	o.token = TOKEN;
	log_set_level(KB_LOG_OFF);
	assert_int_equal(kb_forge_github_new(&f, &o), -1);
	o.api_url = "ftp://127.0.0.1/";
	assert_int_equal(kb_forge_github_new(&f, &o), -1);
	o.api_url = sim_url;
	o.token = NULL;
	assert_int_equal(kb_forge_github_new(&f, &o), -1); /* no credentials */
	o.app_id = 1;
	o.private_key_file = "/nonexistent.pem";
	assert_int_equal(kb_forge_github_new(&f, &o), -1);
	log_set_level(KB_LOG_INFO);
	strbuf_release(&url);
	strbuf_release(&body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_poll_etag, setup),
		cmocka_unit_test_setup(test_label_actor_permission, setup),
		cmocka_unit_test_setup(test_pr_and_paginated_files, setup),
		cmocka_unit_test_setup(test_find_and_open_pr, setup),
		cmocka_unit_test_setup(test_comment_marker_paginated, setup),
		cmocka_unit_test_setup(test_repo_comments_etag_since_pages, setup),
		cmocka_unit_test_setup(test_review_status_labels, setup),
		cmocka_unit_test_setup(test_check_run_pat_falls_back_to_status, setup),
		cmocka_unit_test_setup(test_app_check_run_and_tokens, setup),
		cmocka_unit_test_setup(test_rate_limits, setup),
		cmocka_unit_test_setup(test_5xx_malformed_timeout, setup),
		cmocka_unit_test_setup(test_lost_replies_are_found_not_remade, setup),
		cmocka_unit_test_setup(test_body_cap_and_enterprise_layout, setup),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
