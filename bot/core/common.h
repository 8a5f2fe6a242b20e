#ifndef KB_COMMON_H
#define KB_COMMON_H
/*
 * First include of every project .c file: feature macros, the standard
 * headers nearly every file needs, then banned.h (which must come after any
 * header that declares a banned function).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/types.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define KB_UNUSED __attribute__((unused))
#define KB_PRINTF(f, a) __attribute__((format(printf, f, a)))

#include "core/banned.h"

#endif
