#ifndef KB_LLM_VERIFIERS_H
#define KB_LLM_VERIFIERS_H
/*
 * robust-kbench's soft verifiers: three model reviews of a candidate
 * before anything is built (compile: will it build; numerics: does it
 * compute the operator in its precision; memory: bounds, races, streams,
 * harness rules). The prompts (verify_*.md) end by asking for one line
 * "VERDICT: PASS" or "VERDICT: FAIL".
 *
 * Each candidate's verdicts are stored in candidates.verifiers:
 *
 *   {"compile": {"verdict": "PASS", "model": "m", "note": "..."},
 *    "numerics": {...}, "memory": {...}, "pass": false, "audited": true}
 *
 * ("verdict" is PASS, FAIL, none (no verdict line) or error (the call
 * failed); none and error count as PASS). Their quality is measured
 * against the harness, which has the last word: a candidate the
 * verifiers reject is "positive"; it is a true positive when the harness
 * (or the compiler) rejects it too. Candidates the verifiers reject are
 * only evaluated when audited ([search] verifier_audit), so precision
 * comes from the audited share and recall from everything evaluated.
 */
#include "core/common.h"

#include <cjson/cJSON.h>

enum kb_soft_verifier { KB_SV_COMPILE, KB_SV_NUMERICS, KB_SV_MEMORY };
#define KB_SV_NR 3

/* "compile", "numerics", "memory" */
const char *kb_soft_verifier_name(enum kb_soft_verifier v);

/*
 * The verdict of a reply: its last line that says "VERDICT: PASS" or
 * "VERDICT: FAIL" (any case, markdown emphasis and a trailing full stop
 * allowed). 1 PASS, 0 FAIL, -1 none.
 */
int kb_soft_verdict_parse(const char *reply);

struct kb_verifier_stats {
	int64_t tp, fp, fn, tn;
};

/* predicted_bad: a verifier said FAIL; bad: the harness or the compiler rejected it. */
void kb_verifier_stats_add(struct kb_verifier_stats *s, bool predicted_bad, bool bad);
/*
 * Count one stored candidate: verifiers (candidates.verifiers, NULL:
 * none ran) against its verdict (verified: good; rejected or build:
 * bad; anything else has no ground truth and is not counted). Returns 1
 * when counted.
 */
int kb_verifier_stats_add_candidate(struct kb_verifier_stats *s, const cJSON *verifiers,
				    const char *verdict);
/*
 * The same for one verifier alone (its own PASS or FAIL in verifiers.NAME;
 * a verifier that gave none is not counted): each verifier's precision
 * and recall, so that one that only adds noise can be told and turned off.
 */
int kb_verifier_stats_add_one(struct kb_verifier_stats *s, const cJSON *verifiers,
			      enum kb_soft_verifier v, const char *verdict);
/* tp / (tp + fp) and tp / (tp + fn); NAN when the denominator is 0. */
double kb_verifier_precision(const struct kb_verifier_stats *s);
double kb_verifier_recall(const struct kb_verifier_stats *s);
/* {"precision", "recall" (null when undefined), "tp", "fp", "fn", "tn"} */
cJSON *kb_verifier_stats_json(const struct kb_verifier_stats *s);

#endif
