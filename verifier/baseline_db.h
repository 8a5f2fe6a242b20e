#ifndef KB_BASELINE_DB_H
#define KB_BASELINE_DB_H
/*
 * The baseline cache's table (verifier/PROTOCOL.md "Baseline cache"): the
 * judge's figures for an operator's baselines (eager, torch.compile),
 * filed under the operator's content hash (operator_hash.h) and the key
 * the harness computed (torch, device, pass, config, timing settings).
 * Measured once, they are sent with every later request for that operator
 * (every candidate, job and bench call) until the operator, torch or the
 * device changes, or the harness finds an entry stale and measures again.
 *
 * The bot only files and returns them: what a key means and whether an
 * entry is usable is the harness's judgement (a malformed one is ignored
 * there, with a warning).
 */
#include "core/common.h"

#include <cjson/cJSON.h>

struct kb_state;

/* Newest entries of one operator sent with a request. */
#define KB_BASELINE_MAX_ROWS 256
/* Largest figures object stored (bytes of JSON). */
#define KB_BASELINE_MAX_FIGURES (64 * 1024)

/*
 * The request's "baseline_cache" array for the operator whose content hash
 * is op_hash: [{"key", "figures", "age_s"}], newest first, at most
 * KB_BASELINE_MAX_ROWS. A row whose figures are not a JSON object is left
 * out with a warning. NULL on a database error (logged).
 */
cJSON *kb_baseline_cache_get(struct kb_state *st, const char *op_hash);

/*
 * File the result body's "baselines_measured" entries ({"key",
 * "figures"}) under op_hash, replacing what that key held, in one
 * transaction. An entry without a string key or an object of figures (or
 * figures over KB_BASELINE_MAX_FIGURES) is skipped with a warning. 0 or -1
 * (logged; nothing stored).
 */
int kb_baseline_cache_put(struct kb_state *st, const char *op_hash, const cJSON *measured);

#endif
