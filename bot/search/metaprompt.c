#include "core/common.h"
#include "search/metaprompt.h"
#include "search/extract.h"
#include "core/rng.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <ctype.h>
#include <math.h>

#define MAX_SECTION (8 * 1024)

const char *const kb_prompt_section_names[] = { "strategies", "pitfalls", "analysis", NULL };

void kb_prompt_init(struct kb_prompt *p)
{
	memset(p, 0, sizeof(*p));
	p->fitness = NAN;
}

void kb_prompt_release(struct kb_prompt *p)
{
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++)
		FREE_AND_NULL(p->sections[i]);
}

cJSON *kb_prompt_sections_json(const struct kb_prompt *p)
{
	cJSON *j = cJSON_CreateObject();

	if (!j)
		die("out of memory");
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++)
		if (!cJSON_AddStringToObject(j, kb_prompt_section_names[i], p->sections[i] ? p->sections[i] : ""))
			die("out of memory");
	return j;
}

int kb_prompt_sections_from_json(struct kb_prompt *p, const cJSON *j)
{
	const char *v[KB_PROMPT_NR_SECTIONS];

	if (!cJSON_IsObject(j))
		return error("prompt sections are not a json object");
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++) {
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, kb_prompt_section_names[i]);

		if (!cJSON_IsString(s) || !s->valuestring)
			return error("prompt section '%s' is missing or not a string", kb_prompt_section_names[i]);
		v[i] = s->valuestring;
	}
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++) {
		free(p->sections[i]);
		p->sections[i] = xstrdup(v[i]);
	}
	return 0;
}

size_t kb_metaprompt_select(const struct kb_prompt *prompts, size_t n, double temperature,
			    double exploration, uint64_t *rng)
{
	double lowest = INFINITY, top = -INFINITY, total = 0, r, *w;
	size_t unused = 0, pick;

	if (n <= 1)
		return 0;
	if (kb_rng_double(rng) < exploration) {
		for (size_t i = 0; i < n; i++)
			if (!prompts[i].uses)
				unused++;
		if (unused) {
			size_t k = kb_rng_below(rng, unused);

			for (size_t i = 0; i < n; i++)
				if (!prompts[i].uses && !k--)
					return i;
		}
		return kb_rng_below(rng, n);
	}

	for (size_t i = 0; i < n; i++)
		if (isfinite(prompts[i].fitness) && prompts[i].fitness < lowest)
			lowest = prompts[i].fitness;
	if (!isfinite(lowest))
		lowest = 1.0;
	w = xmalloc(n * sizeof(*w));
	for (size_t i = 0; i < n; i++) {
		w[i] = isfinite(prompts[i].fitness) ? prompts[i].fitness : lowest;
		if (w[i] > top)
			top = w[i];
	}
	if (!(temperature > 0) || !isfinite(temperature)) {
		/* greedy: the first of the fittest */
		for (pick = 0; pick < n && w[pick] < top; pick++)
			;
		free(w);
		return pick < n ? pick : 0;
	}
	for (size_t i = 0; i < n; i++) {
		w[i] = exp((w[i] - top) / temperature);
		total += w[i];
	}
	r = kb_rng_double(rng) * total;
	for (pick = 0; pick + 1 < n; pick++) {
		if (r < w[pick])
			break;
		r -= w[pick];
	}
	free(w);
	return pick;
}

void kb_prompt_credit(struct kb_prompt *p, double fitness)
{
	if (!isfinite(fitness) || fitness <= 0)
		return;
	if (isnan(p->fitness) || fitness > p->fitness)
		p->fitness = fitness;
}

/* A markdown heading naming a section: its index and level, or -1. Any heading: *level > 0. */
static int heading(const char *s, size_t n, int *level)
{
	size_t i = 0, h = 0, e;

	*level = 0;
	while (i < n && i < 3 && s[i] == ' ')
		i++;
	while (i + h < n && s[i + h] == '#')
		h++;
	if (!h || h > 6 || (i + h < n && s[i + h] != ' ' && s[i + h] != '\t'))
		return -1;
	*level = (int)h;
	i += h;
	e = n;
	/* trim: spaces, closing #s, a trailing colon, emphasis or code marks around the word */
	while (i < e && (isspace((unsigned char)s[i]) || s[i] == '*' || s[i] == '_' || s[i] == '`'))
		i++;
	while (e > i && (isspace((unsigned char)s[e - 1]) || s[e - 1] == '#' || s[e - 1] == ':' ||
			 s[e - 1] == '*' || s[e - 1] == '_' || s[e - 1] == '`'))
		e--;
	for (int k = 0; k < KB_PROMPT_NR_SECTIONS; k++) {
		size_t l = strlen(kb_prompt_section_names[k]);

		if (e - i == l && !strncasecmp(s + i, kb_prompt_section_names[k], l))
			return k;
	}
	return -1;
}

static bool fence_line(const char *s, size_t n, char *fc, size_t *fn)
{
	size_t indent;

	return kb_fence_marker(s, n, fc, fn, &indent);
}

int kb_metaprompt_parse_rewrite(const struct kb_prompt *parent, const char *reply,
				struct kb_prompt *child, struct strbuf *why)
{
	struct strbuf text[KB_PROMPT_NR_SECTIONS];
	bool seen[KB_PROMPT_NR_SECTIONS] = { false };
	int cur = -1, cur_level = 0, found = 0, ret = -1;
	char fc = 0;
	size_t fn = 0;
	bool in_fence = false;
	const char *p = reply ? reply : "";

	for (int k = 0; k < KB_PROMPT_NR_SECTIONS; k++)
		strbuf_init(&text[k], 0);
	if (why)
		strbuf_reset(why);

	while (*p) {
		const char *e = strchrnul(p, '\n');
		size_t n = (size_t)(e - p);
		char c;
		size_t cn;
		int level, k;

		if (n && p[n - 1] == '\r')
			n--;
		if (fence_line(p, n, &c, &cn)) {
			if (!in_fence) {
				in_fence = true;
				fc = c;
				fn = cn;
			} else if (c == fc && cn >= fn) {
				in_fence = false;
			}
		} else if (!in_fence) {
			k = heading(p, n, &level);
			if (k >= 0 && !seen[k]) {
				/* the first heading of a section wins; a repeat is text of the current one */
				seen[k] = true;
				found++;
				cur = k;
				cur_level = level;
				goto next;
			}
			if (k < 0 && level > 0 && level <= cur_level)
				cur = -1; /* another heading at this level ends the section */
		}
		if (cur >= 0) {
			strbuf_add(&text[cur], p, n);
			strbuf_addch(&text[cur], '\n');
		}
next:
		p = *e ? e + 1 : e;
	}

	if (!found) {
		if (why)
			strbuf_addstr(why, "reply has none of the sections strategies, pitfalls, analysis");
		goto out;
	}
	for (int k = 0; k < KB_PROMPT_NR_SECTIONS; k++) {
		if (!seen[k])
			continue;
		strbuf_trim(&text[k]);
		if (!text[k].len) {
			if (why)
				strbuf_addf(why, "section '%s' is empty", kb_prompt_section_names[k]);
			goto out;
		}
		if (text[k].len > MAX_SECTION) {
			if (why)
				strbuf_addf(why, "section '%s' is longer than 8 KiB", kb_prompt_section_names[k]);
			goto out;
		}
	}
	for (int k = 0; k < KB_PROMPT_NR_SECTIONS; k++) {
		free(child->sections[k]);
		if (seen[k])
			child->sections[k] = strbuf_detach(&text[k], NULL);
		else
			child->sections[k] = xstrdup(parent->sections[k] ? parent->sections[k] : "");
	}
	child->id = 0;
	child->parent_id = parent->id;
	child->fitness = NAN;
	child->uses = 0;
	ret = 0;
out:
	for (int k = 0; k < KB_PROMPT_NR_SECTIONS; k++)
		strbuf_release(&text[k]);
	return ret;
}
