#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "git/git.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

/*
 * The git side against a real git smart-HTTP server (lighttpd running
 * git-http-backend, tests/gitserver/git-http-server.sh) on loopback, with
 * token auth on every request (a private repository). The suite's tests
 * run in order on one server and one cache, as a job would.
 */

#define TOKEN "tok-9f2c61d0e8a4"
#define BOT_NAME "kernelbot"
#define BOT_EMAIL "kernelbot@example.com"
#define BRANCH "kernelbot/pr-7/add"

static struct {
	bool skip;
	char tmp[64];
	struct strbuf srv;   /* GIT_PROJECT_ROOT */
	struct strbuf bare;  /* srv/demo.git */
	struct strbuf cache; /* the bot's cache dir */
	struct strbuf seed;  /* a work tree the test's "humans" commit from */
	struct strbuf url;   /* http://127.0.0.1:PORT/git/demo.git */
	char main_sha[KB_GIT_SHA_SIZE];
	char feature_sha[KB_GIT_SHA_SIZE];
	char bot_sha[KB_GIT_SHA_SIZE]; /* the bot's last pushed commit */
	struct child_process server;
	struct kb_git_repo *repo;
	struct kb_git_cred cred;
} F;

/* --- helpers --- */

static bool quiet_git; /* an expected failure: say nothing */

/* git CLI with a clean config; out (may be NULL) gets stdout, trimmed */
static int git_in(const char *dir, struct strbuf *out, ...)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	va_list ap;
	const char *arg;
	int rc;

	strvec_pushl(&cp.args, "git", "-c", "init.defaultBranch=main", NULL);
	if (dir)
		strvec_pushl(&cp.args, "-C", dir, NULL);
	va_start(ap, out);
	while ((arg = va_arg(ap, const char *)))
		strvec_push(&cp.args, arg);
	va_end(ap);
	strvec_pushf(&cp.env, "HOME=%s", F.tmp);
	strvec_pushl(&cp.env, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", NULL);
	cp.timeout_ms = 20000;
	rc = run_command(&cp);
	if (!rc && cp.exit_code)
		rc = -1;
	if (rc && !quiet_git) {
		print_message("git failed:");
		for (size_t i = 0; i < cp.args.nr; i++)
			print_message(" %s", cp.args.v[i]);
		print_message("\n%s", cp.err.buf);
	}
	if (out) {
		strbuf_reset(out);
		strbuf_addstr(out, cp.out.buf);
		strbuf_trim(out);
	}
	child_process_release(&cp);
	return rc;
}

static void write_text(const char *dir, const char *name, const char *text, mode_t mode)
{
	struct strbuf path = STRBUF_INIT;
	int fd;

	strbuf_addf(&path, "%s/%s", dir, name);
	fd = open(path.buf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(chmod(path.buf, mode), 0);
	strbuf_release(&path);
}

static void read_text(struct strbuf *out, const char *dir, const char *name)
{
	struct strbuf path = STRBUF_INIT;

	strbuf_addf(&path, "%s/%s", dir, name);
	strbuf_reset(out);
	assert_int_equal(strbuf_read_file(out, path.buf, 1 << 20), 0);
	strbuf_release(&path);
}

/* sha of rev in the server's bare repository ("" when it has none) */
static void server_rev(char *sha, const char *rev)
{
	struct strbuf out = STRBUF_INIT;

	sha[0] = '\0';
	quiet_git = true;
	if (!git_in(NULL, &out, "--git-dir", F.bare.buf, "rev-parse", "--verify", "-q", rev, NULL))
		kb_strlcpy(sha, out.buf, KB_GIT_SHA_SIZE);
	quiet_git = false;
	strbuf_release(&out);
}

/* Log to a file while a call runs; *logged gets what it wrote. */
static char log_path[96];

static void log_capture_begin(void)
{
	xsnprintf(log_path, sizeof(log_path), "%s/capture.log", F.tmp);
	unlink(log_path);
	assert_int_equal(log_open(log_path), 0);
}

static void log_capture_end(struct strbuf *logged)
{
	log_open(NULL);
	strbuf_reset(logged);
	assert_int_equal(strbuf_read_file(logged, log_path, 0), 0);
}

/* --- fixture: the server, a seeded repository, the bot's cache --- */

static int start_server(void)
{
	struct child_process *cp = &F.server;
	struct strbuf script = STRBUF_INIT, conf = STRBUF_INIT, line = STRBUF_INIT;
	const char *top = getenv("KB_TOP");
	int rc;

	strbuf_addf(&script, "%s/tests/gitserver/git-http-server.sh", top ? top : ".");
	strbuf_addf(&conf, "%s/server", F.tmp);
	child_process_init(cp);
	strvec_pushl(&cp->args, "sh", script.buf, "-r", F.srv.buf, "-t", TOKEN, "-d", conf.buf,
		     "-p", "-f", "3", NULL);
	cp->result_fd_child = 3;
	cp->keep_tail = true;
	rc = start_command(cp);
	if (!rc)
		rc = child_read_line(cp, &line, 15000);
	if (rc) {
		finish_command(cp, 2000);
		if (cp->exit_code == 77) {
			print_message("git server unavailable: %s\n", cp->err.buf);
			F.skip = true;
			rc = 0;
		} else {
			print_message("git server did not start (exit %d): %s\n", cp->exit_code,
				      cp->err.buf);
			rc = -1;
		}
		goto out;
	}
	strbuf_addf(&F.url, "%s/demo.git", line.buf);
out:
	strbuf_release(&script);
	strbuf_release(&conf);
	strbuf_release(&line);
	return rc;
}

static int make_dir(const char *base, const char *rel)
{
	struct strbuf d = STRBUF_INIT;
	int rc;

	strbuf_addf(&d, "%s/%s", base, rel);
	rc = kb_mkdir_p(d.buf, 0755);
	strbuf_release(&d);
	return rc;
}

/* git CLI commit in the seed work tree by a human */
static int human_commit(const char *name, const char *email, const char *msg)
{
	struct strbuf user = STRBUF_INIT, mail = STRBUF_INIT;
	int rc;

	strbuf_addf(&user, "user.name=%s", name);
	strbuf_addf(&mail, "user.email=%s", email);
	rc = git_in(F.seed.buf, NULL, "add", "-A", NULL);
	if (!rc)
		rc = git_in(F.seed.buf, NULL, "-c", user.buf, "-c", mail.buf, "commit", "-q", "-m",
			    msg, NULL);
	strbuf_release(&user);
	strbuf_release(&mail);
	return rc;
}

/* main: README, an operator, a script, a link; feature (the "pull
 * request"): one more commit on top */
static int seed_repository(void)
{
	struct strbuf out = STRBUF_INIT, link = STRBUF_INIT;
	int rc = -1;

	if (git_in(NULL, NULL, "init", "-q", "--bare", F.bare.buf, NULL) ||
	    git_in(NULL, NULL, "init", "-q", F.seed.buf, NULL) || make_dir(F.seed.buf, "ops/add"))
		goto out;
	write_text(F.seed.buf, "README.md", "# demo\n", 0644);
	write_text(F.seed.buf, "ops/add/func_forward.py", "def forward_fn(a, b):\n    return a + b\n",
		   0644);
	write_text(F.seed.buf, "run.sh", "#!/bin/sh\necho run\n", 0755);
	strbuf_addf(&link, "%s/secret-link", F.seed.buf);
	if (symlink("/etc/passwd", link.buf) ||
	    human_commit("Alice", "alice@example.com", "initial") ||
	    git_in(F.seed.buf, NULL, "push", "-q", F.bare.buf, "HEAD:refs/heads/main", NULL) ||
	    git_in(F.seed.buf, &out, "rev-parse", "HEAD", NULL))
		goto out;
	kb_strlcpy(F.main_sha, out.buf, sizeof(F.main_sha));

	write_text(F.seed.buf, "ops/add/func_forward.py",
		   "def forward_fn(a, b):\n    return (a + b) * 1\n", 0644);
	write_text(F.seed.buf, ".kernelbot.ini", "[operators]\npaths = ops/add\n", 0644);
	if (human_commit("Alice", "alice@example.com", "add operator") ||
	    git_in(F.seed.buf, NULL, "push", "-q", F.bare.buf, "HEAD:refs/heads/feature", NULL) ||
	    git_in(F.seed.buf, &out, "rev-parse", "HEAD", NULL))
		goto out;
	kb_strlcpy(F.feature_sha, out.buf, sizeof(F.feature_sha));
	/* GitHub keeps pull request heads under refs/pull/N/head */
	if (git_in(NULL, NULL, "--git-dir", F.bare.buf, "update-ref", "refs/pull/7/head",
		   F.feature_sha, NULL))
		goto out;
	rc = 0;
out:
	strbuf_release(&out);
	strbuf_release(&link);
	return rc;
}

static int group_setup(void **state)
{
	memset(&F, 0, sizeof(F));
	strbuf_init(&F.srv, 0);
	strbuf_init(&F.bare, 0);
	strbuf_init(&F.cache, 0);
	strbuf_init(&F.seed, 0);
	strbuf_init(&F.url, 0);
	child_process_init(&F.server);
	F.cred.token = TOKEN;
	xsnprintf(F.tmp, sizeof(F.tmp), "/tmp/kb-test-git-XXXXXX");
	if (!mkdtemp(F.tmp))
		return -1;
	/* libgit2 reads ~/.gitconfig: keep the user's out of it */
	setenv("HOME", F.tmp, 1);
	setenv("XDG_CONFIG_HOME", F.tmp, 1);
	strbuf_addf(&F.srv, "%s/srv", F.tmp);
	strbuf_addf(&F.bare, "%s/demo.git", F.srv.buf);
	strbuf_addf(&F.cache, "%s/cache", F.tmp);
	strbuf_addf(&F.seed, "%s/seed", F.tmp);
	if (kb_mkdir_p(F.srv.buf, 0755))
		return -1;
	if (start_server())
		return -1;
	/* the local-path tests run without the server */
	return seed_repository();
}

static int group_teardown(void **state)
{
	kb_git_repo_free(F.repo);
	/* the script and lighttpd share a process group: both go */
	kill_command(&F.server);
	child_process_release(&F.server);
	kb_rm_rf(F.tmp);
	strbuf_release(&F.srv);
	strbuf_release(&F.bare);
	strbuf_release(&F.cache);
	strbuf_release(&F.seed);
	strbuf_release(&F.url);
	return 0;
}

#define NEED_SERVER() \
	do { \
		if (F.skip) \
			KB_SKIP("no git smart-HTTP server (lighttpd or git-http-backend missing)"); \
		assert_non_null(F.repo); \
	} while (0)

/* --- tests --- */

static void test_redact_url(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	kb_git_redact_url(&sb, "failed 'https://x-access-token:s3cr3t@github.com/o/r.git' and "
			       "http://u@h:8080/p, file:///x, https://plain.example/p");
	assert_string_equal(sb.buf, "failed 'https://***@github.com/o/r.git' and "
				    "http://***@h:8080/p, file:///x, https://plain.example/p");
	strbuf_release(&sb);
}

static void test_sync_clones_with_token(void **state)
{
	struct kb_git_repo *again = NULL, *anon = NULL;
	struct kb_git_cred none = { 0 };
	char sha[KB_GIT_SHA_SIZE];
	struct strbuf logged = STRBUF_INIT;

	if (F.skip)
		KB_SKIP("no git smart-HTTP server (lighttpd or git-http-backend missing)");
	assert_int_equal(git_in(NULL, NULL, "--git-dir", F.bare.buf, "update-ref", "refs/heads/gone",
				F.main_sha, NULL),
			 0);
	assert_int_equal(kb_git_sync(&F.repo, F.cache.buf, F.url.buf, &F.cred), 0);
	assert_non_null(F.repo);
	assert_true(kb_is_dir(kb_git_repo_path(F.repo)));
	assert_int_equal(kb_git_resolve(F.repo, "refs/remotes/origin/main", sha), 0);
	assert_string_equal(sha, F.main_sha);
	assert_int_equal(kb_git_resolve(F.repo, "refs/remotes/origin/feature", sha), 0);
	assert_string_equal(sha, F.feature_sha);
	assert_int_equal(kb_git_resolve(F.repo, "refs/remotes/origin/nothere", sha), KB_ENOTFOUND);

	assert_int_equal(kb_git_resolve(F.repo, "refs/remotes/origin/gone", sha), 0);

	/* the second sync opens the same cache, fetches and prunes */
	assert_int_equal(git_in(NULL, NULL, "--git-dir", F.bare.buf, "update-ref", "-d",
				"refs/heads/gone", NULL),
			 0);
	assert_int_equal(kb_git_sync(&again, F.cache.buf, F.url.buf, &F.cred), 0);
	assert_string_equal(kb_git_repo_path(again), kb_git_repo_path(F.repo));
	assert_int_equal(kb_git_resolve(again, "refs/remotes/origin/gone", sha), KB_ENOTFOUND);
	assert_int_equal(kb_git_resolve(again, "refs/remotes/origin/main", sha), 0);
	kb_git_repo_free(again);

	/* a private repository without a token: refused, and said why */
	log_capture_begin();
	assert_int_equal(kb_git_sync(&anon, F.cache.buf, F.url.buf, &none), KB_GIT_EAUTH);
	log_capture_end(&logged);
	assert_null(anon);
	assert_non_null(strstr(logged.buf, "no token configured"));
	strbuf_release(&logged);
}

static void test_fetch_pr_head(void **state)
{
	char sha[KB_GIT_SHA_SIZE], moved[KB_GIT_SHA_SIZE];
	static const char *missing = "0123456789abcdef0123456789abcdef01234567";

	NEED_SERVER();
	assert_int_equal(kb_git_fetch_pr(F.repo, 7, F.feature_sha), 0);
	assert_int_equal(kb_git_resolve(F.repo, "refs/kernelbot/fetched/pull/7/head", sha), 0);
	assert_string_equal(sha, F.feature_sha);
	/* the local forge: a pull request head is an ordinary branch */
	assert_int_equal(kb_git_fetch_ref(F.repo, "feature", F.feature_sha, sha), 0);
	assert_string_equal(sha, F.feature_sha);
	assert_int_equal(kb_git_fetch_pr(F.repo, 8, NULL), KB_ENOTFOUND);
	assert_int_equal(kb_git_fetch_ref(F.repo, "refs/heads/feature", missing, NULL), KB_ENOTFOUND);
	assert_int_equal(kb_git_fetch_pr(F.repo, 7, "not-a-sha"), -1);

	/* pushed after labelling: the labelled sha is still the one we get */
	write_text(F.seed.buf, "later.txt", "pushed after the label\n", 0644);
	assert_int_equal(human_commit("Alice", "alice@example.com", "later"), 0);
	assert_int_equal(git_in(F.seed.buf, NULL, "push", "-q", F.bare.buf, "HEAD:refs/pull/7/head",
				NULL),
			 0);
	server_rev(moved, "refs/pull/7/head");
	assert_string_not_equal(moved, F.feature_sha);
	assert_int_equal(kb_git_fetch_pr(F.repo, 7, F.feature_sha), 0);
	assert_int_equal(kb_git_resolve(F.repo, "refs/kernelbot/fetched/pull/7/head", sha), 0);
	assert_string_equal(sha, moved);
}

static void test_checkout_and_read(void **state)
{
	struct strbuf dir = STRBUF_INIT, text = STRBUF_INIT, path = STRBUF_INIT;
	struct strvec changed = STRVEC_INIT;
	struct stat st;

	NEED_SERVER();
	strbuf_addf(&dir, "%s/work/pr-7", F.tmp);
	assert_int_equal(kb_git_checkout_tree(F.repo, F.feature_sha, dir.buf), 0);
	read_text(&text, dir.buf, "ops/add/func_forward.py");
	assert_string_equal(text.buf, "def forward_fn(a, b):\n    return (a + b) * 1\n");
	read_text(&text, dir.buf, "README.md");
	assert_string_equal(text.buf, "# demo\n");
	strbuf_addf(&path, "%s/run.sh", dir.buf);
	assert_int_equal(stat(path.buf, &st), 0);
	assert_true(st.st_mode & S_IXUSR);
	/* a link from an untrusted repository is not followed: a plain file */
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/secret-link", dir.buf);
	assert_int_equal(lstat(path.buf, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	read_text(&text, dir.buf, "secret-link");
	assert_string_equal(text.buf, "/etc/passwd");
	/* never into a directory that has something in it */
	assert_int_equal(kb_git_checkout_tree(F.repo, F.feature_sha, dir.buf), -1);

	strbuf_reset(&text);
	assert_int_equal(kb_git_read_file(F.repo, F.feature_sha, ".kernelbot.ini", &text, 4096), 0);
	assert_string_equal(text.buf, "[operators]\npaths = ops/add\n");
	assert_int_equal(kb_git_read_file(F.repo, F.main_sha, ".kernelbot.ini", &text, 4096),
			 KB_ENOTFOUND);
	assert_int_equal(kb_git_read_file(F.repo, F.feature_sha, "ops", &text, 4096), KB_ENOTFOUND);
	assert_int_equal(kb_git_read_file(F.repo, F.feature_sha, "README.md", &text, 3), KB_ETOOBIG);

	assert_int_equal(kb_git_changed_files(F.repo, F.main_sha, F.feature_sha, &changed), 0);
	assert_int_equal(changed.nr, 2);
	assert_string_equal(changed.v[0], ".kernelbot.ini");
	assert_string_equal(changed.v[1], "ops/add/func_forward.py");

	strvec_clear(&changed);
	strbuf_release(&dir);
	strbuf_release(&text);
	strbuf_release(&path);
}

static const char kernel_cu[] = "extern \"C\" int kb_add(void) { return 0; }\n";
static const char binding_py[] = "import torch\n";
static const char evidence_md[] = "# evidence\nall checks passed\n";

static void test_commit_and_push(void **state)
{
	struct kb_git_file files[] = {
		{ "kernels/add/kernel.cu", kernel_cu, sizeof(kernel_cu) - 1, 0644 },
		{ "kernels/add/binding.py", binding_py, sizeof(binding_py) - 1, 0 },
		{ "EVIDENCE.md", evidence_md, sizeof(evidence_md) - 1, 0644 },
		{ "ops/add/bench.sh", "#!/bin/sh\n", 10, 0755 },
	};
	struct strbuf out = STRBUF_INIT, want = STRBUF_INIT;
	char sha[KB_GIT_SHA_SIZE], head[KB_GIT_SHA_SIZE];
	const char *ref = "refs/heads/" BRANCH;

	NEED_SERVER();
	assert_int_equal(kb_git_commit_files(F.repo, BRANCH, F.feature_sha, files, ARRAY_SIZE(files),
					     "kernelbot: add 2.10x faster", BOT_NAME, BOT_EMAIL,
					     sha),
			 0);
	assert_int_equal(kb_git_remote_branch_head(F.repo, NULL, BRANCH, NULL, head), KB_ENOTFOUND);
	assert_int_equal(kb_git_publish_branch(F.repo, NULL, BRANCH, BOT_EMAIL, NULL), 0);
	assert_int_equal(kb_git_remote_branch_head(F.repo, NULL, BRANCH, NULL, head), 0);
	assert_string_equal(head, sha);

	/* what the server holds: author, committer, parent, message, tree */
	server_rev(head, ref);
	assert_string_equal(head, sha);
	assert_int_equal(git_in(NULL, &out, "--git-dir", F.bare.buf, "log", "-1",
				"--format=%an <%ae>|%cn <%ce>|%P|%B", ref, NULL),
			 0);
	strbuf_reset(&want);
	strbuf_addf(&want, "%s <%s>|%s <%s>|%s|kernelbot: add 2.10x faster", BOT_NAME, BOT_EMAIL,
		    BOT_NAME, BOT_EMAIL, F.feature_sha);
	assert_string_equal(out.buf, want.buf);
	assert_int_equal(git_in(NULL, &out, "--git-dir", F.bare.buf, "ls-tree", "-r", ref, NULL), 0);
	assert_non_null(strstr(out.buf, "100644 blob"));
	assert_non_null(strstr(out.buf, "\tkernels/add/kernel.cu\n"));
	assert_non_null(strstr(out.buf, "\tkernels/add/binding.py\n"));
	assert_non_null(strstr(out.buf, "\tEVIDENCE.md\n"));
	assert_non_null(strstr(out.buf, "100755 blob"));
	assert_non_null(strstr(out.buf, "\tops/add/bench.sh\n"));
	/* the parent's files are all still there */
	assert_non_null(strstr(out.buf, "\tops/add/func_forward.py\n"));
	assert_non_null(strstr(out.buf, "\t.kernelbot.ini\n"));
	assert_non_null(strstr(out.buf, "120000 blob"));
	assert_int_equal(git_in(NULL, &out, "--git-dir", F.bare.buf, "show",
				"refs/heads/" BRANCH ":kernels/add/kernel.cu", NULL),
			 0);
	strbuf_addch(&out, '\n'); /* git_in trims */
	assert_string_equal(out.buf, kernel_cu);
	assert_int_equal(git_in(NULL, &out, "--git-dir", F.bare.buf, "fsck", "--strict", NULL), 0);
	kb_strlcpy(F.bot_sha, sha, sizeof(F.bot_sha));

	/* publishing again with nothing new sends nothing and succeeds */
	assert_int_equal(kb_git_publish_branch(F.repo, NULL, BRANCH, BOT_EMAIL, NULL), 0);
	strbuf_release(&out);
	strbuf_release(&want);
}

static void test_commit_rejects_bad_input(void **state)
{
	static const char *const bad[] = { "../x", "a//b", "/abs", ".git/config", "a/.GIT/b",
					   "a/./b", "dir/", "" };
	struct kb_git_file f = { NULL, "x", 1, 0644 };
	char sha[KB_GIT_SHA_SIZE];

	NEED_SERVER();
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		f.path = bad[i];
		assert_int_equal(kb_git_commit_files(F.repo, "kernelbot/bad", F.feature_sha, &f, 1, "m",
						     BOT_NAME, BOT_EMAIL, sha),
				 -1);
	}
	/* a file where the parent has a directory, and the other way round */
	f.path = "ops";
	assert_int_equal(kb_git_commit_files(F.repo, "kernelbot/bad", F.feature_sha, &f, 1, "m",
					     BOT_NAME, BOT_EMAIL, sha),
			 -1);
	f.path = "README.md/x";
	assert_int_equal(kb_git_commit_files(F.repo, "kernelbot/bad", F.feature_sha, &f, 1, "m",
					     BOT_NAME, BOT_EMAIL, sha),
			 -1);
	f.path = "ok.txt";
	f.mode = 0600;
	assert_int_equal(kb_git_commit_files(F.repo, "kernelbot/bad", F.feature_sha, &f, 1, "m",
					     BOT_NAME, BOT_EMAIL, sha),
			 -1);
	f.mode = 0644;
	assert_int_equal(kb_git_commit_files(F.repo, "bad..name", F.feature_sha, &f, 1, "m", BOT_NAME,
					     BOT_EMAIL, sha),
			 -1);
	assert_int_equal(kb_git_commit_files(F.repo, "kernelbot/bad",
					     "0123456789abcdef0123456789abcdef01234567", &f, 1, "m",
					     BOT_NAME, BOT_EMAIL, sha),
			 KB_ENOTFOUND);
	/* nothing half-made: the branch was never created */
	assert_int_equal(kb_git_resolve(F.repo, "refs/heads/kernelbot/bad", sha), KB_ENOTFOUND);
}

/* a re-run replaces the bot's commit: a forced update of its own branch */
static void test_force_push_own_branch(void **state)
{
	static const char v2[] = "extern \"C\" int kb_add(void) { return 2; }\n";
	struct kb_git_file f = { "kernels/add/kernel.cu", v2, sizeof(v2) - 1, 0644 };
	char sha[KB_GIT_SHA_SIZE], head[KB_GIT_SHA_SIZE];

	NEED_SERVER();
	assert_int_equal(kb_git_commit_files(F.repo, BRANCH, F.feature_sha, &f, 1,
					     "kernelbot: add 2.50x faster", BOT_NAME, BOT_EMAIL, sha),
			 0);
	assert_string_not_equal(sha, F.bot_sha);
	/* a plain push of a diverged branch is refused by git itself */
	assert_int_equal(kb_git_push_branch(F.repo, NULL, BRANCH, false, NULL), KB_GIT_EREJECTED);
	server_rev(head, "refs/heads/" BRANCH);
	assert_string_equal(head, F.bot_sha);
	/* the branch holds only the bot's commits: forced */
	assert_int_equal(kb_git_branch_is_ours(F.repo, NULL, BRANCH, BOT_EMAIL, F.bot_sha), 0);
	assert_int_equal(kb_git_publish_branch(F.repo, NULL, BRANCH, BOT_EMAIL, NULL), 0);
	server_rev(head, "refs/heads/" BRANCH);
	assert_string_equal(head, sha);
	kb_strlcpy(F.bot_sha, sha, sizeof(F.bot_sha));
}

/* the pull request was rebased: the bot's branch sits on an old base the
 * new commit lacks; it holds only the bot's commit, so it is still ours */
static void test_rebased_pr_is_still_ours(void **state)
{
	static const char v4[] = "extern \"C\" int kb_add(void) { return 4; }\n";
	struct kb_git_file f = { "kernels/add/kernel.cu", v4, sizeof(v4) - 1, 0644 };
	struct strbuf out = STRBUF_INIT;
	char rebased[KB_GIT_SHA_SIZE], sha[KB_GIT_SHA_SIZE], head[KB_GIT_SHA_SIZE];

	NEED_SERVER();
	assert_int_equal(git_in(F.seed.buf, NULL, "checkout", "-q", "--detach", F.main_sha, NULL), 0);
	write_text(F.seed.buf, "ops/add/func_forward.py",
		   "def forward_fn(a, b):\n    return b + a\n", 0644);
	assert_int_equal(human_commit("Alice", "alice@example.com", "add operator, rebased"), 0);
	assert_int_equal(git_in(F.seed.buf, &out, "rev-parse", "HEAD", NULL), 0);
	kb_strlcpy(rebased, out.buf, sizeof(rebased));
	assert_int_equal(git_in(F.seed.buf, NULL, "push", "-q", "-f", F.bare.buf,
				"HEAD:refs/pull/7/head", NULL),
			 0);

	assert_int_equal(kb_git_fetch_pr(F.repo, 7, rebased), 0);
	assert_int_equal(kb_git_commit_files(F.repo, BRANCH, rebased, &f, 1,
					     "kernelbot: add 2.60x faster", BOT_NAME, BOT_EMAIL, sha),
			 0);
	/* Alice's old commits are in the remote branch's history, not on it */
	assert_int_equal(kb_git_branch_is_ours(F.repo, NULL, BRANCH, BOT_EMAIL, F.bot_sha), 0);
	assert_int_equal(kb_git_publish_branch(F.repo, NULL, BRANCH, BOT_EMAIL, NULL), 0);
	server_rev(head, "refs/heads/" BRANCH);
	assert_string_equal(head, sha);
	server_rev(head, "refs/heads/" BRANCH "^");
	assert_string_equal(head, rebased);
	kb_strlcpy(F.bot_sha, sha, sizeof(F.bot_sha));
	strbuf_release(&out);
}

/* a human amended the bot's commit: author still the bot, committer not */
static void test_human_amend_refused(void **state)
{
	struct kb_git_file f = { "EVIDENCE.md", evidence_md, sizeof(evidence_md) - 1, 0644 };
	const char *branch = "kernelbot/pr-7/amend";
	char sha[KB_GIT_SHA_SIZE], amended[KB_GIT_SHA_SIZE], head[KB_GIT_SHA_SIZE];
	struct strbuf logged = STRBUF_INIT;

	NEED_SERVER();
	assert_int_equal(kb_git_commit_files(F.repo, branch, F.feature_sha, &f, 1, "evidence",
					     BOT_NAME, BOT_EMAIL, sha),
			 0);
	assert_int_equal(kb_git_publish_branch(F.repo, NULL, branch, BOT_EMAIL, NULL), 0);
	assert_int_equal(git_in(F.seed.buf, NULL, "fetch", "-q", F.bare.buf,
				"refs/heads/kernelbot/pr-7/amend:refs/heads/amend", NULL),
			 0);
	assert_int_equal(git_in(F.seed.buf, NULL, "checkout", "-q", "amend", NULL), 0);
	assert_int_equal(git_in(F.seed.buf, NULL, "-c", "user.name=Carol", "-c",
				"user.email=carol@example.com", "commit", "-q", "--amend", "-m",
				"evidence, reworded", NULL),
			 0);
	assert_int_equal(git_in(F.seed.buf, NULL, "push", "-q", "-f", F.bare.buf,
				"HEAD:refs/heads/kernelbot/pr-7/amend", NULL),
			 0);
	server_rev(amended, "refs/heads/kernelbot/pr-7/amend");

	assert_int_equal(kb_git_commit_files(F.repo, branch, F.feature_sha, &f, 1, "evidence again",
					     BOT_NAME, BOT_EMAIL, sha),
			 0);
	log_capture_begin();
	assert_int_equal(kb_git_publish_branch(F.repo, NULL, branch, BOT_EMAIL, NULL),
			 KB_GIT_ENOTOURS);
	log_capture_end(&logged);
	assert_non_null(strstr(logged.buf, "carol@example.com"));
	server_rev(head, "refs/heads/kernelbot/pr-7/amend");
	assert_string_equal(head, amended);
	strbuf_release(&logged);
}

/* a human pushed to the bot's branch: the bot stops touching it */
static void test_human_commit_refused(void **state)
{
	static const char v3[] = "extern \"C\" int kb_add(void) { return 3; }\n";
	struct kb_git_file f = { "kernels/add/kernel.cu", v3, sizeof(v3) - 1, 0644 };
	char sha[KB_GIT_SHA_SIZE], human[KB_GIT_SHA_SIZE], head[KB_GIT_SHA_SIZE];
	struct strbuf logged = STRBUF_INIT;

	NEED_SERVER();
	assert_int_equal(git_in(F.seed.buf, NULL, "fetch", "-q", F.bare.buf,
				"refs/heads/" BRANCH ":refs/heads/bot", NULL),
			 0);
	assert_int_equal(git_in(F.seed.buf, NULL, "checkout", "-q", "bot", NULL), 0);
	write_text(F.seed.buf, "EVIDENCE.md", "# evidence\nchecked by hand too\n", 0644);
	assert_int_equal(human_commit("Bob", "bob@example.com", "tweak evidence"), 0);
	assert_int_equal(git_in(F.seed.buf, NULL, "push", "-q", F.bare.buf,
				"HEAD:refs/heads/" BRANCH, NULL),
			 0);
	server_rev(human, "refs/heads/" BRANCH);

	assert_int_equal(kb_git_commit_files(F.repo, BRANCH, F.feature_sha, &f, 1,
					     "kernelbot: add 3.00x faster", BOT_NAME, BOT_EMAIL, sha),
			 0);
	log_capture_begin();
	assert_int_equal(kb_git_publish_branch(F.repo, NULL, BRANCH, BOT_EMAIL, NULL),
			 KB_GIT_ENOTOURS);
	log_capture_end(&logged);
	assert_non_null(strstr(logged.buf, "bob@example.com"));
	server_rev(head, "refs/heads/" BRANCH);
	assert_string_equal(head, human);
	assert_int_equal(kb_git_branch_is_ours(F.repo, NULL, BRANCH, BOT_EMAIL, human),
			 KB_GIT_ENOTOURS);
	/* the same email in another case is still the bot */
	assert_int_equal(kb_git_branch_is_ours(F.repo, NULL, BRANCH, "KernelBot@Example.com",
					       F.bot_sha),
			 0);
	strbuf_release(&logged);
}

/* a wrong token: refused with a message that does not hold it */
static void test_wrong_token(void **state)
{
	static const char *const wrong = "wrong-token-5b1e77";
	struct kb_git_cred bad = { .token = wrong };
	struct kb_git_repo *r = NULL;
	struct strbuf logged = STRBUF_INIT, url = STRBUF_INIT;
	char sha[KB_GIT_SHA_SIZE];
	struct kb_git_file f = { "new.txt", "x", 1, 0644 };

	NEED_SERVER();
	assert_int_equal(kb_git_commit_files(F.repo, "kernelbot/pr-7/other", F.feature_sha, &f, 1,
					     "other", BOT_NAME, BOT_EMAIL, sha),
			 0);
	log_capture_begin();
	assert_int_equal(kb_git_push_branch(F.repo, NULL, "kernelbot/pr-7/other", false, &bad),
			 KB_GIT_EAUTH);
	log_capture_end(&logged);
	assert_non_null(strstr(logged.buf, "refused the token"));
	assert_null(strstr(logged.buf, wrong));
	/* "***" would mean the log filter caught a leak */
	assert_null(strstr(logged.buf, "***"));
	server_rev(sha, "refs/heads/kernelbot/pr-7/other");
	assert_string_equal(sha, "");

	/* a token inside the URL is redacted from every message */
	strbuf_addf(&url, "http://x-access-token:%s@%s", wrong, F.url.buf + strlen("http://"));
	log_capture_begin();
	assert_int_equal(kb_git_sync(&r, F.cache.buf, url.buf, &bad), KB_GIT_EAUTH);
	log_capture_end(&logged);
	assert_null(r);
	assert_null(strstr(logged.buf, wrong));
	assert_non_null(strstr(logged.buf, "'http://***@127.0.0.1:"));

	/* the right token still works for the same push */
	assert_int_equal(kb_git_push_branch(F.repo, NULL, "kernelbot/pr-7/other", false, NULL), 0);
	server_rev(sha, "refs/heads/kernelbot/pr-7/other");
	assert_string_not_equal(sha, "");
	strbuf_release(&logged);
	strbuf_release(&url);
}

/* the local forge: the remote is a repository on disk, no token */
static void test_local_path_remote(void **state)
{
	struct kb_git_repo *local = NULL;
	struct kb_git_file f = { "kernels/local/kernel.cu", kernel_cu, sizeof(kernel_cu) - 1, 0644 };
	char sha[KB_GIT_SHA_SIZE], head[KB_GIT_SHA_SIZE];
	struct strbuf url = STRBUF_INIT;

	assert_int_equal(kb_git_sync(&local, F.cache.buf, F.bare.buf, NULL), 0);
	assert_int_equal(kb_git_fetch_ref(local, "feature", F.feature_sha, sha), 0);
	assert_string_equal(sha, F.feature_sha);
	assert_int_equal(kb_git_commit_files(local, "kernelbot/pr-1/local", F.feature_sha, &f, 1,
					     "kernelbot: local", BOT_NAME, BOT_EMAIL, sha),
			 0);
	assert_int_equal(kb_git_publish_branch(local, NULL, "kernelbot/pr-1/local", BOT_EMAIL, NULL),
			 0);
	server_rev(head, "refs/heads/kernelbot/pr-1/local");
	assert_string_equal(head, sha);
	kb_git_repo_free(local);

	/* file:// names the same repository, in a cache of its own */
	strbuf_addf(&url, "file://%s", F.bare.buf);
	assert_int_equal(kb_git_sync(&local, F.cache.buf, url.buf, NULL), 0);
	assert_int_equal(kb_git_resolve(local, "refs/remotes/origin/kernelbot/pr-1/local", head), 0);
	assert_string_equal(head, sha);
	kb_git_repo_free(local);
	strbuf_release(&url);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redact_url),
		cmocka_unit_test(test_sync_clones_with_token),
		cmocka_unit_test(test_fetch_pr_head),
		cmocka_unit_test(test_checkout_and_read),
		cmocka_unit_test(test_commit_and_push),
		cmocka_unit_test(test_commit_rejects_bad_input),
		cmocka_unit_test(test_force_push_own_branch),
		cmocka_unit_test(test_rebased_pr_is_still_ours),
		cmocka_unit_test(test_human_amend_refused),
		cmocka_unit_test(test_human_commit_refused),
		cmocka_unit_test(test_wrong_token),
		cmocka_unit_test(test_local_path_remote),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
