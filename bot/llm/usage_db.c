#include "core/common.h"
#include "llm/usage.h"
#include "core/log.h"
#include "core/state.h"
#include "core/util.h"

/*
 * The llm_calls table: every SQL statement of bot/llm/ (the calls of
 * usage.h that record, replay and sum LLM calls). Budgets and the call
 * itself are in usage.c.
 */

static int prep(struct kb_state *st, sqlite3_stmt **stmt, const char *sql)
{
	return kb_state_prepare_logged(st, stmt, sql, "could not prepare an llm_calls query");
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
	kb_state_bind_id(stmt, 1, info->job_id);
	kb_state_bind_id(stmt, 2, info->search_id);
	kb_state_bind_text(stmt, 3, info->call_key);
	kb_state_bind_text(stmt, 4, info->purpose);
	kb_state_bind_text(stmt, 5, reply->model);
	sqlite3_bind_int64(stmt, 6, reply->prompt_tokens);
	sqlite3_bind_int64(stmt, 7, reply->completion_tokens);
	sqlite3_bind_double(stmt, 8, reply->cost_usd);
	sqlite3_bind_int64(stmt, 9, reply->latency_ms);
	kb_state_bind_text(stmt, 10, kb_llm_status_name(reply->status));
	kb_state_bind_text(stmt, 11, info->request_hash);
	sqlite3_bind_text(stmt, 12, resp->buf, (int)resp->len, SQLITE_TRANSIENT);
	sqlite3_bind_int64(stmt, 13, kb_wall_s());
	if (sqlite3_step(stmt) != SQLITE_DONE) {
		kb_state_error(st, "could not record an llm call");
		goto out;
	}
	if (id_out)
		*id_out = kb_state_last_insert_rowid(st);
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
	sqlite3_stmt *stmt = NULL;
	int rc;

	kb_llm_reply_release(reply);
	if (!call_key)
		return KB_ENOTFOUND;
	rc = kb_state_query_row(st, &stmt, "look up an llm call", sql, "t", call_key);
	if (rc == 1) {
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
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* what totals() reads, in its order */
#define USAGE_COLUMNS "count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0)," \
	" coalesce(sum(cost_usd), 0), coalesce(sum(status != 'ok'), 0)"

static int totals(struct kb_state *st, const char *sql, int64_t arg, struct kb_llm_usage *out)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	/* an aggregate: always one row */
	rc = kb_state_query_row(st, &stmt, "sum llm calls", sql, "i", arg);
	if (rc == 1) {
		out->calls = sqlite3_column_int64(stmt, 0);
		out->prompt_tokens = sqlite3_column_int64(stmt, 1);
		out->completion_tokens = sqlite3_column_int64(stmt, 2);
		out->cost_usd = sqlite3_column_double(stmt, 3);
		out->failed = sqlite3_column_int64(stmt, 4);
		rc = 0;
	} else if (rc == KB_ENOTFOUND) {
		rc = error("no sum of llm calls in '%s'", kb_state_path(st));
	}
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
