#include "core/common.h"
#include "verifier/datadir.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"

#include <limits.h>
#include <sys/stat.h>

#define HARNESS_REL "verifier/harness/kb_harness.py"

int kb_exe_dir(struct strbuf *out)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	char *slash;

	if (n <= 0)
		return error_errno("could not read '/proc/self/exe'");
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (!slash)
		return error("unexpected executable path '%s'", buf);
	*slash = '\0';
	strbuf_reset(out);
	strbuf_addstr(out, *buf ? buf : "/");
	return 0;
}

static bool is_executable_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode) && !access(path, X_OK);
}

int kb_find_program(const char *name, struct strbuf *out)
{
	const char *path = getenv("PATH");
	const char *p;

	strbuf_reset(out);
	if (!name || !*name)
		return KB_ENOTFOUND;
	if (strchr(name, '/')) {
		if (!is_executable_file(name))
			return KB_ENOTFOUND;
		strbuf_addstr(out, name);
		return 0;
	}
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; ; ) {
		const char *end = strchrnul(p, ':');

		strbuf_reset(out);
		if (end == p)
			strbuf_addstr(out, ".");
		else
			strbuf_add(out, p, (size_t)(end - p));
		strbuf_addf(out, "/%s", name);
		if (is_executable_file(out->buf))
			return 0;
		if (!*end)
			break;
		p = end + 1;
	}
	strbuf_reset(out);
	return KB_ENOTFOUND;
}

/* A data dir candidate is good when it holds the harness script. */
static bool holds_harness(const char *dir)
{
	struct strbuf sb = STRBUF_INIT;
	bool ok;

	strbuf_addf(&sb, "%s/%s", dir, HARNESS_REL);
	ok = kb_is_file(sb.buf);
	strbuf_release(&sb);
	return ok;
}

static char *canonical(const char *path)
{
	char *r = realpath(path, NULL);

	return r ? r : xstrdup(path);
}

static int find_root(const struct kb_config *cfg, const char *exe_dir,
		     struct strbuf *tried, char **root)
{
	const char *env = getenv("KERNELBOT_DATA_DIR");
	struct strbuf sb = STRBUF_INIT;
	int rc = -1;

	/* an explicit setting is the answer or an error, never skipped */
	if (cfg && cfg->data_dir && *cfg->data_dir) {
		if (!holds_harness(cfg->data_dir)) {
			error("[harness] data_dir '%s' does not hold '%s'", cfg->data_dir, HARNESS_REL);
			goto out;
		}
		*root = canonical(cfg->data_dir);
		rc = 0;
		goto out;
	}
	if (env && *env) {
		if (!holds_harness(env)) {
			error("KERNELBOT_DATA_DIR '%s' does not hold '%s'", env, HARNESS_REL);
			goto out;
		}
		*root = canonical(env);
		rc = 0;
		goto out;
	}
	if (exe_dir) {
		static const char *const ups[] = { "..", "../..", "../../.." };

		for (size_t i = 0; i < ARRAY_SIZE(ups); i++) {
			strbuf_reset(&sb);
			strbuf_addf(&sb, "%s/%s", exe_dir, ups[i]);
			strbuf_addf(tried, "%s'%s'", tried->len ? ", " : "", sb.buf);
			if (holds_harness(sb.buf)) {
				*root = canonical(sb.buf);
				rc = 0;
				goto out;
			}
		}
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/../share/kernelbot", exe_dir);
		strbuf_addf(tried, ", '%s'", sb.buf);
		if (holds_harness(sb.buf)) {
			*root = canonical(sb.buf);
			rc = 0;
			goto out;
		}
	}
	error("kernelbot data dir not found (tried %s); set [harness] data_dir or KERNELBOT_DATA_DIR",
	      tried->len ? tried->buf : "nothing");
out:
	strbuf_release(&sb);
	return rc;
}

static bool dir_has(const char *dir, const char *rel)
{
	struct strbuf sb = STRBUF_INIT;
	bool ok;

	strbuf_addf(&sb, "%s/%s", dir, rel);
	ok = kb_is_file(sb.buf);
	strbuf_release(&sb);
	return ok;
}

int kb_datadir_find(const struct kb_config *cfg, struct kb_datadir *dd)
{
	struct strbuf exe = STRBUF_INIT, tried = STRBUF_INIT, sb = STRBUF_INIT;
	const char *dl_env = getenv("KERNELBOT_DLPACK_INCLUDE");
	bool have_exe;
	int rc = -1;

	memset(dd, 0, sizeof(*dd));
	have_exe = !kb_exe_dir(&exe);
	if (find_root(cfg, have_exe ? exe.buf : NULL, &tried, &dd->root))
		goto out;
	strbuf_addf(&sb, "%s/%s", dd->root, HARNESS_REL);
	dd->harness = strbuf_detach(&sb, NULL);

	/* a checkout keeps the header in verifier/include, an install in include */
	strbuf_addf(&sb, "%s/verifier/include", dd->root);
	if (!dir_has(sb.buf, "kernelbot_abi.h")) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/include", dd->root);
		if (!dir_has(sb.buf, "kernelbot_abi.h")) {
			error("'kernelbot_abi.h' not found in '%s/verifier/include' or '%s/include'",
			      dd->root, dd->root);
			goto out;
		}
	}
	dd->abi_include = strbuf_detach(&sb, NULL);
	strbuf_addf(&sb, "%s/kernelbot_abi.h", dd->abi_include);
	dd->abi_header = strbuf_detach(&sb, NULL);

	if (dl_env && *dl_env) {
		if (!dir_has(dl_env, "dlpack/dlpack.h")) {
			error("KERNELBOT_DLPACK_INCLUDE '%s' does not hold 'dlpack/dlpack.h'", dl_env);
			goto out;
		}
		dd->dlpack_include = canonical(dl_env);
	} else if (dir_has("/usr/include", "dlpack/dlpack.h") ||
		   dir_has("/usr/local/include", "dlpack/dlpack.h")) {
		/* the compilers search these anyway; -I on a system dir only reorders them */
		dd->dlpack_include = NULL;
	} else if (dir_has(dd->abi_include, "dlpack/dlpack.h")) {
		dd->dlpack_include = xstrdup(dd->abi_include);
	} else {
		strbuf_reset(&sb);
		if (have_exe)
			strbuf_addf(&sb, "%s/include", exe.buf);
		if (!have_exe || !dir_has(sb.buf, "dlpack/dlpack.h")) {
			error("'dlpack/dlpack.h' not found (install libdlpack-dev or set KERNELBOT_DLPACK_INCLUDE)");
			goto out;
		}
		dd->dlpack_include = canonical(sb.buf);
	}
	rc = 0;
out:
	strbuf_release(&exe);
	strbuf_release(&tried);
	strbuf_release(&sb);
	return rc;
}

void kb_datadir_include_flags(const struct kb_datadir *dd, struct strvec *flags)
{
	strvec_pushf(flags, "-I%s", dd->abi_include);
	if (dd->dlpack_include && strcmp(dd->dlpack_include, dd->abi_include))
		strvec_pushf(flags, "-I%s", dd->dlpack_include);
}

void kb_datadir_release(struct kb_datadir *dd)
{
	FREE_AND_NULL(dd->root);
	FREE_AND_NULL(dd->harness);
	FREE_AND_NULL(dd->abi_include);
	FREE_AND_NULL(dd->abi_header);
	FREE_AND_NULL(dd->dlpack_include);
}
