#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/state.h"
#include "core/util.h"
#include "llm/llm_priv.h"
#include "llm/usage.h"

#include <inttypes.h>
#include <time.h>

#include <openssl/evp.h>

static int db_fail(struct kb_state *st, const char *what)
{
	return error("could not %s in '%s': %s", what, kb_state_path(st),
		     sqlite3_errmsg(kb_state_db(st)));
}

static int prep(struct kb_state *st, sqlite3_stmt **stmt, const char *sql)
{
	if (sqlite3_prepare_v2(kb_state_db(st), sql, -1, stmt, NULL) != SQLITE_OK) {
		*stmt = NULL;
		return db_fail(st, "prepare an llm_calls query");
	}
	return 0;
}

static void bind_text(sqlite3_stmt *stmt, int col, const char *s)
{
	if (s)
		sqlite3_bind_text(stmt, col, s, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(stmt, col);
}

static void bind_id(sqlite3_stmt *stmt, int col, int64_t id)
{
	if (id > 0)
		sqlite3_bind_int64(stmt, col, id);
	else
		sqlite3_bind_null(stmt, col);
}

int kb_llm_usage_record(struct kb_state *st, const struct kb_llm_call_info *info,
			const struct kb_llm_reply *reply, int64_t *id_out)
{
	static const char sql[] =
		"INSERT INTO llm_calls (job_id, search_id, call_key, purpose, model,"
		" prompt_tokens, completion_tokens, cost_usd, latency_ms, status,"
		" request_hash, response, created_at)"
		" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
	sqlite3_stmt *stmt;
	const struct strbuf *resp = reply->status == KB_LLM_OK ? &reply->text : &reply->error;
	int rc = -1;

	if (prep(st, &stmt, sql))
		return -1;
	bind_id(stmt, 1, info->job_id);
	bind_id(stmt, 2, info->search_id);
	bind_text(stmt, 3, info->call_key);
	bind_text(stmt, 4, info->purpose);
	bind_text(stmt, 5, reply->model);
	sqlite3_bind_int64(stmt, 6, reply->prompt_tokens);
	sqlite3_bind_int64(stmt, 7, reply->completion_tokens);
	sqlite3_bind_double(stmt, 8, reply->cost_usd);
	sqlite3_bind_int64(stmt, 9, reply->latency_ms);
	bind_text(stmt, 10, kb_llm_status_name(reply->status));
	bind_text(stmt, 11, info->request_hash);
	sqlite3_bind_text(stmt, 12, resp->buf, (int)resp->len, SQLITE_TRANSIENT);
	sqlite3_bind_int64(stmt, 13, kb_wall_s());
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		db_fail(st, "record an llm call");
		goto out;
	}
	if (id_out)
		*id_out = sqlite3_last_insert_rowid(kb_state_db(st));
	rc = 0;
out:
	sqlite3_finalize(stmt);
	return rc;
}

int kb_llm_usage_lookup(struct kb_state *st, const char *call_key, struct kb_llm_reply *reply)
{
	static const char sql[] =
		"SELECT model, prompt_tokens, completion_tokens, cost_usd, response"
		" FROM llm_calls WHERE call_key = ? AND status = 'ok' AND response IS NOT NULL"
		" ORDER BY id DESC LIMIT 1";
	sqlite3_stmt *stmt;
	int rc = -1;

	kb_llm_reply_release(reply);
	if (!call_key)
		return KB_ENOTFOUND;
	if (prep(st, &stmt, sql))
		return -1;
	sqlite3_bind_text(stmt, 1, call_key, -1, SQLITE_TRANSIENT);
	switch (sqlite3_step(stmt)) {
	case SQLITE_ROW: {
		const char *model = (const char *)sqlite3_column_text(stmt, 0);
		const void *text = sqlite3_column_blob(stmt, 4);
		int len = sqlite3_column_bytes(stmt, 4);

		reply->status = KB_LLM_OK;
		kb_strlcpy(reply->model, model ? model : "", sizeof(reply->model));
		reply->prompt_tokens = sqlite3_column_int64(stmt, 1);
		reply->completion_tokens = sqlite3_column_int64(stmt, 2);
		reply->cost_usd = sqlite3_column_double(stmt, 3);
		if (text && len > 0)
			strbuf_add(&reply->text, text, (size_t)len);
		rc = 0;
		break;
	}
	case SQLITE_DONE:
		rc = KB_ENOTFOUND;
		break;
	default:
		db_fail(st, "look up an llm call");
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* what totals() reads, in its order */
#define USAGE_COLUMNS "count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0)," \
	" coalesce(sum(cost_usd), 0), coalesce(sum(status != 'ok'), 0)"

static int totals(struct kb_state *st, const char *sql, int64_t arg, struct kb_llm_usage *out)
{
	sqlite3_stmt *stmt;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (prep(st, &stmt, sql))
		return -1;
	sqlite3_bind_int64(stmt, 1, arg);
	if (sqlite3_step(stmt) != SQLITE_ROW) {
		db_fail(st, "sum llm calls");
		goto out;
	}
	out->calls = sqlite3_column_int64(stmt, 0);
	out->prompt_tokens = sqlite3_column_int64(stmt, 1);
	out->completion_tokens = sqlite3_column_int64(stmt, 2);
	out->cost_usd = sqlite3_column_double(stmt, 3);
	out->failed = sqlite3_column_int64(stmt, 4);
	rc = 0;
out:
	sqlite3_finalize(stmt);
	return rc;
}

int kb_llm_usage_search(struct kb_state *st, int64_t search_id, struct kb_llm_usage *out)
{
	return totals(st, "SELECT " USAGE_COLUMNS " FROM llm_calls WHERE search_id = ?", search_id, out);
}

int kb_llm_usage_daily(struct kb_state *st, int64_t now_s, struct kb_llm_usage *out)
{
	return totals(st, "SELECT " USAGE_COLUMNS " FROM llm_calls WHERE created_at > ?",
		      now_s - 86400, out);
}

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
	static const char hex[] = "0123456789abcdef";
	char *body = kb_llm_request_json((enum kb_llm_provider)m->provider, m, req);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	const char *p = kb_llm_provider_name((enum kb_llm_provider)m->provider);

	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
	    EVP_DigestUpdate(ctx, p, strlen(p) + 1) != 1 ||
	    EVP_DigestUpdate(ctx, body, strlen(body)) != 1 ||
	    EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32)
		die("could not compute a sha256 digest");
	EVP_MD_CTX_free(ctx);
	free(body);
	for (unsigned int i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = '\0';
}

int kb_llm_call(struct kb_llm_client *c, struct kb_state *st, size_t i,
		const struct kb_llm_request *req, const struct kb_llm_call_info *info,
		const struct kb_llm_budget *budget, struct kb_llm_reply *reply)
{
	const struct kb_llm_model_cfg *m = kb_llm_model(c, i);
	struct kb_llm_call_info rec = *info;
	struct kb_llm_estimate est;
	struct strbuf why = STRBUF_INIT;
	char hash[65];
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
	rc = kb_llm_chat(c, i, req, reply);
	if (!rec.purpose)
		rec.purpose = req->purpose;
	if (!rec.request_hash) {
		kb_llm_request_hash(m, req, hash);
		rec.request_hash = hash;
	}
	if (kb_llm_usage_record(st, &rec, reply, NULL))
		return -1;
	return rc;
}
