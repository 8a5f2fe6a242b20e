#include "core/common.h"
#include "core/progress.h"
#include "core/util.h"

#include <sys/ioctl.h>

#define BAR_CELLS 20

static int term_width(FILE *fp)
{
	struct winsize ws;
	const char *cols = getenv("COLUMNS");
	int64_t n;

	if (!ioctl(fileno(fp), TIOCGWINSZ, &ws) && ws.ws_col >= 20)
		return ws.ws_col;
	if (cols && !kb_parse_i64(cols, &n) && n >= 20 && n <= 1000)
		return (int)n;
	return 80;
}

void kb_progress_init(struct kb_progress *p, FILE *fp, int tty)
{
	const char *term = getenv("TERM");

	memset(p, 0, sizeof(*p));
	p->fp = fp;
	if (tty < 0)
		tty = isatty(fileno(fp)) && !(term && !strcmp(term, "dumb"));
	p->tty = tty > 0;
	p->width = p->tty ? term_width(fp) : 80;
	p->start_ms = kb_now_ms();
}

void kb_progress_format_bar(const struct kb_progress *p, int64_t now_ms, char *out, size_t size)
{
	char cells[BAR_CELLS + 1];
	size_t fill = 0, len;
	int n;

	if (p->total)
		fill = (p->done > p->total ? p->total : p->done) * BAR_CELLS / p->total;
	for (size_t i = 0; i < BAR_CELLS; i++)
		cells[i] = i < fill ? '#' : '.';
	cells[BAR_CELLS] = '\0';
	if (p->total)
		n = snprintf(out, size, "[%s] %s %zu/%zu", cells, p->stage, p->done, p->total);
	else
		n = snprintf(out, size, "[%s] %s", cells, p->stage);
	if (n < 0 || (size_t)n >= size)
		return;
	len = (size_t)n;
	if (*p->detail)
		len += (size_t)snprintf(out + len, size - len, "  %s", p->detail);
	if (len < size)
		snprintf(out + len, size - len, "  %.1f s", (double)(now_ms - p->start_ms) / 1000.0);
	/* one terminal line: never wrap, or '\r' no longer returns to its start */
	if (p->width > 1 && strlen(out) >= (size_t)p->width)
		out[p->width - 1] = '\0';
}

static void draw(struct kb_progress *p)
{
	char line[512];

	kb_progress_format_bar(p, kb_now_ms(), line, sizeof(line));
	fprintf(p->fp, "\r\033[K%s", line);
	fflush(p->fp);
	p->drawn = true;
}

static void clear(struct kb_progress *p)
{
	if (p->tty && p->drawn) {
		fputs("\r\033[K", p->fp);
		p->drawn = false;
	}
}

void kb_progress_stage(struct kb_progress *p, const char *stage, size_t total)
{
	if (!p)
		return;
	kb_strlcpy(p->stage, stage, sizeof(p->stage));
	p->total = total;
	p->done = 0;
	p->detail[0] = '\0';
	if (p->tty) {
		draw(p);
		return;
	}
	if (total)
		fprintf(p->fp, "[%s 0/%zu]\n", p->stage, total);
	else
		fprintf(p->fp, "[%s]\n", p->stage);
	fflush(p->fp);
}

void kb_progress_step(struct kb_progress *p, size_t done, const char *detail)
{
	if (!p)
		return;
	p->done = done;
	kb_strlcpy(p->detail, detail ? detail : "", sizeof(p->detail));
	if (p->tty) {
		draw(p);
		return;
	}
	if (p->total)
		fprintf(p->fp, "[%s %zu/%zu]%s%s\n", p->stage, done, p->total, *p->detail ? " " : "",
			p->detail);
	else
		fprintf(p->fp, "[%s]%s%s\n", p->stage, *p->detail ? " " : "", p->detail);
	fflush(p->fp);
}

void kb_progress_note(struct kb_progress *p, const char *fmt, ...)
{
	va_list ap;
	bool redraw;

	if (!p)
		return;
	redraw = p->tty && p->drawn;
	clear(p);
	va_start(ap, fmt);
	vfprintf(p->fp, fmt, ap);
	va_end(ap);
	fputc('\n', p->fp);
	if (redraw)
		draw(p);
	fflush(p->fp);
}

void kb_progress_end(struct kb_progress *p)
{
	if (!p)
		return;
	clear(p);
	fflush(p->fp);
}
