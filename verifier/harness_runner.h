#ifndef KB_HARNESS_RUNNER_H
#define KB_HARNESS_RUNNER_H
/*
 * The kernel's side of an evaluation, in a sandbox of its own
 * (PROTOCOL.md "Judge and runner"). The harness (the judge) loads the
 * operator, runs the reference, compares and decides; it never maps
 * candidate code. Candidate code runs in runners that a zygote,
 *
 *   PYTHON -I -B -u verifier/harness/kb_runner.py --zygote 3
 *
 * forks for it, one per evaluation. With the sandbox on, the bot starts
 * that zygote here, in a second sandbox with a scratch directory of its
 * own (the judge's is not in its view, nor its processes: another PID
 * namespace), and hands the judge the other end of their socket as
 * descriptor KB_RUNNER_JUDGE_FD (KB_RUNNER_FD in its environment). The
 * zygote ends when the judge's end closes. With the sandbox off the judge
 * starts the zygote itself, as its own child.
 */
#include "core/common.h"
#include "core/subprocess.h"
#include "verifier/harness_client.h"

#define KB_RUNNER_JUDGE_FD 4

struct kb_harness_runner {
	struct child_process cp;
	char *dir;                 /* its scratch directory, removed at stop */
	bool running;
};

void kb_harness_runner_init(struct kb_harness_runner *r);

/*
 * Start the zygote for backend, seeing h->view_ro plus paths (may be
 * NULL) read-only, and hand the judge's end of the socket to judge (as
 * pass_fd, with KB_RUNNER_FD in its env). A CUDA_VISIBLE_DEVICES already in
 * judge->env is the zygote's too (a worker pinned to one device). Nothing is started when the
 * sandbox is off or a test hook replaces the harness (the judge then
 * starts its own). Returns 0 or -1 (logged).
 */
int kb_harness_runner_start(struct kb_harness_runner *r, const struct kb_harness *h,
			    const struct strvec *paths, const char *backend,
			    struct child_process *judge);

/* After the judge ended (or was killed): reap the zygote (it ends at the
 * judge's EOF; killed after a grace) and remove its directory. */
void kb_harness_runner_stop(struct kb_harness_runner *r);

#endif
