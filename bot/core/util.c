#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <time.h>

int error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(KB_LOG_ERROR, fmt, ap);
	va_end(ap);
	return -1;
}

int error_errno(const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	log_msg(KB_LOG_ERROR, "%s: %s", sb.buf, strerror(saved));
	strbuf_release(&sb);
	errno = saved;
	return -1;
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(KB_LOG_ERROR, fmt, ap);
	va_end(ap);
	exit(2);
}

void *xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (!p)
		die("out of memory allocating %zu bytes", size);
	return p;
}

void *xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);

	if (!p)
		die("out of memory allocating %zu x %zu bytes", nmemb, size);
	return p;
}

void *xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);

	if (!p)
		die("out of memory allocating %zu bytes", size);
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);

	if (!p)
		die("out of memory duplicating a string");
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);

	if (!p)
		die("out of memory duplicating a string");
	return p;
}

void xsnprintf(char *dst, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(dst, size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size)
		die("xsnprintf: output of '%s' truncated", fmt);
}

size_t kb_strlcpy(char *dst, const char *src, size_t size)
{
	size_t len = strlen(src);

	if (size) {
		size_t n = len < size - 1 ? len : size - 1;

		memcpy(dst, src, n);
		dst[n] = '\0';
	}
	return len;
}

size_t kb_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), prev[64], cur[64];

	if (la >= ARRAY_SIZE(prev) || lb >= ARRAY_SIZE(prev))
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;

			cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
		}
		memcpy(prev, cur, (lb + 1) * sizeof(*prev));
	}
	return prev[lb];
}

int64_t kb_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t kb_wall_s(void)
{
	return (int64_t)time(NULL);
}

int kb_parse_i64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

int kb_parse_double(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || isnan(v))
		return -1;
	*out = v;
	return 0;
}

int64_t kb_sat_add_i64(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

int64_t kb_sat_sub_i64(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_sub_overflow(a, b, &r))
		return b < 0 ? INT64_MAX : INT64_MIN;
	return r;
}

int64_t kb_sat_mul_i64(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_mul_overflow(a, b, &r))
		return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
	return r;
}

/* 2^63 is exact as a double; every double below it converts without overflow. */
int64_t kb_i64_from_double(double d)
{
	if (isnan(d))
		return 0;
	if (d >= 9223372036854775808.0)
		return INT64_MAX;
	if (d <= -9223372036854775808.0)
		return INT64_MIN;
	return (int64_t)d;
}

int kb_int_from_double(double d)
{
	if (isnan(d))
		return 0;
	if (d >= (double)INT_MAX)
		return INT_MAX;
	if (d <= (double)INT_MIN)
		return INT_MIN;
	return (int)d;
}

int kb_mkdir_p(const char *path, mode_t mode)
{
	char *copy = xstrdup(path);
	int rc = 0;

	for (char *p = copy + 1; ; p++) {
		if (*p == '/' || *p == '\0') {
			char saved = *p;

			*p = '\0';
			if (mkdir(copy, mode) && errno != EEXIST) {
				rc = error_errno("could not create directory '%s'", copy);
				break;
			}
			*p = saved;
			if (!saved)
				break;
		}
	}
	free(copy);
	if (!rc && !kb_is_dir(path))
		rc = error("'%s' exists and is not a directory", path);
	return rc;
}

int kb_rm_rf(const char *path)
{
	struct stat st;
	DIR *dir;
	struct dirent *de;
	int rc = 0;

	if (lstat(path, &st))
		return errno == ENOENT ? 0 : error_errno("could not stat '%s'", path);
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(path))
			return error_errno("could not remove '%s'", path);
		return 0;
	}
	dir = opendir(path);
	if (!dir)
		return error_errno("could not open directory '%s'", path);
	while ((de = readdir(dir))) {
		struct strbuf child = STRBUF_INIT;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		strbuf_addf(&child, "%s/%s", path, de->d_name);
		if (kb_rm_rf(child.buf))
			rc = -1;
		strbuf_release(&child);
	}
	closedir(dir);
	if (!rc && rmdir(path))
		rc = error_errno("could not remove directory '%s'", path);
	return rc;
}

int kb_write_file_atomic(const char *path, const void *data, size_t len)
{
	struct strbuf tmp = STRBUF_INIT;
	const char *p = data;
	int fd, rc = -1;

	strbuf_addf(&tmp, "%s.tmp.%ld", path, (long)getpid());
	fd = open(tmp.buf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		error_errno("could not create '%s'", tmp.buf);
		goto out;
	}
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			error_errno("could not write '%s'", tmp.buf);
			close(fd);
			unlink(tmp.buf);
			goto out;
		}
		p += n;
		len -= (size_t)n;
	}
	if (fsync(fd) || close(fd)) {
		error_errno("could not flush '%s'", tmp.buf);
		unlink(tmp.buf);
		goto out;
	}
	if (rename(tmp.buf, path)) {
		error_errno("could not rename '%s' to '%s'", tmp.buf, path);
		unlink(tmp.buf);
		goto out;
	}
	rc = 0;
out:
	strbuf_release(&tmp);
	return rc;
}

bool kb_is_file(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode);
}

bool kb_is_dir(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

int kb_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

bool kb_path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}
