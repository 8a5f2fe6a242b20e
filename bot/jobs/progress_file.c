#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "jobs/progress_file.h"

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>

/* Rewrites closer together than this are skipped unless the stage changed. */
#define MIN_REWRITE_MS 250

struct pf {
	char *path;
	FILE *also;
	struct strbuf line;
	struct kb_progress_state st;
	char written_stage[48];
	int64_t written_ms;
	bool dirty;
};

void kb_progress_file_parse_line(struct kb_progress_state *s, const char *line)
{
	const char *close, *detail, *x, *colon;
	char head[64];
	size_t n;
	int64_t d, t;

	if (*line != '[' || !(close = strchr(line, ']')))
		return; /* a note */
	n = (size_t)(close - line - 1);
	if (n >= sizeof(head))
		return;
	memcpy(head, line + 1, n);
	head[n] = '\0';
	detail = close[1] == ' ' ? close + 2 : close + 1;
	/* "stage d/t" or "stage" */
	{
		char *sp = strrchr(head, ' ');
		char *slash = sp ? strchr(sp + 1, '/') : NULL;

		if (sp && slash) {
			*slash = '\0';
			if (!kb_parse_i64(sp + 1, &d) && !kb_parse_i64(slash + 1, &t)) {
				*sp = '\0';
				if (strcmp(s->stage, head))
					s->done = s->total = 0;
				kb_strlcpy(s->stage, head, sizeof(s->stage));
				s->done = d;
				s->total = t;
			} else {
				*slash = '/';
				kb_strlcpy(s->stage, head, sizeof(s->stage));
				s->done = s->total = 0;
			}
		} else {
			kb_strlcpy(s->stage, head, sizeof(s->stage));
			s->done = s->total = 0;
		}
	}
	if (!*detail)
		return;
	if (!strcmp(s->stage, "verify"))
		s->candidates++;
	/* "threads=256 vec=4: 1.42x" */
	colon = strrchr(detail, ':');
	x = detail + strlen(detail);
	if (colon && x > colon + 2 && x[-1] == 'x') {
		char num[32];
		double v;

		n = (size_t)(x - 1 - (colon + 2));
		if (n && n < sizeof(num)) {
			memcpy(num, colon + 2, n);
			num[n] = '\0';
			if (!kb_parse_double(num, &v) && isfinite(v) && v > s->best_speedup)
				s->best_speedup = v;
		}
	}
}

void kb_progress_file_json(struct strbuf *out, const struct kb_progress_state *s)
{
	strbuf_addstr(out, "{\"stage\": \"");
	strbuf_add_json_escaped(out, s->stage);
	strbuf_addf(out, "\", \"done\": %" PRId64 ", \"total\": %" PRId64 ", \"best_speedup\": %.4f,"
		    " \"candidates\": %" PRId64 ", \"updated_at\": %" PRId64 "}\n",
		    s->done, s->total, s->best_speedup, s->candidates, kb_wall_s());
}

/* temp + rename, no fsync: the file is a view, not a record */
static void rewrite(struct pf *pf, bool force)
{
	struct strbuf text = STRBUF_INIT, tmp = STRBUF_INIT;
	int64_t now = kb_now_ms();
	int fd;

	if (!pf->dirty)
		return;
	if (!force && !strcmp(pf->written_stage, pf->st.stage) &&
	    now - pf->written_ms < MIN_REWRITE_MS)
		return;
	kb_progress_file_json(&text, &pf->st);
	strbuf_addf(&tmp, "%s.tmp", pf->path);
	fd = open(tmp.buf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		bool ok = write(fd, text.buf, text.len) == (ssize_t)text.len;

		if (!close(fd) && ok && !rename(tmp.buf, pf->path)) {
			pf->dirty = false;
			pf->written_ms = now;
			kb_strlcpy(pf->written_stage, pf->st.stage, sizeof(pf->written_stage));
		}
	}
	strbuf_release(&text);
	strbuf_release(&tmp);
}

static ssize_t pf_write(void *cookie, const char *buf, size_t size)
{
	struct pf *pf = cookie;

	if (pf->also) {
		fwrite(buf, 1, size, pf->also);
		fflush(pf->also);
	}
	for (size_t i = 0; i < size; i++) {
		char c = buf[i];

		if (c == '\n' || c == '\r') {
			if (pf->line.len) {
				kb_progress_file_parse_line(&pf->st, pf->line.buf);
				pf->dirty = true;
				strbuf_reset(&pf->line);
			}
		} else if (pf->line.len < 4096) {
			strbuf_addch(&pf->line, c);
		}
	}
	rewrite(pf, false);
	return (ssize_t)size;
}

static int pf_close(void *cookie)
{
	struct pf *pf = cookie;

	if (pf->line.len) {
		kb_progress_file_parse_line(&pf->st, pf->line.buf);
		pf->dirty = true;
	}
	rewrite(pf, true);
	strbuf_release(&pf->line);
	free(pf->path);
	free(pf);
	return 0;
}

FILE *kb_progress_file_open(const char *path, FILE *also)
{
	cookie_io_functions_t io = { NULL, pf_write, NULL, pf_close };
	struct pf *pf = xcalloc(1, sizeof(*pf));
	FILE *fp;

	pf->path = xstrdup(path);
	pf->also = also;
	strbuf_init(&pf->line, 0);
	kb_strlcpy(pf->st.stage, "start", sizeof(pf->st.stage));
	pf->dirty = true;
	rewrite(pf, true);
	fp = fopencookie(pf, "w", io);
	if (!fp) {
		error_errno("could not open the progress file '%s'", path);
		strbuf_release(&pf->line);
		free(pf->path);
		free(pf);
		return NULL;
	}
	setvbuf(fp, NULL, _IOLBF, 0);
	return fp;
}
