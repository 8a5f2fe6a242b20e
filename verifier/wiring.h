#ifndef KB_WIRING_H
#define KB_WIRING_H
/*
 * The wiring check (PROTOCOL.md "Wiring check"; issue 17, "Proof that the
 * wiring is right"): a repository's module, patched to call a verified
 * kernel, against its own original code, in the sandbox.
 *
 *   PYTHON -I -B -u verifier/harness/kb_wiring.py --request REQUEST.json
 *
 * started like the harness (kb_harness_call: scrubbed environment, the
 * nonce on stdin, the result channel on descriptor 3, the wall-clock
 * limit, the sandbox with the patched tree read-only and a scratch folder
 * writable, stdout and stderr to the operator's log only). The script
 * copies the tree into scratch, builds the module from the request's init
 * arguments and runs its forward and backward on each recorded shape and
 * seed twice: with the kernel (ops.ENABLED) and without (the original
 * code); outputs, input gradients and parameter gradients must agree
 * within the request's tolerances and the kernel must have been called.
 * One call more with a dtype the kernel was not verified for must not
 * call it. With a pytest selection, the repository's tests then run on the
 * patched tree: outcomes by kind and the kernel's calls.
 *
 * The script's record is untrusted (the repository's code ran in its
 * process): kb_wiring_sanitize keeps only known fields, numbers within
 * bounds and our own words, config names redacted and cut; nothing else
 * of it reaches the evidence or a pull request.
 */
#include "core/common.h"
#include "verifier/harness_client.h"

#include <cjson/cJSON.h>

/*
 * The request (see PROTOCOL.md): tree, module_file, class, ops_module,
 * sys_path, init, configs, tolerances, backend, seeds, tests. Runs the
 * check; *wiring gets the sanitised result, whatever the verdict ("wired",
 * "mismatch", "error": a timeout, a crash or no record is an error with
 * its reason). 0, or -1 when nothing could be started (logged).
 */
int kb_wiring_check(const struct kb_harness *h, const cJSON *request, cJSON **wiring);

/* A fresh directory <h->tmp_root>/<prefix>-XXXXXX into dir (reset first; empty on failure). 0 or -1 (logged). */
int kb_wiring_tmpdir(const struct kb_harness *h, const char *prefix, struct strbuf *dir);

/*
 * The record raw (may be NULL) as the evidence keeps it: verdict,
 * implementation, configs [{config, seed, kernel_calls, outputs_max_abs,
 * grads_max_abs, gradients, ok}], fallback {dtype, kernel_calls, ok},
 * tests {ran, passed, failed, skipped, errors, collected, kernel_calls,
 * exit_code, why}, reasons [{message}]. A field of the wrong type or out of
 * bounds is left out, and "wired" stands only when every config and the
 * fallback say ok. Never NULL.
 */
cJSON *kb_wiring_sanitize(const cJSON *raw);

/*
 * raw's "attributes" (the module's settings: {"path": {"name": value}},
 * path "" the module, dotted submodule paths, names identifiers, values
 * numbers, flags, null, short strings, short lists of those) and
 * "attributes_unknown" (settings of no such kind, "path.name (type)")
 * into out (wiring_attrs.c). True when the record was taken whole and
 * names no unknown setting: only then can ops.configured guard the module.
 */
bool kb_wiring_attributes(const cJSON *raw, cJSON *out);

#endif
