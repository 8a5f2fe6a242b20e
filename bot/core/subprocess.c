#include "core/common.h"
#include "core/subprocess.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/util.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define DEFAULT_CAP ((size_t)16 << 20)
#define STOP_POLL_MS 100     /* kb_stop_requested() is looked at this often */
#define DRAIN_MS 250         /* after the group is killed, wait this long for EOF */
#define CHUNK (64 * 1024)
#define DEFAULT_PATH "/bin:/usr/bin"

/* What the child reports on its status pipe when it fails before exec. */
enum child_stage { STAGE_SETUP = 1, STAGE_CHDIR, STAGE_RLIMIT, STAGE_EXEC };
struct child_status {
	int stage;
	int err;
};

/* Everything the child needs, prepared before fork: after fork it may only
 * make async-signal-safe calls (we may have threads). */
struct child_exec {
	const char *path;
	char *const *argv;
	char *const *sh_argv; /* for ENOEXEC: /bin/sh path args... (execvp does the same) */
	char *const *envp;
	const char *dir;
	int in_fd, out_fd, err_fd, res_fd, status_fd;
	int res_target;
	const struct child_process *cp;
};

/* One captured stream. */
struct sink {
	int fd;
	struct strbuf *sb;
	size_t cap;
	bool *truncated;
};

static const char *const secret_words[] = {
	"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL",
	"PRIVATE", "API_KEY", "APIKEY", "ACCESS_KEY", "AUTH", "COOKIE", "SESSION",
};
static const char *const secret_prefixes[] = {
	"GITHUB_", "ACTIONS_", "RUNNER_", "AWS_", "OPENAI_", "ANTHROPIC_", "HF_", "GH_",
};

static bool name_is_secret(const char *name, size_t len)
{
	for (size_t w = 0; w < ARRAY_SIZE(secret_words); w++) {
		size_t wl = strlen(secret_words[w]);

		for (size_t i = 0; i + wl <= len; i++)
			if (!strncasecmp(name + i, secret_words[w], wl))
				return true;
	}
	for (size_t p = 0; p < ARRAY_SIZE(secret_prefixes); p++) {
		size_t pl = strlen(secret_prefixes[p]);

		if (len >= pl && !strncasecmp(name, secret_prefixes[p], pl))
			return true;
	}
	return len >= 4 && !strncasecmp(name + len - 4, "_KEY", 4);
}

bool env_name_is_secret(const char *name)
{
	return name && name_is_secret(name, strcspn(name, "="));
}

void child_process_init(struct child_process *cp)
{
	struct child_process blank = CHILD_PROCESS_INIT;

	*cp = blank;
}

void child_process_release(struct child_process *cp)
{
	strvec_clear(&cp->args);
	strvec_clear(&cp->env);
	strbuf_release(&cp->out);
	strbuf_release(&cp->err);
	strbuf_release(&cp->result);
}

static void env_unset(struct strvec *env, const char *name, size_t len)
{
	size_t i = 0;

	while (i < env->nr) {
		const char *e = env->v[i];

		if (strcspn(e, "=") == len && !memcmp(e, name, len)) {
			free((char *)e);
			/* shift the tail, NULL terminator included */
			memmove(&env->v[i], &env->v[i + 1], (env->nr - i) * sizeof(*env->v));
			env->nr--;
		} else {
			i++;
		}
	}
}

static void build_env(const struct child_process *cp, struct strvec *env)
{
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');

		if (!eq)
			continue;
		if (!cp->inherit_env && name_is_secret(*e, (size_t)(eq - *e)))
			continue;
		if (log_contains_secret(eq + 1))
			continue;
		strvec_push(env, *e);
	}
	for (size_t i = 0; i < cp->env.nr; i++) {
		const char *e = cp->env.v[i];

		env_unset(env, e, strcspn(e, "="));
		if (strchr(e, '='))
			strvec_push(env, e);
	}
	if (cp->result_fd_child > 0) {
		env_unset(env, "KB_RESULT_FD", strlen("KB_RESULT_FD"));
		strvec_pushf(env, "KB_RESULT_FD=%d", cp->result_fd_child);
	}
}

/*
 * execvp's lookup, done before fork and in the child's PATH: the first
 * regular executable file wins; EACCES when only non-executable ones exist.
 */
static int resolve_program(const char *prog, const struct strvec *env, struct strbuf *path)
{
	const char *p = NULL;
	bool denied = false;

	strbuf_reset(path);
	if (strchr(prog, '/')) {
		strbuf_addstr(path, prog);
		return 0;
	}
	if (!*prog) {
		errno = ENOENT;
		return -1;
	}
	for (size_t i = 0; i < env->nr; i++)
		if (!strncmp(env->v[i], "PATH=", 5))
			p = env->v[i] + 5;
	if (!p)
		p = DEFAULT_PATH;
	for (;;) {
		const char *end = strchrnul(p, ':');
		struct stat st;

		strbuf_reset(path);
		if (end == p)
			strbuf_addch(path, '.');
		else
			strbuf_add(path, p, (size_t)(end - p));
		strbuf_addch(path, '/');
		strbuf_addstr(path, prog);
		if (!stat(path->buf, &st) && S_ISREG(st.st_mode)) {
			if (!access(path->buf, X_OK))
				return 0;
			denied = true;
		}
		if (!*end)
			break;
		p = end + 1;
	}
	strbuf_reset(path);
	errno = denied ? EACCES : ENOENT;
	return -1;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void close_pipe(int p[2])
{
	close_fd(&p[0]);
	close_fd(&p[1]);
}

/* --- the child, between fork and exec: async-signal-safe calls only --- */

static _Noreturn void child_fail(int status_fd, int stage)
{
	struct child_status st = { stage, errno };
	ssize_t n;

	do
		n = write(status_fd, &st, sizeof(st));
	while (n < 0 && errno == EINTR);
	_exit(127);
}

static void close_fd_range(unsigned int lo, unsigned int hi)
{
	struct rlimit rl;
	unsigned int max = 1u << 20;

	if (lo > hi)
		return;
#ifdef SYS_close_range
	if (!syscall(SYS_close_range, lo, hi, 0))
		return;
#endif
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max)
		max = (unsigned int)rl.rlim_cur;
	for (unsigned int fd = lo; fd <= hi && fd < max; fd++)
		close((int)fd);
}

/* hard_extra: RLIMIT_CPU gets SIGXCPU at the soft limit, SIGKILL a second later. */
static int child_limit(int resource, uint64_t value, uint64_t hard_extra)
{
	struct rlimit rl;
	rlim_t hard;

	if (!value)
		return 0;
	if (getrlimit(resource, &rl))
		return -1;
	hard = (rlim_t)(value + hard_extra);
	if (rl.rlim_max != RLIM_INFINITY && hard > rl.rlim_max)
		hard = rl.rlim_max;
	rl.rlim_max = hard;
	rl.rlim_cur = (rlim_t)value < hard ? (rlim_t)value : hard;
	return setrlimit(resource, &rl);
}

static _Noreturn void run_child(const struct child_exec *x)
{
	const struct child_process *cp = x->cp;
	int min_fd = x->res_target >= 3 ? x->res_target + 1 : 3;
	struct sigaction sa;
	sigset_t none;
	int status, in, out, err, res = -1;

	/* the parent blocked every signal around fork: reset, then unblock */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &sa, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	setpgid(0, 0);

	/* move every source above the targets first, so no dup2 clobbers one */
	status = fcntl(x->status_fd, F_DUPFD_CLOEXEC, min_fd);
	if (status < 0)
		_exit(127);
	in = fcntl(x->in_fd, F_DUPFD, min_fd);
	out = fcntl(x->out_fd, F_DUPFD, min_fd);
	err = x->err_fd >= 0 ? fcntl(x->err_fd, F_DUPFD, min_fd) : out;
	if (x->res_fd >= 0)
		res = fcntl(x->res_fd, F_DUPFD, min_fd);
	if (in < 0 || out < 0 || err < 0 || (x->res_fd >= 0 && res < 0))
		child_fail(status, STAGE_SETUP);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 ||
	    (res >= 0 && dup2(res, x->res_target) < 0))
		child_fail(status, STAGE_SETUP);
	if (res >= 0) {
		close_fd_range(3, (unsigned int)x->res_target - 1);
		close_fd_range((unsigned int)x->res_target + 1, (unsigned int)status - 1);
	} else {
		close_fd_range(3, (unsigned int)status - 1);
	}
	close_fd_range((unsigned int)status + 1, ~0u);

	if (x->dir && chdir(x->dir))
		child_fail(status, STAGE_CHDIR);
	if (child_limit(RLIMIT_AS, cp->rlimit_as_bytes, 0) ||
	    child_limit(RLIMIT_CPU, cp->rlimit_cpu_s, 1) ||
	    child_limit(RLIMIT_FSIZE, cp->rlimit_fsize_bytes, 0) ||
	    child_limit(RLIMIT_NOFILE, cp->rlimit_nofile, 0))
		child_fail(status, STAGE_RLIMIT);
	/* a crashing kernel must not litter its working directory with cores */
	if (!cp->keep_core_dumps) {
		struct rlimit no_core = { 0, 0 };

		setrlimit(RLIMIT_CORE, &no_core);
	}

	execve(x->path, x->argv, x->envp);
	if (errno == ENOEXEC)
		execve("/bin/sh", x->sh_argv, x->envp);
	child_fail(status, STAGE_EXEC);
}

/* --- the parent --- */

static void kill_group(pid_t pid)
{
	/* pid is our unreaped child, so neither number can have been reused */
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
}

/* True once the child has exited; it stays a zombie (WNOWAIT) so that
 * its pid, which is also the group id, cannot be reused before we kill. */
static bool child_exited(pid_t pid)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		if (errno != EINTR)
			return true; /* ECHILD: nothing left to wait for */
	return si.si_pid == pid;
}

static int reap(pid_t pid, int *exit_code)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status))
		*exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		*exit_code = 128 + WTERMSIG(status);
	else
		*exit_code = -1;
	return 0;
}

static void sink_add(struct sink *s, const char *buf, size_t n)
{
	size_t room = s->sb->len < s->cap ? s->cap - s->sb->len : 0;
	size_t take = n < room ? n : room;

	if (take && strbuf_add(s->sb, buf, take))
		take = 0; /* the strbuf carries a smaller cap of its own */
	if (take < n)
		*s->truncated = true;
}

/* Read what is there now; closes the sink at EOF or on error. */
static void sink_read(struct sink *s, char *buf)
{
	for (int i = 0; i < 16 && s->fd >= 0; i++) {
		ssize_t n = read(s->fd, buf, CHUNK);

		if (n > 0) {
			sink_add(s, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		close_fd(&s->fd); /* EOF, or an error we cannot do better with */
	}
}

/* Feed stdin; returns true when the child closed its end (EPIPE). */
static bool feed_stdin(int *fd, const char *in, size_t len, size_t *off)
{
	while (*fd >= 0 && *off < len) {
		size_t want = len - *off < CHUNK ? len - *off : CHUNK;
		ssize_t n = write(*fd, in + *off, want);

		if (n > 0) {
			*off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		{
			bool broken = n < 0 && errno == EPIPE;

			close_fd(fd);
			return broken;
		}
	}
	close_fd(fd);
	return false;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return 0;
}

/*
 * The poll loop: feed stdin, drain the sinks, watch the deadline and stop
 * requests. Returns 0 when the child has exited (the group killed, the
 * pipes drained or the drain window over), KB_ECANCELLED, or -1; in every
 * case the child is dead or dying from SIGKILL and only needs reaping.
 */
static int pump(struct child_process *cp, pid_t pid, int *pidfd, int *in_fd,
		struct sink *sinks, size_t nr_sinks, int64_t start, bool *epipe)
{
	char *buf = xmalloc(CHUNK);
	int64_t deadline = cp->timeout_ms > 0 ? start + cp->timeout_ms : 0;
	int64_t drain_until = 0;
	bool exited = false;
	int idle_ms = 1, rc = 0;
	size_t in_off = 0;

	for (;;) {
		struct pollfd pfd[8];
		int in_slot = -1, sink_slot[4] = { -1, -1, -1, -1 };
		nfds_t n = 0;
		int64_t now, wait_ms;
		bool open_fds = *in_fd >= 0;

		if (kb_stop_requested()) {
			kill_group(pid);
			cp->cancelled = true;
			rc = KB_ECANCELLED;
			break;
		}
		if (!exited && child_exited(pid)) {
			/* grandchildren die with it and cannot hold our pipes */
			exited = true;
			kill_group(pid);
			drain_until = kb_now_ms() + DRAIN_MS;
			close_fd(in_fd);
			close_fd(pidfd);
		}
		now = kb_now_ms();
		if (!exited && deadline && now >= deadline) {
			kill_group(pid);
			cp->timed_out = true;
			deadline = 0; /* now wait for the exit, then drain */
		}
		for (size_t i = 0; i < nr_sinks; i++)
			open_fds |= sinks[i].fd >= 0;
		if (exited && (!open_fds || now >= drain_until))
			break;

		if (*in_fd >= 0) {
			in_slot = (int)n;
			pfd[n].fd = *in_fd;
			pfd[n++].events = POLLOUT;
		}
		for (size_t i = 0; i < nr_sinks; i++)
			if (sinks[i].fd >= 0) {
				sink_slot[i] = (int)n;
				pfd[n].fd = sinks[i].fd;
				pfd[n++].events = POLLIN;
			}
		if (*pidfd >= 0) {
			pfd[n].fd = *pidfd;
			pfd[n++].events = POLLIN;
		}
		wait_ms = STOP_POLL_MS;
		if (deadline && deadline - now < wait_ms)
			wait_ms = deadline - now;
		if (exited && drain_until - now < wait_ms)
			wait_ms = drain_until - now;
		if (!exited && *pidfd < 0 && !open_fds) {
			/* nothing will wake us when the child exits: back off */
			if (idle_ms < wait_ms)
				wait_ms = idle_ms;
			idle_ms = idle_ms < 50 ? idle_ms * 2 : 100;
		}
		if (wait_ms < 0)
			wait_ms = 0;
		if (poll(pfd, n, (int)wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			rc = error_errno("could not poll '%s'", cp->args.v[0]);
			kill_group(pid);
			break;
		}
		if (in_slot >= 0 && pfd[in_slot].revents)
			*epipe |= feed_stdin(in_fd, cp->in, cp->in_len, &in_off);
		for (size_t i = 0; i < nr_sinks; i++)
			if (sink_slot[i] >= 0 && pfd[sink_slot[i]].revents)
				sink_read(&sinks[i], buf);
	}
	free(buf);
	return rc;
}

static int report_child_failure(const struct child_process *cp, const struct child_status *st)
{
	const char *prog = cp->args.v[0];
	const char *why = strerror(st->err);

	switch (st->stage) {
	case STAGE_CHDIR:
		return error("could not change directory to '%s' to run '%s': %s", cp->dir, prog, why);
	case STAGE_RLIMIT:
		return error("could not set resource limits for '%s': %s", prog, why);
	case STAGE_EXEC:
		return error("could not run '%s': %s", prog, why);
	default:
		return error("could not set up descriptors for '%s': %s", prog, why);
	}
}

/* 0: the child exec'd; 1: it failed and *st says how. */
static int read_child_status(int fd, struct child_status *st)
{
	size_t got = 0;

	while (got < sizeof(*st)) {
		ssize_t n = read(fd, (char *)st + got, sizeof(*st) - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (!got)
		return 0;
	if (got < sizeof(*st)) {
		st->stage = STAGE_SETUP;
		st->err = EIO;
	}
	return 1;
}

int run_command(struct child_process *cp)
{
	struct strvec env = STRVEC_INIT, sh_argv = STRVEC_INIT;
	struct strbuf path = STRBUF_INIT;
	int in_pipe[2] = { -1, -1 }, out_pipe[2] = { -1, -1 }, err_pipe[2] = { -1, -1 };
	int res_pipe[2] = { -1, -1 }, status_pipe[2] = { -1, -1 };
	int devnull = -1, pidfd = -1;
	struct sink sinks[3];
	size_t nr_sinks = 0;
	struct child_exec x;
	struct child_status st;
	sigset_t all, saved, pipe_set, pending;
	bool pipe_was_pending, epipe = false;
	const char *prog;
	pid_t pid = -1;
	int64_t start = kb_now_ms();
	int rc = -1, fork_errno;

	strbuf_reset(&cp->out);
	strbuf_reset(&cp->err);
	strbuf_reset(&cp->result);
	cp->out_truncated = cp->err_truncated = cp->result_truncated = false;
	cp->timed_out = cp->cancelled = false;
	cp->exit_code = -1;
	cp->elapsed_ms = 0;

	if (!cp->args.nr)
		return error("no program to run");
	prog = cp->args.v[0];
	if (cp->result_fd_child < 0 || (cp->result_fd_child > 0 && cp->result_fd_child < 3))
		return error("result descriptor %d for '%s' is not 3 or more", cp->result_fd_child, prog);
	if (kb_stop_requested()) {
		cp->cancelled = true;
		return KB_ECANCELLED;
	}

	build_env(cp, &env);
	if (resolve_program(prog, &env, &path)) {
		error_errno("could not run '%s'", prog);
		goto out;
	}
	strvec_pushl(&sh_argv, "/bin/sh", path.buf, NULL);
	for (size_t i = 1; i < cp->args.nr; i++)
		strvec_push(&sh_argv, cp->args.v[i]);

	/* CLOEXEC everywhere: other threads' children must not inherit these */
	if (cp->in) {
		if (pipe2(in_pipe, O_CLOEXEC)) {
			error_errno("could not create a pipe for '%s'", prog);
			goto out;
		}
	} else if ((devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		error_errno("could not open '/dev/null'");
		goto out;
	}
	if (pipe2(out_pipe, O_CLOEXEC) || (!cp->err_to_out && pipe2(err_pipe, O_CLOEXEC)) ||
	    (cp->result_fd_child > 0 && pipe2(res_pipe, O_CLOEXEC)) ||
	    pipe2(status_pipe, O_CLOEXEC)) {
		error_errno("could not create a pipe for '%s'", prog);
		goto out;
	}

	memset(&x, 0, sizeof(x));
	x.path = path.buf;
	x.argv = (char *const *)cp->args.v;
	x.sh_argv = (char *const *)sh_argv.v;
	x.envp = (char *const *)env.v;
	x.dir = cp->dir;
	x.in_fd = cp->in ? in_pipe[0] : devnull;
	x.out_fd = out_pipe[1];
	x.err_fd = cp->err_to_out ? -1 : err_pipe[1];
	x.res_fd = res_pipe[1];
	x.res_target = cp->result_fd_child;
	x.status_fd = status_pipe[1];
	x.cp = cp;

	/* no handler of ours may run in the child before it resets them */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	pid = fork();
	fork_errno = errno;
	if (!pid)
		run_child(&x);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (pid < 0) {
		errno = fork_errno;
		error_errno("could not fork to run '%s'", prog);
		goto out;
	}
	setpgid(pid, pid); /* races with the child's own call; either is enough */

	close_fd(&in_pipe[0]);
	close_fd(&out_pipe[1]);
	close_fd(&err_pipe[1]);
	close_fd(&res_pipe[1]);
	close_fd(&status_pipe[1]);
	close_fd(&devnull);

	if (read_child_status(status_pipe[0], &st)) {
		int ignored;

		reap(pid, &ignored);
		pid = -1;
		report_child_failure(cp, &st);
		goto out;
	}
	close_fd(&status_pipe[0]);

#ifdef SYS_pidfd_open
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd >= 0)
		fcntl(pidfd, F_SETFD, FD_CLOEXEC);
#endif
	/* the sinks own the read ends from here on */
	sinks[nr_sinks++] = (struct sink){ out_pipe[0], &cp->out,
		cp->out_cap ? cp->out_cap : DEFAULT_CAP, &cp->out_truncated };
	out_pipe[0] = -1;
	if (err_pipe[0] >= 0) {
		sinks[nr_sinks++] = (struct sink){ err_pipe[0], &cp->err,
			cp->err_cap ? cp->err_cap : DEFAULT_CAP, &cp->err_truncated };
		err_pipe[0] = -1;
	}
	if (res_pipe[0] >= 0) {
		sinks[nr_sinks++] = (struct sink){ res_pipe[0], &cp->result,
			cp->result_cap ? cp->result_cap : DEFAULT_CAP, &cp->result_truncated };
		res_pipe[0] = -1;
	}
	for (size_t i = 0; i < nr_sinks; i++)
		set_nonblock(sinks[i].fd);
	if (in_pipe[1] >= 0)
		set_nonblock(in_pipe[1]);

	/* a child that stops reading its stdin must not kill us with SIGPIPE */
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &saved);
	sigpending(&pending);
	pipe_was_pending = sigismember(&pending, SIGPIPE);

	rc = pump(cp, pid, &pidfd, &in_pipe[1], sinks, nr_sinks, start, &epipe);

	if (epipe && !pipe_was_pending) {
		struct timespec zero = { 0, 0 };

		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &saved, NULL);

	for (size_t i = 0; i < nr_sinks; i++)
		close_fd(&sinks[i].fd);
	if (reap(pid, &cp->exit_code) && !rc)
		rc = error_errno("could not wait for '%s'", prog);
	pid = -1;
	if (rc == KB_ECANCELLED)
		log_debug("stopped '%s' on request", prog);

out:
	if (pid > 0) {
		int ignored;

		kill_group(pid);
		reap(pid, &ignored);
	}
	close_pipe(in_pipe);
	close_pipe(out_pipe);
	close_pipe(err_pipe);
	close_pipe(res_pipe);
	close_pipe(status_pipe);
	close_fd(&devnull);
	close_fd(&pidfd);
	strvec_clear(&env);
	strvec_clear(&sh_argv);
	strbuf_release(&path);
	cp->elapsed_ms = kb_now_ms() - start;
	return rc;
}
