#ifndef KB_PYTHON_ENV_H
#define KB_PYTHON_ENV_H
/*
 * The Python interpreter that runs the harness: one that can import torch.
 *
 * Resolution: config [harness] python when set (it must import torch, else
 * an error naming it); otherwise the first of $KERNELBOT_PYTHON, python3 on
 * PATH, /usr/bin/python3, /usr/local/bin/python3 that imports torch. Each
 * candidate is probed once per process (run isolated, -I, as the harness
 * is); the probe reports torch's version and what torch sees of the GPU.
 * Probes and the resolution are cached for the life of the process and
 * are safe to call from several threads.
 */
#include "core/common.h"
#include "core/config.h"

struct kb_python_probe {
	char *python;          /* the interpreter's path */
	char *python_version;  /* "3.11.2" */
	char *torch_version;   /* "2.11.0+cu130" */
	char *cuda_version;    /* torch.version.cuda, "" when a CPU build */
	bool cuda_available;   /* torch.cuda.is_available() */
	int device_count;
	char *device_name;     /* device 0's name, "" without a GPU */
	char *capability;      /* device 0's compute capability as "90", "" without a GPU */
	bool compile_available; /* torch.compile exists (torch >= 2) */
};

/*
 * Find and probe the interpreter. On success *out points at a cached probe
 * owned by this module (valid until kb_python_reset). Returns 0,
 * KB_ENOTFOUND when no candidate imports torch ("no python3 with torch
 * found; tried: ...; set [harness] python"), -1 for other failures
 * (the configured python is missing or lacks torch). Messages are logged.
 */
int kb_python_find(const struct kb_config *cfg, const struct kb_python_probe **out);

/* Probe one interpreter (cached). 0, or -1 when it cannot import torch. */
int kb_python_probe(const char *python, const struct kb_python_probe **out);

/* The backend to use: requested unless auto; auto is cuda when torch sees a GPU. */
enum kb_backend kb_python_backend(const struct kb_python_probe *probe, enum kb_backend requested);

/* "cuda", "cpu" or "auto". */
const char *kb_backend_name(enum kb_backend b);
/* Parse "cuda", "cpu" or "auto"; -1 otherwise. */
int kb_backend_parse(const char *name, enum kb_backend *out);

/* Forget every cached probe (tests). */
void kb_python_reset(void);

#endif
