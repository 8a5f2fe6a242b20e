#ifndef KB_SEARCH_METAPROMPT_H
#define KB_SEARCH_METAPROMPT_H
/*
 * Meta-prompt evolution: a prompt is a set of named sections
 * ("strategies", "pitfalls", "analysis") spliced into the mutation and
 * translation templates. An auxiliary model rewrites sections from the
 * failure diagnoses of recent candidates (search.c does the call; this
 * file is the pure part). A prompt's fitness is the best fitness of the
 * kernels it produced (NAN until one verified). Selection: with
 * probability `exploration` a prompt uniformly (unused ones first), else
 * softmax over fitness / temperature (a prompt without fitness counts as
 * the lowest fitness seen, or 1.0 when none has one).
 */
#include "core/common.h"

#include <cjson/cJSON.h>

struct strbuf;

/* The section names a prompt holds, in order. */
extern const char *const kb_prompt_section_names[];
#define KB_PROMPT_NR_SECTIONS 3

struct kb_prompt {
	int64_t id;             /* in the store */
	int64_t parent_id;      /* 0: a seed prompt */
	char *sections[KB_PROMPT_NR_SECTIONS]; /* owned */
	double fitness;         /* NAN: nothing verified yet */
	int64_t uses;
};

/* Sections NULL (owned once set; NULL reads as ""), fitness NAN, ids and uses 0. */
void kb_prompt_init(struct kb_prompt *p);
void kb_prompt_release(struct kb_prompt *p);
/* {"strategies": "...", ...} and back; from_json: -1 (logged) on a missing or non-string section. */
cJSON *kb_prompt_sections_json(const struct kb_prompt *p);
int kb_prompt_sections_from_json(struct kb_prompt *p, const cJSON *j);

/* Index of the prompt to use next. n must be > 0. temperature <= 0: the first of the fittest. */
size_t kb_metaprompt_select(const struct kb_prompt *prompts, size_t n, double temperature,
			    double exploration, uint64_t *rng);

/* A kernel of fitness f came from p: raise p's fitness to f when higher (non-finite or <= 0: ignored). */
void kb_prompt_credit(struct kb_prompt *p, double fitness);

/*
 * Parse the auxiliary model's rewrite: the reply holds sections as
 * markdown headings "## strategies", "## pitfalls", "## analysis" (any
 * case, any order); a section it omits keeps the parent's text. Fills
 * child from parent + reply. 0, or -1 with why when the reply has none of
 * the sections or a section is empty or longer than 8 KiB.
 *
 * Details: any heading level 1-6 (a trailing ":" or emphasis around the
 * name is fine); headings inside fenced code blocks do not count; a
 * section runs to the next heading of the same or a higher level (its
 * own subheadings stay in it); the first heading of a section wins, a
 * repeat is text of the section it is in; text is trimmed. child must be
 * initialised (kb_prompt_init): on success its sections are replaced, id
 * and uses set to 0, parent_id to parent->id, fitness to NAN; on failure
 * it is untouched. why may be NULL (it is reset first).
 */
int kb_metaprompt_parse_rewrite(const struct kb_prompt *parent, const char *reply,
				struct kb_prompt *child, struct strbuf *why);

#endif
