#include "core/common.h"
#include "core/util.h"
#include "forge/github/gh.h"

const char *gh_jstr(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int64_t gh_jint(const cJSON *o, const char *key, int64_t def)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	if (!cJSON_IsNumber(v) || v->valuedouble < -9.0e15 || v->valuedouble > 9.0e15)
		return def;
	return (int64_t)v->valuedouble;
}

const cJSON *gh_jobj(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsObject(v) ? v : NULL;
}

char *gh_jdup(const cJSON *o, const char *key)
{
	const char *s = gh_jstr(o, key);

	return s ? xstrdup(s) : NULL;
}

char *gh_jprint(const cJSON *v)
{
	char *s = cJSON_PrintUnformatted(v);

	if (!s)
		die("out of memory");
	return s;
}

int gh_paginate(struct gh *gh, const struct gh_req *first, gh_item_fn fn, void *payload,
		bool *not_modified, struct strbuf *etag_out)
{
	struct gh_req req = *first;
	struct gh_reply rep;
	char *next = NULL;
	int rc = 0;

	if (not_modified)
		*not_modified = false;
	gh_reply_init(&rep);
	for (int page = 0;; page++) {
		cJSON *json;
		const cJSON *item;

		if (page >= GH_MAX_PAGES) {
			rc = error("github: more than %d pages from '%s'", GH_MAX_PAGES, first->path);
			break;
		}
		if ((rc = gh_call(gh, &req, &rep)))
			break;
		if (page == 0 && etag_out) {
			strbuf_reset(etag_out);
			if (rep.etag)
				strbuf_addstr(etag_out, rep.etag);
		}
		if (page == 0 && rep.not_modified && first->if_none_match) {
			if (not_modified)
				*not_modified = true;
			break;
		}
		if (!(json = gh_reply_json(&req, &rep, cJSON_Array))) {
			rc = -1;
			break;
		}
		cJSON_ArrayForEach(item, json) {
			rc = fn(gh, item, payload);
			if (rc)
				break;
		}
		cJSON_Delete(json);
		if (rc)
			break;
		free(next);
		next = gh_link_find(rep.link, "next");
		if (!next)
			break;
		/* only the first page is conditional on the caller's ETag */
		req.path = next;
		req.if_none_match = NULL;
	}
	free(next);
	gh_reply_release(&rep);
	return rc;
}
