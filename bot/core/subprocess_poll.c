#include "core/common.h"
#include "core/subprocess.h"
#include "core/subprocess_priv.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/util.h"

/*
 * The parent's side of a started child: one poll loop feeds its stdin,
 * drains stdout, stderr and the result pipe, and watches for its exit, the
 * deadline and stop requests. run_command runs it once to the exit; the
 * persistent calls (child_write, child_read_line) run it until their own
 * goal is met and leave the child running.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define STOP_POLL_MS 100     /* kb_stop_requested() is looked at this often */
#define DRAIN_MS 250         /* after the group is killed, wait this long for EOF */
#define SETTLE_MS 100        /* a child that closed its result pipe may be exiting */
#define CHUNK (64 * 1024)
#define COMPACT_MIN (64 * 1024) /* consumed result bytes worth moving the rest down for */

enum { SINK_OUT, SINK_ERR, SINK_RES, NR_SINKS };

/* One captured stream. */
struct sink {
	int fd;                  /* -1: none, or closed at EOF */
	struct strbuf *sb;
	size_t cap;
	bool *truncated;
	bool tail;               /* keep the last cap bytes, not the first */
};

struct child_state {
	pid_t pid;
	int pidfd;               /* -1: none (old kernel) or closed */
	int64_t start;
	int64_t drain_until;     /* once exited: how long to wait for EOF */
	bool exited;             /* it exited and its group was killed; unreaped */
	bool killed;             /* kill_command: the caller's kill, not a timeout */
	bool keep_in;            /* stdin stays open when the queue runs dry */
	bool lines;              /* result bytes go to rbuf for child_read_line */
	bool discarding;         /* inside an overlong result line: drop to its newline */
	bool epipe;              /* a write met EPIPE during this call */
	int idle_ms;
	struct strbuf inq;       /* bytes for stdin, written up to inq_off */
	size_t inq_off;
	struct strbuf rbuf;      /* result bytes, taken up to roff */
	size_t roff;
	size_t partial;          /* bytes of the unfinished last line in rbuf */
	size_t line_cap;
	struct sink sinks[NR_SINKS];
	char *buf;               /* CHUNK bytes to read into */
};

enum goal { GOAL_WRITE, GOAL_LINE, GOAL_EXIT };

static size_t cap_or_default(size_t cap)
{
	return cap ? cap : SP_DEFAULT_CAP;
}

static const char *prog_name(const struct child_process *cp)
{
	return cp->args.nr ? cp->args.v[0] : "";
}

void child_state_attach(struct child_process *cp, pid_t pid, int64_t start,
			int in_fd, int out_fd, int err_fd, int res_fd, bool persistent)
{
	struct child_state *st = xcalloc(1, sizeof(*st));
	int fds[NR_SINKS] = { out_fd, err_fd, res_fd };
	struct strbuf *sbs[NR_SINKS] = { &cp->out, &cp->err, &cp->result };
	bool *flags[NR_SINKS] = { &cp->out_truncated, &cp->err_truncated, &cp->result_truncated };
	size_t caps[NR_SINKS] = { cp->out_cap, cp->err_cap, cp->result_cap };

	st->pid = pid;
	st->pidfd = -1;
	st->start = start;
	st->idle_ms = 1;
	st->keep_in = persistent && cp->keep_stdin_open;
	st->lines = persistent;
	st->line_cap = cap_or_default(cp->result_cap);
	strbuf_init(&st->inq, 0);
	strbuf_init(&st->rbuf, 0);
	st->buf = xmalloc(CHUNK);
	if (cp->in)
		strbuf_add(&st->inq, cp->in, cp->in_len);
	for (int i = 0; i < NR_SINKS; i++) {
		st->sinks[i] = (struct sink){ fds[i], sbs[i], cap_or_default(caps[i]), flags[i],
			cp->keep_tail && i != SINK_RES };
		if (fds[i] >= 0)
			fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
	}
	if (in_fd >= 0)
		fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
#ifdef SYS_pidfd_open
	st->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (st->pidfd >= 0)
		fcntl(st->pidfd, F_SETFD, FD_CLOEXEC);
#endif
	cp->state = st;
	cp->pid = pid;
	cp->started_pid = pid;
	cp->in_fd = in_fd;
	/* nothing queued and nothing more to come: EOF at once */
	if (!st->inq.len && !st->keep_in)
		sp_close_fd(&cp->in_fd);
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

static void mark_exited(struct child_process *cp)
{
	struct child_state *st = cp->state;

	/* grandchildren die with it and cannot hold our pipes */
	st->exited = true;
	sp_kill_group(st->pid);
	st->drain_until = kb_now_ms() + DRAIN_MS;
	sp_close_fd(&cp->in_fd);
	sp_close_fd(&st->pidfd);
}

/* A child that closes its pipes is often on its way out: wait up to ms to
 * tell that apart from one that just closed them. */
static void settle_exit(struct child_process *cp, int ms)
{
	struct child_state *st = cp->state;
	int64_t until = kb_now_ms() + ms;

	while (!st->exited) {
		int64_t left = until - kb_now_ms();

		if (child_exited(st->pid)) {
			mark_exited(cp);
			break;
		}
		if (left <= 0)
			break;
		if (st->pidfd >= 0) {
			struct pollfd p = { .fd = st->pidfd, .events = POLLIN };

			poll(&p, 1, (int)left);
		} else {
			usleep(5000);
		}
	}
}

/* --- captured streams --- */

/* Keep only the last keep bytes of a tail sink. */
static void sink_keep_tail(struct sink *s, size_t keep)
{
	struct strbuf *sb = s->sb;

	if (sb->len <= keep)
		return;
	memmove(sb->buf, sb->buf + sb->len - keep, keep);
	strbuf_setlen(sb, keep);
	*s->truncated = true;
}

static void sink_add(struct sink *s, const char *buf, size_t n)
{
	size_t room, take;

	if (s->tail) {
		if (n >= s->cap) {
			if (n > s->cap || s->sb->len)
				*s->truncated = true;
			strbuf_reset(s->sb);
			buf += n - s->cap;
			n = s->cap;
		} else if (s->sb->len + n > 2 * s->cap) {
			/* trim rarely (at twice the cap) so a flood costs O(1) a byte;
			 * sinks_trim brings it down to the cap before a call returns */
			sink_keep_tail(s, s->cap - n);
		}
		if (strbuf_add(s->sb, buf, n))
			*s->truncated = true;
		return;
	}
	room = s->sb->len < s->cap ? s->cap - s->sb->len : 0;
	take = n < room ? n : room;
	if (take && strbuf_add(s->sb, buf, take))
		take = 0; /* the strbuf carries a smaller cap of its own */
	if (take < n)
		*s->truncated = true;
}

static void sinks_trim(struct child_state *st)
{
	for (int i = 0; i < NR_SINKS; i++)
		if (st->sinks[i].tail)
			sink_keep_tail(&st->sinks[i], st->sinks[i].cap);
}

/*
 * Result bytes for child_read_line. A line longer than line_cap keeps only
 * line_cap + 1 bytes (the rest up to its newline is dropped), so memory
 * stays bounded and take_line still sees that it was too long.
 */
static void lines_add(struct child_state *st, const char *p, size_t n)
{
	size_t cap = st->line_cap;

	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t len = nl ? (size_t)(nl - p) : n;

		if (!st->discarding) {
			size_t take = len;

			if (st->partial + len > cap) {
				take = cap + 1 - st->partial;
				st->discarding = true;
			}
			strbuf_add(&st->rbuf, p, take);
			st->partial += take;
		}
		if (!nl)
			break;
		strbuf_addch(&st->rbuf, '\n');
		st->partial = 0;
		st->discarding = false;
		p = nl + 1;
		n -= len + 1;
	}
}

static size_t unread_result(const struct child_state *st)
{
	return st->rbuf.len - st->roff;
}

/*
 * Move the next complete line into line: 0, KB_ETOOBIG (dropped), or 1
 * when there is none yet.
 */
static int take_line(struct child_state *st, struct strbuf *line)
{
	const char *p = st->rbuf.buf + st->roff;
	const char *nl = memchr(p, '\n', unread_result(st));
	size_t len;
	int rc;

	if (!nl)
		return 1;
	len = (size_t)(nl - p);
	rc = len > st->line_cap ? KB_ETOOBIG : strbuf_add(line, p, len);
	st->roff += len + 1;
	if (st->roff == st->rbuf.len) {
		strbuf_reset(&st->rbuf);
		st->roff = 0;
	} else if (st->roff >= COMPACT_MIN && st->roff >= st->rbuf.len / 2) {
		size_t rest = unread_result(st);

		memmove(st->rbuf.buf, st->rbuf.buf + st->roff, rest);
		strbuf_setlen(&st->rbuf, rest);
		st->roff = 0;
	}
	return rc;
}

/* finish: what no child_read_line took goes to cp->result, as does the rest. */
static void lines_to_result(struct child_state *st)
{
	if (!st->lines)
		return;
	st->lines = false;
	if (unread_result(st))
		sink_add(&st->sinks[SINK_RES], st->rbuf.buf + st->roff, unread_result(st));
	strbuf_release(&st->rbuf);
	st->roff = st->partial = 0;
}

/* Read what is there now; closes the sink at EOF or on error. */
static void sink_read(struct child_state *st, int i)
{
	struct sink *s = &st->sinks[i];

	for (int round = 0; round < 16 && s->fd >= 0; round++) {
		ssize_t n = read(s->fd, st->buf, CHUNK);

		if (n > 0) {
			if (i == SINK_RES && st->lines)
				lines_add(st, st->buf, (size_t)n);
			else
				sink_add(s, st->buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		sp_close_fd(&s->fd); /* EOF, or an error we cannot do better with */
	}
}

/* Whether to read the result pipe now: unread answers past the cap wait
 * for child_read_line (the child blocks), an overlong line is dropped. */
static bool want_result(const struct child_state *st)
{
	return !st->lines || st->discarding || unread_result(st) <= st->line_cap;
}

/* Write queued stdin; closes it once the queue is out (unless kept open),
 * when the child closed its end (EPIPE) or on error. */
static void feed_stdin(struct child_process *cp)
{
	struct child_state *st = cp->state;

	while (cp->in_fd >= 0 && st->inq_off < st->inq.len) {
		size_t left = st->inq.len - st->inq_off;
		ssize_t n = write(cp->in_fd, st->inq.buf + st->inq_off, left < CHUNK ? left : CHUNK);

		if (n > 0) {
			st->inq_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0 && errno == EPIPE)
			st->epipe = true;
		sp_close_fd(&cp->in_fd);
	}
	if (st->inq_off == st->inq.len) {
		strbuf_reset(&st->inq);
		st->inq_off = 0;
		if (!st->keep_in)
			sp_close_fd(&cp->in_fd);
	}
}

/* --- the loop --- */

/*
 * Run until the goal: GOAL_WRITE, the stdin queue is written (0); GOAL_LINE,
 * a line is in *line (0, KB_ETOOBIG); GOAL_EXIT, the child has exited and
 * the pipes are drained or the drain window is over (0). At deadline
 * (0: none), GOAL_EXIT kills the group and goes on, the others return
 * KB_ETIMEOUT once they have looked at least once. A stop request returns
 * KB_ECANCELLED; only GOAL_EXIT kills the group for it.
 */
static int pump(struct child_process *cp, enum goal goal, int64_t deadline, struct strbuf *line)
{
	struct child_state *st = cp->state;
	const char *prog = prog_name(cp);
	bool looked = false;

	for (;;) {
		struct pollfd pfd[NR_SINKS + 2];
		int in_slot = -1, sink_slot[NR_SINKS] = { -1, -1, -1 };
		nfds_t n = 0;
		int64_t now, wait_ms;
		bool open_fds = false;
		int rc;

		if (kb_stop_requested()) {
			if (goal == GOAL_EXIT) {
				sp_kill_group(st->pid);
				cp->cancelled = true;
			}
			return KB_ECANCELLED;
		}
		if (!st->exited && child_exited(st->pid))
			mark_exited(cp);
		now = kb_now_ms();
		for (int i = 0; i < NR_SINKS; i++)
			open_fds |= st->sinks[i].fd >= 0;

		switch (goal) {
		case GOAL_WRITE:
			if (st->inq_off == st->inq.len)
				return 0;
			if (cp->in_fd < 0)
				return error(st->exited ? "could not write to '%s': it exited" :
					     "could not write to '%s': it closed its input", prog);
			break;
		case GOAL_LINE:
			rc = take_line(st, line);
			if (rc <= 0)
				return rc;
			if (st->sinks[SINK_RES].fd < 0 || (st->exited && now >= st->drain_until)) {
				settle_exit(cp, SETTLE_MS);
				return error(st->exited ? "'%s' exited without a further answer" :
					     "'%s' closed its result descriptor", prog);
			}
			break;
		case GOAL_EXIT:
			if (st->exited && (!open_fds || now >= st->drain_until))
				return 0;
			break;
		}
		if (deadline && now >= deadline && !st->exited && looked) {
			if (goal != GOAL_EXIT)
				return KB_ETIMEOUT;
			sp_kill_group(st->pid);
			if (!st->killed)
				cp->timed_out = true;
			deadline = 0; /* now wait for the exit, then drain */
		}

		if (cp->in_fd >= 0 && st->inq_off < st->inq.len) {
			in_slot = (int)n;
			pfd[n].fd = cp->in_fd;
			pfd[n++].events = POLLOUT;
		}
		for (int i = 0; i < NR_SINKS; i++)
			if (st->sinks[i].fd >= 0 && (i != SINK_RES || want_result(st))) {
				sink_slot[i] = (int)n;
				pfd[n].fd = st->sinks[i].fd;
				pfd[n++].events = POLLIN;
			}
		if (st->pidfd >= 0) {
			pfd[n].fd = st->pidfd;
			pfd[n++].events = POLLIN;
		}
		wait_ms = STOP_POLL_MS;
		if (deadline && deadline - now < wait_ms)
			wait_ms = deadline - now;
		if (st->exited && st->drain_until - now < wait_ms)
			wait_ms = st->drain_until - now;
		if (!st->exited && !n) {
			/* nothing will wake us when the child exits: back off */
			if (st->idle_ms < wait_ms)
				wait_ms = st->idle_ms;
			st->idle_ms = st->idle_ms < 50 ? st->idle_ms * 2 : 100;
		}
		if (wait_ms < 0)
			wait_ms = 0;
		if (poll(pfd, n, (int)wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			rc = error_errno("could not poll '%s'", prog);
			if (goal == GOAL_EXIT)
				sp_kill_group(st->pid);
			return rc;
		}
		looked = true;
		if (in_slot >= 0 && pfd[in_slot].revents)
			feed_stdin(cp);
		for (int i = 0; i < NR_SINKS; i++)
			if (sink_slot[i] >= 0 && pfd[sink_slot[i]].revents)
				sink_read(st, i);
	}
}

/*
 * pump, with SIGPIPE held off while there is stdin to write: a child that
 * stops reading must not kill us. A SIGPIPE that our own write raised is
 * taken back; one that was pending before stays.
 */
static int pump_guarded(struct child_process *cp, enum goal goal, int64_t deadline,
			struct strbuf *line)
{
	struct child_state *st = cp->state;
	sigset_t pipe_set, saved, pending;
	bool guard = cp->in_fd >= 0 && st->inq_off < st->inq.len;
	bool was_pending = false;
	int rc;

	st->epipe = false;
	if (guard) {
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &pipe_set, &saved);
		sigpending(&pending);
		was_pending = sigismember(&pending, SIGPIPE);
	}
	rc = pump(cp, goal, deadline, line);
	if (guard) {
		if (st->epipe && !was_pending) {
			struct timespec zero = { 0, 0 };

			while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
				;
		}
		pthread_sigmask(SIG_SETMASK, &saved, NULL);
	}
	sinks_trim(st);
	return rc;
}

static int64_t deadline_in(int64_t timeout_ms)
{
	return timeout_ms > 0 ? kb_now_ms() + timeout_ms : 0;
}

/* --- the API --- */

int child_write(struct child_process *cp, const void *buf, size_t len, int64_t timeout_ms)
{
	struct child_state *st = cp->state;
	int rc;

	if (!st)
		return error("could not write to '%s': it is not running", prog_name(cp));
	if (!st->keep_in)
		return error("could not write to '%s': its input was not kept open", prog_name(cp));
	if (cp->in_fd < 0)
		return error("could not write to '%s': its input is closed", prog_name(cp));
	strbuf_add(&st->inq, buf, len);
	rc = pump_guarded(cp, GOAL_WRITE, deadline_in(timeout_ms), NULL);
	if (rc && rc != KB_ETIMEOUT && rc != KB_ECANCELLED) {
		strbuf_reset(&st->inq); /* nobody will read it */
		st->inq_off = 0;
	}
	return rc;
}

int child_read_line(struct child_process *cp, struct strbuf *line, int64_t timeout_ms)
{
	struct child_state *st = cp->state;

	strbuf_reset(line);
	if (!st)
		return error("could not read from '%s': it is not running", prog_name(cp));
	if (!st->lines || cp->result_fd_child <= 0)
		return error("could not read from '%s': it has no result descriptor", prog_name(cp));
	return pump_guarded(cp, GOAL_LINE, deadline_in(timeout_ms), line);
}

size_t child_wait_fds(const struct child_process *cp, int *fds, size_t max)
{
	const struct child_state *st = cp->state;
	size_t n = 0;

	for (int i = 0; st && i < NR_SINKS && n < max; i++)
		if (st->sinks[i].fd >= 0)
			fds[n++] = st->sinks[i].fd;
	if (st && st->pidfd >= 0 && n < max)
		fds[n++] = st->pidfd;
	return n;
}

bool child_alive(struct child_process *cp)
{
	struct child_state *st = cp->state;

	if (!st || st->exited)
		return false;
	if (child_exited(st->pid)) {
		mark_exited(cp);
		return false;
	}
	return true;
}

int child_finish(struct child_process *cp, int64_t deadline)
{
	struct child_state *st = cp->state;
	const char *prog = prog_name(cp);
	int rc;

	if (!st)
		return error("could not wait for '%s': it is not running", prog);
	st->keep_in = false;
	if (st->inq_off == st->inq.len)
		sp_close_fd(&cp->in_fd);
	lines_to_result(st);

	rc = pump_guarded(cp, GOAL_EXIT, deadline, NULL);

	for (int i = 0; i < NR_SINKS; i++)
		sp_close_fd(&st->sinks[i].fd);
	sp_close_fd(&cp->in_fd);
	sp_close_fd(&st->pidfd);
	if (sp_reap(st->pid, &cp->exit_code) && !rc)
		rc = error_errno("could not wait for '%s'", prog);
	if (rc == KB_ECANCELLED)
		log_debug("stopped '%s' on request", prog);
	cp->elapsed_ms = kb_now_ms() - st->start;

	strbuf_release(&st->inq);
	strbuf_release(&st->rbuf);
	free(st->buf);
	free(st);
	cp->state = NULL;
	cp->pid = 0;
	return rc;
}

int finish_command(struct child_process *cp, int64_t grace_ms)
{
	return child_finish(cp, grace_ms < 0 ? 0 : kb_now_ms() + grace_ms);
}

void kill_command(struct child_process *cp)
{
	if (!cp->state)
		return;
	cp->state->killed = true;
	if (!cp->state->exited)
		sp_kill_group(cp->state->pid);
	finish_command(cp, 0);
}
