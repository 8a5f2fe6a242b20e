/*
 * The pass/forward pairing of a final check, shared by the tuner and the
 * LLM search: a backward kernel ships its forward too, so the forward must
 * verify as well before the kernel is published.
 */
#include "templates/tune.h"
#include "verifier/evidence.h"

int kb_final_check_pass(kb_final_check_fn check, void *ctx, const char *pass, cJSON **evidence,
			cJSON **forward, bool *cached, bool *fwd_failed)
{
	bool fwd_cached = true;
	int rc;

	*evidence = NULL;
	*forward = NULL;
	*fwd_failed = false;
	rc = check(ctx, pass, true, evidence, cached);
	if (rc || strcmp(kb_evidence_verdict(*evidence), "verified") || strcmp(pass, "backward"))
		return rc;
	rc = check(ctx, "forward", false, forward, &fwd_cached);
	if (rc)
		return rc;
	if (strcmp(kb_evidence_verdict(*forward), "verified")) {
		/* the forward's failure decides: the kernel cannot ship */
		cJSON_Delete(*evidence);
		*evidence = cJSON_Duplicate(*forward, true);
		*fwd_failed = true;
	}
	*cached = *cached && fwd_cached;
	return 0;
}
