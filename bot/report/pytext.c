#include "core/common.h"
#include "core/util.h"
#include "report/pytext.h"

#include <cjson/cJSON.h>

void kb_pytext_doc_safe(struct strbuf *out, const char *s, const char *extra)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '_' || c == '-' || c == '.' || (extra && strchr(extra, c)))
			strbuf_addch(out, (char)c);
		else
			strbuf_addch(out, '_');
	}
}

static void add_json(struct strbuf *out, cJSON *j)
{
	char *text = cJSON_PrintUnformatted(j);

	if (!text)
		die("out of memory");
	strbuf_addstr(out, text);
	free(text);
	cJSON_Delete(j);
}

void kb_pytext_json_string(struct strbuf *out, const char *s)
{
	add_json(out, cJSON_CreateString(s ? s : ""));
}

void kb_pytext_json_strings(struct strbuf *out, const char *const *v, size_t n)
{
	cJSON *j = cJSON_CreateArray();

	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(j, cJSON_CreateString(v[i] ? v[i] : ""));
	add_json(out, j);
}

void kb_pytext_fill(struct strbuf *out, const char *text, const char *const *names,
		    const struct strbuf *vals, size_t n)
{
	const char *p = text;

	while (*p) {
		const char *at = strchr(p, '@'), *end;
		size_t k;

		if (!at) {
			strbuf_addstr(out, p);
			return;
		}
		strbuf_add(out, p, (size_t)(at - p));
		end = strchr(at + 1, '@');
		for (k = 0; end && k < n; k++)
			if ((size_t)(end - at - 1) == strlen(names[k]) &&
			    !memcmp(at + 1, names[k], strlen(names[k])))
				break;
		if (!end || k == n) {
			strbuf_addch(out, '@');
			p = at + 1;
			continue;
		}
		strbuf_add(out, vals[k].buf, vals[k].len);
		p = end + 1;
	}
}
