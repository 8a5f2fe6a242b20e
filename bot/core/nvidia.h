#ifndef KB_NVIDIA_H
#define KB_NVIDIA_H
/*
 * The NVIDIA GPUs as the kernel driver lists them, read from procfs
 * without loading CUDA: PROC/driver/nvidia/gpus/<PCI bus id>/information
 * names each GPU's UUID ("GPU UUID:") and its device node's minor ("Device
 * Minor:", /dev/nvidia<minor>). The daemon counts them to lease devices to
 * jobs (jobs/devices.h); the sandbox maps a CUDA_VISIBLE_DEVICES list to the
 * device nodes it binds (verifier/sandbox.h).
 */
#include "core/common.h"
#include "core/strbuf.h"

struct kb_nvidia_gpu {
	char bus_id[32];   /* the folder's name, lower case: 0000:18:00.0 */
	char uuid[96];     /* GPU-<uuid>; "" when the file does not say */
	int minor;         /* /dev/nvidia<minor> */
	bool excluded;     /* "GPU Excluded: Yes": CUDA does not number it */
};

/*
 * The GPUs proc (normally "/proc") lists, in PCI bus id order: CUDA's
 * order under CUDA_DEVICE_ORDER=PCI_BUS_ID, so entry i is CUDA device i
 * there. *out (free it) and *nr. 0; -1 with why (not logged) when there is
 * no driver listing or a GPU's information lacks its device minor.
 */
int kb_nvidia_gpus(const char *proc, struct kb_nvidia_gpu **out, size_t *nr, struct strbuf *why);

/*
 * True when a GPU of proc's listing has MIG instances
 * (driver/nvidia/capabilities/gpu<minor>/mig/gi<N>): CUDA then numbers the
 * instances, not the GPUs.
 */
bool kb_nvidia_has_mig(const char *proc);

#endif
