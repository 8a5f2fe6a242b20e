#include "core/common.h"
#include "core/json.h"
#include "verifier/harness_log.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/subprocess.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

/* Prune on a process's first write and every PRUNE_EVERY writes after. */
#define PRUNE_EVERY 8

static unsigned writes;

/*
 * The part of a capture that holds whole lines: a capture cut at its start
 * (a worker keeps the last bytes) or at its end loses the partial line
 * there, so that no fragment of a secret too short to recognise is kept.
 * A capture without any newline is kept whole.
 */
static void whole_lines(const struct strbuf *cap, bool cut_start, bool cut_end,
			const char **p, size_t *len)
{
	const char *s = cap->buf, *e = cap->buf + cap->len, *nl;

	if (cut_start && (nl = memchr(s, '\n', cap->len)) && nl + 1 < e)
		s = nl + 1;
	if (cut_end && (nl = memrchr(s, '\n', (size_t)(e - s))) && nl > s)
		e = nl + 1;
	*p = s;
	*len = (size_t)(e - s);
}

/*
 * One stream as kept: redacted whole (a cut made first could leave part of
 * a secret that no longer matches), then its last KB_HARNESS_LOG_KEEP
 * bytes, starting at a line where one starts.
 */
static void keep_stream(const struct strbuf *cap, bool cut_start, bool cut_end, struct strbuf *out)
{
	struct strbuf sb = STRBUF_INIT;
	const char *p, *nl;
	size_t len, start = 0;

	whole_lines(cap, cut_start, cut_end, &p, &len);
	strbuf_add(&sb, p, len);
	kb_redact(&sb, 0);
	if (sb.len > KB_HARNESS_LOG_KEEP) {
		start = sb.len - KB_HARNESS_LOG_KEEP;
		nl = memchr(sb.buf + start, '\n', sb.len - start);
		if (nl && (size_t)(nl + 1 - sb.buf) < sb.len)
			start = (size_t)(nl + 1 - sb.buf);
		while (start < sb.len && ((unsigned char)sb.buf[start] & 0xC0) == 0x80)
			start++;
		strbuf_addf(out, "[... %zu earlier bytes not kept]\n", start);
	}
	strbuf_add(out, sb.buf + start, sb.len - start);
	if (out->len && out->buf[out->len - 1] != '\n')
		strbuf_addch(out, '\n');
	strbuf_release(&sb);
}

/* The checks of ev's reasons, comma-separated. */
static void add_checks(struct strbuf *sb, const cJSON *ev)
{
	const cJSON *r;
	size_t n = 0;

	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(ev, "reasons")) {
		const char *check = kb_json_str(r, "check");

		strbuf_addstr(sb, n++ ? ", " : " (");
		strbuf_addstr(sb, check ? check : "?");
	}
	if (n)
		strbuf_addch(sb, ')');
}

/* What was evaluated and how it ended. */
static void add_header(struct strbuf *sb, const cJSON *request, const cJSON *ev,
		       const struct child_process *cp)
{
	const cJSON *kernel = cJSON_GetObjectItemCaseSensitive(request, "kernel");
	const char *src = kb_json_str(kernel, "source") ? kb_json_str(kernel, "source") : kb_json_str(kernel, "library");
	char stamp[32];
	struct tm tm;
	time_t now = time(NULL);

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	strbuf_addstr(sb, "# kernelbot harness output (redacted; for the runner's operator, never published)\n");
	strbuf_addf(sb, "time: %s\n", stamp);
	if (kb_json_str(request, "mode"))
		strbuf_addf(sb, "mode: %s\n", kb_json_str(request, "mode"));
	if (kb_json_str(request, "operator"))
		strbuf_addf(sb, "operator: %s\n", kb_json_str(request, "operator"));
	if (src)
		strbuf_addf(sb, "kernel: %s\n", src);
	if (ev) {
		strbuf_addf(sb, "verdict: %s", kb_json_str(ev, "verdict") ? kb_json_str(ev, "verdict") : "?");
		add_checks(sb, ev);
		strbuf_addch(sb, '\n');
	}
	if (cp->pid)
		strbuf_addf(sb, "process: worker %d, still running\n", (int)cp->pid);
	else if (cp->timed_out)
		strbuf_addstr(sb, "process: killed at the time limit\n");
	else
		strbuf_addf(sb, "process: exit code %d\n", cp->exit_code);
}

static void add_stream(struct strbuf *sb, const char *name, const struct strbuf *cap, bool truncated,
		       bool tail)
{
	if (!cap->len)
		return;
	strbuf_addf(sb, "--- %s: %zu bytes captured%s ---\n", name, cap->len,
		    !truncated ? "" : tail ? ", earlier ones dropped" : ", later ones dropped");
	keep_stream(cap, truncated && tail, truncated && !tail, sb);
}

/* A new 0600 file <dir>/<time>-XXXXXX.log holding text; its path in path. */
static int write_new(const char *dir, const struct strbuf *text, struct strbuf *path)
{
	char stamp[32];
	struct tm tm;
	time_t now = time(NULL);
	int fd, rc = -1;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	strbuf_reset(path);
	strbuf_addf(path, "%s/%s-XXXXXX.log", dir, stamp);
	fd = mkostemps(path->buf, 4, O_CLOEXEC);
	if (fd < 0) {
		log_warn("could not create a harness log in '%s': %s", dir, strerror(errno));
		goto out;
	}
	if (kb_write_all(fd, text->buf, text->len)) {
		log_warn("could not write the harness log '%s': %s", path->buf, strerror(errno));
		close(fd);
		unlink(path->buf);
		goto out;
	}
	if (close(fd)) {
		log_warn("could not write the harness log '%s': %s", path->buf, strerror(errno));
		unlink(path->buf);
		goto out;
	}
	rc = 0;
out:
	if (rc)
		strbuf_reset(path);
	return rc;
}

/* dir exists, is ours alone (0700), and is not a link someone planted. */
static int ensure_dir(const char *dir)
{
	struct stat st;

	if (kb_mkdir_p(dir, 0700) || lstat(dir, &st) || !S_ISDIR(st.st_mode)) {
		log_warn("could not create the harness log folder '%s'", dir);
		return -1;
	}
	if ((st.st_mode & 07777) != 0700 && chmod(dir, 0700)) {
		log_warn("could not make the harness log folder '%s' private: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

static void set_pointer(cJSON *ev, const char *path)
{
	if (cJSON_GetObjectItemCaseSensitive(ev, "operator_log"))
		cJSON_ReplaceItemInObjectCaseSensitive(ev, "operator_log", cJSON_CreateString(path));
	else
		cJSON_AddStringToObject(ev, "operator_log", path);
}

int kb_harness_log_keep(const char *dir, const cJSON *request, cJSON *ev,
			const struct child_process *cp, struct strbuf *path)
{
	struct strbuf text = STRBUF_INIT, file = STRBUF_INIT;
	int rc = 0;

	if (path)
		strbuf_reset(path);
	if (!dir || !*dir || (!cp->out.len && !cp->err.len))
		goto out;
	rc = -1;
	if (ensure_dir(dir))
		goto out;
	add_header(&text, request, ev, cp);
	/* the header holds paths and reasons' checks: redacted like the rest */
	kb_redact(&text, 0);
	add_stream(&text, "stdout", &cp->out, cp->out_truncated, cp->keep_tail);
	add_stream(&text, "stderr", &cp->err, cp->err_truncated, cp->keep_tail);
	if (write_new(dir, &text, &file))
		goto out;
	if (ev)
		set_pointer(ev, file.buf);
	if (path)
		strbuf_addstr(path, file.buf);
	if (writes++ % PRUNE_EVERY == 0)
		kb_harness_log_prune(dir, KB_HARNESS_LOG_DIR_MAX, KB_HARNESS_LOG_FILES_MAX);
	rc = 0;
out:
	strbuf_release(&text);
	strbuf_release(&file);
	return rc;
}

struct log_file {
	char *name;
	uint64_t size;
};

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct log_file *)a)->name, ((const struct log_file *)b)->name);
}

static bool is_log_name(const char *name)
{
	size_t n = strlen(name);

	return name[0] != '.' && n > 4 && !strcmp(name + n - 4, ".log");
}

/* The *.log regular files of d with their sizes, in *files (the caller frees them). */
static size_t list_logs(DIR *d, struct log_file **files, uint64_t *total)
{
	struct dirent *de;
	struct stat st;
	size_t n = 0, alloc = 0;

	*files = NULL;
	*total = 0;
	while ((de = readdir(d))) {
		if (!is_log_name(de->d_name) ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		if (n == alloc) {
			alloc = alloc ? 2 * alloc : 64;
			*files = xrealloc(*files, alloc * sizeof(**files));
		}
		(*files)[n].name = xstrdup(de->d_name);
		(*files)[n].size = (uint64_t)st.st_size;
		*total += (uint64_t)st.st_size;
		n++;
	}
	return n;
}

int kb_harness_log_prune(const char *dir, uint64_t max_bytes, size_t max_files)
{
	DIR *d = opendir(dir);
	struct log_file *files = NULL;
	uint64_t total;
	size_t n, left, i;

	if (!d) {
		log_warn("could not read the harness log folder '%s': %s", dir, strerror(errno));
		return -1;
	}
	n = list_logs(d, &files, &total);
	/* names start with the UTC time they were written: oldest first */
	if (n)
		qsort(files, n, sizeof(*files), by_name);
	left = n;
	for (i = 0; i < n && (total > max_bytes || left > max_files); i++) {
		if (unlinkat(dirfd(d), files[i].name, 0) && errno != ENOENT)
			log_warn("could not remove the old harness log '%s/%s': %s", dir, files[i].name,
				 strerror(errno));
		total -= files[i].size;
		left--;
	}
	for (i = 0; i < n; i++)
		free(files[i].name);
	free(files);
	closedir(d);
	return 0;
}
