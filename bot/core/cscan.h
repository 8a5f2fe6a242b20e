#ifndef KB_CORE_CSCAN_H
#define KB_CORE_CSCAN_H
/*
 * The lexical rules of C and C++ source that both readers of kernel
 * source share (verifier/static_check.c blanks comments and strings before
 * its checks; search/extract.c normalises a candidate for its hash): what
 * an identifier character is, where a raw string starts, and when a
 * quote is a digit separator rather than a character literal. Pure
 * functions over a NUL-terminated source; nothing is allocated.
 */
#include "core/common.h"

/* A letter, digit or underscore. */
bool kb_c_ident_char(int c);
/* True when the '"' at s[quote] opens a raw string: R, uR, UR, LR or u8R as a whole prefix. */
bool kb_c_raw_string_at(const char *s, size_t quote);
/* True when the '\'' at s[q] separates digits of a number (1'000'000). */
bool kb_c_digit_separator_at(const char *s, size_t q);

#endif
