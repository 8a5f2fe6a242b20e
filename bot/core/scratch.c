#include "core/common.h"
#include "core/scratch.h"
#include "core/log.h"
#include "core/util.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

int kb_scratch_make(const char *root, const char *prefix, struct strbuf *out)
{
	strbuf_reset(out);
	if (kb_mkdir_p(root, 0700))
		return -1;
	strbuf_addf(out, "%s/%s-%ld-XXXXXX", root, prefix, (long)getpid());
	if (!mkdtemp(out->buf)) {
		error_errno("could not create a directory in '%s'", root);
		strbuf_reset(out);
		return -1;
	}
	return 0;
}

/* The owner's pid in "<prefix>-<pid>-XXXXXX", or 0 when name is not one of ours. */
static pid_t owner_of(const char *name, const char *prefix)
{
	size_t n = strlen(prefix);
	const char *p = name + n + 1;
	long pid = 0;

	if (strncmp(name, prefix, n) || name[n] != '-' || *p < '1' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		pid = pid * 10 + (*p - '0');
		if (pid > (1L << 30))
			return 0;
	}
	return *p == '-' && p[1] ? (pid_t)pid : 0;
}

static bool running(pid_t pid)
{
	return pid == getpid() || !kill(pid, 0) || errno != ESRCH;
}

int kb_scratch_sweep(const char *root, const char *prefix)
{
	struct strbuf path = STRBUF_INIT;
	struct dirent *de;
	int removed = 0;
	DIR *d = opendir(root);

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		pid_t pid = owner_of(de->d_name, prefix);
		struct stat st;

		if (!pid || running(pid))
			continue;
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/%s", root, de->d_name);
		if (lstat(path.buf, &st) || !S_ISDIR(st.st_mode))
			continue;
		if (kb_rm_rf(path.buf)) {
			log_warn("could not remove '%s', left by process %ld", path.buf, (long)pid);
			continue;
		}
		log_debug("removed '%s', left by process %ld", path.buf, (long)pid);
		removed++;
	}
	closedir(d);
	if (removed)
		log_info("removed %d %s director%s in '%s' left by processes that are gone", removed,
			 prefix, removed == 1 ? "y" : "ies", root);
	strbuf_release(&path);
	return removed;
}
