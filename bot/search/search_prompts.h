#ifndef KB_SEARCH_PROMPTS_H
#define KB_SEARCH_PROMPTS_H
/*
 * The search's prompt templates (the .md files in bot/search/prompts, found through
 * the data dir) and the small renderer that fills them:
 *
 *   {{name}}                 the value of name
 *   {{#name}}...{{/name}}    the inside, only when name is set and not empty
 *
 * Names are [a-z0-9_]. Values are inserted as they are (never rendered
 * again), so a kernel that contains "{{" is harmless. A placeholder
 * without a value is an error: a typo in a template fails the tests,
 * not a search.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

struct kb_prompt_vars {
	struct strvec names, values;
};

#define KB_PROMPT_VARS_INIT { STRVEC_INIT, STRVEC_INIT }

void kb_prompt_vars_release(struct kb_prompt_vars *v);
/* Set name to value (a copy; NULL is ""), replacing an earlier value. */
void kb_prompt_var(struct kb_prompt_vars *v, const char *name, const char *value);
void kb_prompt_varf(struct kb_prompt_vars *v, const char *name, const char *fmt, ...) KB_PRINTF(3, 4);
/* The value of name, NULL when unset. */
const char *kb_prompt_var_get(const struct kb_prompt_vars *v, const char *name);

/*
 * Render tmpl into out (appended). 0, or -1 with why (nothing logged): a
 * placeholder without a value, an unclosed {{ or section, a section
 * closed out of order.
 */
int kb_prompt_render(const char *tmpl, const struct kb_prompt_vars *v, struct strbuf *out,
		     struct strbuf *why);

/* <root>/bot/search/prompts/<name> into out. 0, or -1 (logged). */
int kb_prompt_load(const char *root, const char *name, struct strbuf *out);

#endif
