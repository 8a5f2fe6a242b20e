#ifndef KB_LOG_H
#define KB_LOG_H
/*
 * One line per event: "2026-12-02T10:04:11Z level message". To stderr by
 * default, or appended to a file. Every line passes through a redaction
 * filter that replaces each registered secret with "***", so a token that
 * reaches a message by accident never reaches the log.
 */
#include "core/common.h"

enum kb_log_level { KB_LOG_DEBUG, KB_LOG_INFO, KB_LOG_WARN, KB_LOG_ERROR, KB_LOG_OFF };

/* NULL or "-" or "stderr": standard error. The file is opened for append. */
int log_open(const char *path);
void log_close(void);
void log_set_level(enum kb_log_level level);
enum kb_log_level log_get_level(void);
int log_parse_level(const char *name, enum kb_log_level *out);

/* Register a secret to redact from every line (copied; empty strings and
 * strings shorter than 4 bytes are ignored so "***" does not eat prose). */
void log_add_secret(const char *secret);
void log_clear_secrets(void);
/* True when s contains a registered secret (the subprocess runner drops such
 * environment variables from a child's environment). */
bool log_contains_secret(const char *s);
/* Redact registered secrets in place; used also for text leaving the bot. */
struct strbuf;
void log_redact(struct strbuf *sb);

/*
 * A progress bar owns the terminal's current line: before a log line goes
 * to standard error, clear(payload) takes the bar away, and redraw(payload)
 * puts it back under the line, so log lines never tear the bar. One owner
 * at a time; log_release_tty_line(payload) forgets it only while payload
 * still owns the line. Lines to a log file call neither.
 */
void log_claim_tty_line(void (*clear)(void *), void (*redraw)(void *), void *payload);
void log_release_tty_line(void *payload);

void log_msg(enum kb_log_level level, const char *fmt, ...) KB_PRINTF(2, 3);
void log_vmsg(enum kb_log_level level, const char *fmt, va_list ap);

#define log_debug(...) log_msg(KB_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(KB_LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(KB_LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(KB_LOG_ERROR, __VA_ARGS__)

#endif
