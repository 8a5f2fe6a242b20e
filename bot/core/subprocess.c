#include "core/common.h"
#include "core/subprocess.h"
#include "core/subprocess_priv.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/util.h"

/*
 * Starting a child: environment, program lookup, fork and exec, and the
 * child's side up to exec. Talking to it and waiting for it live in
 * subprocess_poll.c.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

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
	int in_fd, out_fd, err_fd, res_fd, status_fd, extra_fd, pass_fd;
	int res_target, extra_target, pass_target;
	pid_t parent;         /* getpid() before fork: another getppid() means it died */
	const struct child_process *cp;
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
	if (cp->state)
		kill_command(cp);
	strvec_clear(&cp->args);
	strvec_clear(&cp->env);
	strbuf_release(&cp->out);
	strbuf_release(&cp->err);
	strbuf_release(&cp->result);
	if (cp->extra_fd >= 0)
		close(cp->extra_fd);
	cp->extra_fd = -1;
	if (cp->pass_fd >= 0)
		close(cp->pass_fd);
	cp->pass_fd = -1;
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
	for (char **e = cp->clear_env ? NULL : environ; e && *e; e++) {
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

static void close_pipe(int p[2])
{
	sp_close_fd(&p[0]);
	sp_close_fd(&p[1]);
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

/* Close [lo, hi] except the (at most two) descriptors in keep. */
/* Close [lo, hi] but the descriptors in keep (async-signal-safe). */
static void close_fds_except(unsigned int lo, unsigned int hi, int *keep, int n)
{
	unsigned int from = lo;

	for (int i = 1; i < n; i++)     /* sort: n is at most 3 */
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];

			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (int i = 0; i < n; i++) {
		if (keep[i] < (int)from)
			continue;
		if ((unsigned int)keep[i] > from)
			close_fd_range(from, (unsigned int)keep[i] - 1);
		from = (unsigned int)keep[i] + 1;
	}
	if (from <= hi)
		close_fd_range(from, hi);
}

static _Noreturn void run_child(const struct child_exec *x)
{
	const struct child_process *cp = x->cp;
	int top = x->res_target > x->extra_target ? x->res_target : x->extra_target;
	int min_fd, keep[3], nkeep = 0;
	struct sigaction sa;
	sigset_t none;
	int status, in, out, err, res = -1, extra = -1, passed = -1;

	if (x->pass_target > top)
		top = x->pass_target;
	min_fd = top >= 3 ? top + 1 : 3;
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

	/*
	 * Die with the thread that forked us: a parent killed with SIGKILL
	 * cannot kill our group, and a worker running a spinning kernel has
	 * no deadline of its own. Set before the parent check, so that a
	 * parent dying in between is seen by one or the other.
	 */
	if (!cp->outlive_parent) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0))
			child_fail(x->status_fd, STAGE_SETUP);
		if (getppid() != x->parent)
			raise(SIGKILL);
	}

	/* move every source above the targets first, so no dup2 clobbers one */
	status = fcntl(x->status_fd, F_DUPFD_CLOEXEC, min_fd);
	if (status < 0)
		_exit(127);
	in = fcntl(x->in_fd, F_DUPFD, min_fd);
	out = fcntl(x->out_fd, F_DUPFD, min_fd);
	err = x->err_fd >= 0 ? fcntl(x->err_fd, F_DUPFD, min_fd) : out;
	if (x->res_fd >= 0)
		res = fcntl(x->res_fd, F_DUPFD, min_fd);
	if (x->extra_fd >= 0)
		extra = fcntl(x->extra_fd, F_DUPFD, min_fd);
	if (x->pass_fd >= 0)
		passed = fcntl(x->pass_fd, F_DUPFD, min_fd);
	if (in < 0 || out < 0 || err < 0 || (x->res_fd >= 0 && res < 0) ||
	    (x->extra_fd >= 0 && extra < 0) || (x->pass_fd >= 0 && passed < 0))
		child_fail(status, STAGE_SETUP);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 ||
	    (res >= 0 && dup2(res, x->res_target) < 0) ||
	    (extra >= 0 && dup2(extra, x->extra_target) < 0) ||
	    (passed >= 0 && dup2(passed, x->pass_target) < 0))
		child_fail(status, STAGE_SETUP);
	if (res >= 0)
		keep[nkeep++] = x->res_target;
	if (extra >= 0)
		keep[nkeep++] = x->extra_target;
	if (passed >= 0)
		keep[nkeep++] = x->pass_target;
	close_fds_except(3, (unsigned int)status - 1, keep, nkeep);
	close_fd_range((unsigned int)status + 1, ~0u);

	if (x->dir && chdir(x->dir))
		child_fail(status, STAGE_CHDIR);
	if (child_limit(RLIMIT_AS, cp->rlimit_as_bytes, 0) ||
	    child_limit(RLIMIT_CPU, cp->rlimit_cpu_s, 1) ||
	    child_limit(RLIMIT_FSIZE, cp->rlimit_fsize_bytes, 0) ||
	    child_limit(RLIMIT_NOFILE, cp->rlimit_nofile, 0) ||
	    child_limit(RLIMIT_NPROC, cp->rlimit_nproc, 0))
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

/* --- killing a child's whole tree --- */

#define KILL_TREE_ROUNDS 64

struct proc_entry {
	pid_t pid, ppid, pgrp;
};

/* Every live process's pid, parent and group from /proc; -1 without /proc. */
static int scan_procs(struct proc_entry **out, size_t *nr)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t alloc = 0;

	*out = NULL;
	*nr = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[64], buf[512], state;
		const char *paren;
		int fd, ppid, pgrp;
		ssize_t n;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		xsnprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		/* "pid (comm) state ppid pgrp ...": comm may hold spaces and ')' */
		paren = strrchr(buf, ')');
		if (!paren || sscanf(paren + 1, " %c %d %d", &state, &ppid, &pgrp) != 3)
			continue;
		if (state == 'Z' || state == 'X')
			continue;
		if (*nr == alloc) {
			alloc = alloc ? 2 * alloc : 256;
			*out = xrealloc(*out, alloc * sizeof(**out));
		}
		(*out)[(*nr)++] = (struct proc_entry){ (pid_t)atoi(de->d_name), (pid_t)ppid,
						       (pid_t)pgrp };
	}
	closedir(d);
	return 0;
}

static bool pid_in(const pid_t *v, size_t nr, pid_t pid)
{
	for (size_t i = 0; i < nr; i++)
		if (v[i] == pid)
			return true;
	return false;
}

/* True unless we know that pid has no child: /proc/PID/task/TID/children
 * (a kernel without that file: we do not know). */
static bool may_have_children(pid_t pid)
{
	char path[96], c;
	struct dirent *de;
	bool any = false;
	DIR *d;

	xsnprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return true;
	while (!any && (de = readdir(d))) {
		int fd;

		if (de->d_name[0] == '.')
			continue;
		xsnprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)pid, de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || read(fd, &c, 1) != 0)
			any = true;
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
	return any;
}

/* True unless group pid is known to hold no process but pid (getpgid of
 * every pid: much cheaper than reading every /proc/PID/stat). */
static bool group_may_have_others(pid_t pid)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool any = false;

	if (!d)
		return true;
	while (!any && (de = readdir(d))) {
		pid_t p;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		p = (pid_t)atoi(de->d_name);
		any = p != pid && getpgid(p) == pid;
	}
	closedir(d);
	return any;
}

/*
 * Freeze, then kill. A stopped process cannot fork or exit, so the tree
 * stays put while /proc is read: stop the group, then whatever descends
 * from a stopped process, round after round until a round finds nothing
 * new; then SIGKILL all of it. A group kill alone leaves ninja's compilers
 * running (each is in a group of its own) once ninja is gone.
 */
void sp_kill_tree(pid_t pid)
{
	pid_t *tree = NULL, self = getpid();
	size_t nr = 0, alloc = 0;

	/* pid is our unreaped child, so neither number can have been reused */
	kill(-pid, SIGSTOP);
	kill(pid, SIGSTOP);
	/* the common case, a child alone (or gone): no walk of /proc */
	if (!may_have_children(pid) && !group_may_have_others(pid))
		goto out;
	for (int round = 0; round < KILL_TREE_ROUNDS; round++) {
		struct proc_entry *procs;
		size_t np, before = nr;
		bool grew = true;

		if (scan_procs(&procs, &np))
			break;
		/* the closure over this snapshot: parents may come after children */
		while (grew) {
			grew = false;
			for (size_t i = 0; i < np; i++) {
				struct proc_entry *e = &procs[i];

				if (e->pid == self || pid_in(tree, nr, e->pid))
					continue;
				if (e->pid != pid && e->pgrp != pid && e->ppid != pid &&
				    !pid_in(tree, nr, e->ppid))
					continue;
				if (nr == alloc) {
					alloc = alloc ? 2 * alloc : 16;
					tree = xrealloc(tree, alloc * sizeof(*tree));
				}
				tree[nr++] = e->pid;
				kill(e->pid, SIGSTOP);
				grew = true;
			}
		}
		free(procs);
		if (nr == before)
			break;
	}
out:
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	for (size_t i = 0; i < nr; i++)
		kill(tree[i], SIGKILL);
	free(tree);
}

/* --- the parent --- */

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

/*
 * Clear cp's outputs from an earlier run and check what it asks for:
 * 0, -1 with a message, or KB_ECANCELLED when a stop was requested.
 */
static int prepare_child(struct child_process *cp)
{
	const char *prog;

	strbuf_reset(&cp->out);
	strbuf_reset(&cp->err);
	strbuf_reset(&cp->result);
	cp->out_truncated = cp->err_truncated = cp->result_truncated = false;
	cp->timed_out = cp->cancelled = false;
	cp->exit_code = -1;
	cp->elapsed_ms = 0;
	cp->pid = 0;
	cp->in_fd = -1;

	if (!cp->args.nr)
		return error("no program to run");
	prog = cp->args.v[0];
	if (cp->result_fd_child < 0 || (cp->result_fd_child > 0 && cp->result_fd_child < 3))
		return error("result descriptor %d for '%s' is not 3 or more", cp->result_fd_child, prog);
	if (cp->extra_fd >= 0 && (cp->extra_fd_child < 3 || cp->extra_fd_child == cp->result_fd_child))
		return error("extra descriptor %d for '%s' is not 3 or more, or is the result descriptor",
			     cp->extra_fd_child, prog);
	if (cp->pass_fd >= 0 && (cp->pass_fd_child < 3 || cp->pass_fd_child == cp->result_fd_child ||
				 (cp->extra_fd >= 0 && cp->pass_fd_child == cp->extra_fd_child)))
		return error("passed descriptor %d for '%s' is not 3 or more, or is taken",
			     cp->pass_fd_child, prog);
	if (kb_stop_requested()) {
		cp->cancelled = true;
		return KB_ECANCELLED;
	}
	return 0;
}

/* The child's pipes (-1: none) and /dev/null for its stdin when it gets no pipe. */
struct child_pipes {
	int in[2], out[2], err[2], res[2], status[2];
	int devnull;
};

#define CHILD_PIPES_INIT { { -1, -1 }, { -1, -1 }, { -1, -1 }, { -1, -1 }, { -1, -1 }, -1 }

static void close_pipes(struct child_pipes *p)
{
	close_pipe(p->in);
	close_pipe(p->out);
	close_pipe(p->err);
	close_pipe(p->res);
	close_pipe(p->status);
	sp_close_fd(&p->devnull);
}

/* CLOEXEC everywhere: other threads' children must not inherit these */
static int open_pipes(const struct child_process *cp, bool stdin_pipe, struct child_pipes *p)
{
	const char *prog = cp->args.v[0];

	if (stdin_pipe) {
		if (pipe2(p->in, O_CLOEXEC))
			return error_errno("could not create a pipe for '%s'", prog);
	} else if ((p->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		return error_errno("could not open '/dev/null'");
	}
	if (pipe2(p->out, O_CLOEXEC) || (!cp->err_to_out && pipe2(p->err, O_CLOEXEC)) ||
	    (cp->result_fd_child > 0 && pipe2(p->res, O_CLOEXEC)) ||
	    pipe2(p->status, O_CLOEXEC))
		return error_errno("could not create a pipe for '%s'", prog);
	return 0;
}

/* What the child does between fork and exec: its descriptors, directory and program. */
static void fill_exec(struct child_exec *x, struct child_process *cp, const char *path,
		      const struct strvec *sh_argv, const struct strvec *env,
		      const struct child_pipes *p, bool stdin_pipe)
{
	memset(x, 0, sizeof(*x));
	x->path = path;
	x->argv = (char *const *)cp->args.v;
	x->sh_argv = (char *const *)sh_argv->v;
	x->envp = (char *const *)env->v;
	x->dir = cp->dir;
	x->in_fd = stdin_pipe ? p->in[0] : p->devnull;
	x->out_fd = p->out[1];
	x->err_fd = cp->err_to_out ? -1 : p->err[1];
	x->res_fd = p->res[1];
	x->res_target = cp->result_fd_child;
	x->extra_fd = cp->extra_fd;
	x->extra_target = cp->extra_fd >= 0 ? cp->extra_fd_child : -1;
	x->pass_fd = cp->pass_fd;
	x->pass_target = cp->pass_fd >= 0 ? cp->pass_fd_child : -1;
	x->status_fd = p->status[1];
	x->parent = getpid();
	x->cp = cp;
}

/* Fork; the child runs x. The child's pid, or -1 with a message. */
static pid_t fork_child(struct child_exec *x, const char *prog)
{
	sigset_t all, saved;
	pid_t pid;
	int fork_errno;

	/* no handler of ours may run in the child before it resets them */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	pid = fork();
	fork_errno = errno;
	if (!pid)
		run_child(x);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (pid < 0) {
		errno = fork_errno;
		error_errno("could not fork to run '%s'", prog);
		return -1;
	}
	setpgid(pid, pid); /* races with the child's own call; either is enough */
	return pid;
}

/* After the fork: close the child's ends of the pipes, and the descriptor passed to it. */
static void close_child_ends(struct child_process *cp, struct child_pipes *p)
{
	sp_close_fd(&p->in[0]);
	sp_close_fd(&p->out[1]);
	sp_close_fd(&p->err[1]);
	sp_close_fd(&p->res[1]);
	sp_close_fd(&p->status[1]);
	if (cp->pass_fd >= 0) {  /* the child's now: our copy would hide its EOF */
		close(cp->pass_fd);
		cp->pass_fd = -1;
	}
	sp_close_fd(&p->devnull);
}

/*
 * Fork and exec; on success the poll side owns the child (cp->state).
 * persistent: start_command's child, else run_command's.
 */
static int start_child(struct child_process *cp, bool persistent, int64_t start)
{
	struct strvec env = STRVEC_INIT, sh_argv = STRVEC_INIT;
	struct strbuf path = STRBUF_INIT;
	struct child_pipes p = CHILD_PIPES_INIT;
	bool stdin_pipe = cp->in || (persistent && cp->keep_stdin_open);
	struct child_exec x;
	struct child_status st;
	const char *prog;
	pid_t pid = -1;
	int rc;

	if (cp->state)
		return error("'%s' is already running", cp->args.nr ? cp->args.v[0] : "");
	if ((rc = prepare_child(cp)))
		return rc;
	rc = -1;
	prog = cp->args.v[0];

	build_env(cp, &env);
	if (resolve_program(prog, &env, &path)) {
		error_errno("could not run '%s'", prog);
		goto out;
	}
	strvec_pushl(&sh_argv, "/bin/sh", path.buf, NULL);
	for (size_t i = 1; i < cp->args.nr; i++)
		strvec_push(&sh_argv, cp->args.v[i]);
	if (open_pipes(cp, stdin_pipe, &p))
		goto out;

	fill_exec(&x, cp, path.buf, &sh_argv, &env, &p, stdin_pipe);
	pid = fork_child(&x, prog);
	if (pid < 0)
		goto out;
	close_child_ends(cp, &p);

	if (read_child_status(p.status[0], &st)) {
		int ignored;

		sp_reap(pid, &ignored);
		pid = -1;
		report_child_failure(cp, &st);
		goto out;
	}

	/* the state owns the child and our ends of its pipes from here on */
	child_state_attach(cp, pid, start, p.in[1], p.out[0], p.err[0], p.res[0], persistent);
	p.in[1] = p.out[0] = p.err[0] = p.res[0] = -1;
	pid = -1;
	rc = 0;

out:
	if (pid > 0) {
		int ignored;

		sp_kill_group(pid);
		sp_reap(pid, &ignored);
	}
	close_pipes(&p);
	strvec_clear(&env);
	strvec_clear(&sh_argv);
	strbuf_release(&path);
	if (rc)
		cp->elapsed_ms = kb_now_ms() - start;
	return rc;
}

int start_command(struct child_process *cp)
{
	return start_child(cp, true, kb_now_ms());
}

int run_command(struct child_process *cp)
{
	int64_t start = kb_now_ms();
	int rc = start_child(cp, false, start);

	if (rc)
		return rc;
	return child_finish(cp, cp->timeout_ms > 0 ? start + cp->timeout_ms : 0);
}
