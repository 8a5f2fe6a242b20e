#include "core/common.h"
#include "core/config.h"
#include "core/util.h"
#include "llm/llm_priv.h"

#include <math.h>

/*
 * The Anthropic Messages API: POST {base}/messages with headers x-api-key
 * and anthropic-version, body {"model", "max_tokens" (required),
 * "system" (a top-level string, not a message), "messages",
 * "temperature"}; reasoning_effort turns on extended thinking with a
 * token budget, which must stay below max_tokens and forbids a
 * temperature, so the budget is added on top of the answer's max_tokens
 * and the temperature is left out. The reply's text is every "text"
 * block of "content" joined ("thinking" blocks are skipped).
 */

char *llm_anthropic_request_json(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req)
{
	cJSON *root = cJSON_CreateObject(), *msgs;
	struct strbuf system = STRBUF_INIT;
	int64_t budget = llm_thinking_budget(m->reasoning_effort);
	double t = llm_temperature(m, req);
	char *s, *out;

	if (!root)
		die("out of memory");
	cJSON_AddStringToObject(root, "model", m->model);
	cJSON_AddNumberToObject(root, "max_tokens", (double)(llm_max_tokens(m, req) + budget));
	/* the Messages API has no system role: every system message goes to "system" */
	for (size_t i = 0; i < req->nr_messages; i++) {
		const struct kb_llm_message *msg = &req->messages[i];

		if (strcmp(msg->role, "system") || !msg->content)
			continue;
		if (system.len)
			strbuf_addstr(&system, "\n\n");
		strbuf_addstr(&system, msg->content);
	}
	if (system.len)
		cJSON_AddStringToObject(root, "system", system.buf);
	msgs = cJSON_AddArrayToObject(root, "messages");
	for (size_t i = 0; i < req->nr_messages; i++) {
		const struct kb_llm_message *msg = &req->messages[i];
		cJSON *item;

		if (!strcmp(msg->role, "system"))
			continue;
		item = cJSON_CreateObject();
		if (!item)
			die("out of memory");
		cJSON_AddStringToObject(item, "role", msg->role);
		cJSON_AddStringToObject(item, "content", msg->content ? msg->content : "");
		cJSON_AddItemToArray(msgs, item);
	}
	if (budget) {
		cJSON *thinking = cJSON_AddObjectToObject(root, "thinking");

		cJSON_AddStringToObject(thinking, "type", "enabled");
		cJSON_AddNumberToObject(thinking, "budget_tokens", (double)budget);
	} else if (!isnan(t)) {
		cJSON_AddNumberToObject(root, "temperature", t);
	}
	strbuf_release(&system);
	s = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!s)
		die("out of memory");
	out = xstrdup(s);
	cJSON_free(s);
	return out;
}

static void set_error(struct kb_llm_reply *reply, enum kb_llm_status status, const char *why)
{
	reply->status = status;
	strbuf_reset(&reply->error);
	strbuf_addstr(&reply->error, why);
}

int llm_anthropic_parse(const char *body, size_t len, struct kb_llm_reply *reply)
{
	cJSON *json = cJSON_ParseWithLength(body, len);
	const cJSON *type, *content, *usage, *block;
	int rc = -1;

	strbuf_reset(&reply->text);
	if (!json) {
		set_error(reply, KB_LLM_MALFORMED, "malformed reply: not JSON");
		goto out;
	}
	if (!cJSON_IsObject(json)) {
		set_error(reply, KB_LLM_MALFORMED, "malformed reply: not a JSON object");
		goto out;
	}
	type = cJSON_GetObjectItemCaseSensitive(json, "type");
	if (cJSON_IsString(type) && !strcmp(type->valuestring, "error")) {
		set_error(reply, KB_LLM_MALFORMED, "malformed reply: an error object in a 2xx reply: ");
		llm_add_error_body(&reply->error, body, len);
		goto out;
	}
	usage = cJSON_GetObjectItemCaseSensitive(json, "usage");
	if (cJSON_IsObject(usage)) {
		/* cached prompt tokens are prompt tokens too (priced alike here) */
		reply->prompt_tokens = llm_json_count(usage, "input_tokens") +
				       llm_json_count(usage, "cache_creation_input_tokens") +
				       llm_json_count(usage, "cache_read_input_tokens");
		reply->completion_tokens = llm_json_count(usage, "output_tokens");
	}
	content = cJSON_GetObjectItemCaseSensitive(json, "content");
	if (!cJSON_IsArray(content)) {
		set_error(reply, KB_LLM_MALFORMED, "malformed reply: no \"content\" array");
		goto out;
	}
	cJSON_ArrayForEach(block, content) {
		const cJSON *btype = cJSON_GetObjectItemCaseSensitive(block, "type");
		const cJSON *text = cJSON_GetObjectItemCaseSensitive(block, "text");

		if (!cJSON_IsString(btype)) {
			set_error(reply, KB_LLM_MALFORMED,
				  "malformed reply: a content block without a \"type\"");
			strbuf_reset(&reply->text);
			goto out;
		}
		if (strcmp(btype->valuestring, "text"))
			continue; /* thinking, redacted_thinking, tool_use, ... */
		if (!cJSON_IsString(text)) {
			set_error(reply, KB_LLM_MALFORMED,
				  "malformed reply: a text block without a \"text\" string");
			strbuf_reset(&reply->text);
			goto out;
		}
		strbuf_addstr(&reply->text, text->valuestring);
	}
	rc = llm_reply_settle(reply, "stop_reason", cJSON_GetObjectItemCaseSensitive(json, "stop_reason"));
out:
	cJSON_Delete(json);
	return rc;
}
