#ifndef KB_JOBS_DEVICES_H
#define KB_JOBS_DEVICES_H
/*
 * Device leases: with several jobs at once ([bot] max_jobs), each job gets
 * devices of its own ([bot] devices_per_job) for its whole life, and its
 * children see only those: CUDA_VISIBLE_DEVICES, the child config's
 * [harness] devices and KB_DEVICE_LEASE, which the harness client writes
 * into the evidence (kernelbot.placement.lease, verifier/PROTOCOL.md). A
 * job that cannot take its devices stays queued; no two jobs of one
 * daemon ever hold the same device. Leases live in the daemon's memory
 * only: a restarted daemon starts with none (its old children died with
 * it, setpriv --pdeathsig).
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

struct kb_config;

struct jdevices {
	struct strvec ids;   /* the runner's devices; empty: nothing is leased */
	const void **holder; /* per device: the owner holding it (a job's runner), NULL: free */
	size_t per_job;      /* devices a job takes */
};

/*
 * The devices of cfg: none on the cpu backend; else [harness] devices
 * unless auto; else visible (the daemon's CUDA_VISIBLE_DEVICES, NULL:
 * unset; not a list of devices: none, warned); else one per GPU proc's
 * driver listing names (core/nvidia.h; none without the driver). per_job:
 * [bot] devices_per_job, 0: the devices / max_jobs, at least 1. 0; -1
 * (logged) when a job could never take its devices (devices_per_job above
 * them).
 */
int jdevices_init(struct jdevices *d, const struct kb_config *cfg, const char *visible,
		  const char *proc);
void jdevices_release(struct jdevices *d);

/*
 * Lease per_job free devices (the first free ones, in the runner's order)
 * to owner (not NULL); their ids into out (replaced). Nothing to lease:
 * out empty, 0. -1 (quiet) when not enough are free: the job waits.
 */
int jdevices_take(struct jdevices *d, const void *owner, struct strvec *out);

/* Every device owner holds is free again. */
void jdevices_give_back(struct jdevices *d, const void *owner);

/* The ids of lease as a comma list, appended to out. */
void jdevices_join(const struct strvec *lease, struct strbuf *out);

/*
 * What a child of a job with lease (empty: none, nothing added) needs in
 * its environment: CUDA_VISIBLE_DEVICES and KB_DEVICE_LEASE_ENV
 * (core/config.h), appended to env (a child_process's env).
 */
void jdevices_child_env(const struct strvec *lease, struct strvec *env);

#endif
