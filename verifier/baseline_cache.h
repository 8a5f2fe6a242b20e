#ifndef KB_BASELINE_CACHE_H
#define KB_BASELINE_CACHE_H
/*
 * The baseline cache around one timed evaluation (verifier/PROTOCOL.md
 * "Baseline cache"; the table: baseline_db.h). The baselines of an
 * operator on a device are measured once and reused by every candidate,
 * job and bench call: kb_baseline_cache_request puts the operator's cached
 * entries into the request, kb_baseline_cache_keep files the judge's fresh
 * measurements ("baselines_measured") and takes them out of the evidence,
 * which says per config where its baselines came from.
 *
 * The cache lives in the state store (<state_dir>/kernelbot.db), opened by
 * the verifier at its first timed evaluation. A store that cannot be
 * opened, or an operator that cannot be hashed, costs the cache only
 * (warned once): the judge then measures every baseline, as before.
 */
#include "core/common.h"

#include <cjson/cJSON.h>

struct kb_verifier;

/*
 * Add "baseline_cache" (the entries filed under the operator's content
 * hash) to a timed request and set op_hash. 0, or -1 (warned) when there
 * is no cache to use for it: the request goes without.
 */
int kb_baseline_cache_request(struct kb_verifier *vf, const char *operator_path, cJSON *request,
			      char op_hash[65]);

/*
 * File evidence's "baselines_measured" under op_hash and remove it from
 * the evidence (it is an instruction to the bot, not evidence). A failure
 * to store is warned; the evidence stands.
 */
void kb_baseline_cache_keep(struct kb_verifier *vf, const char *op_hash, cJSON *evidence);

#endif
