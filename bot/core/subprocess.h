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
 * SIGKILL, so a child that forks cannot leave work behind or keep our pipes
 * open. Every descriptor handed over is closed on every path. The child
 * starts with default signal dispositions, an empty signal mask and only
 * descriptors 0, 1, 2 (and result_fd_child) open.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

struct child_process {
	struct strvec args;      /* argv[0] is looked up in PATH when it has no '/' */
	struct strvec env;       /* additions/overrides/removals to the child's env */
	bool inherit_env;        /* true: start from our full environment (still minus registered secrets' values) */
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
	bool keep_core_dumps;    /* default: RLIMIT_CORE 0 in the child */
	/* An extra pipe the child writes results to: when set, the child gets
	 * the write end as descriptor result_fd_child (e.g. 3) and KB_RESULT_FD
	 * in its environment; what it writes lands in cp.result (capped by
	 * result_cap, 0: 16 MiB). Used by the harness protocol. */
	int result_fd_child;     /* 0: no result pipe */
	size_t result_cap;

	/* results */
	struct strbuf out;
	struct strbuf err;
	struct strbuf result;
	bool out_truncated, err_truncated, result_truncated;
	int exit_code;           /* exit status, or 128 + signal */
	bool timed_out;          /* killed for the deadline (exit_code is then 128 + SIGKILL) */
	bool cancelled;          /* killed because a stop was requested */
	int64_t elapsed_ms;
};

#define CHILD_PROCESS_INIT { .args = STRVEC_INIT, .env = STRVEC_INIT, \
	.out = STRBUF_INIT, .err = STRBUF_INIT, .result = STRBUF_INIT }

void child_process_init(struct child_process *cp);
/* Frees args, env and the captured buffers. */
void child_process_release(struct child_process *cp);

/*
 * Run the child to completion. Returns 0 when it was started and waited for
 * (look at exit_code / timed_out), -1 when it could not be started (the
 * message names the program), KB_ECANCELLED when a stop was requested.
 */
int run_command(struct child_process *cp);

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
