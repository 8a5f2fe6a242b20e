#ifndef KB_CLI_RECORD_H
#define KB_CLI_RECORD_H
/*
 * Run a repository's own tests in the sandbox with the shape recorder
 * (verifier/harness/kb_record.py) for `kernelbot operator`: the
 * repository is visible read-only, the process writes only a fresh
 * scratch folder (its HOME and TMPDIR), has no network, and is killed at
 * timeout_ms. What the tests print is untrusted: it goes to log_path
 * (NULL: nowhere), never to our output.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "jobs/repo_operators.h"
#include "verifier/harness_client.h"

/*
 * The recorder's JSON (at most KB_MODOP_MAX_RECORD bytes, unchecked:
 * modop_record.c reads it) into out. 0; -1 with why (the sandbox could
 * not start, the recorder wrote nothing: a timeout, a crash).
 */
int cli_record_shapes(const struct kb_harness *h, const char *backend, const char *root,
		      const struct kb_repo_operator *op, int64_t timeout_ms, const char *log_path,
		      struct strbuf *out, struct strbuf *why);

#endif
