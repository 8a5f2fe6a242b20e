#ifndef KB_SUBPROCESS_H
#define KB_SUBPROCESS_H
/*
 * The one way the bot runs another program (nvcc, g++, python, git helpers).
 * Modelled on git's run-command: a struct with an _INIT macro, argv never a
 * shell string, the result an exit code or 128 + signal number.
 *
 *   struct child_process cp = CHILD_PROCESS_INIT;
 *   strvec_pushl(&cp.args, "nvcc", "-O3", src, NULL);
 *   cp.timeout_ms = 60000;
 *   rc = run_command(&cp);          // fills cp.out, cp.err, cp.exit_code
 *   ...
 *   child_process_release(&cp);
 *
 * Environment: unless inherit_env is set, the child starts from a scrubbed
 * copy of ours: every variable whose name looks like a secret (see
 * env_name_is_secret) is removed, and so is every variable whose value
 * contains a secret registered with log_add_secret(). cp.env then adds or
 * overrides "NAME=value" entries ("NAME" alone removes NAME); these are
 * taken as given, unscrubbed. argv[0] without '/' is looked up in the
 * child's PATH (after cp.env), /bin:/usr/bin when it has none.
 *
 * The child runs in its own process group; on timeout, on a stop request
 * (signals.h) or when the direct child exits, the whole group is killed with
 * SIGKILL, and with it (Linux) every process that descends from the child or
 * a group member, also in another group or session (ninja puts each
 * compiler in a group of its own), so a child that forks cannot leave work
 * behind or keep our pipes open. Every descriptor handed over is closed on
 * every path. The child starts with default signal dispositions, an empty
 * signal mask and only descriptors 0, 1, 2 (and result_fd_child) open.
 * Should we die without a chance to clean up (SIGKILL), the kernel kills
 * the child for us (see outlive_parent).
 *
 * A persistent child (a worker that answers many requests; starting python
 * with torch and CUDA costs seconds) is started, talked to and finished:
 *
 *   cp.keep_stdin_open = true;      // requests go to its stdin
 *   cp.result_fd_child = 3;         // answers come back as lines on fd 3
 *   cp.keep_tail = true;            // out/err hold the last *_cap bytes
 *   if (start_command(&cp)) ...
 *   rc = child_write(&cp, req, len, 5000);
 *   if (!rc)
 *       rc = child_read_line(&cp, &line, 60000);
 *   if (rc == KB_ETIMEOUT)
 *       kill_command(&cp);          // hung: kill the group, reap, restart
 *   else if (rc)
 *       finish_command(&cp, 0);     // died: reap it (exit_code), restart
 *   ...
 *   finish_command(&cp, 2000);      // EOF on stdin, 2 s to exit, then SIGKILL
 *
 * Same environment, group, rlimits and descriptors as run_command. Between
 * calls nothing reads the child's output: a child that writes a lot while
 * idle blocks until the next call drains it. stdout and stderr are drained
 * during every call into out and err (a caller may reset those between
 * requests). One thread at a time per struct. SIGPIPE never reaches us:
 * writes to a child that went away return -1.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

struct child_state; /* private to bot/core/subprocess*.c */

struct child_process {
	struct strvec args;      /* argv[0] is looked up in PATH when it has no '/' */
	struct strvec env;       /* additions/overrides/removals to the child's env */
	bool inherit_env;        /* true: start from our full environment (still minus registered secrets' values) */
	bool clear_env;          /* true: start from an empty environment (only cp->env; the sandbox) */
	const char *dir;         /* working directory, NULL: ours */
	const char *in;          /* bytes written to stdin (NULL: /dev/null) */
	size_t in_len;
	size_t out_cap;          /* cap on captured stdout bytes (0: 16 MiB); excess is read and dropped */
	size_t err_cap;          /* same for stderr */
	bool err_to_out;         /* stderr goes into out as well (interleaved) */
	int64_t timeout_ms;      /* wall clock, 0: none */
	/* resource limits, 0: unchanged */
	uint64_t rlimit_as_bytes;
	uint64_t rlimit_cpu_s;
	uint64_t rlimit_fsize_bytes;
	uint64_t rlimit_nofile;
	uint64_t rlimit_nproc;
	bool keep_core_dumps;    /* default: RLIMIT_CORE 0 in the child */
	/* Default (false): the child gets SIGKILL when the thread that
	 * started it ends, however it ends (Linux PR_SET_PDEATHSIG), so that
	 * a `kill -9` of the bot leaves no harness worker or compiler behind.
	 * The child's own children do not inherit it (bubblewrap passes it on
	 * with --die-with-parent); a set-user-ID exec clears it. Start a
	 * child from a thread that outlives it, or set this. */
	bool outlive_parent;
	/* An extra pipe the child writes results to: when set, the child gets
	 * the write end as descriptor result_fd_child (e.g. 3) and KB_RESULT_FD
	 * in its environment; what it writes lands in cp.result (capped by
	 * result_cap, 0: 16 MiB). Used by the harness protocol. For a child
	 * from start_command the bytes are read as lines (child_read_line;
	 * result_cap is then the longest line) and cp.result holds, after
	 * finish_command, what no child_read_line took. */
	int result_fd_child;     /* 0: no result pipe */
	size_t result_cap;
	/* One more descriptor the child inherits, as extra_fd_child (above 2
	 * and not result_fd_child), e.g. a seccomp program for bwrap. cp owns
	 * extra_fd: child_process_release closes it. -1: none. */
	int extra_fd;
	int extra_fd_child;
	/* A descriptor handed over to the child as pass_fd_child (above 2,
	 * not taken by the two above), e.g. a socket to a peer process. It is
	 * the child's alone: cp closes its own copy once the child started
	 * (so the peer sees EOF when the child ends), and on release. -1: none. */
	int pass_fd;
	int pass_fd_child;
	/* start_command: stdin stays a pipe (cp.in first, then child_write)
	 * until finish_command; without it stdin closes once cp.in is written.
	 * start_command copies cp.in: it need not outlive the call. */
	bool keep_stdin_open;
	/* out and err keep the LAST out_cap / err_cap bytes instead of the
	 * first (truncated flags are set all the same): a worker's log tail */
	bool keep_tail;

	/* results */
	struct strbuf out;
	struct strbuf err;
	struct strbuf result;
	bool out_truncated, err_truncated, result_truncated;
	int exit_code;           /* exit status, or 128 + signal */
	bool timed_out;          /* killed for the deadline (exit_code is then 128 + SIGKILL) */
	bool cancelled;          /* killed because a stop was requested */
	int64_t elapsed_ms;

	/* while a start_command child runs (until finish_command): */
	pid_t pid;               /* its pid, also its process group id; 0 otherwise */
	pid_t started_pid;       /* the pid of the last child started, kept after it ended */
	int in_fd;               /* our non-blocking write end of its stdin, -1 once closed;
	                          * for poll() and the like: write with child_write */
	struct child_state *state; /* private */
};

#define CHILD_PROCESS_INIT { .args = STRVEC_INIT, .env = STRVEC_INIT, \
	.out = STRBUF_INIT, .err = STRBUF_INIT, .result = STRBUF_INIT, .in_fd = -1, .extra_fd = -1, \
	.pass_fd = -1 }

void child_process_init(struct child_process *cp);
/* Frees args, env and the captured buffers; a started child still running
 * is killed (whole group) and reaped first. */
void child_process_release(struct child_process *cp);

/*
 * Run the child to completion. Returns 0 when it was started and waited for
 * (look at exit_code / timed_out), -1 when it could not be started (the
 * message names the program), KB_ECANCELLED when a stop was requested.
 */
int run_command(struct child_process *cp);

/*
 * Start the child and return once it runs (after exec). out, err, result
 * and the flags start afresh; timeout_ms is not used (each call below takes
 * its own). Returns 0, -1 when it could not be started (the message names
 * the program; nothing is left to finish), KB_ECANCELLED when a stop was
 * already requested. After 0, finish_command or kill_command (or
 * child_process_release) must follow, once.
 */
int start_command(struct child_process *cp);

/*
 * Write all len bytes to the child's stdin (keep_stdin_open), draining its
 * output meanwhile so neither side can block the other. timeout_ms: 0 or
 * less waits without limit. Returns 0; -1 when the child exited or closed
 * its stdin (logged); KB_ETIMEOUT when the bytes could not all be written
 * in time (the rest stays queued and goes out during later calls: a caller
 * that gives up kills the child); KB_ECANCELLED on a stop request (the
 * child is left alone, the bytes stay queued as well). The caller keeps reading answers: a child blocked
 * on more than result_cap unread answer bytes stops reading its stdin.
 */
int child_write(struct child_process *cp, const void *buf, size_t len, int64_t timeout_ms);

/*
 * Wait for one complete '\n'-terminated line on the result pipe and put it
 * in line without the newline (a line written in pieces is joined; bytes
 * after it wait for the next call). Drains stdout and stderr meanwhile and
 * keeps feeding queued stdin. timeout_ms: 0 or less waits without limit.
 * Returns 0; KB_ETIMEOUT when none came in time (the child still runs);
 * KB_ETOOBIG when the next line was longer than result_cap (it is dropped,
 * up to and including its newline: the next call reads the line after it);
 * KB_ECANCELLED on a stop request (the child is left alone); -1 (logged)
 * when the child exited or closed the result pipe without a further
 * complete line: finish_command then gives its exit_code.
 */
int child_read_line(struct child_process *cp, struct strbuf *line, int64_t timeout_ms);

/*
 * For waiting on several children at once: the descriptors (at most max,
 * into fds; their number) that poll() reports readable when the started
 * child has output, an answer or has exited (its pipes, and its pidfd
 * where the kernel has them: without one, poll with a timeout). Take
 * answers with child_read_line (a timeout of 1 ms) until KB_ETIMEOUT
 * first: a line already read in waits on no descriptor. Stdin is not
 * among them: child_write a short request before waiting.
 */
size_t child_wait_fds(const struct child_process *cp, int *fds, size_t max);

/*
 * Non-blocking: true while the started child runs. Once it has exited its
 * group is killed too; it stays unreaped for finish_command.
 */
bool child_alive(struct child_process *cp);

/*
 * Close the child's stdin (after queued bytes), wait up to grace_ms for it
 * to exit while draining its output (grace_ms < 0: no limit; 0: kill at
 * once unless it has already exited), then SIGKILL its group; reap it and
 * fill exit_code, elapsed_ms (since start_command), timed_out (true when
 * the grace ran out and it was killed), cancelled, and result (what no
 * child_read_line took). Every descriptor is closed and cp.pid is 0
 * afterwards. Returns 0, KB_ECANCELLED when a stop request cut the wait
 * short (the child is killed and reaped all the same), -1 when there was no
 * started child or waiting failed.
 */
int finish_command(struct child_process *cp, int64_t grace_ms);

/*
 * SIGKILL the child's group now (a request timed out, or the worker is
 * past saving), then finish_command(cp, 0). timed_out stays false: the
 * caller knows why. A no-op when nothing was started.
 */
void kill_command(struct child_process *cp);

/*
 * True when name (up to an optional '=') looks like it holds a secret:
 * it contains, in any case, TOKEN, SECRET, PASSWORD, PASSWD, PASSPHRASE,
 * CREDENTIAL, PRIVATE, API_KEY, APIKEY, ACCESS_KEY, AUTH, COOKIE or
 * SESSION, ends in _KEY, or starts with GITHUB_, ACTIONS_, RUNNER_, AWS_,
 * OPENAI_, ANTHROPIC_, HF_ or GH_. SSH_AUTH_SOCK goes too: a child never
 * needs our agent.
 */
bool env_name_is_secret(const char *name);

#endif
