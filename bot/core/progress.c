#include "core/common.h"
#include "core/log.h"
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
	p->start_ms = p->step_ms = p->line_ms = kb_now_ms();
	p->heartbeat_ms = KB_PROGRESS_HEARTBEAT_MS;
	{
		const char *hb = getenv("KB_PROGRESS_HEARTBEAT_S");
		int64_t s;

		if (hb && !kb_parse_i64(hb, &s) && s >= 1 && s <= 3600)
			p->heartbeat_ms = s * 1000;
	}
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
	if (*p->activity && len < size)
		len += (size_t)snprintf(out + len, size - len, "  | %s (%lld s)", p->activity,
					(long long)((now_ms - p->step_ms) / 1000));
	if (len < size)
		snprintf(out + len, size - len, "  %.1f s", (double)(now_ms - p->start_ms) / 1000.0);
	/* one terminal line: never wrap, or '\r' no longer returns to its start */
	if (p->width > 1 && strlen(out) >= (size_t)p->width)
		out[p->width - 1] = '\0';
}

static void hide_for_log(void *payload);
static void show_after_log(void *payload);

static void draw(struct kb_progress *p)
{
	char line[512];

	p->line_ms = kb_now_ms();
	kb_progress_format_bar(p, p->line_ms, line, sizeof(line));
	fprintf(p->fp, "\r\033[K%s", line);
	fflush(p->fp);
	p->drawn = true;
	log_claim_tty_line(hide_for_log, show_after_log, p);
}

static void clear(struct kb_progress *p)
{
	if (p->tty && p->drawn) {
		fputs("\r\033[K", p->fp);
		p->drawn = false;
	}
}

/* A log line is about to be written to standard error: the bar makes way. */
static void hide_for_log(void *payload)
{
	struct kb_progress *p = payload;

	p->hidden = p->drawn;
	clear(p);
	fflush(p->fp);
}

static void show_after_log(void *payload)
{
	struct kb_progress *p = payload;

	if (p->hidden)
		draw(p);
	p->hidden = false;
}

/* One plain line (not a terminal); it counts for the heartbeat. */
static void plain_line(struct kb_progress *p, const char *fmt, ...) KB_PRINTF(2, 3);
static void plain_line(struct kb_progress *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(p->fp, fmt, ap);
	va_end(ap);
	fflush(p->fp);
	p->line_ms = kb_now_ms();
}

static void observe(struct kb_progress *p)
{
	if (p->observe)
		p->observe(p, p->observe_payload);
}

void kb_progress_stage(struct kb_progress *p, const char *stage, size_t total)
{
	if (!p)
		return;
	kb_strlcpy(p->stage, stage, sizeof(p->stage));
	p->total = total;
	p->done = 0;
	p->detail[0] = '\0';
	p->activity[0] = '\0';
	p->step_ms = kb_now_ms();
	observe(p);
	if (p->tty)
		draw(p);
	else if (total)
		plain_line(p, "[%s 0/%zu]\n", p->stage, total);
	else
		plain_line(p, "[%s]\n", p->stage);
}

void kb_progress_step(struct kb_progress *p, size_t done, const char *detail)
{
	if (!p)
		return;
	p->done = done;
	kb_strlcpy(p->detail, detail ? detail : "", sizeof(p->detail));
	p->activity[0] = '\0';
	p->step_ms = kb_now_ms();
	observe(p);
	if (p->tty)
		draw(p);
	else if (p->total)
		plain_line(p, "[%s %zu/%zu]%s%s\n", p->stage, done, p->total, *p->detail ? " " : "",
			   p->detail);
	else
		plain_line(p, "[%s]%s%s\n", p->stage, *p->detail ? " " : "", p->detail);
}

void kb_progress_activity(struct kb_progress *p, const char *fmt, ...)
{
	va_list ap;

	if (!p)
		return;
	va_start(ap, fmt);
	vsnprintf(p->activity, sizeof(p->activity), fmt, ap);
	va_end(ap);
	kb_progress_tick(p);
}

void kb_progress_tick(struct kb_progress *p)
{
	int64_t now;

	if (!p || !*p->stage)
		return; /* nothing to show before the first stage */
	now = kb_now_ms();
	if (p->tty) {
		/* a redraw per harness record would flicker: at most 5 a second */
		if (now - p->line_ms >= 200)
			draw(p);
		return;
	}
	if (now - p->line_ms < p->heartbeat_ms)
		return;
	/* a note (no '['): whoever parses the step lines skips it */
	if (p->total)
		plain_line(p, "... %s %zu/%zu still running after %lld s%s%s\n", p->stage, p->done, p->total,
			   (long long)((now - p->step_ms) / 1000), *p->activity ? ": " : "", p->activity);
	else
		plain_line(p, "... %s still running after %lld s%s%s\n", p->stage,
			   (long long)((now - p->step_ms) / 1000), *p->activity ? ": " : "", p->activity);
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
	p->line_ms = kb_now_ms();
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
	log_release_tty_line(p);
}
