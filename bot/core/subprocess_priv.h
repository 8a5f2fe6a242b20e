#ifndef KB_SUBPROCESS_PRIV_H
#define KB_SUBPROCESS_PRIV_H
/*
 * Shared by bot/core/subprocess.c (environment, fork, exec) and
 * bot/core/subprocess_poll.c (talking to a started child, waiting for it);
 * nothing else includes it.
 */
#include "core/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#define SP_DEFAULT_CAP ((size_t)16 << 20)

/*
 * Hand a child that has exec'd over to the poll side: its pid (the leader
 * of its own group), the start time and our pipe ends (-1: none), which
 * the state owns from here on. persistent: a start_command child (result
 * read as lines, stdin kept open when cp->keep_stdin_open); otherwise
 * run_command's (result into cp->result, stdin closed once cp->in is out).
 */
void child_state_attach(struct child_process *cp, pid_t pid, int64_t start,
			int in_fd, int out_fd, int err_fd, int res_fd, bool persistent);

/*
 * Wait for the child to exit, SIGKILL its group at deadline (kb_now_ms()
 * time, 0: none) and mark timed_out, drain, reap, fill the results and free
 * the state. finish_command and run_command end here.
 */
int child_finish(struct child_process *cp, int64_t deadline);

static inline void sp_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
 * SIGKILL the child's group and every process that descends from the child
 * or from a member of its group, also where it left the group or the
 * session (ninja starts each compiler in a group of its own). Linux /proc;
 * elsewhere only the group. pid is our unreaped child.
 */
void sp_kill_tree(pid_t pid);

static inline void sp_kill_group(pid_t pid)
{
	sp_kill_tree(pid);
}

static inline int sp_reap(pid_t pid, int *exit_code)
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

#endif
