#include "core/common.h"
#include "jobs/devices.h"
#include "core/config.h"
#include "core/log.h"
#include "core/nvidia.h"
#include "core/util.h"

/*
 * The daemon's device leases (devices.h). The list is the one the
 * harness pins its workers to (verifier/harness_pool.h), except that with
 * devices = auto and no CUDA_VISIBLE_DEVICES the GPUs are counted from the
 * driver's listing: the daemon loads no CUDA to ask.
 */

/* The runner's devices into d->ids; 0, or -1 (logged). */
static int runner_devices(struct jdevices *d, const struct kb_config *cfg, const char *visible,
			  const char *proc)
{
	struct strbuf why = STRBUF_INIT;
	struct kb_nvidia_gpu *gpus = NULL;
	size_t nr = 0;
	int rc = 0;

	if (cfg->backend == KB_BACKEND_CPU) {
		/* nothing to lease: every job's harness runs on the CPU */
	} else if (cfg->devices && strcmp(cfg->devices, "auto")) {
		if (kb_config_devices(cfg->devices, &d->ids, &why))
			rc = error("[harness] devices: %s", why.buf);
	} else if (visible) {
		if (*visible && kb_config_devices(visible, &d->ids, &why)) {
			log_warn("CUDA_VISIBLE_DEVICES: %s; jobs are not given devices of their own", why.buf);
			strvec_clear(&d->ids);
		}
	} else if (!kb_nvidia_gpus(proc, &gpus, &nr, &why)) {
		for (size_t i = 0; i < nr; i++)
			strvec_pushf(&d->ids, "%zu", i);
	}
	free(gpus);
	strbuf_release(&why);
	return rc;
}

int jdevices_init(struct jdevices *d, const struct kb_config *cfg, const char *visible,
		  const char *proc)
{
	struct strbuf list = STRBUF_INIT;
	int64_t max_jobs = cfg->bot_max_jobs > 0 ? cfg->bot_max_jobs : 1;
	int rc = -1;

	memset(d, 0, sizeof(*d));
	strvec_init(&d->ids);
	if (runner_devices(d, cfg, visible, proc))
		goto out;
	if (!d->ids.nr) {
		log_debug("jobs get no devices of their own: no GPU, or the cpu backend");
		rc = 0;
		goto out;
	}
	d->per_job = cfg->bot_devices_per_job > 0 ? (size_t)cfg->bot_devices_per_job
						  : d->ids.nr / (size_t)max_jobs;
	if (!d->per_job)
		d->per_job = 1;
	jdevices_join(&d->ids, &list);
	if (d->per_job > d->ids.nr) {
		error("[bot] devices_per_job = %zu, but the runner has %zu device%s (%s): no job could start",
		      d->per_job, d->ids.nr, d->ids.nr == 1 ? "" : "s", list.buf);
		goto out;
	}
	d->holder = xcalloc(d->ids.nr, sizeof(*d->holder));
	log_info("devices %s: %zu per job, up to %zu job%s at once", list.buf, d->per_job,
		 d->ids.nr / d->per_job, d->ids.nr / d->per_job == 1 ? "" : "s");
	rc = 0;
out:
	if (rc)
		jdevices_release(d);
	strbuf_release(&list);
	return rc;
}

void jdevices_release(struct jdevices *d)
{
	strvec_clear(&d->ids);
	FREE_AND_NULL(d->holder);
	d->per_job = 0;
}

static size_t nr_free(const struct jdevices *d)
{
	size_t n = 0;

	for (size_t i = 0; i < d->ids.nr; i++)
		n += !d->holder[i];
	return n;
}

int jdevices_take(struct jdevices *d, const void *owner, struct strvec *out)
{
	strvec_clear(out);
	if (!d->ids.nr)
		return 0;
	if (!owner || nr_free(d) < d->per_job)
		return -1;
	for (size_t i = 0; i < d->ids.nr && out->nr < d->per_job; i++) {
		if (d->holder[i])
			continue;
		d->holder[i] = owner;
		strvec_push(out, d->ids.v[i]);
	}
	return 0;
}

void jdevices_give_back(struct jdevices *d, const void *owner)
{
	for (size_t i = 0; i < d->ids.nr; i++)
		if (d->holder[i] == owner)
			d->holder[i] = NULL;
}

void jdevices_join(const struct strvec *lease, struct strbuf *out)
{
	for (size_t i = 0; i < lease->nr; i++)
		strbuf_addf(out, "%s%s", i ? "," : "", lease->v[i]);
}

void jdevices_child_env(const struct strvec *lease, struct strvec *env)
{
	struct strbuf list = STRBUF_INIT;

	if (!lease->nr)
		return;
	jdevices_join(lease, &list);
	strvec_pushf(env, "CUDA_VISIBLE_DEVICES=%s", list.buf);
	strvec_pushf(env, "%s=%s", KB_DEVICE_LEASE_ENV, list.buf);
	strbuf_release(&list);
}
