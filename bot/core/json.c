#include "core/common.h"
#include "core/json.h"
#include "core/util.h"

const char *kb_json_str(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

double kb_json_num(const cJSON *o, const char *key, double def)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsNumber(v) ? v->valuedouble : def;
}

int64_t kb_json_i64(const cJSON *o, const char *key, int64_t def)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsNumber(v) ? kb_i64_from_double(v->valuedouble) : def;
}
