#include "core/common.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include <setjmp.h>
#include <cmocka.h>

/* Answers each stdin line on the result descriptor. */
#define ECHO_WORKER "while read -r l; do echo \"r:$l\" >&3; done"

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

/* Dead, or a zombie waiting for a reaper we do not control. */
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

/* Our own child, reaped: waitpid knows it no more and the pid is free. */
static bool reaped(pid_t pid)
{
	int status;

	return waitpid(pid, &status, WNOHANG) < 0 && errno == ECHILD &&
	       kill(pid, 0) < 0 && errno == ESRCH;
}

/* A worker under sh -c with a result pipe on 3 and stdin kept open. */
static void worker_init(struct child_process *cp, const char *script)
{
	child_process_init(cp);
	strvec_pushl(&cp->args, "sh", "-c", script, NULL);
	cp->result_fd_child = 3;
	cp->keep_stdin_open = true;
}

static int write_str(struct child_process *cp, const char *s, int64_t timeout_ms)
{
	return child_write(cp, s, strlen(s), timeout_ms);
}

/* Send one request line and expect answer as the reply. */
static void ask(struct child_process *cp, const char *req, const char *answer)
{
	struct strbuf line = STRBUF_INIT;

	assert_int_equal(write_str(cp, req, 5000), 0);
	assert_int_equal(child_read_line(cp, &line, 5000), 0);
	assert_string_equal(line.buf, answer);
	strbuf_release(&line);
}

static char log_path[64];

/* Error logs go to a file of our own for a while; log_end returns what was logged. */
static void log_begin(void)
{
	int fd;

	xsnprintf(log_path, sizeof(log_path), "/tmp/kb-test-subprocess-log-XXXXXX");
	fd = mkstemp(log_path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(log_open(log_path), 0);
}

static void log_end(struct strbuf *logged)
{
	log_open(NULL);
	strbuf_reset(logged);
	assert_int_equal(strbuf_read_file(logged, log_path, 0), 0);
	unlink(log_path);
}

static void *stop_later(void *arg)
{
	usleep((useconds_t)*(int *)arg * 1000);
	kb_request_stop(SIGTERM);
	return NULL;
}

/* --- tests --- */

static void test_echo_worker(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT;
	int64_t t0 = kb_now_ms();
	pid_t pid;

	worker_init(&cp, ECHO_WORKER);
	assert_int_equal(start_command(&cp), 0);
	assert_true(cp.pid > 0);
	assert_true(cp.in_fd >= 0);
	pid = cp.pid;
	for (int i = 0; i < 100; i++) {
		char req[32], want[32];

		xsnprintf(req, sizeof(req), "request %d\n", i);
		xsnprintf(want, sizeof(want), "r:request %d", i);
		assert_int_equal(write_str(&cp, req, 5000), 0);
		assert_int_equal(child_read_line(&cp, &line, 5000), 0);
		assert_string_equal(line.buf, want);
	}
	assert_true(child_alive(&cp));
	/* EOF on stdin ends the loop: a clean exit inside the grace */
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_false(cp.timed_out);
	assert_false(cp.cancelled);
	assert_int_equal(cp.pid, 0);
	assert_int_equal(cp.in_fd, -1);
	assert_true(cp.elapsed_ms <= kb_now_ms() - t0);
	assert_true(reaped(pid));
	assert_string_equal(cp.result.buf, "");
	assert_false(child_alive(&cp));
	child_process_release(&cp);
	strbuf_release(&line);
}

/* cp.in goes out before anything child_write sends; big writes drain stdout. */
static void test_in_first_and_big_write(void **state)
{
	struct child_process cp;
	size_t len = 1 << 20;
	char *big = xmalloc(len);

	worker_init(&cp, ECHO_WORKER);
	cp.in = "first\n";
	cp.in_len = strlen(cp.in);
	assert_int_equal(start_command(&cp), 0);
	ask(&cp, "second\n", "r:first");
	ask(&cp, "third\n", "r:second");
	assert_int_equal(finish_command(&cp, 5000), 0);
	/* what no child_read_line took stays in cp.result */
	assert_string_equal(cp.result.buf, "r:third\n");
	child_process_release(&cp);

	/* 1 MiB through cat: cat blocks on its stdout unless we drain it while writing */
	for (size_t i = 0; i < len; i++)
		big[i] = (char)('a' + i % 26);
	child_process_init(&cp);
	strvec_pushl(&cp.args, "cat", NULL);
	cp.keep_stdin_open = true;
	assert_int_equal(start_command(&cp), 0);
	assert_int_equal(child_write(&cp, big, len, 10000), 0);
	assert_int_equal(child_write(&cp, big, len, 10000), 0);
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_int_equal(cp.out.len, 2 * len);
	assert_true(!memcmp(cp.out.buf, big, len));
	assert_true(!memcmp(cp.out.buf + len, big, len));
	child_process_release(&cp);
	free(big);
}

static void test_partial_lines(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT;

	worker_init(&cp, "while read -r l; do printf 'r:%s' \"$l\" >&3; sleep 0.2; "
			 "printf ' end\\none\\ntw' >&3; sleep 0.1; printf 'o\\n' >&3; done");
	assert_int_equal(start_command(&cp), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(write_str(&cp, "x\n", 5000), 0);
		assert_int_equal(child_read_line(&cp, &line, 5000), 0);
		assert_string_equal(line.buf, "r:x end");
		assert_int_equal(child_read_line(&cp, &line, 5000), 0);
		assert_string_equal(line.buf, "one");
		assert_int_equal(child_read_line(&cp, &line, 5000), 0);
		assert_string_equal(line.buf, "two");
	}
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	child_process_release(&cp);
	strbuf_release(&line);
}

/* A line over result_cap is dropped up to its newline; the next one comes through. */
static void test_overlong_line(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT;

	worker_init(&cp, "read -r l; printf 'short\\n0123456789abcdef\\n' >&3; "
			 "printf 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' >&3; sleep 0.1; "
			 "printf 'yyyyyyyyyyyyyyyyyyyyyyyyyyyy\\nafter\\n' >&3; "
			 "printf '0123456789abcdefg\\nlast\\n' >&3; read -r l; exit 0");
	cp.result_cap = 16;
	assert_int_equal(start_command(&cp), 0);
	assert_int_equal(write_str(&cp, "go\n", 5000), 0);
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	assert_string_equal(line.buf, "short");
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	assert_string_equal(line.buf, "0123456789abcdef"); /* exactly the cap */
	assert_int_equal(child_read_line(&cp, &line, 5000), KB_ETOOBIG);
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	assert_string_equal(line.buf, "after");
	assert_int_equal(child_read_line(&cp, &line, 5000), KB_ETOOBIG);
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	assert_string_equal(line.buf, "last");
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	child_process_release(&cp);
	strbuf_release(&line);
}

static void test_timeouts(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT;
	size_t len = 4 << 20;
	char *big = xcalloc(1, len);
	int64_t t0;

	/* reads its requests, never answers */
	worker_init(&cp, "while read -r l; do :; done");
	assert_int_equal(start_command(&cp), 0);
	assert_int_equal(write_str(&cp, "x\n", 5000), 0);
	t0 = kb_now_ms();
	assert_int_equal(child_read_line(&cp, &line, 300), KB_ETIMEOUT);
	assert_true(kb_now_ms() - t0 >= 300);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_true(child_alive(&cp));
	assert_int_equal(write_str(&cp, "y\n", 5000), 0); /* still takes requests */
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_false(cp.timed_out);
	child_process_release(&cp);

	/* never reads: the write times out and the rest stays queued */
	worker_init(&cp, "exec sleep 30");
	assert_int_equal(start_command(&cp), 0);
	t0 = kb_now_ms();
	assert_int_equal(child_write(&cp, big, len, 300), KB_ETIMEOUT);
	assert_true(kb_now_ms() - t0 >= 300);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_true(child_alive(&cp));
	t0 = kb_now_ms();
	kill_command(&cp);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_int_equal(cp.exit_code, 128 + SIGKILL);
	assert_false(cp.timed_out);
	child_process_release(&cp);

	/* a child that ignores EOF is killed when the grace runs out */
	worker_init(&cp, "cat >/dev/null; exec sleep 30");
	assert_int_equal(start_command(&cp), 0);
	t0 = kb_now_ms();
	assert_int_equal(finish_command(&cp, 300), 0);
	assert_true(kb_now_ms() - t0 >= 300);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_true(cp.timed_out);
	assert_int_equal(cp.exit_code, 128 + SIGKILL);
	child_process_release(&cp);

	free(big);
	strbuf_release(&line);
}

/* A worker that dies mid-request is noticed at once, not at the timeout. */
static void test_dies_mid_request(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT, logged = STRBUF_INIT;
	int64_t t0;

	worker_init(&cp, "while read -r l; do if [ \"$l\" = die ]; then "
			 "printf 'half' >&3; kill -TERM $$; fi; echo \"r:$l\" >&3; done");
	assert_int_equal(start_command(&cp), 0);
	ask(&cp, "ok\n", "r:ok");
	assert_int_equal(write_str(&cp, "die\n", 5000), 0);
	t0 = kb_now_ms();
	log_begin();
	assert_int_equal(child_read_line(&cp, &line, 20000), -1);
	log_end(&logged);
	assert_true(kb_now_ms() - t0 < 2000);
	assert_non_null(strstr(logged.buf, "'sh' exited without a further answer"));
	assert_false(child_alive(&cp));
	/* and again: still an error, at once */
	log_begin();
	assert_int_equal(child_read_line(&cp, &line, 20000), -1);
	assert_int_equal(write_str(&cp, "more\n", 20000), -1);
	log_end(&logged);
	assert_true(kb_now_ms() - t0 < 2000);
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 128 + SIGTERM);
	assert_false(cp.timed_out);
	assert_string_equal(cp.result.buf, "half"); /* the unfinished answer */
	child_process_release(&cp);

	/* closing the result descriptor while alive is an error as well */
	worker_init(&cp, "exec 3>&-; exec sleep 30");
	assert_int_equal(start_command(&cp), 0);
	log_begin();
	assert_int_equal(child_read_line(&cp, &line, 5000), -1);
	log_end(&logged);
	assert_non_null(strstr(logged.buf, "closed its result descriptor"));
	assert_true(child_alive(&cp));
	kill_command(&cp);
	assert_int_equal(cp.exit_code, 128 + SIGKILL);
	child_process_release(&cp);

	strbuf_release(&line);
	strbuf_release(&logged);
}

/* A hung worker (and what it started) is killed; a fresh one starts in the same struct. */
static void test_kill_hung_then_restart(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT;
	pid_t pid, grandchild;
	int64_t t0;

	worker_init(&cp, "while read -r l; do if [ \"$l\" = hang ]; then "
			 "sleep 30 & echo $!; wait; fi; echo \"r:$l\" >&3; done");
	assert_int_equal(start_command(&cp), 0);
	ask(&cp, "a\n", "r:a");
	assert_int_equal(write_str(&cp, "hang\n", 5000), 0);
	assert_int_equal(child_read_line(&cp, &line, 300), KB_ETIMEOUT);
	assert_true(child_alive(&cp));
	pid = cp.pid;
	grandchild = (pid_t)atoi(cp.out.buf); /* stdout was drained while we waited */
	assert_true(grandchild > 1);
	t0 = kb_now_ms();
	kill_command(&cp);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_int_equal(cp.exit_code, 128 + SIGKILL);
	assert_false(cp.timed_out);
	assert_int_equal(cp.pid, 0);
	assert_true(reaped(pid));
	assert_true(pid_gone(grandchild));
	kill_command(&cp); /* nothing left: a no-op */

	assert_int_equal(start_command(&cp), 0);
	assert_int_equal(cp.out.len, 0); /* results start afresh */
	ask(&cp, "b\n", "r:b");
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	child_process_release(&cp);
	strbuf_release(&line);
}

/* 10 MB on stderr per request: no deadlock, and err holds the tail. */
static void test_stderr_flood_tail(void **state)
{
	struct child_process cp;
	int64_t t0 = kb_now_ms();

	worker_init(&cp, "while read -r l; do head -c 10000000 /dev/zero >&2; "
			 "echo \"end-$l\" >&2; echo \"r:$l\" >&3; done");
	cp.err_cap = 4096;
	cp.keep_tail = true;
	assert_int_equal(start_command(&cp), 0);
	for (int i = 0; i < 2; i++) {
		const char *want = i ? "end-b\n" : "end-a\n";

		ask(&cp, i ? "b\n" : "a\n", i ? "r:b" : "r:a");
		assert_int_equal(cp.err.len, 4096);
		assert_true(cp.err_truncated);
		assert_string_equal(cp.err.buf + cp.err.len - strlen(want), want);
		for (size_t j = 0; j < cp.err.len - strlen(want); j++)
			if (cp.err.buf[j])
				fail_msg("byte %zu of the tail is %d", j, cp.err.buf[j]);
		assert_true(cp.err.alloc < (1 << 20));
		strbuf_reset(&cp.err); /* per-request logs: the caller may reset */
	}
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_true(kb_now_ms() - t0 < 10000);
	child_process_release(&cp);

	/* keep_tail works for run_command too */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "seq", "1", "100000", NULL);
	cp.out_cap = 19;
	cp.keep_tail = true;
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.out.buf, "99998\n99999\n100000\n");
	assert_true(cp.out_truncated);
	child_process_release(&cp);

	/* a short stream under the cap is whole and not truncated */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "echo hi >&2", NULL);
	cp.err_cap = 100;
	cp.keep_tail = true;
	assert_int_equal(run_command(&cp), 0);
	assert_string_equal(cp.err.buf, "hi\n");
	assert_false(cp.err_truncated);
	child_process_release(&cp);
}

/* Writes to a child that is gone, or closed its stdin, return -1; no SIGPIPE. */
static void test_write_dead_child(void **state)
{
	struct child_process cp;
	struct strbuf logged = STRBUF_INIT;
	struct sigaction dfl, old;
	size_t len = 1 << 20;
	char *big = xcalloc(1, len);
	sigset_t pending;

	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(SIGPIPE, &dfl, &old);

	/* closed stdin, still alive: EPIPE */
	worker_init(&cp, "exec 0<&-; exec sleep 30");
	assert_int_equal(start_command(&cp), 0);
	usleep(100000);
	log_begin();
	assert_int_equal(child_write(&cp, big, len, 5000), -1);
	assert_int_equal(write_str(&cp, "x\n", 5000), -1);
	log_end(&logged);
	assert_non_null(strstr(logged.buf, "could not write to 'sh'"));
	assert_true(child_alive(&cp));
	kill_command(&cp);
	child_process_release(&cp);

	/* reads a little, then exits */
	worker_init(&cp, "head -c 10 >/dev/null");
	assert_int_equal(start_command(&cp), 0);
	log_begin();
	assert_int_equal(child_write(&cp, big, len, 5000), -1);
	log_end(&logged);
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 0);
	child_process_release(&cp);

	/* exited before we write */
	worker_init(&cp, "exit 4");
	assert_int_equal(start_command(&cp), 0);
	while (child_alive(&cp))
		usleep(10000);
	log_begin();
	assert_int_equal(write_str(&cp, "x\n", 5000), -1);
	log_end(&logged);
	assert_non_null(strstr(logged.buf, "could not write to 'sh': "));
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 4);
	child_process_release(&cp);

	sigpending(&pending);
	assert_false(sigismember(&pending, SIGPIPE));
	sigaction(SIGPIPE, &old, NULL);
	strbuf_release(&logged);
	free(big);
}

static void test_misuse(void **state)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf line = STRBUF_INIT, logged = STRBUF_INIT;

	log_begin();
	/* nothing started */
	assert_int_equal(finish_command(&cp, 0), -1);
	assert_int_equal(child_write(&cp, "x", 1, 100), -1);
	assert_int_equal(child_read_line(&cp, &line, 100), -1);
	assert_false(child_alive(&cp));
	kill_command(&cp);

	/* cannot start: -1 with the reason, nothing to finish */
	strvec_pushl(&cp.args, "kb-no-such-program", NULL);
	cp.keep_stdin_open = true;
	assert_int_equal(start_command(&cp), -1);
	assert_null(cp.state);
	assert_int_equal(cp.pid, 0);
	assert_int_equal(cp.in_fd, -1);
	child_process_release(&cp);

	child_process_init(&cp);
	strvec_pushl(&cp.args, "/nonexistent/python3", NULL);
	assert_int_equal(start_command(&cp), -1);
	assert_null(cp.state);
	child_process_release(&cp);

	/* no result pipe, no kept stdin, started twice */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "sleep", "30", NULL);
	assert_int_equal(start_command(&cp), 0);
	assert_int_equal(child_read_line(&cp, &line, 100), -1);
	assert_int_equal(child_write(&cp, "x", 1, 100), -1);
	assert_int_equal(start_command(&cp), -1);
	assert_int_equal(run_command(&cp), -1);
	assert_true(child_alive(&cp));
	kill_command(&cp);
	child_process_release(&cp);
	log_end(&logged);
	assert_non_null(strstr(logged.buf, "could not run 'kb-no-such-program': No such file or directory"));
	assert_non_null(strstr(logged.buf, "could not run '/nonexistent/python3': No such file or directory"));
	assert_non_null(strstr(logged.buf, "'sleep' is already running"));

	/* without keep_stdin_open, start + finish is run_command in two steps */
	child_process_init(&cp);
	strvec_pushl(&cp.args, "sh", "-c", "cat; echo res >&3; exit 2", NULL);
	cp.in = "hello\n";
	cp.in_len = strlen(cp.in);
	cp.result_fd_child = 3;
	assert_int_equal(start_command(&cp), 0);
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	assert_string_equal(line.buf, "res");
	assert_int_equal(finish_command(&cp, 5000), 0);
	assert_int_equal(cp.exit_code, 2);
	assert_string_equal(cp.out.buf, "hello\n");
	child_process_release(&cp);

	strbuf_release(&line);
	strbuf_release(&logged);
}

/* Releasing a struct whose child still runs kills its group and reaps it. */
static void test_release_running(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT;
	pid_t pid, grandchild;
	int64_t t0;

	worker_init(&cp, "sleep 30 & echo $! >&3; wait");
	assert_int_equal(start_command(&cp), 0);
	pid = cp.pid;
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	grandchild = (pid_t)atoi(line.buf);
	assert_true(grandchild > 1);
	t0 = kb_now_ms();
	child_process_release(&cp);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_true(reaped(pid));
	assert_true(pid_gone(grandchild));
	assert_null(cp.state);
	strbuf_release(&line);
}

static void test_stop_request(void **state)
{
	struct child_process cp;
	struct strbuf line = STRBUF_INIT;
	int delay = 150;
	pthread_t th;
	int64_t t0;

	kb_reset_stop();
	worker_init(&cp, "while read -r l; do if [ \"$l\" = slow ]; then sleep 1; fi; "
			 "echo \"r:$l\" >&3; done");
	assert_int_equal(start_command(&cp), 0);
	assert_int_equal(write_str(&cp, "slow\n", 5000), 0);
	t0 = kb_now_ms();
	assert_int_equal(pthread_create(&th, NULL, stop_later, &delay), 0);
	assert_int_equal(child_read_line(&cp, &line, 10000), KB_ECANCELLED);
	pthread_join(th, NULL);
	assert_true(kb_now_ms() - t0 >= 150);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_true(child_alive(&cp)); /* the caller decides what happens to it */
	assert_int_equal(write_str(&cp, "x\n", 5000), KB_ECANCELLED);
	kb_reset_stop();
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	assert_string_equal(line.buf, "r:slow");
	assert_int_equal(child_read_line(&cp, &line, 5000), 0);
	assert_string_equal(line.buf, "r:x"); /* the queued request went out */

	/* a stop during finish kills at once */
	kb_request_stop(SIGINT);
	t0 = kb_now_ms();
	assert_int_equal(finish_command(&cp, 20000), KB_ECANCELLED);
	assert_true(kb_now_ms() - t0 < 1000);
	assert_true(cp.cancelled);
	assert_int_equal(cp.pid, 0);

	/* and nothing starts while it is pending */
	assert_int_equal(start_command(&cp), KB_ECANCELLED);
	assert_null(cp.state);
	assert_true(cp.cancelled);
	kb_reset_stop();
	child_process_release(&cp);
	strbuf_release(&line);
}

static void test_no_fd_leak(void **state)
{
	int before = count_fds();
	enum kb_log_level level = log_get_level();

	log_set_level(KB_LOG_OFF); /* the failed starts would log */
	for (int i = 0; i < 50; i++) {
		struct child_process cp;
		struct strbuf line = STRBUF_INIT;

		worker_init(&cp, ECHO_WORKER);
		cp.keep_tail = i % 2;
		switch (i % 5) {
		case 0:
			assert_int_equal(start_command(&cp), 0);
			ask(&cp, "x\n", "r:x");
			assert_int_equal(finish_command(&cp, 5000), 0);
			break;
		case 1:
			assert_int_equal(start_command(&cp), 0);
			assert_int_equal(write_str(&cp, "x\n", 5000), 0);
			kill_command(&cp);
			break;
		case 2:
			strvec_clear(&cp.args);
			strvec_pushl(&cp.args, "/nonexistent/x", NULL);
			assert_int_equal(start_command(&cp), -1);
			break;
		case 3:
			cp.err_to_out = true;
			assert_int_equal(start_command(&cp), 0);
			break; /* release does the rest */
		default:
			strvec_clear(&cp.args);
			strvec_pushl(&cp.args, "sh", "-c", "sleep 5 & exit 1", NULL);
			assert_int_equal(start_command(&cp), 0);
			assert_int_equal(child_read_line(&cp, &line, 5000), -1);
			assert_int_equal(finish_command(&cp, 5000), 0);
			assert_int_equal(cp.exit_code, 1);
			break;
		}
		child_process_release(&cp);
		strbuf_release(&line);
	}
	log_set_level(level);
	assert_int_equal(count_fds(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo_worker),
		cmocka_unit_test(test_in_first_and_big_write),
		cmocka_unit_test(test_partial_lines),
		cmocka_unit_test(test_overlong_line),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_dies_mid_request),
		cmocka_unit_test(test_kill_hung_then_restart),
		cmocka_unit_test(test_stderr_flood_tail),
		cmocka_unit_test(test_write_dead_child),
		cmocka_unit_test(test_misuse),
		cmocka_unit_test(test_release_running),
		cmocka_unit_test(test_stop_request),
		cmocka_unit_test(test_no_fd_leak),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
