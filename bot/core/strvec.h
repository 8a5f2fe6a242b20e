#ifndef KB_STRVEC_H
#define KB_STRVEC_H
/* A NULL-terminated, growable array of owned strings (git's strvec). */
#include "core/common.h"

struct strvec {
	const char **v;
	size_t nr;
	size_t alloc;
};

extern const char *empty_strvec[];
#define STRVEC_INIT { empty_strvec, 0, 0 }

void strvec_init(struct strvec *sv);
const char *strvec_push(struct strvec *sv, const char *s);
const char *strvec_pushf(struct strvec *sv, const char *fmt, ...) KB_PRINTF(2, 3);
/* Push each argument up to a terminating NULL. */
void strvec_pushl(struct strvec *sv, ...);
void strvec_pushv(struct strvec *sv, const char **items);
void strvec_clear(struct strvec *sv);

#endif
