#include "core/common.h"
#include "core/config.h"
#include "core/util.h"
#include "llm/llm_priv.h"

#include <math.h>

/*
 * OpenAI-compatible chat completions: POST {base}/chat/completions with
 * {"model", "messages": [{"role", "content"}], "max_tokens",
 * "temperature"}; the reply's text is choices[0].message.content.
 * A model with reasoning_effort gets "reasoning_effort" and
 * "max_completion_tokens" instead of "max_tokens": OpenAI's reasoning
 * models refuse max_tokens, and vLLM accepts either.
 */

char *llm_openai_request_json(const struct kb_llm_model_cfg *m, const struct kb_llm_request *req)
{
	cJSON *root = cJSON_CreateObject(), *msgs;
	double t = llm_temperature(m, req);
	int64_t max = llm_max_tokens(m, req);
	char *s, *out;

	if (!root)
		die("out of memory");
	cJSON_AddStringToObject(root, "model", m->model);
	msgs = cJSON_AddArrayToObject(root, "messages");
	for (size_t i = 0; i < req->nr_messages; i++) {
		cJSON *msg = cJSON_CreateObject();

		if (!msg)
			die("out of memory");
		cJSON_AddStringToObject(msg, "role", req->messages[i].role);
		cJSON_AddStringToObject(msg, "content",
					req->messages[i].content ? req->messages[i].content : "");
		cJSON_AddItemToArray(msgs, msg);
	}
	if (m->reasoning_effort && *m->reasoning_effort) {
		cJSON_AddNumberToObject(root, "max_completion_tokens", (double)max);
		cJSON_AddStringToObject(root, "reasoning_effort", m->reasoning_effort);
	} else {
		cJSON_AddNumberToObject(root, "max_tokens", (double)max);
	}
	if (!isnan(t))
		cJSON_AddNumberToObject(root, "temperature", t);
	s = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!s)
		die("out of memory");
	out = xstrdup(s);
	cJSON_free(s);
	return out;
}

static int malformed(struct kb_llm_reply *reply, const char *why)
{
	reply->status = KB_LLM_MALFORMED;
	strbuf_reset(&reply->error);
	strbuf_addf(&reply->error, "malformed reply: %s", why);
	return -1;
}

int llm_openai_parse(const char *body, size_t len, struct kb_llm_reply *reply)
{
	cJSON *json = cJSON_ParseWithLength(body, len);
	const cJSON *choices, *c0, *msg, *content, *usage, *err;
	int rc = -1;

	strbuf_reset(&reply->text);
	if (!json) {
		malformed(reply, "not JSON");
		goto out;
	}
	if (!cJSON_IsObject(json)) {
		malformed(reply, "not a JSON object");
		goto out;
	}
	err = cJSON_GetObjectItemCaseSensitive(json, "error");
	if (err && !cJSON_IsNull(err)) {
		malformed(reply, "an error object in a 2xx reply: ");
		llm_add_error_body(&reply->error, body, len);
		goto out;
	}
	usage = cJSON_GetObjectItemCaseSensitive(json, "usage");
	if (cJSON_IsObject(usage)) {
		reply->prompt_tokens = llm_json_count(usage, "prompt_tokens");
		reply->completion_tokens = llm_json_count(usage, "completion_tokens");
	}
	choices = cJSON_GetObjectItemCaseSensitive(json, "choices");
	if (!cJSON_IsArray(choices)) {
		malformed(reply, "no \"choices\" array");
		goto out;
	}
	c0 = cJSON_GetArrayItem(choices, 0);
	if (!c0) {
		reply->status = KB_LLM_EMPTY;
		strbuf_reset(&reply->error);
		strbuf_addstr(&reply->error, "empty reply: no choices");
		goto out;
	}
	msg = cJSON_GetObjectItemCaseSensitive(c0, "message");
	if (!cJSON_IsObject(msg)) {
		malformed(reply, "no \"message\" object in choices[0]");
		goto out;
	}
	content = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (cJSON_IsString(content)) {
		strbuf_addstr(&reply->text, content->valuestring);
	} else if (cJSON_IsArray(content)) {
		/* some servers answer with content parts */
		const cJSON *part;

		cJSON_ArrayForEach(part, content) {
			const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
			const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");

			if (cJSON_IsString(type) && !strcmp(type->valuestring, "text") &&
			    cJSON_IsString(text))
				strbuf_addstr(&reply->text, text->valuestring);
		}
	} else if (content && !cJSON_IsNull(content)) {
		malformed(reply, "\"content\" is neither a string nor null");
		goto out;
	}
	rc = llm_reply_settle(reply, "finish_reason", cJSON_GetObjectItemCaseSensitive(c0, "finish_reason"));
out:
	cJSON_Delete(json);
	return rc;
}
