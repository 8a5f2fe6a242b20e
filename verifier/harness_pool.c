#include "core/common.h"
#include "verifier/harness_pool.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <poll.h>

#define WAIT_MS 100        /* the longest poll: stop requests are looked at this often */
#define TICK_MS 1000       /* ops->wait hears this often that the batch goes on */
#define FDS_PER_WORKER 4   /* stdout, stderr, the result pipe, a pidfd */

void kb_harness_pool_devices(const char *setting, const char *visible, int gpus, struct strvec *out)
{
	struct strbuf why = STRBUF_INIT;

	if (setting && strcmp(setting, "auto")) {
		/* the config was checked at load: a bad list cannot get here */
		if (kb_config_devices(setting, out, &why))
			log_warn("[harness] devices: %s; the workers are not pinned", why.buf);
	} else if (visible) {
		if (*visible && kb_config_devices(visible, out, &why))
			log_warn("CUDA_VISIBLE_DEVICES: %s; the harness workers see what the bot sees", why.buf);
	} else {
		for (int i = 0; i < gpus; i++)
			strvec_pushf(out, "%d", i);
	}
	if (why.len)
		strvec_clear(out);
	strbuf_release(&why);
}

void kb_harness_pool_init(struct kb_harness_pool *p, const struct kb_harness *h,
			  const struct strvec *devices, size_t per_device)
{
	size_t nd;

	memset(p, 0, sizeof(*p));
	strvec_init(&p->devices);
	for (size_t i = 0; devices && i < devices->nr; i++)
		strvec_push(&p->devices, devices->v[i]);
	p->per_device = per_device ? per_device : 1;
	nd = p->devices.nr ? p->devices.nr : 1;
	p->nr = nd * p->per_device;
	p->w = xcalloc(p->nr, sizeof(*p->w));
	for (size_t k = 0; k < p->nr; k++) {
		kb_harness_worker_init(&p->w[k], h);
		p->w[k].device = p->devices.nr ? p->devices.v[k % nd] : NULL;
	}
}

void kb_harness_pool_release(struct kb_harness_pool *p)
{
	for (size_t k = 0; k < p->nr; k++)
		kb_harness_worker_release(&p->w[k]);
	free(p->w);
	strvec_clear(&p->devices);
	memset(p, 0, sizeof(*p));
}

void kb_harness_pool_see(struct kb_harness_pool *p, const char *path)
{
	for (size_t k = 0; k < p->nr; k++)
		kb_harness_worker_see(&p->w[k], path);
}

static size_t nr_devices(const struct kb_harness_pool *p)
{
	return p->devices.nr ? p->devices.nr : 1;
}

/* Worker k takes backend's requests: cpu ones only on the first device's workers. */
static bool takes(const struct kb_harness_pool *p, size_t k, const char *backend)
{
	return strcmp(backend, "cpu") || k % nr_devices(p) == 0;
}

/* What worker k runs backend's requests on, as the placement names it. */
static const char *device_label(const struct kb_harness_pool *p, size_t k, const char *backend)
{
	if (!strcmp(backend, "cpu"))
		return "cpu";
	return p->devices.nr ? p->devices.v[k % p->devices.nr] : "default";
}

int kb_harness_pool_start(struct kb_harness_pool *p, const char *backend, size_t n)
{
	for (size_t k = 0; k < p->nr && n; k++) {
		if (!takes(p, k, backend))
			continue;
		if (kb_harness_worker_start(&p->w[k], backend) == KB_ECANCELLED)
			return KB_ECANCELLED;
		n--;
	}
	return 0;
}

/* A worker during kb_harness_pool_run. */
struct slot {
	size_t job;                    /* SIZE_MAX: idle */
	const char *label;             /* its job's device label */
	cJSON *shared;                 /* its job's shared_with */
	const struct kb_pool_ops *ops;
	/* the worker's own on_wait, given back after the run */
	void (*saved_wait)(const char *stage, int config, int seed, void *payload);
	void *saved_payload;
};

#define IDLE SIZE_MAX

/* A worker's progress record, as its job's. */
static void slot_wait(const char *stage, int config, int seed, void *payload)
{
	struct slot *s = payload;

	if (stage && s->job != IDLE && s->ops->wait)
		s->ops->wait(s->job, stage, config, seed, s->ops->payload);
}

static void add_sharer(cJSON *shared, size_t worker, const char *tag)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "worker", (double)(worker + 1));
	if (tag)
		cJSON_AddStringToObject(o, "kernel_sha256", tag);
	cJSON_AddItemToArray(shared, o);
}

/* The idle worker for backend on the device with the fewest requests in flight; IDLE: none. */
static size_t pick(const struct kb_harness_pool *p, const struct slot *slots, const char *backend)
{
	size_t best = IDLE, best_busy = SIZE_MAX;

	for (size_t k = 0; k < p->nr; k++) {
		const char *label = device_label(p, k, backend);
		size_t busy = 0;

		if (slots[k].job != IDLE || !takes(p, k, backend))
			continue;
		for (size_t t = 0; t < p->nr; t++)
			busy += slots[t].job != IDLE && !strcmp(slots[t].label, label);
		if (busy < best_busy) {
			best = k;
			best_busy = busy;
		}
	}
	return best;
}

/* Send every job not yet sent that an idle worker takes. 0, -1, KB_ECANCELLED. */
static int dispatch(struct kb_harness_pool *p, struct slot *slots, const struct kb_pool_job *jobs,
		    size_t n, bool *sent, const struct kb_pool_ops *ops)
{
	for (size_t i = 0; i < n; i++) {
		size_t k;
		cJSON *req = NULL;
		int64_t timeout_ms = 0;
		int rc;

		if (sent[i] || (k = pick(p, slots, jobs[i].backend)) == IDLE)
			continue;
		if (ops->request(i, &req, &timeout_ms, ops->payload))
			return -1;
		rc = kb_harness_worker_send(&p->w[k], req, timeout_ms);
		cJSON_Delete(req);
		if (rc)
			return rc;
		sent[i] = true;
		slots[k].job = i;
		slots[k].label = device_label(p, k, jobs[i].backend);
		slots[k].shared = cJSON_CreateArray();
		/* what runs on its device now runs beside it, and it beside them */
		for (size_t t = 0; t < p->nr; t++) {
			if (t == k || slots[t].job == IDLE || strcmp(slots[t].label, slots[k].label))
				continue;
			add_sharer(slots[k].shared, t, jobs[slots[t].job].tag);
			add_sharer(slots[t].shared, k, jobs[i].tag);
		}
	}
	return 0;
}

/* Until a busy worker has something to say, at most WAIT_MS. */
static void wait_any(const struct kb_harness_pool *p, const struct slot *slots, struct pollfd *pfd)
{
	nfds_t n = 0;

	for (size_t k = 0; k < p->nr; k++) {
		int fds[FDS_PER_WORKER];
		size_t m;

		if (slots[k].job == IDLE)
			continue;
		m = kb_harness_worker_wait_fds(&p->w[k], fds, FDS_PER_WORKER);
		for (size_t j = 0; j < m; j++) {
			pfd[n].fd = fds[j];
			pfd[n].events = POLLIN;
			pfd[n++].revents = 0;
		}
	}
	/* EINTR (a stop request's signal) is as good as an answer: the steps see it */
	poll(pfd, n, WAIT_MS);
}

static cJSON *placement(const struct kb_harness_pool *p, size_t k, struct slot *s)
{
	cJSON *pl = cJSON_CreateObject();

	cJSON_AddStringToObject(pl, "device", s->label);
	cJSON_AddNumberToObject(pl, "worker", (double)(k + 1));
	cJSON_AddNumberToObject(pl, "workers_on_device", (double)p->per_device);
	cJSON_AddItemToObject(pl, "shared_with", s->shared);
	s->shared = NULL;
	return pl;
}

/* Take what the busy workers said; hand over the jobs that ended. 0, -1, KB_ECANCELLED. */
static int collect_done(struct kb_harness_pool *p, struct slot *slots, const struct kb_pool_ops *ops,
			size_t *left)
{
	for (size_t k = 0; k < p->nr; k++) {
		cJSON *ev = NULL;
		size_t job = slots[k].job;
		int rc;

		if (job == IDLE)
			continue;
		rc = kb_harness_worker_step(&p->w[k], 1);
		if (rc <= 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		rc = kb_harness_worker_collect(&p->w[k], &ev, NULL);
		slots[k].job = IDLE;
		if (rc) {
			cJSON_Delete(slots[k].shared);
			slots[k].shared = NULL;
			return rc;
		}
		ops->done(job, ev, placement(p, k, &slots[k]), ops->payload);
		(*left)--;
	}
	return 0;
}

int kb_harness_pool_run(struct kb_harness_pool *p, const struct kb_pool_job *jobs, size_t n,
			const struct kb_pool_ops *ops)
{
	struct slot *slots = xcalloc(p->nr, sizeof(*slots));
	struct pollfd *pfd = xcalloc(p->nr * FDS_PER_WORKER, sizeof(*pfd));
	bool *sent = xcalloc(n ? n : 1, sizeof(*sent));
	int64_t tick = kb_now_ms() + TICK_MS;
	size_t left = n;
	int rc = 0;

	for (size_t k = 0; k < p->nr; k++) {
		slots[k] = (struct slot){ .job = IDLE, .ops = ops, .saved_wait = p->w[k].on_wait,
					  .saved_payload = p->w[k].on_wait_payload };
		p->w[k].on_wait = slot_wait;
		p->w[k].on_wait_payload = &slots[k];
	}
	while (left && !rc) {
		rc = dispatch(p, slots, jobs, n, sent, ops);
		if (rc)
			break;
		wait_any(p, slots, pfd);
		rc = collect_done(p, slots, ops, &left);
		if (!rc && left && ops->idle)
			ops->idle(ops->idle_arg);
		if (ops->wait && kb_now_ms() >= tick) {
			ops->wait(SIZE_MAX, NULL, -1, -1, ops->payload);
			tick = kb_now_ms() + TICK_MS;
		}
	}
	for (size_t k = 0; k < p->nr; k++) {
		if (slots[k].job != IDLE)
			kb_harness_worker_abandon(&p->w[k]);
		cJSON_Delete(slots[k].shared);
		p->w[k].on_wait = slots[k].saved_wait;
		p->w[k].on_wait_payload = slots[k].saved_payload;
	}
	free(slots);
	free(pfd);
	free(sent);
	return rc;
}

/* {"devices": [...], "exclusive": true} of a lease; NULL when there is none. */
static cJSON *lease_json(const char *lease)
{
	struct strvec ids = STRVEC_INIT;
	struct strbuf why = STRBUF_INIT;
	cJSON *l = NULL, *arr;

	if (!lease || !*lease)
		goto out;
	if (kb_config_devices(lease, &ids, &why)) {
		log_warn("%s: %s; the evidence names no lease", KB_DEVICE_LEASE_ENV, why.buf);
		goto out;
	}
	l = cJSON_CreateObject();
	arr = cJSON_AddArrayToObject(l, "devices");
	for (size_t i = 0; i < ids.nr; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(ids.v[i]));
	/* the daemon leased them to this job alone (jobs/devices.h) */
	cJSON_AddBoolToObject(l, "exclusive", true);
out:
	strvec_clear(&ids);
	strbuf_release(&why);
	return l;
}

void kb_harness_placement_lease(cJSON *placement, const char *lease)
{
	cJSON *l = lease_json(lease);

	if (l)
		cJSON_AddItemToObject(placement, "lease", l);
}

cJSON *kb_harness_fresh_placement(const char *backend, const char *visible, const char *lease)
{
	struct strvec ids = STRVEC_INIT;
	struct strbuf why = STRBUF_INIT;
	cJSON *l = lease_json(lease), *pl;
	const char *device = "default";

	if (!l)
		return NULL;
	if (!strcmp(backend, "cpu"))
		device = "cpu";
	else if (visible && *visible && !kb_config_devices(visible, &ids, &why))
		device = ids.v[0]; /* CUDA's device 0, the one a harness uses */
	pl = cJSON_CreateObject();
	cJSON_AddStringToObject(pl, "device", device);
	cJSON_AddBoolToObject(pl, "fresh", true);
	/* fresh evaluations run one at a time, outside every pool run */
	cJSON_AddItemToObject(pl, "shared_with", cJSON_CreateArray());
	cJSON_AddItemToObject(pl, "lease", l);
	strvec_clear(&ids);
	strbuf_release(&why);
	return pl;
}
