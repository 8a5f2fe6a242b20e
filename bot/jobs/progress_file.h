#ifndef KB_PROGRESS_FILE_H
#define KB_PROGRESS_FILE_H
/*
 * How a `kernelbot run` child tells the job loop how far it is: a small
 * JSON file, rewritten atomically (temp file + rename) as it goes,
 *
 *   {"stage": "time", "done": 3, "total": 8, "best_speedup": 1.42,
 *    "candidates": 11, "updated_at": 1764670000}
 *
 * which the daemon reads when its mtime changes. The file is fed by the
 * plain-line form of core/progress.h ("[stage d/t] detail", notes): the
 * stream returned here passes every byte on to `also` (the terminal or
 * log) and parses the lines on the way. A detail ending in ": <x>x" is a
 * measured speedup over eager; candidates counts the points the "verify"
 * stage reported.
 */
#include "core/common.h"

/*
 * A write-only stream for kb_progress_init(&pg, fp, 0). Closing it writes
 * the file a last time. NULL (logged) when it cannot be made.
 */
FILE *kb_progress_file_open(const char *path, FILE *also);

/* Parse one plain progress line into the state (exposed for tests). */
struct kb_progress_state {
	char stage[48];
	int64_t done, total, candidates;
	double best_speedup;
};
void kb_progress_file_parse_line(struct kb_progress_state *s, const char *line);
/* The JSON text of s (appended). */
struct strbuf;
void kb_progress_file_json(struct strbuf *out, const struct kb_progress_state *s);

#endif
