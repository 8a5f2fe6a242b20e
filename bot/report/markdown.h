#ifndef KB_MARKDOWN_H
#define KB_MARKDOWN_H
/*
 * The evidence helpers of everything the bot posts and report.md: reading
 * the judge's evidence (verifier/PROTOCOL.md) into table rows, labels and
 * the speedup table. The generic builders (escaping, code spans, tables,
 * number formats) are core/markdown.h, included here for the callers.
 */
#include "core/common.h"
#include "core/markdown.h"
#include "core/strbuf.h"

#include <cjson/cJSON.h>

/* --- evidence (verifier/PROTOCOL.md), for every text that shows one --- */

/* Member of o of that type, or NULL / NAN (o may be NULL). */
const cJSON *kb_md_ev_obj(const cJSON *o, const char *key);
const cJSON *kb_md_ev_arr(const cJSON *o, const char *key);
const char *kb_md_ev_str(const cJSON *o, const char *key);
double kb_md_ev_num(const cJSON *o, const char *key);

/* Longest config name shown, in code points. */
#define KB_MD_NAME_CHARS 80

/* A config's name as a table-safe code span (at most KB_MD_NAME_CHARS), else "#index". */
void kb_md_ev_config_label(struct strbuf *sb, const cJSON *config, size_t index);
/* One row "| label | kind | reason |" of a config the verifier left out
 * (evidence "dropped_configs"); the reason at most reason_max bytes. */
void kb_md_dropped_row(struct strbuf *sb, const cJSON *dropped, size_t index, size_t reason_max);
/* "17% BW" or "45% FLOPs", the larger share of the measured peak; "n/a". */
void kb_md_ev_roofline(char *buf, size_t size, const cJSON *timing);

/*
 * The speedup table: config | eager ms | torch.compile ms | kernel ms |
 * speedup | roofline share, one row per config (at most max_rows of them;
 * SIZE_MAX: all), then a bold geomean row. The speedup cell is "vs eager /
 * vs torch.compile" when any config has a compile baseline. Then a legend
 * paragraph that gives the reason torch.compile is n/a, once per distinct
 * reason. When rows were left out, a line "… N more configs" between the
 * two, with " in `more_where`" when that is not NULL (the evidence file).
 * Returns how many configs were left out. Only "Not timed." (with the
 * evidence's timing_note) when no config was timed.
 */
size_t kb_md_ev_speedup_table(struct strbuf *sb, const cJSON *evidence, size_t max_rows,
			      const char *more_where);

#endif
