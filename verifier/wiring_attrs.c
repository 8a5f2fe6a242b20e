#include "core/common.h"
#include "core/redact.h"
#include "verifier/wiring.h"

#include <math.h>

/*
 * The wiring check's record of the module's settings (kb_wiring_attributes):
 * they become a Python literal in ops.py, which the patched module compares
 * its own attributes with on every call. Taken only whole: a value that
 * would be changed on the way (cut, redacted) could never compare equal,
 * and a name that is no identifier could not be looked up.
 */

#define PATHS_MAX 64
#define ATTRS_MAX 256
#define PATH_MAX_BYTES 200
#define NAME_MAX_BYTES 64
#define STRING_MAX_BYTES 200
#define TUPLE_MAX 16

static bool ident_chars(const char *s, size_t max, bool dots)
{
	size_t n = strlen(s);

	if (n > max)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || (dots && *p == '.')))
			return false;
	return true;
}

static cJSON *scalar(const cJSON *v)
{
	char *r;
	cJSON *out = NULL;

	if (cJSON_IsBool(v) || cJSON_IsNull(v))
		return cJSON_Duplicate(v, false);
	if (cJSON_IsNumber(v))
		return isfinite(v->valuedouble) ? cJSON_CreateNumber(v->valuedouble) : NULL;
	if (!cJSON_IsString(v) || strlen(v->valuestring) > STRING_MAX_BYTES)
		return NULL;
	for (const char *p = v->valuestring; *p; p++)
		if ((unsigned char)*p < 0x20)
			return NULL;
	r = kb_redact_str(v->valuestring, STRING_MAX_BYTES + 1);
	if (!strcmp(r, v->valuestring))
		out = cJSON_CreateString(r);
	free(r);
	return out;
}

static cJSON *value(const cJSON *v)
{
	const cJSON *x;
	cJSON *arr;

	if (!cJSON_IsArray(v))
		return scalar(v);
	if (cJSON_GetArraySize(v) > TUPLE_MAX)
		return NULL;
	arr = cJSON_CreateArray();
	cJSON_ArrayForEach(x, v) {
		cJSON *s = scalar(x);

		if (!s) {
			cJSON_Delete(arr);
			return NULL;
		}
		cJSON_AddItemToArray(arr, s);
	}
	return arr;
}

bool kb_wiring_attributes(const cJSON *raw, cJSON *out)
{
	const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(raw, "attributes"), *sub, *a;
	cJSON *o, *unknown;
	size_t paths = 0, n = 0;
	bool whole = cJSON_IsObject(attrs);

	if (!whole)
		attrs = NULL;

	o = cJSON_AddObjectToObject(out, "attributes");
	cJSON_ArrayForEach(sub, attrs) {
		cJSON *so;

		if (!cJSON_IsObject(sub) || !ident_chars(sub->string, PATH_MAX_BYTES, true) || ++paths > PATHS_MAX) {
			whole = false;
			continue;
		}
		so = cJSON_CreateObject();
		cJSON_ArrayForEach(a, sub) {
			cJSON *v = ident_chars(a->string, NAME_MAX_BYTES, false) && *a->string && ++n <= ATTRS_MAX
					   ? value(a) : NULL;

			if (v)
				cJSON_AddItemToObject(so, a->string, v);
			else
				whole = false;
		}
		cJSON_AddItemToObject(o, sub->string, so);
	}
	unknown = cJSON_AddArrayToObject(out, "attributes_unknown");
	cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(raw, "attributes_unknown")) {
		char *r = kb_redact_str(cJSON_IsString(a) ? a->valuestring : "?", 160);

		cJSON_AddItemToArray(unknown, cJSON_CreateString(r));
		free(r);
		if (cJSON_GetArraySize(unknown) >= 16)
			break;
	}
	return whole && !cJSON_GetArraySize(unknown);
}
