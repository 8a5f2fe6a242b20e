#include "core/common.h"
#include "verifier/sandbox.h"
#include "core/config.h"
#include "core/log.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "verifier/datadir.h"

/*
 * bwrap's command line, the seccomp program (libseccomp, exported as BPF
 * onto a memfd that bwrap reads from an inherited descriptor) and the
 * rlimits: see sandbox.h for what the sandbox holds and why.
 */
#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>

#define SANDBOX_UID 65534
#define SECCOMP_FD 9            /* the descriptor bwrap reads the filter from */
#define TMPFS_BYTES "67108864" /* /tmp inside: 64 MiB of memory at most */
#define SANDBOX_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Top-level directories that are symlinks into /usr on merged-/usr systems. */
static const char *const system_roots[] = { "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32" };
/* What the dynamic loader and C library read from /etc. */
static const char *const etc_files[] = {
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/localtime", "/etc/nsswitch.conf",
};
/* Variables of ours a sandboxed program may still see (secret-looking
 * names and values are dropped all the same, by the subprocess runner). */
static const char *const env_pass_prefixes[] = {
	"CUDA_", "NVIDIA_", "OMP_", "MKL_", "OPENBLAS_", "KB_", "TORCH_", "TORCHINDUCTOR_",
	"PYTORCH_", "TRITON_", "LD_LIBRARY_PATH=",
};

void kb_sandbox_init(struct kb_sandbox *sb)
{
	memset(sb, 0, sizeof(*sb));
	strvec_init(&sb->ro_paths);
}

void kb_sandbox_release(struct kb_sandbox *sb)
{
	free(sb->bwrap);
	strvec_clear(&sb->ro_paths);
	memset(sb, 0, sizeof(*sb));
}

void kb_sandbox_view_release(struct kb_sandbox_view *view)
{
	strvec_clear(&view->ro);
}

static void split_paths(struct strvec *out, const char *list)
{
	const char *p = list ? list : "";

	while (*p) {
		size_t n = strcspn(p, ",");
		char *item = xstrndup(p, n);
		char *s = item, *e;

		while (*s == ' ' || *s == '\t')
			s++;
		e = s + strlen(s);
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		if (*s)
			strvec_push(out, s);
		free(item);
		p += n;
		if (*p == ',')
			p++;
	}
}

int kb_sandbox_setup(struct kb_sandbox *sb, const struct kb_config *cfg)
{
	struct strbuf path = STRBUF_INIT;
	int rc = -1;

	kb_sandbox_release(sb);
	kb_sandbox_init(sb);
	sb->enabled = cfg->sandbox_enabled;
	sb->seccomp = cfg->sandbox_seccomp;
	sb->memory_bytes = (uint64_t)cfg->sandbox_memory_mb << 20;
	sb->file_size_bytes = (uint64_t)cfg->sandbox_file_size_mb << 20;
	sb->cpu_s = (uint64_t)cfg->sandbox_cpu_s;
	sb->open_files = (uint64_t)cfg->sandbox_open_files;
	sb->processes = (uint64_t)cfg->sandbox_processes;
	split_paths(&sb->ro_paths, cfg->sandbox_ro_paths);
	if (!sb->enabled) {
		/* the CLI warns when it loads such a config (cli_load_config) */
		log_debug("sandbox disabled by [sandbox] enabled = false");
		rc = 0;
		goto out;
	}
	if (kb_find_program(cfg->sandbox_bwrap, &path)) {
		error("the sandbox needs bubblewrap, but '%s' was not found ([sandbox] bwrap); install it "
		      "(apt-get install bubblewrap) or turn the sandbox off with [sandbox] enabled = false",
		      cfg->sandbox_bwrap);
		goto out;
	}
	sb->bwrap = realpath(path.buf, NULL);
	if (!sb->bwrap)
		sb->bwrap = strbuf_detach(&path, NULL);
	rc = 0;
out:
	strbuf_release(&path);
	return rc;
}

/* --- seccomp --- */

/* Syscalls that fail with EPERM inside: debugging and reading other
 * processes, mounts and namespaces, kernel modules and keyrings, bpf and
 * perf, io_uring (its operations bypass this filter), clocks and the
 * like. */
static const char *const denied_syscalls[] = {
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
	"name_to_handle_at", "acct", "swapon", "swapoff", "reboot", "settimeofday",
	"clock_settime", "clock_adjtime", "adjtimex", "syslog", "quotactl", "lookup_dcookie",
	"iopl", "ioperm", "vhangup", "uselib", "fanotify_init",
};

static int seccomp_rules(scmp_filter_ctx ctx)
{
	static const int denied_families[] = { AF_INET, AF_INET6, AF_PACKET, AF_NETLINK };

	for (size_t i = 0; i < ARRAY_SIZE(denied_syscalls); i++) {
		int nr = seccomp_syscall_resolve_name(denied_syscalls[i]);

		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0))
			return error("could not add the seccomp rule for '%s'", denied_syscalls[i]);
	}
	/* clone3 passes its flags in memory the filter cannot read: make the
	 * C library fall back to clone, whose flags it can */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
			     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
			     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI)))
		return error("could not add the seccomp rules for clone and ioctl");
	for (size_t i = 0; i < ARRAY_SIZE(denied_families); i++)
		if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
				     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)denied_families[i])))
			return error("could not add the seccomp rule for socket family %d",
				     denied_families[i]);
	return 0;
}

/* The filter as a BPF program on a fresh memfd, positioned at its start. */
static int seccomp_program_fd(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int fd = -1;

	if (!ctx)
		return error("could not create a seccomp filter");
	if (seccomp_rules(ctx))
		goto fail;
	fd = memfd_create("kb-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		error_errno("could not create a memfd for the seccomp filter");
		goto fail;
	}
	if (seccomp_export_bpf(ctx, fd) || lseek(fd, 0, SEEK_SET) != 0) {
		error("could not write the seccomp filter");
		goto fail;
	}
	seccomp_release(ctx);
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return -1;
}

/* --- limits --- */

/* Tasks (threads count) whose real uid is ours: RLIMIT_NPROC is checked
 * against this count, so the limit is set that far above it. */
static uint64_t tasks_of_our_uid(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	uid_t me = getuid();
	uint64_t n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[64], buf[4096];
		const char *u, *t;
		ssize_t len;
		int fd;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		xsnprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = '\0';
		u = strstr(buf, "\nUid:");
		t = strstr(buf, "\nThreads:");
		if (u && (uid_t)strtoul(u + 5, NULL, 10) == me)
			n += t ? strtoull(t + 9, NULL, 10) : 1;
	}
	closedir(d);
	return n;
}

/* --- the command line --- */

static void add_ro(struct strvec *a, const char *path)
{
	struct stat st;

	if (lstat(path, &st))
		return;
	if (S_ISLNK(st.st_mode) && path[0] == '/' && !strchr(path + 1, '/')) {
		/* a top-level link such as /lib -> usr/lib: the same link inside */
		char target[4096];
		ssize_t n = readlink(path, target, sizeof(target) - 1);

		if (n > 0) {
			target[n] = '\0';
			strvec_pushl(a, "--symlink", target, path, NULL);
			return;
		}
	}
	strvec_pushl(a, "--ro-bind", path, path, NULL);
}

/*
 * The prefix a program outside /usr lives in (a pyenv or conda python, a
 * CUDA toolkit in /opt): <prefix>/bin/prog gives <prefix>. Never a home
 * directory or a top-level directory as such: those hold other things.
 * path is absolute; not resolved, it is the path the program is run by.
 */
static void add_prefix_of(struct strvec *a, const char *path)
{
	char *dir = xstrdup(path), *slash;
	const char *home = getenv("HOME");

	if (kb_path_under(dir, "/usr"))
		goto out;
	slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0'; /* <prefix>/bin */
	slash = strrchr(dir, '/');
	if (slash && slash != dir && !strcmp(slash, "/bin"))
		*slash = '\0'; /* <prefix> */
	if (!strchr(dir + 1, '/') || (home && !strcmp(dir, home)) || !strcmp(dir, "/"))
		goto out;
	strvec_pushl(a, "--ro-bind", dir, dir, NULL);
out:
	free(dir);
}

/*
 * Both the prefix of the path the program is run by and that of its real
 * file: a virtual environment's bin/python3 is a symlink into /usr (or a
 * pyenv), yet the environment's own prefix holds its packages, and bwrap
 * executes the path as given.
 */
static void add_program_prefix(struct strvec *a, const char *resolved)
{
	char *real = realpath(resolved, NULL);

	if (resolved[0] == '/')
		add_prefix_of(a, resolved);
	if (real && (resolved[0] != '/' || strcmp(real, resolved)))
		add_prefix_of(a, real);
	free(real);
}

/* The value cp's program will see of name: cp->env's last word on it, else ours. */
static const char *child_env(const struct child_process *cp, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = cp->env.nr; i-- > 0;) {
		const char *e = cp->env.v[i];

		if (!strncmp(e, name, n) && (e[n] == '=' || !e[n]))
			return e[n] ? e + n + 1 : NULL;
	}
	return getenv(name);
}

/*
 * The /dev/nvidia* nodes of the GPUs cp may use (kb_sandbox_gpu_nodes).
 * Numbered by PCI bus id inside, as mapped; every node when that cannot be
 * done, said once per process.
 */
static void gpu_nodes(struct child_process *cp, struct strvec *nodes)
{
	static bool said;
	struct strbuf why = STRBUF_INIT;
	const char *order = child_env(cp, "CUDA_DEVICE_ORDER");

	if (!kb_sandbox_gpu_nodes("/dev", "/proc", child_env(cp, "CUDA_VISIBLE_DEVICES"), order, nodes,
				  &why)) {
		if (!order)
			strvec_push(&cp->env, "CUDA_DEVICE_ORDER=PCI_BUS_ID");
	} else if (why.len && !said) {
		said = true;
		log_info("the sandbox binds every /dev/nvidia*, not only its GPUs': %s", why.buf);
	}
	strbuf_release(&why);
}

static void add_gpu(struct strvec *a, const struct strvec *nodes)
{
	for (size_t i = 0; i < nodes->nr; i++)
		strvec_pushl(a, "--dev-bind", nodes->v[i], nodes->v[i], NULL);
	if (kb_is_dir("/dev/dri"))
		strvec_pushl(a, "--dev-bind", "/dev/dri", "/dev/dri", NULL);
	/* the driver reads PCI topology and its own settings from /sys */
	strvec_pushl(a, "--ro-bind", "/sys", "/sys", NULL);
}

static bool env_passes(const char *e)
{
	for (size_t i = 0; i < ARRAY_SIZE(env_pass_prefixes); i++)
		if (!strncmp(e, env_pass_prefixes[i], strlen(env_pass_prefixes[i])))
			return true;
	return false;
}

/* The child's environment from nothing: ours only where env_passes. */
static void sandbox_env(const struct kb_sandbox_view *view, struct child_process *cp,
			const char *prog_dir)
{
	struct strvec env = STRVEC_INIT;

	for (char **e = environ; e && *e; e++)
		if (env_passes(*e) && !env_name_is_secret(*e))
			strvec_push(&env, *e);
	strvec_pushf(&env, "PATH=%s%s%s", prog_dir ? prog_dir : "", prog_dir ? ":" : "",
		     SANDBOX_PATH);
	strvec_pushf(&env, "HOME=%s", view->scratch);
	strvec_pushf(&env, "TMPDIR=%s", view->scratch);
	strvec_pushl(&env, "USER=kernelbot", "LOGNAME=kernelbot", "LANG=C.UTF-8", NULL);
	/* the caller's entries last: they override */
	for (size_t i = 0; i < cp->env.nr; i++)
		strvec_push(&env, cp->env.v[i]);
	strvec_clear(&cp->env);
	cp->env = env;
	cp->clear_env = true;
}

static void set_limits(const struct kb_sandbox *sb, struct child_process *cp, bool gpu)
{
	/* CUDA reserves address space far beyond the memory it uses */
	if (sb->memory_bytes && !gpu && (!cp->rlimit_as_bytes || cp->rlimit_as_bytes > sb->memory_bytes))
		cp->rlimit_as_bytes = sb->memory_bytes;
	if (sb->file_size_bytes && !cp->rlimit_fsize_bytes)
		cp->rlimit_fsize_bytes = sb->file_size_bytes;
	if (sb->cpu_s && !cp->rlimit_cpu_s)
		cp->rlimit_cpu_s = sb->cpu_s;
	if (sb->open_files && !cp->rlimit_nofile)
		cp->rlimit_nofile = sb->open_files;
	if (sb->processes && !cp->rlimit_nproc)
		cp->rlimit_nproc = tasks_of_our_uid() + sb->processes;
}

static void bwrap_words(const struct kb_sandbox *sb, const struct kb_sandbox_view *view,
			const struct child_process *cp, const char *prog, const struct strvec *gpus,
			struct strvec *a)
{
	strvec_pushl(a, sb->bwrap, "--unshare-all", "--unshare-user", "--die-with-parent",
		     "--new-session", "--cap-drop", "ALL", "--hostname", "kernelbot-sandbox", NULL);
	strvec_push(a, "--uid");
	strvec_pushf(a, "%d", SANDBOX_UID);
	strvec_push(a, "--gid");
	strvec_pushf(a, "%d", SANDBOX_UID);
	strvec_pushl(a, "--ro-bind", "/usr", "/usr", NULL);
	for (size_t i = 0; i < ARRAY_SIZE(system_roots); i++)
		add_ro(a, system_roots[i]);
	for (size_t i = 0; i < ARRAY_SIZE(etc_files); i++)
		add_ro(a, etc_files[i]);
	strvec_pushl(a, "--proc", "/proc", "--dev", "/dev", NULL);
	/* a small private /tmp first (TMPDIR points to scratch), so that the
	 * binds below may lie under /tmp */
	strvec_pushl(a, "--size", TMPFS_BYTES, "--tmpfs", "/tmp", NULL);
	add_program_prefix(a, prog);
	for (size_t i = 0; i < sb->ro_paths.nr; i++)
		add_ro(a, sb->ro_paths.v[i]);
	for (size_t i = 0; i < view->ro.nr; i++)
		add_ro(a, view->ro.v[i]);
	if (view->gpu)
		add_gpu(a, gpus);
	/* the one writable place: on disk, each file bounded by RLIMIT_FSIZE */
	strvec_pushl(a, "--bind", view->scratch, view->scratch, NULL);
	if (cp->dir)
		strvec_pushl(a, "--chdir", cp->dir, NULL);
	else
		strvec_pushl(a, "--chdir", view->scratch, NULL);
	if (sb->seccomp) {
		strvec_push(a, "--seccomp");
		strvec_pushf(a, "%d", SECCOMP_FD);
	}
	strvec_push(a, "--");
}

int kb_sandbox_wrap(const struct kb_sandbox *sb, const struct kb_sandbox_view *view,
		    struct child_process *cp)
{
	struct strvec args = STRVEC_INIT, gpus = STRVEC_INIT;
	struct strbuf prog = STRBUF_INIT;
	char *prog_dir = NULL, *slash;
	int rc = -1;

	if (!sb || !sb->enabled)
		return 0;
	if (!view->scratch || !*view->scratch)
		return error("a sandboxed program needs a scratch directory");
	if (!cp->args.nr)
		return error("no program to run in the sandbox");
	if (cp->dir && !kb_path_under(cp->dir, view->scratch)) {
		bool seen = false;

		for (size_t i = 0; i < view->ro.nr && !seen; i++)
			seen = kb_path_under(cp->dir, view->ro.v[i]);
		if (!seen)
			return error("the working directory '%s' is not inside the sandbox's view", cp->dir);
	}
	if (kb_find_program(cp->args.v[0], &prog)) {
		error("could not find '%s' to run in the sandbox", cp->args.v[0]);
		goto out;
	}
	if (prog.buf[0] != '/') {
		char *abs = realpath(prog.buf, NULL);

		if (!abs) {
			error_errno("could not resolve '%s'", prog.buf);
			goto out;
		}
		strbuf_reset(&prog);
		strbuf_addstr(&prog, abs);
		free(abs);
	}
	if (sb->seccomp) {
		if (cp->extra_fd >= 0)
			goto busy;
		cp->extra_fd = seccomp_program_fd();
		if (cp->extra_fd < 0)
			goto out;
		cp->extra_fd_child = SECCOMP_FD;
	}
	if (view->gpu)
		gpu_nodes(cp, &gpus);
	bwrap_words(sb, view, cp, prog.buf, &gpus, &args);
	strvec_push(&args, prog.buf);
	for (size_t i = 1; i < cp->args.nr; i++)
		strvec_push(&args, cp->args.v[i]);
	strvec_clear(&cp->args);
	cp->args = args;
	prog_dir = xstrdup(prog.buf);
	slash = strrchr(prog_dir, '/');
	if (slash)
		*slash = '\0';
	sandbox_env(view, cp, prog_dir);
	set_limits(sb, cp, view->gpu);
	rc = 0;
	goto out;
busy:
	error("the sandbox needs the extra descriptor of '%s', which is already in use", cp->args.v[0]);
out:
	free(prog_dir);
	strvec_clear(&gpus);
	strbuf_release(&prog);
	return rc;
}

int kb_sandbox_probe(const struct kb_sandbox *sb, struct strbuf *why)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct kb_sandbox_view view = KB_SANDBOX_VIEW_INIT;
	char dir[] = "/tmp/kb-sandbox-probe-XXXXXX";
	int rc = -1;

	strbuf_reset(why);
	if (!sb->enabled) {
		strbuf_addstr(why, "disabled");
		return 0;
	}
	if (!mkdtemp(dir)) {
		strbuf_addf(why, "could not create a scratch directory: %s", strerror(errno));
		return -1;
	}
	view.scratch = dir;
	strvec_pushl(&cp.args, "sh", "-c", "test \"$(id -u)\" = 65534 && test -w \"$TMPDIR\"", NULL);
	cp.timeout_ms = 30000;
	cp.err_cap = cp.out_cap = 4096;
	if (kb_sandbox_wrap(sb, &view, &cp)) {
		strbuf_addstr(why, "could not prepare the sandbox (see the log above)");
		goto out;
	}
	if (run_command(&cp)) {
		strbuf_addf(why, "could not run '%s'", sb->bwrap);
		goto out;
	}
	if (cp.exit_code) {
		char *err = xstrndup(cp.err.buf, strcspn(cp.err.buf, "\n"));

		strbuf_addf(why, "bubblewrap failed (exit code %d%s%s): user namespaces may be off on "
			    "this machine (sysctl kernel.unprivileged_userns_clone, "
			    "user.max_user_namespaces, or an AppArmor userns restriction); fix that, or "
			    "turn the sandbox off with [sandbox] enabled = false",
			    cp.exit_code, *err ? ": " : "", err);
		free(err);
		goto out;
	}
	rc = 0;
out:
	child_process_release(&cp);
	kb_rm_rf(dir);
	return rc;
}

int kb_sandbox_protect_self(void)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
		return error_errno("could not make this process non-dumpable");
	return 0;
}
