#ifndef KB_CORE_JSON_H
#define KB_CORE_JSON_H
/*
 * Typed reads of one member of a cJSON object, for the files the bot
 * reads back (evidence, kernel.json, progress, webhook events, REST and
 * LLM replies). A missing member, a member of another type and a NULL
 * object all give the default, so callers read optional fields in one
 * line. Strings are borrowed from the object: they live as long as it.
 * Numbers from outside are converted with saturation (core/util.h).
 */
#include "core/common.h"

#include <cjson/cJSON.h>

/* The string member key of o; NULL when absent or not a string. */
const char *kb_json_str(const cJSON *o, const char *key);
/* The number member key of o; def when absent or not a number. */
double kb_json_num(const cJSON *o, const char *key, double def);
/* The number member key of o as an integer (truncated, saturating); def when absent or not a number. */
int64_t kb_json_i64(const cJSON *o, const char *key, int64_t def);

#endif
