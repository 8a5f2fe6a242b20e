#ifndef KB_OPERATOR_HASH_H
#define KB_OPERATOR_HASH_H
#include "core/common.h"

/*
 * SHA-256 of an operator's content: a file's bytes, or a folder's regular
 * files (recursively, sorted by relative path; names and bytes; dot files
 * and __pycache__ skipped). 0 or -1 (logged).
 */
int kb_operator_hash(const char *path, char hex[65]);

#endif
