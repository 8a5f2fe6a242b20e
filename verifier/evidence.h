#ifndef KB_EVIDENCE_H
#define KB_EVIDENCE_H
/*
 * The evidence file: the harness's result (PROTOCOL.md, "Evidence") plus
 * what only the bot knows, under "kernelbot":
 *
 *   "kernelbot": { "version": "0.1.0",
 *                  "kernel": { "path", "sha256", "abi" },
 *                  "build": { build.json's fields, "library" } | null,
 *                  "static": [ { "line", "rule", "message" } ],
 *                  "started_at": "2026-12-02T10:04:11Z", "finished_at": ...,
 *                  "seconds": x,
 *                  "placement": { "device", "worker", "workers_on_device",
 *                                 "shared_with" } }   // from a worker only
 *                                 (harness_pool.h, PROTOCOL.md "Placement")
 * and environment.kernelbot = the version. Rejections the bot decides
 * itself (static findings, a failed build, a crash or timeout of the
 * harness) use the same shape, with reasons whose check is "static",
 * "build", "crash", "timeout" or "harness".
 *
 * Every string in it is redacted (core/redact.h) as it comes in: reasons'
 * messages, the build's error text, the harness's result. Two fields are
 * for this machine only and kb_evidence_scrub removes them before the
 * evidence is stored or published: "operator_log" (where the harness's
 * output was kept, harness_log.h) and kernelbot.build.errors (compiler
 * messages, which a repair prompt quotes while the search runs).
 */
#include "core/common.h"
#include "verifier/static_check.h"

#include <cjson/cJSON.h>

struct kb_build_result;

/* {"protocol": 1, "type": "result", "verdict": verdict, "reasons": []} */
cJSON *kb_evidence_new(const char *verdict);
/* Append {"check", "config", "seed", "message"} (config/seed < 0: null); message redacted, cut to KB_REDACT_MESSAGE_MAX. */
void kb_evidence_add_reason(cJSON *ev, const char *check, int config, int seed, const char *message);
/* The verdict string ("" when missing). */
const char *kb_evidence_verdict(const cJSON *ev);

/* Whether a reason of ev has this check. */
bool kb_evidence_has_check(const cJSON *ev, const char *check);

/* Append "<check>: <message>" of ev's first reason that is not the
 * suspicious_speedup note (a flag, not a cause), else "verdict 'V'". */
struct strbuf;
void kb_evidence_first_reason(const cJSON *ev, struct strbuf *out);

/* The same over a reasons array; false (nothing appended) without one. */
bool kb_reasons_first(const cJSON *reasons, struct strbuf *out);

struct kb_evidence_meta {
	const char *kernel_path;
	const char *kernel_sha256;    /* hex, NULL: not known */
	const char *abi;              /* "native" / "torch-ext" */
	const struct kb_build_result *build; /* NULL: no build (torch-ext, or stopped before) */
	const struct kb_findings *findings;  /* NULL: none */
	int64_t started_at, finished_at;     /* Unix seconds */
	double seconds;
};

/* Add the "kernelbot" object (its strings redacted) and environment.kernelbot to ev. */
void kb_evidence_annotate(cJSON *ev, const struct kb_evidence_meta *meta);

/*
 * Make ev fit to leave this machine or be kept: remove "operator_log",
 * kernelbot.build.errors and "log_tail" (evidence of older versions),
 * every copy of a repeated key and keys that only redaction makes so, and
 * redact every string again (rows and files written before redaction
 * existed). For the run's evidence.json (committed with the kernel), the
 * state database and anything published. Idempotent; NULL is a no-op.
 */
void kb_evidence_scrub(cJSON *ev);

/* Pretty-printed, written atomically. 0 or -1. */
int kb_evidence_write(const cJSON *ev, const char *path);

/*
 * One line per reason: "rejected: <check>: <message> (config N, seed S)",
 * then, unless verified, "log: the harness's output is in <operator_log>"
 * when the evidence has one.
 */
void kb_evidence_print_reasons(const cJSON *ev, FILE *fp);
/* verdict, configs x seeds, max errors, geomean speedups when timed. */
void kb_evidence_print_summary(const cJSON *ev, FILE *fp);
/* config | eager ms | compile ms | kernel ms | speedup | roofline share, and a geomean row. */
void kb_evidence_print_table(const cJSON *ev, FILE *fp);

#endif
