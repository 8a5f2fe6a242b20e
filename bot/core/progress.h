#ifndef KB_PROGRESS_H
#define KB_PROGRESS_H
/*
 * Progress of a long command (kernelbot run): stages such as "analyse",
 * "build" with a k/n counter, "final check".
 *
 * On a terminal one line is redrawn in place with '\r':
 *
 *   [#########.......] build 9/16  threads=256 vec=4  12.3 s
 *
 * and notes are printed above it. Otherwise (a pipe, a log file, CI) every
 * event is one plain line that a test or a log reader can match:
 *
 *   [analyse]
 *   [build 3/8] threads=256 vec=4: ok
 *   note text
 *
 * A NULL struct pointer is accepted everywhere and does nothing.
 */
#include "core/common.h"

struct kb_progress {
	FILE *fp;
	bool tty;               /* redraw a bar, else plain lines */
	int width;              /* terminal columns (tty) */
	char stage[48];
	size_t done, total;     /* total 0: no counter */
	char detail[160];
	int64_t start_ms;
	bool drawn;             /* a bar is on the current line */
};

/*
 * tty: 1 bar, 0 plain lines, -1 decide with isatty(fileno(fp)) (and the
 * TERM is not "dumb"). The width comes from the terminal or $COLUMNS (80).
 */
void kb_progress_init(struct kb_progress *p, FILE *fp, int tty);

/* Start a stage ("analyse", "build", ...); total 0 shows no counter. */
void kb_progress_stage(struct kb_progress *p, const char *stage, size_t total);

/* done of total finished in the current stage; detail may be NULL. */
void kb_progress_step(struct kb_progress *p, size_t done, const char *detail);

/* A line of its own (above the bar on a terminal). */
void kb_progress_note(struct kb_progress *p, const char *fmt, ...) KB_PRINTF(2, 3);

/* Clear the bar (tty) so that ordinary output can follow. */
void kb_progress_end(struct kb_progress *p);

/* The bar line for the current state, without '\r' (exposed for tests). */
void kb_progress_format_bar(const struct kb_progress *p, int64_t now_ms, char *out, size_t size);

#endif
