#ifndef KB_SANDBOX_H
#define KB_SANDBOX_H
/*
 * The sandbox every process that loads or compiles untrusted code runs in:
 * candidate builds (nvcc, g++), the harness (reference operators from a
 * pull request, candidate kernels) and the final re-check.
 *
 * It is bubblewrap (bwrap, a well-kept setuid-free tool packaged by Debian
 * and Ubuntu) around the program, plus a seccomp filter made with
 * libseccomp and resource limits:
 *   - new user, PID, mount, IPC, UTS, cgroup and network namespaces: the
 *     child is uid/gid 65534 inside, sees only its own processes, and has
 *     no network at all (a loopback of its own, nothing else);
 *   - a read-only view of only what it needs: /usr (and the /bin, /lib,
 *     /lib64, /sbin that point into it), the loader's cache, the program's
 *     own prefix when it lives elsewhere, the paths a caller names (data
 *     dir, operator folder, build cache) and, on a GPU, the /dev/nvidia*
 *     nodes of the GPUs its CUDA_VISIBLE_DEVICES names and the control
 *     nodes (kb_sandbox_gpu_nodes);
 *   - one writable scratch directory (at the same path inside), a private
 *     /tmp, a fresh /proc and a minimal /dev;
 *   - an environment built from nothing: PATH, HOME and TMPDIR (scratch),
 *     LANG/LC_ALL, USER, the CUDA device selection, plus the caller's
 *     cp->env entries; never a variable of ours;
 *   - no capabilities, a new session (no terminal to inject into), killed
 *     with its parent; everything in the PID namespace dies with it, so a
 *     double-forked setsid process cannot outlive the evaluation;
 *   - seccomp: ptrace, process_vm_readv/writev, mount, namespaces, kernel
 *     modules, keyrings, bpf, perf_event_open, userfaultfd, personality,
 *     TIOCSTI and IP/packet/netlink sockets fail with EPERM;
 *   - rlimits: address space, file size, CPU seconds, open files and
 *     processes (RLIMIT_NPROC above what our user already runs).
 *
 * The bot itself is made non-dumpable at start (kb_sandbox_protect_self),
 * so no process of the same user can read its memory or /proc/PID/environ.
 *
 * [sandbox] in config.ini turns it off (enabled = false: a warning on every
 * start of every command) or tunes the limits; `kernelbot config check` runs
 * kb_sandbox_probe.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

struct kb_config;
struct child_process;

struct kb_sandbox {
	bool enabled;
	char *bwrap;               /* resolved path of bwrap; NULL when disabled */
	bool seccomp;              /* apply the seccomp filter */
	uint64_t memory_bytes;     /* RLIMIT_AS, 0: none */
	uint64_t file_size_bytes;  /* RLIMIT_FSIZE, 0: none */
	uint64_t cpu_s;            /* RLIMIT_CPU, 0: none */
	uint64_t open_files;       /* RLIMIT_NOFILE, 0: unchanged */
	uint64_t processes;        /* processes beyond what our uid already runs, 0: no limit */
	struct strvec ro_paths;    /* [sandbox] ro_paths: more read-only paths */
};

/* What one sandboxed process may see besides the system view. */
struct kb_sandbox_view {
	struct strvec ro;          /* paths visible read-only at the same path (missing ones skipped) */
	const char *scratch;       /* the one writable directory, same path inside; required */
	bool gpu;                  /* bind its GPUs' /dev/nvidia* (and /sys read-only) */
};
#define KB_SANDBOX_VIEW_INIT { .ro = STRVEC_INIT }

void kb_sandbox_init(struct kb_sandbox *sb);

/*
 * From the config's [sandbox] section. Enabled: finds bwrap (error naming
 * the setting that turns the sandbox off when it is missing). Disabled:
 * nothing to find (the CLI warns on every start, cli_load_config).
 * Returns 0 or -1 (logged).
 */
int kb_sandbox_setup(struct kb_sandbox *sb, const struct kb_config *cfg);
void kb_sandbox_release(struct kb_sandbox *sb);

/*
 * Try the sandbox on this machine: run `true` inside it with the full
 * set of namespaces and the seccomp filter. 0 when it works; otherwise -1
 * with why (the cause and the exact setting that turns the sandbox off)
 * in *why. A disabled sandbox probes 0 with why "disabled".
 */
int kb_sandbox_probe(const struct kb_sandbox *sb, struct strbuf *why);

/*
 * Rewrite cp so that its program runs inside the sandbox with view: the
 * bwrap words are put in front of cp->args (argv[0] is resolved first,
 * against cp->env's PATH or ours), the environment is built from nothing
 * (see above), the seccomp filter is handed over on a descriptor the child
 * inherits, and the rlimits are set. cp->dir, when set, must lie inside the
 * view. A disabled sandbox leaves cp as it is (returns 0). Call it once,
 * after cp->args and cp->env are complete and before starting cp.
 * Returns 0 or -1 (logged).
 */
int kb_sandbox_wrap(const struct kb_sandbox *sb, const struct kb_sandbox_view *view,
		    struct child_process *cp);

void kb_sandbox_view_release(struct kb_sandbox_view *view);

/*
 * The device nodes under dev ("/dev") that a process whose
 * CUDA_VISIBLE_DEVICES is visible (NULL: unset) and CUDA_DEVICE_ORDER is
 * order (NULL: unset) needs, the GPUs found in proc's ("/proc") driver
 * listing (core/nvidia.h): an index is the index-th GPU in PCI bus order
 * (the wrapped process gets CUDA_DEVICE_ORDER=PCI_BUS_ID), GPU-<uuid> the
 * GPU with that UUID. Into nodes (replaced). 0: the nodes of those GPUs and
 * the control nodes (nvidiactl, nvidia-uvm, nvidia-uvm-tools,
 * nvidia-modeset, nvidia-caps) that exist. 1: every dev/nvidia*, because
 * visible is unset (why stays empty) or because the list cannot be mapped
 * for certain (why says why: no driver listing, a MIG instance or MIG
 * instances on a GPU, an unknown id, another device order, a GPU node
 * that cannot be opened, which a device cgroup hides from CUDA too).
 */
int kb_sandbox_gpu_nodes(const char *dev, const char *proc, const char *visible, const char *order,
			 struct strvec *nodes, struct strbuf *why);

/*
 * Make this process non-dumpable: no core files, and no process of the
 * same user can ptrace it or read its /proc/PID/{environ,mem,maps}.
 * Called first thing in main(). Returns 0 or -1 (logged).
 */
int kb_sandbox_protect_self(void);

#endif
