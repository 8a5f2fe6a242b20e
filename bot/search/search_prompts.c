#include "core/common.h"
#include "search/search_prompts.h"
#include "core/util.h"

#include <ctype.h>

void kb_prompt_vars_release(struct kb_prompt_vars *v)
{
	strvec_clear(&v->names);
	strvec_clear(&v->values);
}

void kb_prompt_var(struct kb_prompt_vars *v, const char *name, const char *value)
{
	for (size_t i = 0; i < v->names.nr; i++)
		if (!strcmp(v->names.v[i], name)) {
			free((char *)v->values.v[i]);
			v->values.v[i] = xstrdup(value ? value : "");
			return;
		}
	strvec_push(&v->names, name);
	strvec_push(&v->values, value ? value : "");
}

void kb_prompt_varf(struct kb_prompt_vars *v, const char *name, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	kb_prompt_var(v, name, sb.buf);
	strbuf_release(&sb);
}

const char *kb_prompt_var_get(const struct kb_prompt_vars *v, const char *name)
{
	for (size_t i = 0; i < v->names.nr; i++)
		if (!strcmp(v->names.v[i], name))
			return v->values.v[i];
	return NULL;
}

static const char *var_n(const struct kb_prompt_vars *v, const char *name, size_t len)
{
	for (size_t i = 0; i < v->names.nr; i++)
		if (strlen(v->names.v[i]) == len && !memcmp(v->names.v[i], name, len))
			return v->values.v[i];
	return NULL;
}

#define MAX_DEPTH 8

int kb_prompt_render(const char *tmpl, const struct kb_prompt_vars *v, struct strbuf *out,
		     struct strbuf *why)
{
	const char *p = tmpl, *open[MAX_DEPTH];
	size_t open_len[MAX_DEPTH];
	int depth = 0, skip = 0; /* skip: depth of the outermost section left out, 0: none */

	while (*p) {
		const char *s = strstr(p, "{{"), *name, *end;
		size_t len;
		char kind;

		if (!s) {
			if (!skip)
				strbuf_addstr(out, p);
			break;
		}
		if (!skip)
			strbuf_add(out, p, (size_t)(s - p));
		end = strstr(s + 2, "}}");
		if (!end) {
			strbuf_addstr(why, "unclosed '{{'");
			return -1;
		}
		name = s + 2;
		kind = *name == '#' || *name == '/' ? *name++ : 0;
		len = (size_t)(end - name);
		for (size_t i = 0; i < len; i++)
			if (!(islower((unsigned char)name[i]) || isdigit((unsigned char)name[i]) || name[i] == '_'))
				len = 0;
		if (!len) {
			strbuf_addf(why, "bad placeholder '%.*s'", (int)(end + 2 - s), s);
			return -1;
		}
		if (kind == '#') {
			const char *val = var_n(v, name, len);

			if (depth == MAX_DEPTH) {
				strbuf_addstr(why, "sections nested too deep");
				return -1;
			}
			open[depth] = name;
			open_len[depth] = len;
			depth++;
			if (!skip && (!val || !*val))
				skip = depth;
		} else if (kind == '/') {
			if (!depth || open_len[depth - 1] != len || memcmp(open[depth - 1], name, len)) {
				strbuf_addf(why, "'{{/%.*s}}' closes no open section", (int)len, name);
				return -1;
			}
			if (skip == depth)
				skip = 0;
			depth--;
		} else if (!skip) {
			const char *val = var_n(v, name, len);

			if (!val) {
				strbuf_addf(why, "no value for '{{%.*s}}'", (int)len, name);
				return -1;
			}
			strbuf_addstr(out, val);
		}
		p = end + 2;
		/* a section tag alone on its line takes its newline with it */
		if (kind && *p == '\n' && (s == tmpl || s[-1] == '\n'))
			p++;
	}
	if (depth) {
		strbuf_addf(why, "section '{{#%.*s}}' is not closed", (int)open_len[depth - 1], open[depth - 1]);
		return -1;
	}
	return 0;
}

int kb_prompt_load(const char *root, const char *name, struct strbuf *out)
{
	struct strbuf path = STRBUF_INIT;
	int rc = 0;

	strbuf_addf(&path, "%s/bot/search/prompts/%s", root, name);
	if (strbuf_read_file(out, path.buf, 1u << 20) < 0)
		rc = error("could not read prompt template '%s'", path.buf);
	strbuf_release(&path);
	return rc;
}
