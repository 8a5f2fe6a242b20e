#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <fcntl.h>

/* Shared empty string so an unallocated strbuf still has a valid buf. */
char strbuf_slopbuf[1];

void strbuf_init(struct strbuf *sb, size_t hint)
{
	sb->alloc = sb->len = sb->cap = 0;
	sb->buf = strbuf_slopbuf;
	if (hint)
		strbuf_grow(sb, hint);
}

void strbuf_init_capped(struct strbuf *sb, size_t cap)
{
	strbuf_init(sb, 0);
	sb->cap = cap;
}

void strbuf_release(struct strbuf *sb)
{
	if (sb->alloc)
		free(sb->buf);
	sb->alloc = sb->len = 0;
	sb->buf = strbuf_slopbuf;
}

char *strbuf_detach(struct strbuf *sb, size_t *len_out)
{
	char *res;

	if (!sb->alloc)
		strbuf_grow(sb, 0);
	if (!sb->alloc) /* a cap of 0 bytes still yields an allocated "" */
		sb->buf = xcalloc(1, 1);
	res = sb->buf;
	if (len_out)
		*len_out = sb->len;
	sb->alloc = sb->len = 0;
	sb->buf = strbuf_slopbuf;
	return res;
}

int strbuf_grow(struct strbuf *sb, size_t extra)
{
	size_t need;

	if (extra > SIZE_MAX - sb->len - 1)
		die("strbuf: size overflow");
	need = sb->len + extra + 1;
	if (sb->cap && sb->len + extra > sb->cap)
		return KB_ETOOBIG;
	if (need <= sb->alloc)
		return 0;
	{
		size_t nalloc = sb->alloc ? sb->alloc : 64;
		bool fresh = !sb->alloc;

		while (nalloc < need)
			nalloc = nalloc < SIZE_MAX / 2 ? nalloc * 2 : need;
		sb->buf = xrealloc(fresh ? NULL : sb->buf, nalloc);
		if (fresh)
			sb->buf[0] = '\0';
		sb->alloc = nalloc;
	}
	return 0;
}

int strbuf_add(struct strbuf *sb, const void *data, size_t len)
{
	int rc = strbuf_grow(sb, len);

	if (rc)
		return rc;
	if (len)
		memcpy(sb->buf + sb->len, data, len);
	sb->len += len;
	if (sb->alloc)
		sb->buf[sb->len] = '\0';
	return 0;
}

int strbuf_addstr(struct strbuf *sb, const char *s)
{
	return strbuf_add(sb, s, strlen(s));
}

int strbuf_addch(struct strbuf *sb, int c)
{
	char ch = (char)c;

	return strbuf_add(sb, &ch, 1);
}

int strbuf_vaddf(struct strbuf *sb, const char *fmt, va_list ap)
{
	va_list cp;
	int n;
	int rc;

	va_copy(cp, ap);
	n = vsnprintf(NULL, 0, fmt, cp);
	va_end(cp);
	if (n < 0)
		return error("strbuf: bad format '%s'", fmt);
	rc = strbuf_grow(sb, (size_t)n);
	if (rc)
		return rc;
	vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
	sb->len += (size_t)n;
	return 0;
}

int strbuf_addf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = strbuf_vaddf(sb, fmt, ap);
	va_end(ap);
	return rc;
}

int strbuf_add_json_escaped(struct strbuf *sb, const char *s)
{
	int rc = 0;

	for (; *s && !rc; s++) {
		unsigned char c = (unsigned char)*s;

		switch (c) {
		case '"': rc = strbuf_addstr(sb, "\\\""); break;
		case '\\': rc = strbuf_addstr(sb, "\\\\"); break;
		case '\n': rc = strbuf_addstr(sb, "\\n"); break;
		case '\r': rc = strbuf_addstr(sb, "\\r"); break;
		case '\t': rc = strbuf_addstr(sb, "\\t"); break;
		default:
			if (c < 0x20)
				rc = strbuf_addf(sb, "\\u%04x", c);
			else
				rc = strbuf_addch(sb, c);
		}
	}
	return rc;
}

void strbuf_reset(struct strbuf *sb)
{
	strbuf_setlen(sb, 0);
}

void strbuf_setlen(struct strbuf *sb, size_t len)
{
	if (len > sb->len)
		die("strbuf_setlen: %zu beyond length %zu", len, sb->len);
	sb->len = len;
	if (sb->alloc)
		sb->buf[len] = '\0';
}

void strbuf_trim(struct strbuf *sb)
{
	size_t start = 0;

	while (sb->len && strchr(" \t\r\n", sb->buf[sb->len - 1]))
		sb->len--;
	while (start < sb->len && strchr(" \t\r\n", sb->buf[start]))
		start++;
	if (start)
		memmove(sb->buf, sb->buf + start, sb->len - start);
	sb->len -= start;
	if (sb->alloc)
		sb->buf[sb->len] = '\0';
}

int strbuf_replace_all(struct strbuf *sb, const char *needle, const char *repl)
{
	struct strbuf out = STRBUF_INIT;
	size_t nlen = strlen(needle);
	const char *p = sb->buf, *hit;
	int count = 0;

	if (!nlen || !sb->len)
		return 0;
	while ((hit = strstr(p, needle))) {
		strbuf_add(&out, p, (size_t)(hit - p));
		strbuf_addstr(&out, repl);
		p = hit + nlen;
		count++;
	}
	if (!count) {
		strbuf_release(&out);
		return 0;
	}
	strbuf_addstr(&out, p);
	out.cap = sb->cap;
	strbuf_release(sb);
	*sb = out;
	return count;
}

int strbuf_read_fd(struct strbuf *sb, int fd)
{
	char chunk[8192];

	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		int rc;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return error_errno("could not read");
		if (n == 0)
			return 0;
		rc = strbuf_add(sb, chunk, (size_t)n);
		if (rc)
			return rc;
	}
}

int strbuf_read_file(struct strbuf *sb, const char *path, size_t max)
{
	size_t old_cap = sb->cap;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_errno("could not open '%s'", path);
	if (max && (!sb->cap || sb->len + max < sb->cap))
		sb->cap = sb->len + max;
	rc = strbuf_read_fd(sb, fd);
	sb->cap = old_cap;
	close(fd);
	if (rc == KB_ETOOBIG)
		error("'%s' is larger than %zu bytes", path, max);
	return rc;
}
