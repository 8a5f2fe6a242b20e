/*
 * A webhook delivery's body (daemon/webhook.c kb_webhook_extract), after
 * its signature passed: first line the X-GitHub-Event name, the rest the
 * body. What is queued is a JSON object with the fields its event must
 * have, numbers that are whole and positive (the daemon reads them as
 * int64), and for a comment the command kb_jobs_parse_command finds.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "daemon/webhook.h"
#include "jobs/jobs.h"
#include "fuzz.h"

#include <cjson/cJSON.h>

static const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Absent, or a whole number in [1, 2^53]. */
static bool id_ok(const cJSON *o, const char *key, bool required)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!v)
		return !required;
	return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 9007199254740992.0 &&
	       v->valuedouble == (double)(int64_t)v->valuedouble;
}

int kb_fuzz_webhook_event(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t elen = nl ? (size_t)(nl - data) : size;
	char *event = kb_fuzz_str(data, elen);
	char *body = kb_fuzz_str(nl ? nl + 1 : data + size, nl ? size - elen - 1 : 0);
	size_t blen = nl ? size - elen - 1 : 0;
	struct strbuf out = STRBUF_INIT;
	cJSON *o;

	kb_fuzz_init();
	if (kb_webhook_extract(&out, event, body, blen))
		goto done;
	o = cJSON_Parse(out.buf);
	FUZZ_CHECK(cJSON_IsObject(o));
	FUZZ_CHECK(jstr(o, "event") && !strcmp(jstr(o, "event"), event));
	FUZZ_CHECK(jstr(o, "action") && jstr(o, "repo"));
	FUZZ_CHECK(id_ok(o, "number", true));
	FUZZ_CHECK(id_ok(o, "comment_id", false));
	FUZZ_CHECK(id_ok(o, "installation_id", false));
	if (!strcmp(event, "issue_comment")) {
		const char *cmd = jstr(o, "command");

		FUZZ_CHECK(cmd && (!strcmp(cmd, "run") || !strcmp(cmd, "stop")));
	} else {
		FUZZ_CHECK(!strcmp(event, "pull_request") && jstr(o, "head_sha"));
	}
	cJSON_Delete(o);
done:
	strbuf_release(&out);
	free(event);
	free(body);
	return 0;
}

KB_FUZZ_ENTRY(webhook_event)
