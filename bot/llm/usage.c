#include "core/common.h"
#include "core/config.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/state.h"
#include "core/util.h"
#include "llm/llm_priv.h"
#include "llm/usage.h"

#include <inttypes.h>
#include <time.h>


void kb_llm_budget_from_config(struct kb_llm_budget *b, const struct kb_config *cfg)
{
	b->job_usd = cfg->search_job_budget_usd;
	b->job_tokens = cfg->search_job_budget_tokens;
	b->daily_usd = cfg->llm_daily_budget_usd;
	b->daily_tokens = cfg->llm_daily_budget_tokens;
}

void kb_llm_estimate(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req,
		     struct kb_llm_estimate *out)
{
	size_t chars = 0;

	for (size_t i = 0; i < req->nr_messages; i++)
		if (req->messages[i].content)
			chars += strlen(req->messages[i].content);
	out->prompt_tokens = (int64_t)((chars + 3) / 4);
	out->completion_tokens = llm_max_tokens(m, req);
	if (m->provider == KB_LLM_ANTHROPIC)
		out->completion_tokens += llm_thinking_budget(m->reasoning_effort);
	out->cost_usd = kb_llm_cost(m, out->prompt_tokens, out->completion_tokens);
}

/* One budget: 0, or KB_EBUDGET with why. */
static int check_tokens(const char *which, int64_t limit, const struct kb_llm_usage *u,
			int64_t est, struct strbuf *why)
{
	int64_t used = u->prompt_tokens + u->completion_tokens;

	if (limit <= 0 || used + est <= limit)
		return 0;
	strbuf_addf(why, "the %s token budget would be exceeded: %" PRId64 " used + %" PRId64
		    " estimated > %" PRId64, which, used, est, limit);
	return KB_EBUDGET;
}

static int check_usd(const char *which, double limit, const struct kb_llm_usage *u, double est,
		     struct strbuf *why)
{
	if (limit <= 0 || u->cost_usd + est <= limit)
		return 0;
	strbuf_addf(why, "the %s budget of $%.2f would be exceeded: $%.4f spent + $%.4f estimated"
		    " > $%.2f", which, limit, u->cost_usd, est, limit);
	return KB_EBUDGET;
}

int kb_llm_budget_check(struct kb_state *st, const struct kb_llm_budget *b, int64_t search_id,
			const struct kb_llm_estimate *est, struct strbuf *why)
{
	struct kb_llm_usage u;
	int64_t tokens = est->prompt_tokens + est->completion_tokens;
	int rc;

	if (search_id > 0 && (b->job_tokens > 0 || b->job_usd > 0)) {
		if (kb_llm_usage_search(st, search_id, &u))
			return -1;
		if ((rc = check_tokens("job", b->job_tokens, &u, tokens, why)) ||
		    (rc = check_usd("job", b->job_usd, &u, est->cost_usd, why)))
			return rc;
	}
	if (b->daily_tokens > 0 || b->daily_usd > 0) {
		if (kb_llm_usage_daily(st, kb_wall_s(), &u))
			return -1;
		if ((rc = check_tokens("daily", b->daily_tokens, &u, tokens, why)) ||
		    (rc = check_usd("daily", b->daily_usd, &u, est->cost_usd, why)))
			return rc;
	}
	return 0;
}

void kb_llm_request_hash(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req,
			 char out[65])
{
	char *body = kb_llm_request_json((enum kb_llm_provider)m->provider, m, req);
	const char *p = kb_llm_provider_name((enum kb_llm_provider)m->provider);
	struct kb_sha256 h;

	kb_sha256_init(&h);
	kb_sha256_update(&h, p, strlen(p) + 1);
	kb_sha256_update(&h, body, strlen(body));
	kb_sha256_final_hex(&h, out);
	free(body);
}

/*
 * A reply the provider sent (2xx) but that carried no usable usage figures
 * (malformed, over the size cap, empty) was still billed: record the
 * estimate (the prompt's characters / 4, the full max_tokens) rather than
 * 0 tokens, so that the budgets and the cost stay on the safe side, and
 * say so in the reply's error line.
 */
static void estimate_billed(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req,
			    struct kb_llm_reply *reply)
{
	struct kb_llm_estimate est;

	if (reply->status == KB_LLM_OK || reply->http_status < 200 || reply->http_status > 299 ||
	    reply->prompt_tokens || reply->completion_tokens)
		return;
	kb_llm_estimate(m, req, &est);
	reply->prompt_tokens = est.prompt_tokens;
	reply->completion_tokens = est.completion_tokens;
	reply->cost_usd = est.cost_usd;
	strbuf_addstr(&reply->error, " (no usage in the reply: tokens and cost estimated)");
}

int kb_llm_call(struct kb_llm_client *c, struct kb_state *st, size_t i,
		const struct kb_llm_request *req, const struct kb_llm_call_info *info,
		const struct kb_llm_budget *budget, struct kb_llm_reply *reply)
{
	const struct kb_llm_model_cfg *m = kb_llm_model(c, i);
	struct kb_llm_estimate est;
	struct strbuf why = STRBUF_INIT;
	int rc;

	if (info->call_key) {
		rc = kb_llm_usage_lookup(st, info->call_key, reply);
		if (rc != KB_ENOTFOUND)
			return rc; /* 0: replayed; -1: the store failed */
	}
	kb_llm_reply_release(reply);
	if (!m) {
		reply->status = KB_LLM_HTTP_ERROR;
		strbuf_addf(&reply->error, "llm: no model number %zu", i);
		return -1;
	}
	if (budget) {
		kb_llm_estimate(m, req, &est);
		rc = kb_llm_budget_check(st, budget, info->search_id, &est, &why);
		if (rc) {
			if (rc == KB_EBUDGET) {
				kb_strlcpy(reply->model, m->name, sizeof(reply->model));
				strbuf_addf(&reply->error, "llm '%s': %s", m->name, why.buf);
			}
			strbuf_release(&why);
			return rc;
		}
	}
	strbuf_release(&why);
	return kb_llm_call_unchecked(c, st, i, req, info, reply);
}

int kb_llm_call_unchecked(struct kb_llm_client *c, struct kb_state *st, size_t i,
			  const struct kb_llm_request *req, const struct kb_llm_call_info *info,
			  struct kb_llm_reply *reply)
{
	const struct kb_llm_model_cfg *m = kb_llm_model(c, i);
	struct kb_llm_call_info rec = *info;
	char hash[65];
	int rc;

	rc = kb_llm_chat(c, i, req, reply);
	if (!m)
		return rc;
	estimate_billed(m, req, reply);
	if (!rec.purpose)
		rec.purpose = req->purpose;
	if (!rec.request_hash) {
		kb_llm_request_hash(m, req, hash);
		rec.request_hash = hash;
	}
	/* a call a stop or an abort ended was not answered: nothing to replay, but
	 * what it cost so far is recorded all the same */
	if (kb_llm_usage_record(st, &rec, reply, NULL))
		return -1;
	return rc;
}
