#ifndef KB_STRBUF_H
#define KB_STRBUF_H
/*
 * A growable string that is never NULL and always NUL-terminated (git's
 * strbuf). Its memory leaves only through strbuf_detach. A buffer made with
 * strbuf_init_capped refuses to grow past its cap (curl's dynbuf): use it
 * for anything read from the network or from a child process.
 *
 * The add functions return 0, or KB_ETOOBIG when the cap would be exceeded
 * (nothing is appended then). Uncapped buffers never fail.
 */
#include "core/common.h"

struct strbuf {
	size_t alloc;
	size_t len;
	size_t cap; /* 0: no cap */
	char *buf;
};

extern char strbuf_slopbuf[];
#define STRBUF_INIT { 0, 0, 0, strbuf_slopbuf }

void strbuf_init(struct strbuf *sb, size_t hint);
void strbuf_init_capped(struct strbuf *sb, size_t cap);
void strbuf_release(struct strbuf *sb);
char *strbuf_detach(struct strbuf *sb, size_t *len_out);

int strbuf_grow(struct strbuf *sb, size_t extra);
int strbuf_add(struct strbuf *sb, const void *data, size_t len);
int strbuf_addstr(struct strbuf *sb, const char *s);
int strbuf_addch(struct strbuf *sb, int c);
int strbuf_addf(struct strbuf *sb, const char *fmt, ...) KB_PRINTF(2, 3);
int strbuf_vaddf(struct strbuf *sb, const char *fmt, va_list ap);
/* Append s with JSON string escaping (no surrounding quotes). */
int strbuf_add_json_escaped(struct strbuf *sb, const char *s);

void strbuf_reset(struct strbuf *sb);
void strbuf_setlen(struct strbuf *sb, size_t len);
void strbuf_trim(struct strbuf *sb);
/* Replace every occurrence of needle by repl; returns how many. */
int strbuf_replace_all(struct strbuf *sb, const char *needle, const char *repl);

/* Read a whole file (at most max bytes, 0: no limit). -1 on error, KB_ETOOBIG when larger. */
int strbuf_read_file(struct strbuf *sb, const char *path, size_t max);
/* Read from fd until EOF (respects the cap). */
int strbuf_read_fd(struct strbuf *sb, int fd);

#endif
