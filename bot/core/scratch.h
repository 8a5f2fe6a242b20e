#ifndef KB_SCRATCH_H
#define KB_SCRATCH_H
/*
 * Scratch directories that name their owner: "<root>/<prefix>-<pid>-XXXXXX",
 * pid being the process that made it and removes it when done. A process
 * killed with SIGKILL (or crashed) cannot remove its own; the next process
 * sweeps them: a directory whose pid no longer runs is stale.
 *
 * Every process using root must share one PID namespace (as everything
 * sharing a state dir does, state.h), or a live directory could look
 * stale. A pid reused by another process keeps a stale directory until
 * that one ends too: never the reverse.
 */
#include "core/common.h"
#include "core/strbuf.h"

/*
 * Create root (0700, with its parents) and a fresh directory in it, mode
 * 0700, its path in out. 0, or -1 (logged).
 */
int kb_scratch_make(const char *root, const char *prefix, struct strbuf *out);

/*
 * Remove every "<prefix>-<pid>-*" directory in root whose pid is not
 * running (our own pid is running). Returns how many were removed (>= 0;
 * one that could not be removed is logged as a warning and not counted).
 * A missing root is fine.
 */
int kb_scratch_sweep(const char *root, const char *prefix);

#endif
