#include "core/common.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

/* --- helpers --- */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* True when out has a line starting with prefix (e.g. "NAME="). */
static bool has_line(const char *out, const char *prefix)
{
	size_t len = strlen(prefix);

	for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, prefix, len))
			return true;
	return false;
}

static void make_tmpdir(char *buf, size_t size)
{
	xsnprintf(buf, size, "/tmp/kb-test-subprocess-XXXXXX");
	assert_non_null(mkdtemp(buf));
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

/* Dead, or a zombie waiting for a reaper we do not control (pid 1 may not reap). */
static bool pid_gone(pid_t pid)
{
	for (int i = 0; i < 200; i++) {
		char path[64], buf[512];
		const char *paren;
		char state = '?';
		ssize_t n = -1;
		int fd;

		if (kill(pid, 0) && errno == ESRCH)
			return true;
		xsnprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
		}
		if (n > 0) {
			buf[n] = '\0';
			paren = strrchr(buf, ')');
			if (paren && paren[1] == ' ')
				state = paren[2];
		}
		if (state == 'Z' || state == 'X')
			return true;
		usleep(10000);
	}
	return false;
}

/* Run cp with error logs sent to a file; returns rc, the log in *logged. */
static int run_logged(struct child_process *cp, struct strbuf *logged)
{
	char path[] = "/tmp/kb-test-subprocess-log-XXXXXX";
	int fd = mkstemp(path);
	int rc;

	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(log_open(path), 0);
	rc = run_command(cp);
	log_open(NULL);
	strbuf_reset(logged);
	assert_int_equal(strbuf_read_file(logged, path, 0), 0);
	unlink(path);
	return rc;
}

/* --- tests --- */

static void test_exit_codes(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;

	strvec_pushl(&cp.args, "true", NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_false(cp.timed_out);
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "exit 3", NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 3);
	/* the same struct runs again: results start afresh */
	strvec_clear(&cp.args);
	strvec_pushl(&cp.args, "sh", "-c", "echo again", NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_string_equal(cp.out.buf, "again\n");
	child_process_release(&cp);

	/* no stdin given: /dev/null, so cat ends at once */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "cat", NULL);
	cp.timeout_ms = 5000;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_false(cp.timed_out);
	assert_int_equal(cp.out.len, 0);
	child_process_release(&cp);
}

static void test_capture(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;

	strvec_pushl(&cp.args, "sh", "-c", "printf 'to out'; printf 'to err' >&2", NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "to out");
	assert_string_equal(cp.err.buf, "to err");
	assert_false(cp.out_truncated);
	assert_false(cp.err_truncated);
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "echo a; echo b >&2; echo c", NULL);
	cp.err_to_out = true;
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "a\nb\nc\n");
	assert_int_equal(cp.err.len, 0);
	child_process_release(&cp);

	/* a stderr cap of its own */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "head -c 5000 /dev/zero >&2; echo done", NULL);
	cp.err_cap = 100;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.err.len, 100);
	assert_true(cp.err_truncated);
	assert_false(cp.out_truncated);
	assert_string_equal(cp.out.buf, "done\n");
	child_process_release(&cp);
}

static void test_stdin(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	const char *text = "hello\nworld\n";

	strvec_pushl(&cp.args, "cat", NULL);
	cp.in = text;
	cp.in_len = strlen(text);
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, text);
	child_process_release(&cp);

	/* empty stdin: EOF at once */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "wc", "-c", NULL);
	cp.in = "";
	cp.in_len = 0;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(atoi(cp.out.buf), 0);
	child_process_release(&cp);
}

/* 1 MiB in, 1 MiB out and 1 MiB err at once: deadlocks unless all are pumped together. */
static void test_big_stdin_big_output(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	size_t len = 1 << 20;
	char *in = xmalloc(len);

	for (size_t i = 0; i < len; i++)
		in[i] = (char)('a' + (i * 7 + i / 1000) % 26);
	strvec_pushl(&cp.args, "sh", "-c", "head -c 1048576 /dev/zero >&2; cat", NULL);
	cp.in = in;
	cp.in_len = len;
	cp.timeout_ms = 20000;
	assert_int_equal(run_command(&cp), 0);
	assert_false(cp.timed_out);
	assert_int_equal(cp.exit_code, 0);
	assert_int_equal(cp.out.len, len);
	assert_true(!memcmp(cp.out.buf, in, len));
	assert_int_equal(cp.err.len, len);
	child_process_release(&cp);
	free(in);
}

/* A child that never reads its stdin must not kill us with SIGPIPE. */
static void test_stdin_not_read(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	size_t len = 4 << 20;
	char *in = xcalloc(1, len);
	sigset_t pending;

	signal(SIGPIPE, SIG_DFL);
	strvec_pushl(&cp.args, "head", "-c", "10", NULL);
	cp.in = in;
	cp.in_len = len;
	cp.timeout_ms = 20000;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_int_equal(cp.out.len, 10);
	strvec_clear(&cp.args);
	strvec_pushl(&cp.args, "true", NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	sigpending(&pending);
	assert_false(sigismember(&pending, SIGPIPE));
	child_process_release(&cp);
	free(in);
}

static void test_huge_output_capped(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	size_t cap = 1 << 20;

	strvec_pushl(&cp.args, "head", "-c", "50000000", "/dev/zero", NULL);
	cp.out_cap = cap;
	cp.timeout_ms = 20000;
	assert_int_equal(run_command(&cp), 0);
	assert_false(cp.timed_out);
	assert_int_equal(cp.exit_code, 0); /* drained to the end: head saw no EPIPE */
	assert_int_equal(cp.out.len, cap);
	assert_true(cp.out_truncated);
	assert_false(cp.err_truncated);
	assert_true(cp.out.alloc <= 2 * cap + 1);
	assert_true(cp.elapsed_ms < 5000);
	child_process_release(&cp);
}

static void test_timeout(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;

	strvec_pushl(&cp.args, "sleep", "30", NULL);
	cp.timeout_ms = 300;
	assert_int_equal(run_command(&cp), 0);
	assert_true(cp.timed_out);
	assert_false(cp.cancelled);
	assert_int_equal(cp.exit_code, 128 + SIGKILL);
	assert_true(cp.elapsed_ms >= 300);
	assert_true(cp.elapsed_ms < 1000);
	child_process_release(&cp);

	/* a child that finishes in time is not marked */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "true", NULL);
	cp.timeout_ms = 5000;
	assert_int_equal(run_command(&cp), 0);
	assert_false(cp.timed_out);
	assert_int_equal(cp.exit_code, 0);
	child_process_release(&cp);
}

/* A grandchild that holds stdout open neither delays us nor survives. */
/* Leaves a process outside our group that holds stdout for 5 s; prints its
 * pid once it has left (the pid file is written after setsid). */
#define ESCAPE_SCRIPT "rm -f pid; setsid sh -c 'echo $$ > pid; exec sleep 5' & " \
	"while [ ! -s pid ]; do sleep 0.01; done; cat pid"

static void test_grandchild(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64];
	pid_t pid;

	strvec_pushl(&cp.args, "sh", "-c", "sleep 30 & echo hi", NULL);
	cp.timeout_ms = 20000;
	assert_int_equal(run_command(&cp), 0);
	assert_false(cp.timed_out);
	assert_int_equal(cp.exit_code, 0);
	assert_string_equal(cp.out.buf, "hi\n");
	assert_true(cp.elapsed_ms < 2000);
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "sleep 30 & echo $!", NULL);
	cp.timeout_ms = 20000;
	assert_int_equal(run_command(&cp), 0);
	assert_false(cp.timed_out);
	assert_true(cp.elapsed_ms < 2000);
	pid = (pid_t)atoi(cp.out.buf);
	assert_true(pid > 1);
	assert_true(pid_gone(pid));
	child_process_release(&cp);

	/* one that escaped the group (setsid) holds stdout: the drain is bounded */
	make_tmpdir(dir, sizeof(dir));
	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", ESCAPE_SCRIPT, NULL);
	cp.dir = dir;
	cp.timeout_ms = 20000;
	assert_int_equal(run_command(&cp), 0);
	pid = (pid_t)atoi(cp.out.buf);
	assert_true(pid > 1);
	kill(pid, SIGKILL);
	assert_false(cp.timed_out);
	assert_int_equal(cp.exit_code, 0);
	assert_true(cp.elapsed_ms < 1500);
	child_process_release(&cp);
	kb_rm_rf(dir);
}

static void test_crash(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64];

	make_tmpdir(dir, sizeof(dir)); /* any core file lands there */
	strvec_pushl(&cp.args, "sh", "-c", "kill -SEGV $$", NULL);
	cp.dir = dir;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 128 + SIGSEGV);
	child_process_release(&cp);
	kb_rm_rf(dir);
}

static void test_cannot_run(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf logged = STRBUF_INIT;
	char dir[64], path[128];

	strvec_pushl(&cp.args, "kb-no-such-program", NULL);
	assert_int_equal(run_logged(&cp, &logged), -1);
	assert_non_null(strstr(logged.buf, "could not run 'kb-no-such-program': No such file or directory"));
	child_process_release(&cp);

	/* a path: execve fails in the child and the status pipe says why */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "/nonexistent/nvcc", "-O3", NULL);
	assert_int_equal(run_logged(&cp, &logged), -1);
	assert_non_null(strstr(logged.buf, "could not run '/nonexistent/nvcc': No such file or directory"));
	child_process_release(&cp);

	make_tmpdir(dir, sizeof(dir));
	xsnprintf(path, sizeof(path), "%s/not-executable", dir);
	write_file(path, "#!/bin/sh\necho no\n", 0644);
	child_process_init(&cp);
	strvec_pushl(&cp.args, path, NULL);
	assert_int_equal(run_logged(&cp, &logged), -1);
	assert_non_null(strstr(logged.buf, "Permission denied"));
	assert_non_null(strstr(logged.buf, "could not run '"));
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "true", NULL);
	cp.dir = "/nonexistent-kb-dir";
	assert_int_equal(run_logged(&cp, &logged), -1);
	assert_non_null(strstr(logged.buf, "could not change directory to '/nonexistent-kb-dir' to run 'true'"));
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "true", NULL);
	cp.result_fd_child = 1;
	assert_int_equal(run_logged(&cp, &logged), -1);
	assert_non_null(strstr(logged.buf, "result descriptor 1"));
	child_process_release(&cp);

	child_process_init(&cp);
	assert_int_equal(run_logged(&cp, &logged), -1);
	child_process_release(&cp);

	strbuf_release(&logged);
	kb_rm_rf(dir);
}

/* PATH comes from the child's environment; a script without #! runs under sh. */
static void test_path_lookup(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64], path[128];

	make_tmpdir(dir, sizeof(dir));
	xsnprintf(path, sizeof(path), "%s/kb-hello", dir);
	write_file(path, "#!/bin/sh\necho \"hello $1\"\n", 0755);
	xsnprintf(path, sizeof(path), "%s/kb-plain", dir);
	write_file(path, "echo plain \"$1\"\n", 0755);
	xsnprintf(path, sizeof(path), "%s/kb-shadowed", dir);
	write_file(path, "#!/bin/sh\necho shadowed\n", 0644);

	strvec_pushl(&cp.args, "kb-hello", "there", NULL);
	strvec_pushf(&cp.env, "PATH=%s:/usr/bin:/bin", dir);
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "hello there\n");

	strvec_clear(&cp.args);
	strvec_pushl(&cp.args, "kb-plain", "text", NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_string_equal(cp.out.buf, "plain text\n");
	child_process_release(&cp);

	/* a non-executable file in PATH is skipped; a later executable one wins */
	child_process_init(&cp);
	xsnprintf(path, sizeof(path), "%s/sub", dir);
	assert_int_equal(kb_mkdir_p(path, 0755), 0);
	xsnprintf(path, sizeof(path), "%s/sub/kb-shadowed", dir);
	write_file(path, "#!/bin/sh\necho found\n", 0755);
	strvec_pushl(&cp.args, "kb-shadowed", NULL);
	strvec_pushf(&cp.env, "PATH=%s:%s/sub", dir, dir);
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "found\n");
	child_process_release(&cp);
	kb_rm_rf(dir);
}

static void test_env_name_is_secret(void **state)
{
	const char *secret[] = {
		"GITHUB_TOKEN", "MY_API_KEY", "openai_api_key", "AWS_REGION", "HF_HOME",
		"GH_HOST", "ACTIONS_RUNTIME_URL", "RUNNER_TEMP", "DB_PASSWORD", "PASSWD",
		"SSH_AUTH_SOCK", "XDG_SESSION_ID", "COOKIE_JAR", "GOOGLE_APPLICATION_CREDENTIALS",
		"ANTHROPIC_BASE_URL", "SIGNING_KEY", "ApiKey", "AWS_ACCESS_KEY_ID",
		"MY_PRIVATE_THING", "X_SECRET=1", "KB_WEBHOOK_SECRET", "GPG_PASSPHRASE",
	};
	const char *plain[] = {
		"PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "CC", "TMPDIR", "KEYBOARD",
		"MONKEY", "PYTHONPATH", "USER", "TERM", "LD_LIBRARY_PATH=/x/TOKEN",
	};

	for (size_t i = 0; i < ARRAY_SIZE(secret); i++)
		if (!env_name_is_secret(secret[i]))
			fail_msg("'%s' should count as a secret", secret[i]);
	for (size_t i = 0; i < ARRAY_SIZE(plain); i++)
		if (env_name_is_secret(plain[i]))
			fail_msg("'%s' should not count as a secret", plain[i]);
}

static void test_env_scrubbing(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char *home;

	setenv("GITHUB_TOKEN", "ghp_kbtest", 1);
	setenv("MY_API_KEY", "kbtest-key", 1);
	setenv("SSH_AUTH_SOCK", "/tmp/kb-agent.sock", 1);
	setenv("KB_INNOCENT", "prefix-kbRegisteredSecret42-suffix", 1);
	setenv("KB_PLAIN", "visible", 1);
	setenv("KB_REPLACED", "old", 1);
	home = getenv("HOME") ? xstrdup(getenv("HOME")) : NULL;
	setenv("HOME", "/kb-home", 1);
	log_add_secret("kbRegisteredSecret42");

	strvec_pushl(&cp.args, "env", NULL);
	strvec_pushl(&cp.env, "FOO=bar", "HOME", "KB_REPLACED=new", "KB_NOT_SET", NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_false(has_line(cp.out.buf, "GITHUB_TOKEN="));
	assert_false(has_line(cp.out.buf, "MY_API_KEY="));
	assert_false(has_line(cp.out.buf, "SSH_AUTH_SOCK="));
	assert_false(has_line(cp.out.buf, "KB_INNOCENT="));
	assert_null(strstr(cp.out.buf, "kbRegisteredSecret42"));
	assert_null(strstr(cp.out.buf, "ghp_kbtest"));
	assert_false(has_line(cp.out.buf, "HOME="));
	assert_false(has_line(cp.out.buf, "KB_RESULT_FD="));
	assert_true(has_line(cp.out.buf, "FOO=bar\n"));
	assert_true(has_line(cp.out.buf, "KB_PLAIN=visible\n"));
	assert_true(has_line(cp.out.buf, "KB_REPLACED=new\n"));
	assert_false(has_line(cp.out.buf, "KB_REPLACED=old"));
	assert_true(has_line(cp.out.buf, "PATH="));
	child_process_release(&cp);

	/* inherit_env keeps names, but never a registered secret's value */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "env", NULL);
	cp.inherit_env = true;
	assert_int_equal(run_command(&cp), 0);
	assert_true(has_line(cp.out.buf, "GITHUB_TOKEN=ghp_kbtest\n"));
	assert_true(has_line(cp.out.buf, "HOME=/kb-home\n"));
	assert_false(has_line(cp.out.buf, "KB_INNOCENT="));
	assert_null(strstr(cp.out.buf, "kbRegisteredSecret42"));
	child_process_release(&cp);

	unsetenv("GITHUB_TOKEN");
	unsetenv("MY_API_KEY");
	unsetenv("SSH_AUTH_SOCK");
	unsetenv("KB_INNOCENT");
	unsetenv("KB_PLAIN");
	unsetenv("KB_REPLACED");
	if (home)
		setenv("HOME", home, 1);
	else
		unsetenv("HOME");
	free(home);
	log_clear_secrets();
}

static void test_cwd(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64], real[PATH_MAX + 2];

	make_tmpdir(dir, sizeof(dir));
	assert_non_null(realpath(dir, real));
	strvec_pushl(&cp.args, "pwd", NULL);
	cp.dir = dir;
	assert_int_equal(run_command(&cp), 0);
	strbuf_trim(&cp.out);
	assert_string_equal(cp.out.buf, real);
	child_process_release(&cp);
	kb_rm_rf(dir);
}

static void test_rlimits(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64];
	struct sigaction ign, old;

	/* RLIMIT_FSIZE; SIGXFSZ ignored here must be back to default in the child */
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigaction(SIGXFSZ, &ign, &old);
	make_tmpdir(dir, sizeof(dir));
	strvec_pushl(&cp.args, "sh", "-c", "exec head -c 100000 /dev/zero > big", NULL);
	cp.dir = dir;
	cp.rlimit_fsize_bytes = 1000;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 128 + SIGXFSZ);
	sigaction(SIGXFSZ, &old, NULL);
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "ulimit -n; ulimit -v", NULL);
	cp.rlimit_nofile = 64;
	cp.rlimit_as_bytes = (uint64_t)1 << 30;
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "64\n1048576\n");
	child_process_release(&cp);

	/*
	 * RLIMIT_CPU: one second of busy loop, then SIGXCPU (SIGKILL a second
	 * later). That second is CPU time: on a machine busy with other jobs
	 * it takes many seconds of wall time; the timeout only catches a limit
	 * that never fires.
	 */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "while :; do :; done", NULL);
	cp.rlimit_cpu_s = 1;
	cp.timeout_ms = 300000;
	assert_int_equal(run_command(&cp), 0);
	assert_false(cp.timed_out);
	assert_true(cp.exit_code == 128 + SIGXCPU || cp.exit_code == 128 + SIGKILL);
	child_process_release(&cp);
	kb_rm_rf(dir);
}

/* A signal blocked in our thread is unblocked in the child. */
static void test_signal_mask_reset(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	sigset_t term, old;

	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &term, &old);
	strvec_pushl(&cp.args, "sh", "-c", "kill -TERM $$; exit 0", NULL);
	assert_int_equal(run_command(&cp), 0);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	assert_int_equal(cp.exit_code, 128 + SIGTERM);
	child_process_release(&cp);
}

static void test_result_pipe(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;

	strvec_pushl(&cp.args, "sh", "-c", "echo result >&3; echo \"fd=$KB_RESULT_FD\"", NULL);
	cp.result_fd_child = 3;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_string_equal(cp.result.buf, "result\n");
	assert_string_equal(cp.out.buf, "fd=3\n");
	assert_false(cp.result_truncated);
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "printf 0123456789 >&7; printf %s \"$KB_RESULT_FD\"", NULL);
	strvec_push(&cp.env, "KB_RESULT_FD=99"); /* ours wins */
	cp.result_fd_child = 7;
	cp.result_cap = 4;
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.result.buf, "0123");
	assert_true(cp.result_truncated);
	assert_string_equal(cp.out.buf, "7");
	child_process_release(&cp);
}

/* The child sees 0, 1, 2 (and the result descriptor), nothing we left open. */
static void test_child_descriptors(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf script = STRBUF_INIT;
	int leak = fcntl(0, F_DUPFD, 40); /* no CLOEXEC on purpose */

	assert_true(leak >= 40);
	strbuf_addstr(&script, "for n in");
	for (int n = 3; n <= leak + 5; n++)
		strbuf_addf(&script, " %d", n);
	strbuf_addstr(&script, "; do if [ -e /proc/$$/fd/$n ]; then echo $n; fi; done");

	strvec_pushl(&cp.args, "sh", "-c", script.buf, NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "");
	cp.result_fd_child = 5;
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "5\n");
	child_process_release(&cp);

	/* stdin, stdout and stderr are ours: a pipe, a pipe, a pipe */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c",
		     "for n in 0 1 2; do readlink /proc/$$/fd/$n | cut -c1-5; done", NULL);
	cp.in = "x";
	cp.in_len = 1;
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "pipe:\npipe:\npipe:\n");
	child_process_release(&cp);

	close(leak);
	strbuf_release(&script);
}

/* A passed descriptor lands where asked, beside the result pipe and an
 * extra one, and is the child's alone: the peer sees EOF once it exits. */
static void test_pass_fd(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	int sv[2], extra = open("/dev/null", O_RDONLY | O_CLOEXEC);
	char buf[16];
	ssize_t n;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	strvec_pushl(&cp.args, "sh", "-c",
		     "for n in 3 4 5 6 7 8 9 10; do if [ -e /proc/$$/fd/$n ]; then echo $n; fi; done; "
		     "echo hello >&4", NULL);
	cp.result_fd_child = 3;
	cp.extra_fd = extra;
	cp.extra_fd_child = 9;
	cp.pass_fd = sv[1];
	cp.pass_fd_child = 4;
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_string_equal(cp.out.buf, "3\n4\n9\n");
	assert_int_equal(cp.pass_fd, -1);   /* handed over at the start */
	n = read(sv[0], buf, sizeof(buf) - 1);
	assert_int_equal(n, 6);
	buf[n] = '\0';
	assert_string_equal(buf, "hello\n");
	assert_int_equal(read(sv[0], buf, sizeof(buf)), 0);  /* EOF: no copy left with us */
	child_process_release(&cp);
	close(sv[0]);

	/* a passed descriptor may not take the result pipe's number */
	child_process_init(&cp);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	strvec_pushl(&cp.args, "true", NULL);
	cp.result_fd_child = 3;
	cp.pass_fd = sv[1];
	cp.pass_fd_child = 3;
	assert_int_equal(run_command(&cp), -1);
	child_process_release(&cp);
	close(sv[0]);
}

struct stopper {
	int delay_ms;
};

static void *stop_later(void *arg)
{
	struct stopper *s = arg;

	usleep((useconds_t)s->delay_ms * 1000);
	kb_request_stop(SIGTERM);
	return NULL;
}

static void test_no_fd_leak(void **state)
{
	int before = count_fds(), after;
	char dir[64];
	enum kb_log_level level = log_get_level();

	log_set_level(KB_LOG_OFF); /* the failures below would log 100 lines */
	for (int i = 0; i < 200; i++) {
		struct child_process cp = CHILD_PROCESS_INIT;
		int rc;

		switch (i % 5) {
		case 0:
			strvec_pushl(&cp.args, "true", NULL);
			break;
		case 1:
			strvec_pushl(&cp.args, "sh", "-c", "cat; echo r >&3", NULL);
			cp.in = "x";
			cp.in_len = 1;
			cp.result_fd_child = 3;
			break;
		case 2:
			strvec_pushl(&cp.args, i % 2 ? "kb-no-such-program" : "/nonexistent/x", NULL);
			break;
		case 3:
			strvec_pushl(&cp.args, "true", NULL);
			cp.dir = "/nonexistent-kb-dir";
			break;
		default:
			strvec_pushl(&cp.args, "sh", "-c", "sleep 5 & echo x >&2", NULL);
			cp.err_to_out = true;
			break;
		}
		rc = run_command(&cp);
		assert_int_equal(rc, (i % 5 == 2 || i % 5 == 3) ? -1 : 0);
		child_process_release(&cp);
	}
	/* paths that leave the loop early: a stop request, an escaped writer */
	make_tmpdir(dir, sizeof(dir));
	for (int i = 0; i < 3; i++) {
		struct child_process cp = CHILD_PROCESS_INIT;
		struct stopper s = { 30 };
		pthread_t th;

		strvec_pushl(&cp.args, "sh", "-c", "echo x >&3; sleep 5", NULL);
		cp.result_fd_child = 3;
		cp.in = "x";
		cp.in_len = 1;
		assert_int_equal(pthread_create(&th, NULL, stop_later, &s), 0);
		assert_int_equal(run_command(&cp), KB_ECANCELLED);
		pthread_join(th, NULL);
		kb_reset_stop();
		child_process_release(&cp);

		child_process_init(&cp);
		strvec_pushl(&cp.args, "sh", "-c", ESCAPE_SCRIPT, NULL);
		cp.dir = dir;
		assert_int_equal(run_command(&cp), 0);
		kill((pid_t)atoi(cp.out.buf), SIGKILL);
		child_process_release(&cp);
	}
	kb_rm_rf(dir);
	log_set_level(level);
	after = count_fds();
	assert_int_equal(after, before);
}

static void test_stop_from_thread(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct stopper s = { 200 };
	pthread_t th;
	int child, grandchild;

	kb_reset_stop();
	strvec_pushl(&cp.args, "sh", "-c", "echo $$; sleep 30 & echo $!; wait", NULL);
	cp.timeout_ms = 20000;
	assert_int_equal(pthread_create(&th, NULL, stop_later, &s), 0);
	assert_int_equal(run_command(&cp), KB_ECANCELLED);
	pthread_join(th, NULL);
	assert_true(kb_stop_requested());
	kb_reset_stop();
	assert_true(cp.cancelled);
	assert_false(cp.timed_out);
	assert_true(cp.elapsed_ms >= 200);
	assert_true(cp.elapsed_ms < 1000);
	assert_int_equal(sscanf(cp.out.buf, "%d %d", &child, &grandchild), 2);
	assert_true(pid_gone(child));
	assert_true(pid_gone(grandchild));
	child_process_release(&cp);

	/* a stop already pending: nothing starts */
	child_process_init(&cp);
	kb_request_stop(SIGINT);
	strvec_pushl(&cp.args, "sleep", "30", NULL);
	assert_int_equal(run_command(&cp), KB_ECANCELLED);
	assert_true(cp.cancelled);
	assert_true(cp.elapsed_ms < 100);
	kb_reset_stop();
	child_process_release(&cp);
}

static void on_alarm(int signo)
{
	kb_request_stop(signo);
}

/* A real signal interrupts poll (EINTR) and the loop notices the stop. */
static void test_stop_from_signal(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct sigaction sa, old;
	struct itimerval it = { { 0, 0 }, { 0, 200000 } };

	kb_reset_stop();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, &old);
	strvec_pushl(&cp.args, "sleep", "30", NULL);
	cp.timeout_ms = 20000;
	assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
	assert_int_equal(run_command(&cp), KB_ECANCELLED);
	assert_int_equal(kb_stop_signal(), SIGALRM);
	kb_reset_stop();
	sigaction(SIGALRM, &old, NULL);
	assert_true(cp.cancelled);
	assert_int_equal(cp.exit_code, 128 + SIGKILL);
	assert_true(cp.elapsed_ms < 1000);
	child_process_release(&cp);
}

/* --- killing a tree that left the process group --- */

/*
 * Like ninja under torch's extension loader: each "compiler" in a process
 * group of its own (ninja spawns them so), one in a session of its own,
 * each with a child of its own. Every pid goes to the file "pids" (4 lines).
 */
#define FAKE_BUILD \
	"perl -e 'setpgrp(0, 0); exec @ARGV' sh -c 'echo $$ >> pids; sleep 30 & echo $! >> pids; wait' &\n" \
	"setsid sh -c 'echo $$ >> pids; sleep 30 & echo $! >> pids; wait' &\n" \
	"wait\n"
#define FAKE_BUILD_PIDS 4
#define MAX_PIDS 16

/* The pids listed in path, at most max. */
static int read_pids(const char *path, pid_t *pids, int max)
{
	struct strbuf sb = STRBUF_INIT;
	const char *p;
	int n = 0;

	if (access(path, R_OK) || strbuf_read_file(&sb, path, 0)) {
		strbuf_release(&sb);
		return 0;
	}
	for (p = sb.buf; *p && n < max;) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		if (v > 1)
			pids[n++] = (pid_t)v;
		p = end;
		while (*p == '\n' || *p == ' ')
			p++;
	}
	strbuf_release(&sb);
	return n;
}

static int wait_for_pids(const char *path, pid_t *pids, int want, int ms)
{
	int n = 0;

	for (int waited = 0; waited <= ms; waited += 10) {
		n = read_pids(path, pids, MAX_PIDS);
		if (n >= want)
			break;
		usleep(10000);
	}
	return n;
}

/* True when every pid is gone; kills the survivors either way, so a
 * failing test leaves nothing behind. */
static bool all_gone_then_reap(const pid_t *pids, int n)
{
	bool gone = true;

	for (int i = 0; i < n; i++)
		if (!pid_gone(pids[i])) {
			fprintf(stderr, "process %d outlived the kill\n", (int)pids[i]);
			gone = false;
		}
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	return gone;
}

static bool have_perl(void)
{
	return !access("/usr/bin/perl", X_OK) || !access("/bin/perl", X_OK);
}

static void fake_build_dir(char *dir, size_t size, char *pidfile, size_t psize)
{
	char script[PATH_MAX];

	make_tmpdir(dir, size);
	xsnprintf(script, sizeof(script), "%s/build.sh", dir);
	write_file(script, FAKE_BUILD, 0644);
	xsnprintf(pidfile, psize, "%s/pids", dir);
}

static void test_kill_tree_on_timeout(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64], pidfile[PATH_MAX];
	pid_t pids[MAX_PIDS];
	int n;

	if (!have_perl())
		KB_SKIP("no perl (the test's child is a perl one-liner)");
	fake_build_dir(dir, sizeof(dir), pidfile, sizeof(pidfile));
	strvec_pushl(&cp.args, "sh", "build.sh", NULL);
	cp.dir = dir;
	cp.timeout_ms = 1500;
	assert_int_equal(run_command(&cp), 0);
	assert_true(cp.timed_out);
	n = read_pids(pidfile, pids, MAX_PIDS);
	assert_int_equal(n, FAKE_BUILD_PIDS);
	assert_true(all_gone_then_reap(pids, n));
	child_process_release(&cp);
	kb_rm_rf(dir);
}

/* The worker's way: start_command, then kill_command when it hangs. */
static void test_kill_tree_of_persistent_child(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64], pidfile[PATH_MAX];
	pid_t pids[MAX_PIDS];
	int n;

	if (!have_perl())
		KB_SKIP("no perl (the test's child is a perl one-liner)");
	fake_build_dir(dir, sizeof(dir), pidfile, sizeof(pidfile));
	strvec_pushl(&cp.args, "sh", "build.sh", NULL);
	cp.dir = dir;
	cp.keep_stdin_open = true;
	assert_int_equal(start_command(&cp), 0);
	n = wait_for_pids(pidfile, pids, FAKE_BUILD_PIDS, 10000);
	kill_command(&cp);
	assert_int_equal(cp.exit_code, 128 + SIGKILL);
	assert_int_equal(n, FAKE_BUILD_PIDS);
	assert_true(all_gone_then_reap(pids, n));
	child_process_release(&cp);
	kb_rm_rf(dir);
}

static void test_kill_tree_on_stop(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64], pidfile[PATH_MAX];
	struct stopper s = { 1000 };
	pid_t pids[MAX_PIDS];
	pthread_t th;
	int n;

	if (!have_perl())
		KB_SKIP("no perl (the test's child is a perl one-liner)");
	kb_reset_stop();
	fake_build_dir(dir, sizeof(dir), pidfile, sizeof(pidfile));
	strvec_pushl(&cp.args, "sh", "build.sh", NULL);
	cp.dir = dir;
	cp.timeout_ms = 20000;
	assert_int_equal(pthread_create(&th, NULL, stop_later, &s), 0);
	assert_int_equal(run_command(&cp), KB_ECANCELLED);
	pthread_join(th, NULL);
	kb_reset_stop();
	assert_true(cp.cancelled);
	n = read_pids(pidfile, pids, MAX_PIDS);
	assert_int_equal(n, FAKE_BUILD_PIDS);
	assert_true(all_gone_then_reap(pids, n));
	child_process_release(&cp);
	kb_rm_rf(dir);
}

/* The direct child exits and leaves the build running in its group: the
 * group's members and all they started go with it. */
static void test_kill_tree_after_exit(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[64], pidfile[PATH_MAX];
	pid_t pids[MAX_PIDS];
	int n;

	if (!have_perl())
		KB_SKIP("no perl (the test's child is a perl one-liner)");
	fake_build_dir(dir, sizeof(dir), pidfile, sizeof(pidfile));
	strvec_pushl(&cp.args, "sh", "-c",
		     "sh build.sh </dev/null >/dev/null 2>&1 &\n"
		     "until [ -s pids ] && [ $(wc -l < pids) -ge 4 ]; do sleep 0.01; done", NULL);
	cp.dir = dir;
	cp.timeout_ms = 20000;
	assert_int_equal(run_command(&cp), 0);
	assert_false(cp.timed_out);
	assert_int_equal(cp.exit_code, 0);
	n = read_pids(pidfile, pids, MAX_PIDS);
	assert_int_equal(n, FAKE_BUILD_PIDS);
	assert_true(all_gone_then_reap(pids, n));
	child_process_release(&cp);
	kb_rm_rf(dir);
}

/* Nothing outside the child's tree is touched: a process of ours in a
 * group of its own survives a kill of another child. */
static void test_kill_tree_spares_others(void **state)
{
	struct child_process other = CHILD_PROCESS_INIT, cp = CHILD_PROCESS_INIT;

	strvec_pushl(&other.args, "sleep", "30", NULL);
	other.keep_stdin_open = true;
	assert_int_equal(start_command(&other), 0);
	strvec_pushl(&cp.args, "sh", "-c", "sleep 30 & wait", NULL);
	cp.timeout_ms = 300;
	assert_int_equal(run_command(&cp), 0);
	assert_true(cp.timed_out);
	assert_int_equal(kill(other.pid, 0), 0);
	assert_false(pid_gone(getpid()));
	kill_command(&other);
	child_process_release(&other);
	child_process_release(&cp);
}

/*
 * The case found on the GPU runner: `kernelbot verify` of a torch
 * extension, stopped while torch's loader runs ninja. A stand-in g++ (CXX)
 * compiles nothing: it sleeps, with one child in its own session. After
 * kernelbot has stopped (SIGTERM: it ends the evaluation and kills the
 * worker's tree) no compiler, child or ninja may be left. kernelbot has
 * exited before anything of ours kills, so its orphans are not in our reach.
 */
#define FAKE_CXX \
	"#!/bin/sh\n" \
	"case \" $* \" in *\" -c \"*) ;; *) exec c++ \"$@\" ;; esac\n" \
	"echo $$ >> \"$KB_FAKE_PIDS\"\n" \
	"echo $PPID >> \"$KB_FAKE_PIDS\"\n" \
	"setsid sh -c 'echo $$ >> \"$KB_FAKE_PIDS\"; exec sleep 60' &\n" \
	"sleep 60 &\n" \
	"echo $! >> \"$KB_FAKE_PIDS\"\n" \
	"wait\n"

static bool python_with_torch_and_ninja(const char *top, struct strbuf *py)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	bool ok = false;

	strvec_pushl(&cp.args, "sh", "tests/find_python.sh", "--torch-only", NULL);
	cp.dir = top;
	cp.timeout_ms = 60000;
	if (run_command(&cp) || cp.exit_code || !cp.out.len)
		goto out;
	strbuf_addstr(py, cp.out.buf);
	strbuf_trim(py);
	child_process_release(&cp);
	child_process_init(&cp);
	strvec_pushl(&cp.args, py->buf, "-c",
		     "from torch.utils.cpp_extension import verify_ninja_availability as v; v()",
		     NULL);
	cp.timeout_ms = 60000;
	ok = !run_command(&cp) && !cp.exit_code;
out:
	child_process_release(&cp);
	return ok;
}

static void test_stopped_torch_extension_build_leaves_nothing(void **state)
{
	const char *top = getenv("KB_TOP"), *bin = getenv("KB_BIN");
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf py = STRBUF_INIT, cfg = STRBUF_INIT;
	char dir[64], pidfile[PATH_MAX], cxx[PATH_MAX], config[PATH_MAX];
	char op[PATH_MAX], kernel[PATH_MAX], json[PATH_MAX];
	pid_t pids[MAX_PIDS];
	int n;

	if (!top || !bin || access(bin, X_OK) || !python_with_torch_and_ninja(top, &py)) {
		strbuf_release(&py);
		KB_SKIP("needs the kernelbot binary and a python3 with torch and ninja");
	}
	make_tmpdir(dir, sizeof(dir));
	xsnprintf(pidfile, sizeof(pidfile), "%s/pids", dir);
	xsnprintf(cxx, sizeof(cxx), "%s/g++", dir);   /* torch accepts a "g++" */
	write_file(cxx, FAKE_CXX, 0755);
	xsnprintf(config, sizeof(config), "%s/config.ini", dir);
	/* a fake compiler injected through CXX: only outside the sandbox (the
	 * sandbox's PID namespace kills what it starts on its own) */
	strbuf_addf(&cfg, "[core]\nstate_dir = %s/state\n[harness]\npython = %s\n"
		    "[sandbox]\nenabled = false\n", dir, py.buf);
	write_file(config, cfg.buf, 0644);
	xsnprintf(op, sizeof(op), "%s/tests/operators/kb_relu.py", top);
	xsnprintf(kernel, sizeof(kernel), "%s/tests/kernels/cpu/ext_ok_relu.cpp", top);
	xsnprintf(json, sizeof(json), "%s/evidence.json", dir);

	strvec_pushl(&cp.args, bin, "verify", "-c", config, op, kernel, "--backend", "cpu",
		     "--seeds", "1", "--no-timing", "--timeout", "300", "--json", json, NULL);
	strvec_pushf(&cp.env, "CXX=%s", cxx);
	strvec_pushf(&cp.env, "KB_FAKE_PIDS=%s", pidfile);
	cp.dir = top;
	cp.keep_stdin_open = true;
	assert_int_equal(start_command(&cp), 0);
	n = wait_for_pids(pidfile, pids, 4, 120000);
	kill(cp.pid, SIGTERM);
	finish_command(&cp, 60000);
	if (n < 4)
		fprintf(stderr, "no fake compile started; kernelbot said:\n%s\n%s\n",
			cp.out.buf, cp.err.buf);
	assert_int_equal(n, 4);
	assert_true(cp.exit_code != 128 + SIGKILL); /* it stopped by itself */
	assert_true(all_gone_then_reap(pids, n));
	child_process_release(&cp);
	strbuf_release(&py);
	strbuf_release(&cfg);
	kb_rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_codes),
		cmocka_unit_test(test_capture),
		cmocka_unit_test(test_stdin),
		cmocka_unit_test(test_big_stdin_big_output),
		cmocka_unit_test(test_stdin_not_read),
		cmocka_unit_test(test_huge_output_capped),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_grandchild),
		cmocka_unit_test(test_crash),
		cmocka_unit_test(test_cannot_run),
		cmocka_unit_test(test_path_lookup),
		cmocka_unit_test(test_env_name_is_secret),
		cmocka_unit_test(test_env_scrubbing),
		cmocka_unit_test(test_cwd),
		cmocka_unit_test(test_rlimits),
		cmocka_unit_test(test_signal_mask_reset),
		cmocka_unit_test(test_result_pipe),
		cmocka_unit_test(test_child_descriptors),
		cmocka_unit_test(test_pass_fd),
		cmocka_unit_test(test_no_fd_leak),
		cmocka_unit_test(test_stop_from_thread),
		cmocka_unit_test(test_stop_from_signal),
		cmocka_unit_test(test_kill_tree_on_timeout),
		cmocka_unit_test(test_kill_tree_of_persistent_child),
		cmocka_unit_test(test_kill_tree_on_stop),
		cmocka_unit_test(test_kill_tree_after_exit),
		cmocka_unit_test(test_kill_tree_spares_others),
		cmocka_unit_test(test_stopped_torch_extension_build_leaves_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
