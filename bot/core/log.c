#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <pthread.h>
#include <time.h>

static FILE *log_fp;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static enum kb_log_level log_level = KB_LOG_INFO;
static char **secrets;
static size_t nr_secrets;
/* the progress bar on the terminal's current line (log_claim_tty_line) */
static void (*tty_clear)(void *);
static void (*tty_redraw)(void *);
static void *tty_payload;

static const char *const level_names[] = { "debug", "info", "warn", "error", "off" };

int log_open(const char *path)
{
	FILE *fp;

	if (!path || !*path || !strcmp(path, "-") || !strcmp(path, "stderr")) {
		log_close();
		return 0;
	}
	fp = fopen(path, "ae");
	if (!fp)
		return error_errno("could not open log file '%s'", path);
	setvbuf(fp, NULL, _IOLBF, 0);
	log_close();
	log_fp = fp;
	return 0;
}

void log_close(void)
{
	if (log_fp)
		fclose(log_fp);
	log_fp = NULL;
}

void log_set_level(enum kb_log_level level)
{
	log_level = level;
}

enum kb_log_level log_get_level(void)
{
	return log_level;
}

int log_parse_level(const char *name, enum kb_log_level *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(level_names); i++)
		if (!strcasecmp(name, level_names[i])) {
			*out = (enum kb_log_level)i;
			return 0;
		}
	return -1;
}

void log_add_secret(const char *secret)
{
	if (!secret || strlen(secret) < 4)
		return;
	for (size_t i = 0; i < nr_secrets; i++)
		if (!strcmp(secrets[i], secret))
			return;
	secrets = xrealloc(secrets, (nr_secrets + 1) * sizeof(*secrets));
	secrets[nr_secrets++] = xstrdup(secret);
}

void log_clear_secrets(void)
{
	for (size_t i = 0; i < nr_secrets; i++)
		free(secrets[i]);
	FREE_AND_NULL(secrets);
	nr_secrets = 0;
}

bool log_contains_secret(const char *s)
{
	for (size_t i = 0; s && i < nr_secrets; i++)
		if (strstr(s, secrets[i]))
			return true;
	return false;
}

void log_redact(struct strbuf *sb)
{
	for (size_t i = 0; i < nr_secrets; i++)
		strbuf_replace_all(sb, secrets[i], "***");
}

void log_claim_tty_line(void (*clear)(void *), void (*redraw)(void *), void *payload)
{
	tty_clear = clear;
	tty_redraw = redraw;
	tty_payload = payload;
}

void log_release_tty_line(void *payload)
{
	if (tty_payload != payload)
		return;
	tty_clear = NULL;
	tty_redraw = NULL;
	tty_payload = NULL;
}

void log_vmsg(enum kb_log_level level, const char *fmt, va_list ap)
{
	struct strbuf line = STRBUF_INIT;
	char stamp[32];
	struct tm tm;
	time_t now;
	int saved_errno = errno;

	if (level < log_level || level >= KB_LOG_OFF)
		return;
	now = time(NULL);
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	strbuf_addf(&line, "%s %-5s ", stamp, level_names[level]);
	strbuf_vaddf(&line, fmt, ap);
	/* one event, one line: fold embedded newlines */
	for (size_t i = 0; i < line.len; i++)
		if (line.buf[i] == '\n' || line.buf[i] == '\r')
			line.buf[i] = ' ';
	log_redact(&line);
	strbuf_addch(&line, '\n');
	/* model calls log from their threads (llm/pool.h): one line and the
	 * progress line's redraw at a time */
	pthread_mutex_lock(&write_lock);
	if (!log_fp && tty_clear)
		tty_clear(tty_payload);
	fwrite(line.buf, 1, line.len, log_fp ? log_fp : stderr);
	if (!log_fp && tty_redraw)
		tty_redraw(tty_payload);
	pthread_mutex_unlock(&write_lock);
	strbuf_release(&line);
	errno = saved_errno;
}

void log_msg(enum kb_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}
