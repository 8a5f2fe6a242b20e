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
 * and notes are printed above it; log lines (core/log.h) clear the bar and
 * it is drawn again below them. Otherwise (a pipe, a log file, CI) every
 * event is one plain line that a test or a log reader can match:
 *
 *   [analyse]
 *   [build 3/8] threads=256 vec=4: ok
 *   note text
 *
 * What runs inside a step (a harness evaluation: its config and seed) is
 * its activity: on a terminal the bar shows it, refreshed about once a
 * second by kb_progress_tick; in plain lines a heartbeat note
 *
 *   ... verify 3/8 still running after 60 s: k.cpp: trial, config 2, seed 1
 *
 * follows when no line was printed for KB_PROGRESS_HEARTBEAT_MS (the
 * environment's KB_PROGRESS_HEARTBEAT_S, in seconds, overrides it), so a
 * log never goes quiet for long while something runs.
 *
 * A NULL struct pointer is accepted everywhere and does nothing.
 */
#include "core/common.h"

#define KB_PROGRESS_HEARTBEAT_MS 30000

struct kb_progress;
/* Told of every stage and step (e.g. to keep a record of a run). */
typedef void (*kb_progress_observe_fn)(const struct kb_progress *p, void *payload);

struct kb_progress {
	FILE *fp;
	bool tty;               /* redraw a bar, else plain lines */
	int width;              /* terminal columns (tty) */
	char stage[48];
	size_t done, total;     /* total 0: no counter */
	char detail[160];
	char activity[160];     /* what runs inside the step, "" none */
	int64_t start_ms;
	int64_t step_ms;        /* the last stage or step began */
	int64_t line_ms;        /* the last plain line or bar was written */
	int64_t heartbeat_ms;   /* plain lines: a note after this long without one */
	bool drawn;             /* a bar is on the current line */
	bool hidden;            /* the bar was cleared for a log line */
	kb_progress_observe_fn observe; /* NULL: none */
	void *observe_payload;
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

/*
 * What runs inside the current step now (printf-like); the next stage or
 * step clears it. Shown on the bar; in plain lines only the heartbeat
 * prints it.
 */
void kb_progress_activity(struct kb_progress *p, const char *fmt, ...) KB_PRINTF(2, 3);

/* Call about once a second while waiting: redraws the bar's clock, prints a due heartbeat. */
void kb_progress_tick(struct kb_progress *p);

/* Clear the bar (tty) so that ordinary output can follow; the next event draws it again. */
void kb_progress_end(struct kb_progress *p);

/* The bar line for the current state, without '\r' (exposed for tests). */
void kb_progress_format_bar(const struct kb_progress *p, int64_t now_ms, char *out, size_t size);

#endif
