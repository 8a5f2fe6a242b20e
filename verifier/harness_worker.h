#ifndef KB_HARNESS_WORKER_H
#define KB_HARNESS_WORKER_H
/*
 * A long-lived harness process that evaluates candidate after candidate
 * (PROTOCOL.md "Serve mode"): starting python with torch and CUDA costs
 * seconds, an evaluation should not.
 *
 *   PYTHON -I -B -u kb_harness.py --serve <its dir>
 *
 * started with start_command (bot/core/subprocess.h): a scrubbed
 * environment, its own process group, a TMPDIR (and working directory) of
 * its own under tmp_root, RLIMIT_AS on the cpu backend, the nonce as the
 * first line of its stdin, which stays open: each request is written to
 * <its dir>/eval-XXXXXX/request.json (that dir is the request's workdir,
 * removed after the answer) and its path sent as one line. Records come
 * back on descriptor 3 stamped with the nonce and the request path; those
 * of other requests or without the nonce are ignored.
 *
 * The worker is restarted, lazily at the next evaluation, when it
 *  - died (a crash: the rejection has the signal and the stage; what it
 *    printed goes to the operator's log, harness_log.h, as after every
 *    request),
 *  - outlived a request's timeout (killed with its group: `timeout`),
 *  - said it will exit after the result (`worker_exit`: the CUDA context
 *    is lost after a sticky device error),
 *  - was started for another backend.
 * A worker that dies before its first record for a request (something
 * left over from an earlier candidate, or a broken start) is started again
 * and the request sent once more; a second death is the candidate's.
 *
 * One thread at a time per worker. Several workers are driven at once
 * from one thread (harness_pool.h) through the split call below: send,
 * poll the wait descriptors of all, step each, collect.
 */
#include "core/common.h"
#include "core/subprocess.h"
#include "verifier/harness_client.h"
#include "verifier/harness_runner.h"

#include <cjson/cJSON.h>

struct kb_harness_flight; /* a request in flight, private to harness_worker.c */

struct kb_harness_worker {
	const struct kb_harness *h;  /* borrowed: interpreter, script, tmp_root, caps, argv hook */
	struct child_process cp;
	struct kb_harness_runner runner; /* the kernel's side (harness_runner.h), with cp */
	bool running;
	char nonce[33];
	char *dir;                   /* the running worker's TMPDIR */
	char backend[8];             /* what it was started for */
	struct strvec seen;          /* read-only paths its sandbox shows (operators, kernels) */
	bool view_stale;             /* seen grew beyond what the running worker shows */
	unsigned starts;             /* workers started so far */
	unsigned requests;           /* requests sent to the running one */
	/* Told of each progress record of a request (its stage, config and
	 * seed, -1: none) and, with stage NULL, about once a second while
	 * the answer is awaited: a progress bar's activity. NULL: nobody. */
	void (*on_wait)(const char *stage, int config, int seed, void *payload);
	void *on_wait_payload;
	/* NULL: the worker sees every GPU the bot sees. Else (borrowed, e.g.
	 * "1") a worker started for cuda runs with CUDA_VISIBLE_DEVICES set to
	 * it, its runner too (harness_runner.h): one device per worker. */
	const char *device;
	struct kb_harness_flight *flight; /* NULL: no request in flight */
};

/* h must outlive the worker. Starts nothing. */
void kb_harness_worker_init(struct kb_harness_worker *w, const struct kb_harness *h);

/*
 * Start a worker for backend ("cpu" or "cuda") now, unless one for it
 * runs (one for another backend is stopped first); it then loads torch
 * while the caller does other things (builds). 0, -1 (logged) when it
 * could not be started, KB_ECANCELLED.
 */
int kb_harness_worker_start(struct kb_harness_worker *w, const char *backend);

/*
 * Show path (an operator file or folder, a kernel) read-only in the
 * worker's sandbox from its next start on; a running worker that does not
 * show it is restarted at the next evaluation. kb_harness_worker_eval adds
 * the request's own paths itself: calling this before
 * kb_harness_worker_start spares that restart.
 */
void kb_harness_worker_see(struct kb_harness_worker *w, const char *path);

/*
 * Evaluate request (the worker sets "workdir") within timeout_ms (0: no
 * limit; a worker started for this request spends its start-up from
 * it; a judge that says it measures baselines, progress stage
 * "baselines", gets the harness's baseline_timeout_ms more, once). Returns 0 with *evidence whatever the verdict, as kb_harness_call
 * does; -1 when no worker could be started or the request not written
 * (logged); KB_ECANCELLED on a stop request (the worker is killed). info
 * may be NULL; its exit_code is the worker's when it ended during this
 * call.
 */
int kb_harness_worker_eval(struct kb_harness_worker *w, const cJSON *request, int64_t timeout_ms,
			   cJSON **evidence, struct kb_harness_run *info);

/*
 * The same in pieces, for several workers at once. kb_harness_worker_send
 * starts the worker when needed, writes the request and sends its path:
 * 0, or -1 / KB_ECANCELLED as above (nothing is then in flight).
 * kb_harness_worker_step takes what came back, waiting up to wait_ms
 * (<= 0: until the answer) and never past the request's deadline: 1 when
 * the request has ended (an answer, a death, the deadline or a stop
 * request; a death before its first record sends it again to a fresh
 * worker and goes on), 0 while it runs, -1 when nothing is in flight.
 * kb_harness_worker_wait_fds gives the descriptors to poll() (readable)
 * between steps. kb_harness_worker_collect, after step said 1, returns
 * what kb_harness_worker_eval returns and ends the flight. One request at
 * a time per worker; kb_harness_worker_abandon kills the worker and drops
 * the request in flight, if any.
 */
int kb_harness_worker_send(struct kb_harness_worker *w, const cJSON *request, int64_t timeout_ms);
int kb_harness_worker_step(struct kb_harness_worker *w, int64_t wait_ms);
size_t kb_harness_worker_wait_fds(const struct kb_harness_worker *w, int *fds, size_t max);
int kb_harness_worker_collect(struct kb_harness_worker *w, cJSON **evidence,
			      struct kb_harness_run *info);
void kb_harness_worker_abandon(struct kb_harness_worker *w);

/* The running worker's pid, 0 when none runs. */
pid_t kb_harness_worker_pid(const struct kb_harness_worker *w);

/* Close its stdin (the worker exits at EOF), wait up to 2 s, then kill; remove its dir. */
void kb_harness_worker_stop(struct kb_harness_worker *w);

/* Stop it and free what it holds. */
void kb_harness_worker_release(struct kb_harness_worker *w);

#endif
