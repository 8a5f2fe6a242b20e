#include "core/common.h"
#include "verifier/baseline_cache.h"
#include "core/log.h"
#include "core/state.h"
#include "verifier/baseline_db.h"
#include "verifier/harness_client.h"
#include "verifier/operator_hash.h"

/* The state store, opened once per verifier; NULL (warned once) when it cannot be. */
static struct kb_state *cache_store(struct kb_verifier *vf)
{
	if (!vf->st && !vf->st_tried) {
		vf->st_tried = true;
		if (kb_state_open(&vf->st, vf->cfg->state_dir))
			log_warn("baseline cache: the state store in '%s' cannot be opened: every "
				 "timed evaluation measures its baselines", vf->cfg->state_dir);
	}
	return vf->st;
}

int kb_baseline_cache_request(struct kb_verifier *vf, const char *operator_path, cJSON *request,
			      char op_hash[65])
{
	struct kb_state *st = cache_store(vf);
	cJSON *entries;

	op_hash[0] = '\0';
	if (!st)
		return -1;
	if (kb_operator_hash(operator_path, op_hash)) {
		log_warn("baseline cache: operator '%s' cannot be hashed: its baselines are measured",
			 operator_path);
		op_hash[0] = '\0';
		return -1;
	}
	entries = kb_baseline_cache_get(st, op_hash);
	if (!entries) {
		log_warn("baseline cache: not read: the baselines of '%s' are measured", operator_path);
		return -1;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(request, "baseline_cache");
	cJSON_AddItemToObject(request, "baseline_cache", entries);
	return 0;
}

void kb_baseline_cache_keep(struct kb_verifier *vf, const char *op_hash, cJSON *evidence)
{
	cJSON *measured = cJSON_DetachItemFromObjectCaseSensitive(evidence, "baselines_measured");
	const cJSON *verdict = cJSON_GetObjectItemCaseSensitive(evidence, "verdict");

	/* the judge sends them only with a verified kernel; a verdict the bot
	 * overturned (a crash or a hang after the result) keeps none either */
	if (!cJSON_IsString(verdict) || strcmp(verdict->valuestring, "verified"))
		op_hash = "";
	if (measured && *op_hash && vf->st && kb_baseline_cache_put(vf->st, op_hash, measured))
		log_warn("baseline cache: fresh baselines not stored: the next evaluation measures them again");
	cJSON_Delete(measured);
}
