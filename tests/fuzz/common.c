#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "fuzz.h"

#include <fcntl.h>
#include <sys/stat.h>

const char *kb_fuzz_current;

void kb_fuzz_fail(const char *file, int line, const char *what)
{
	if (kb_fuzz_current)
		fprintf(stderr, "%s:%d: invariant broken: %s (input %s)\n", file, line, what,
			kb_fuzz_current);
	else
		fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
	abort();
}

void kb_fuzz_init(void)
{
	static bool done;

	if (done)
		return;
	done = true;
	log_set_level(KB_LOG_OFF);
}

void kb_fuzz_split(struct kb_fuzz_parts *p, const uint8_t *data, size_t size, size_t max)
{
	const char *s = (const char *)data, *end = s + size;
	size_t seplen = strlen(KB_FUZZ_SEP);

	memset(p, 0, sizeof(*p));
	if (max > KB_FUZZ_MAX_PARTS)
		max = KB_FUZZ_MAX_PARTS;
	while (p->nr < max && (s < end || !p->nr)) {
		const char *sep = p->nr + 1 < max ? memmem(s, (size_t)(end - s), KB_FUZZ_SEP, seplen) : NULL;
		const char *stop = sep ? sep : end;

		p->len[p->nr] = (size_t)(stop - s);
		p->v[p->nr] = kb_fuzz_str((const uint8_t *)s, p->len[p->nr]);
		p->nr++;
		if (!sep)
			break;
		s = sep + seplen;
	}
	for (size_t i = p->nr; i < max; i++)
		p->v[i] = xstrdup("");
}

void kb_fuzz_parts_release(struct kb_fuzz_parts *p)
{
	for (size_t i = 0; i < KB_FUZZ_MAX_PARTS; i++)
		free(p->v[i]);
	memset(p, 0, sizeof(*p));
}

char *kb_fuzz_str(const uint8_t *data, size_t size)
{
	char *s = xmalloc(size + 1);

	if (size)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

static char scratch[512];

static void remove_scratch(void)
{
	if (scratch[0])
		kb_rm_rf(scratch);
}

const char *kb_fuzz_dir(void)
{
	const char *tmp = getenv("TMPDIR");

	if (scratch[0])
		return scratch;
	xsnprintf(scratch, sizeof(scratch), "%s/kb-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(scratch))
		die("could not create a scratch directory under '%s'", tmp && *tmp ? tmp : "/tmp");
	atexit(remove_scratch);
	return scratch;
}

void kb_fuzz_write(struct strbuf *path, const char *dir, const char *name, const char *data,
		   size_t len)
{
	int fd;

	strbuf_reset(path);
	strbuf_addf(path, "%s/%s", dir, name);
	fd = open(path->buf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || kb_write_all(fd, data, len))
		die("could not write '%s'", path->buf);
	close(fd);
}

FILE *kb_fuzz_null(void)
{
	static FILE *fp;

	if (!fp && !(fp = fopen("/dev/null", "w")))
		die("could not open /dev/null");
	return fp;
}
