#include "core/common.h"
#include "verifier/sandbox.h"
#include "core/config.h"
#include "core/nvidia.h"
#include "core/util.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>

/*
 * Which /dev/nvidia* nodes a sandboxed process gets (sandbox.h,
 * kb_sandbox_gpu_nodes): those of the GPUs its CUDA_VISIBLE_DEVICES names,
 * so that a kernel that starts a process of its own cannot reach another
 * job's GPU, plus the nodes every CUDA process opens. Whenever the list
 * cannot be mapped for certain, every node, as before: a wrong guess would
 * leave the worker without its GPU.
 */

/* Opened by every CUDA process whatever its devices (those present are bound). */
static const char *const control_nodes[] = {
	"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps",
};

static int all_nodes(const char *dev, struct strvec *nodes)
{
	char pattern[4096];
	glob_t g;

	strvec_clear(nodes);
	xsnprintf(pattern, sizeof(pattern), "%s/nvidia*", dev);
	if (!glob(pattern, 0, NULL, &g)) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			strvec_push(nodes, g.gl_pathv[i]);
		globfree(&g);
	}
	return 1;
}

/* The GPU of entry id (an index in bus order, or GPU-<uuid>); NULL with why. */
static const struct kb_nvidia_gpu *gpu_of(const char *id, const struct kb_nvidia_gpu *gpus, size_t nr,
					  struct strbuf *why)
{
	int64_t i;

	if (!strncmp(id, "GPU-", 4)) {
		for (size_t k = 0; k < nr; k++)
			if (!strcasecmp(gpus[k].uuid, id))
				return &gpus[k];
		strbuf_addf(why, "no GPU of the driver's listing has the UUID '%s'", id);
		return NULL;
	}
	if (kb_parse_i64(id, &i) || i < 0 || (uint64_t)i >= nr) {
		strbuf_addf(why, "CUDA device %s: the driver lists %zu GPU%s", id, nr, nr == 1 ? "" : "s");
		return NULL;
	}
	return &gpus[i];
}

/*
 * CUDA numbers the GPUs it can open: a device cgroup (Slurm's
 * ConstrainDevices) that denies one shifts the numbers of those after it.
 * So every GPU up to the highest index named must open.
 */
static bool numbered_as_listed(const char *dev, const struct kb_nvidia_gpu *gpus, size_t upto,
			       struct strbuf *why)
{
	for (size_t k = 0; k <= upto; k++) {
		char path[4096];
		int fd;

		if (gpus[k].excluded) {
			strbuf_addf(why, "the driver excludes GPU %s: CUDA numbers the GPUs without it",
				    gpus[k].bus_id);
			return false;
		}
		xsnprintf(path, sizeof(path), "%s/nvidia%d", dev, gpus[k].minor);
		fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
		if (fd < 0) {
			strbuf_addf(why, "'%s' cannot be opened (%s): CUDA may number the GPUs differently",
				    path, strerror(errno));
			return false;
		}
		close(fd);
	}
	return true;
}

/* The node of each id into nodes; false with why. */
static bool map_ids(const char *dev, const char *proc, const struct strvec *ids, struct strvec *nodes,
		    struct strbuf *why)
{
	struct kb_nvidia_gpu *gpus = NULL;
	size_t nr = 0, highest = 0;
	bool by_index = false, ok = false;

	for (size_t i = 0; i < ids->nr; i++)
		if (!strncmp(ids->v[i], "MIG-", 4)) {
			strbuf_addf(why, "'%s' is a MIG instance, which has no device node of its own",
				    ids->v[i]);
			return false;
		}
	if (kb_nvidia_gpus(proc, &gpus, &nr, why))
		return false;
	for (size_t i = 0; i < ids->nr; i++) {
		const struct kb_nvidia_gpu *g = gpu_of(ids->v[i], gpus, nr, why);
		char path[4096];
		struct stat st;

		if (!g)
			goto out;
		if (strncmp(ids->v[i], "GPU-", 4)) {
			by_index = true;
			if ((size_t)(g - gpus) > highest)
				highest = (size_t)(g - gpus);
		}
		xsnprintf(path, sizeof(path), "%s/nvidia%d", dev, g->minor);
		if (stat(path, &st)) {
			strbuf_addf(why, "'%s' (GPU %s) is missing", path, g->bus_id);
			goto out;
		}
		strvec_push(nodes, path);
	}
	if (by_index && kb_nvidia_has_mig(proc)) {
		strbuf_addstr(why, "a GPU has MIG instances: CUDA numbers the instances, not the GPUs");
		goto out;
	}
	ok = !by_index || numbered_as_listed(dev, gpus, highest, why);
out:
	free(gpus);
	return ok;
}

int kb_sandbox_gpu_nodes(const char *dev, const char *proc, const char *visible, const char *order,
			 struct strvec *nodes, struct strbuf *why)
{
	struct strvec ids = STRVEC_INIT;
	struct strbuf bad = STRBUF_INIT;
	bool ok = true;

	strvec_clear(nodes);
	if (!visible)
		return all_nodes(dev, nodes); /* every GPU is the process's */
	if (*visible && kb_config_devices(visible, &ids, &bad)) {
		strbuf_addf(why, "CUDA_VISIBLE_DEVICES: %s", bad.buf);
		ok = false;
	} else if (order && strcmp(order, "PCI_BUS_ID")) {
		strbuf_addf(why, "CUDA_DEVICE_ORDER=%s: the driver's listing is in PCI bus order", order);
		ok = false;
	} else {
		ok = map_ids(dev, proc, &ids, nodes, why);
	}
	strvec_clear(&ids);
	strbuf_release(&bad);
	if (!ok)
		return all_nodes(dev, nodes);
	for (size_t i = 0; i < ARRAY_SIZE(control_nodes); i++) {
		char path[4096];
		struct stat st;

		xsnprintf(path, sizeof(path), "%s/%s", dev, control_nodes[i]);
		if (!lstat(path, &st))
			strvec_push(nodes, path);
	}
	return 0;
}
