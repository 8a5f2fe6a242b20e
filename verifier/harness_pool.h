#ifndef KB_HARNESS_POOL_H
#define KB_HARNESS_POOL_H
/*
 * Every device of a runner busy: long-lived harness workers
 * (harness_worker.h), [harness] workers_per_device of them per device,
 * each pinned to its device, and a batch of requests spread over them and
 * driven at once from the caller's thread. The workers are child
 * processes: the pool polls all of them together; requests are made, and
 * answers handed back, on the caller's thread in the order they complete,
 * so the caller keeps its state store and its callbacks to itself.
 *
 * Worker k (0-based; "worker": k + 1 in the evidence) serves device
 * k % nr_devices, so a batch's first requests go to distinct devices; a
 * request goes to an idle worker of the device with the fewest requests
 * in flight. A cpu request goes only to the workers of the first device,
 * labelled "cpu" (cpu timings must not share cores). A worker that dies
 * or hangs is restarted at its next request (harness_worker.h); the others
 * are not touched.
 *
 * Each answer comes with its placement (verifier/PROTOCOL.md "Placement"):
 *
 *   {"device": "0", "worker": 1, "workers_on_device": 2,
 *    "shared_with": [{"worker": 2, "kernel_sha256": "..."}]}
 *
 * device: the CUDA device id the worker was pinned to, "cpu", or "default"
 * (not pinned: the worker saw every GPU the bot sees). shared_with: every
 * other request of this pool in flight on the same device at any time
 * while this one was (its timing included); [] when no other worker of
 * this bot process used the device meanwhile.
 */
#include "core/common.h"
#include "core/strvec.h"
#include "verifier/harness_worker.h"

#include <cjson/cJSON.h>

struct kb_harness_pool {
	struct kb_harness_worker *w;  /* nr workers */
	size_t nr;
	struct strvec devices;        /* the ids workers are pinned to; empty: not pinned */
	size_t per_device;
};

/*
 * The devices to pin workers to: the list in setting ([harness] devices)
 * unless it is "auto" (or NULL); with auto, the entries of visible (the
 * bot's CUDA_VISIBLE_DEVICES, NULL: unset) when set, else 0 .. gpus - 1
 * (gpus: the devices torch sees, 0 without CUDA). Appended to out; none
 * (one set of workers that sees what the bot sees) when visible is empty
 * or not a list of device ids (warned) and when gpus is 0.
 */
void kb_harness_pool_devices(const char *setting, const char *visible, int gpus, struct strvec *out);

/* per_device (at least 1) workers on h (borrowed) for each of devices
 * (none: one unpinned set). Starts nothing. */
void kb_harness_pool_init(struct kb_harness_pool *p, const struct kb_harness *h,
			  const struct strvec *devices, size_t per_device);
/* Stops every worker and frees them. */
void kb_harness_pool_release(struct kb_harness_pool *p);

/* kb_harness_worker_see on every worker. */
void kb_harness_pool_see(struct kb_harness_pool *p, const char *path);

/*
 * Start up to n of the workers backend's requests go to, one device after
 * another, so that they load torch while the caller builds. 0, or
 * KB_ECANCELLED (a worker that cannot start fails its first request).
 */
int kb_harness_pool_start(struct kb_harness_pool *p, const char *backend, size_t n);

struct kb_pool_job {
	const char *backend;  /* "cpu" or "cuda" */
	const char *tag;      /* names the job in another's shared_with (a kernel's sha256); NULL: none */
};

struct kb_pool_ops {
	/* Job i's request and timeout (kb_harness_worker_eval's), made right
	 * before it is sent: 0, or -1 (logged; the run stops). */
	int (*request)(size_t i, cJSON **request, int64_t *timeout_ms, void *payload);
	/* Job i ended; the evidence and the placement are the callee's. */
	void (*done)(size_t i, cJSON *evidence, cJSON *placement, void *payload);
	/* Job i's progress records (stage, config and seed, -1: none), and
	 * with i == SIZE_MAX and stage NULL about once a second. May be NULL. */
	void (*wait)(size_t i, const char *stage, int config, int seed, void *payload);
	void *payload;
	/* Called between polls of the busy workers (about every 100 ms, on
	 * the caller's thread) with idle_arg, for the caller's other work; it
	 * must not use this pool. May be NULL. */
	void (*idle)(void *idle_arg);
	void *idle_arg;
};

/*
 * Run the n jobs on p's workers, as many at once as there are workers
 * for them. 0 when every job ended (done called n times); -1 when a
 * request could not be made or sent (logged) and KB_ECANCELLED on a stop
 * request: the requests in flight then are dropped, their workers killed.
 */
int kb_harness_pool_run(struct kb_harness_pool *p, const struct kb_pool_job *jobs, size_t n,
			const struct kb_pool_ops *ops);

/*
 * A job's device lease in its placement: lease is KB_DEVICE_LEASE_ENV's
 * value (core/config.h; NULL or "": none, nothing added). Adds
 *   "lease": {"devices": ["0", "1"], "exclusive": true}
 * the devices the daemon leased to the job this process runs for, which no
 * other job of that daemon used meanwhile (verifier/PROTOCOL.md).
 */
void kb_harness_placement_lease(cJSON *placement, const char *lease);

/*
 * The placement of an evaluation in a fresh harness process of a job with
 * a lease (NULL without one): {"device": the first id of visible (CUDA's
 * device 0; "cpu" for backend cpu), "fresh": true, "shared_with": [],
 * "lease": {...}}. Fresh evaluations run one at a time, never during a
 * pool run: nothing else of this process evaluated meanwhile.
 */
cJSON *kb_harness_fresh_placement(const char *backend, const char *visible, const char *lease);

#endif
