#ifndef KB_UTIL_H
#define KB_UTIL_H
/*
 * Error conventions and allocation helpers used everywhere.
 *
 * Functions return int: 0 success, -1 with a logged message for ordinary
 * failure, or one of the named negative codes below when a caller branches
 * on the cause. Allocation failure is fatal (die), as in git: there is no
 * sensible recovery inside a CI bot and it keeps every call site simple.
 */
#include "core/common.h"

enum kb_error {
	KB_OK = 0,
	KB_ERROR = -1,     /* generic failure, already reported */
	KB_ENOTFOUND = -2, /* the thing asked for does not exist */
	KB_ETOOBIG = -3,   /* a size cap was hit */
	KB_ETIMEOUT = -4,  /* a deadline passed */
	KB_EEXISTS = -5,   /* already there (not an error to retry) */
	KB_ECANCELLED = -6, /* stopped on request (signal, user) */
	KB_ENOTSUPPORTED = -7, /* the backend or its credentials cannot do this */
	KB_EBUDGET = -8    /* a money, token or time budget would be exceeded */
};

/* Log at error level and return -1: `return error("could not open '%s'", p);` */
int error(const char *fmt, ...) KB_PRINTF(1, 2);
/* error() with ": strerror(errno)" appended. */
int error_errno(const char *fmt, ...) KB_PRINTF(1, 2);
/* Log and exit(2): environment errors the program cannot continue from. */
_Noreturn void die(const char *fmt, ...) KB_PRINTF(1, 2);

void *xmalloc(size_t size);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* snprintf that dies when the result would be truncated: for fixed formats only. */
void xsnprintf(char *dst, size_t size, const char *fmt, ...) KB_PRINTF(3, 4);
/* Copy at most size-1 bytes and NUL-terminate; returns strlen(src). */
size_t kb_strlcpy(char *dst, const char *src, size_t size);
/* Levenshtein distance of two short strings, for "did you mean"; SIZE_MAX
 * when either has 64 bytes or more. */
size_t kb_edit_distance(const char *a, const char *b);

/* Monotonic clock in milliseconds / wall clock in seconds. */
int64_t kb_now_ms(void);
int64_t kb_wall_s(void);

/* Parse a whole string as an integer / double; -1 when it is not one. */
int kb_parse_i64(const char *s, int64_t *out);
int kb_parse_double(const char *s, double *out);

/*
 * Saturating arithmetic for figures that come from outside (header values,
 * JSON numbers): a result beyond the type's range is clamped to its end
 * instead of overflowing, and a NaN reads as 0. A wait computed from a
 * server's number this way is at worst very long (and then refused or
 * capped by the caller), never negative.
 */
int64_t kb_sat_add_i64(int64_t a, int64_t b);
int64_t kb_sat_sub_i64(int64_t a, int64_t b);
int64_t kb_sat_mul_i64(int64_t a, int64_t b);
int64_t kb_i64_from_double(double d);
int kb_int_from_double(double d);

/* mkdir -p with the given mode; 0 when the directory exists afterwards. */
int kb_mkdir_p(const char *path, mode_t mode);
/* rm -rf; 0 when the path no longer exists. */
int kb_rm_rf(const char *path);
/* Write all len bytes to fd, retrying on EINTR and short writes. 0 or -1 (errno set). */
int kb_write_all(int fd, const void *buf, size_t len);
/* Write a whole file atomically (temp file + fsync + rename). */
int kb_write_file_atomic(const char *path, const void *data, size_t len);
/* True when path is dir or lies below it ("/a/b" is under "/a", "/ab" is not). */
bool kb_path_under(const char *path, const char *dir);
/* True when path names an existing regular file / directory. */
bool kb_is_file(const char *path);
bool kb_is_dir(const char *path);

#define FREE_AND_NULL(p) do { free(p); (p) = NULL; } while (0)

#endif
