#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "search/metaprompt.h"
#include "core/rng.h"

#include <math.h>
#include <setjmp.h>
#include <cmocka.h>

static int quiet(void **state)
{
	log_set_level(KB_LOG_OFF); /* the refused json below logs errors */
	return 0;
}

static void set(struct kb_prompt *p, const char *s, const char *f, const char *a)
{
	free(p->sections[0]);
	free(p->sections[1]);
	free(p->sections[2]);
	p->sections[0] = xstrdup(s);
	p->sections[1] = xstrdup(f);
	p->sections[2] = xstrdup(a);
}

static void test_prompt_basics(void **state)
{
	struct kb_prompt p, q;
	cJSON *j;
	char *text;

	assert_string_equal(kb_prompt_section_names[0], "strategies");
	assert_string_equal(kb_prompt_section_names[1], "pitfalls");
	assert_string_equal(kb_prompt_section_names[2], "analysis");
	kb_prompt_init(&p);
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++)
		assert_null(p.sections[i]);
	/* unset sections read as "" */
	j = kb_prompt_sections_json(&p);
	assert_string_equal(cJSON_GetObjectItem(j, "pitfalls")->valuestring, "");
	cJSON_Delete(j);
	assert_true(isnan(p.fitness));
	assert_int_equal(p.id, 0);
	assert_int_equal(p.uses, 0);

	/* json round trip, text with quotes, newlines and unicode */
	set(&p, "Tile with \"__shared__\".\n- use float4", "Do not\tforget bounds: é ✓", "");
	j = kb_prompt_sections_json(&p);
	text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	j = cJSON_Parse(text);
	kb_prompt_init(&q);
	assert_int_equal(kb_prompt_sections_from_json(&q, j), 0);
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++)
		assert_string_equal(q.sections[i], p.sections[i]);
	cJSON_Delete(j);
	free(text);

	/* refused: not an object, a missing section, a non-string; q stays as it was */
	j = cJSON_Parse("{\"strategies\": \"a\", \"pitfalls\": \"b\"}");
	assert_int_equal(kb_prompt_sections_from_json(&q, j), -1);
	cJSON_Delete(j);
	j = cJSON_Parse("{\"strategies\": \"a\", \"pitfalls\": \"b\", \"analysis\": 3}");
	assert_int_equal(kb_prompt_sections_from_json(&q, j), -1);
	cJSON_Delete(j);
	j = cJSON_Parse("[\"a\", \"b\", \"c\"]");
	assert_int_equal(kb_prompt_sections_from_json(&q, j), -1);
	cJSON_Delete(j);
	assert_int_equal(kb_prompt_sections_from_json(&q, NULL), -1);
	assert_string_equal(q.sections[0], p.sections[0]);
	/* extra keys are ignored */
	j = cJSON_Parse("{\"strategies\": \"a\", \"pitfalls\": \"b\", \"analysis\": \"c\", \"x\": 1}");
	assert_int_equal(kb_prompt_sections_from_json(&q, j), 0);
	assert_string_equal(q.sections[2], "c");
	cJSON_Delete(j);

	/* credit: the best fitness of the kernels it produced */
	kb_prompt_credit(&p, 1.2);
	assert_true(p.fitness == 1.2);
	kb_prompt_credit(&p, 0.9);
	assert_true(p.fitness == 1.2);
	kb_prompt_credit(&p, 1.7);
	assert_true(p.fitness == 1.7);
	kb_prompt_credit(&p, NAN);
	kb_prompt_credit(&p, INFINITY);
	kb_prompt_credit(&p, -3);
	assert_true(p.fitness == 1.7);

	kb_prompt_release(&p);
	kb_prompt_release(&q);
	kb_prompt_release(&q); /* twice is harmless */
}

static void test_select(void **state)
{
	struct kb_prompt ps[4];
	uint64_t rng = 11, r1 = 3, r2 = 3;
	int counts[4] = { 0 };
	const int draws = 20000;

	for (int i = 0; i < 4; i++) {
		kb_prompt_init(&ps[i]);
		ps[i].uses = 1;
	}
	assert_int_equal(kb_metaprompt_select(ps, 1, 1.0, 0.5, &rng), 0);

	/* softmax over fitness / T: 1.0, 2.0, NaN (counts as the lowest, 1.0), 3.0 */
	ps[0].fitness = 1.0;
	ps[1].fitness = 2.0;
	ps[3].fitness = 3.0;
	for (int d = 0; d < draws; d++)
		counts[kb_metaprompt_select(ps, 4, 1.0, 0.0, &rng)]++;
	{
		double e1 = exp(-2.0), e2 = exp(-1.0), e3 = 1.0, z = e1 + e2 + e1 + e3;

		assert_true(fabs(counts[0] / (double)draws - e1 / z) < 0.015);
		assert_true(fabs(counts[1] / (double)draws - e2 / z) < 0.015);
		assert_true(fabs(counts[2] / (double)draws - e1 / z) < 0.015);
		assert_true(fabs(counts[3] / (double)draws - e3 / z) < 0.015);
	}
	/* a low temperature is nearly greedy, zero is greedy */
	memset(counts, 0, sizeof(counts));
	for (int d = 0; d < 2000; d++)
		counts[kb_metaprompt_select(ps, 4, 0.05, 0.0, &rng)]++;
	assert_true(counts[3] > 1990);
	for (int d = 0; d < 100; d++)
		assert_int_equal(kb_metaprompt_select(ps, 4, 0.0, 0.0, &rng), 3);

	/* exploration: the unused prompts first */
	ps[2].uses = 0;
	for (int d = 0; d < 100; d++)
		assert_int_equal(kb_metaprompt_select(ps, 4, 0.0, 1.0, &rng), 2);
	/* every prompt used: uniform */
	ps[2].uses = 4;
	memset(counts, 0, sizeof(counts));
	for (int d = 0; d < draws; d++)
		counts[kb_metaprompt_select(ps, 4, 0.0, 1.0, &rng)]++;
	for (int i = 0; i < 4; i++)
		assert_true(fabs(counts[i] / (double)draws - 0.25) < 0.015);
	/* the share: with exploration 0.2 and temperature 0, prompt 3 gets 0.8 + 0.2 / 4 */
	memset(counts, 0, sizeof(counts));
	for (int d = 0; d < draws; d++)
		counts[kb_metaprompt_select(ps, 4, 0.0, 0.2, &rng)]++;
	assert_true(fabs(counts[3] / (double)draws - 0.85) < 0.015);
	assert_true(fabs(counts[0] / (double)draws - 0.05) < 0.015);

	/* nothing verified yet: all count as 1.0, uniform */
	for (int i = 0; i < 4; i++)
		ps[i].fitness = NAN;
	memset(counts, 0, sizeof(counts));
	for (int d = 0; d < draws; d++)
		counts[kb_metaprompt_select(ps, 4, 1.0, 0.0, &rng)]++;
	for (int i = 0; i < 4; i++)
		assert_true(fabs(counts[i] / (double)draws - 0.25) < 0.015);
	/* deterministic for a given rng state */
	for (int d = 0; d < 200; d++)
		assert_int_equal(kb_metaprompt_select(ps, 4, 0.5, 0.3, &r1), kb_metaprompt_select(ps, 4, 0.5, 0.3, &r2));
	/* huge fitness values do not overflow */
	ps[0].fitness = 1e300;
	ps[1].fitness = 1.0;
	assert_int_equal(kb_metaprompt_select(ps, 4, 1e-300, 0.0, &rng), 0);
	for (int i = 0; i < 4; i++)
		kb_prompt_release(&ps[i]);
}

static struct kb_prompt parent, child;
static struct strbuf why = STRBUF_INIT;

static int setup(void **state)
{
	kb_prompt_init(&parent);
	kb_prompt_init(&child);
	parent.id = 42;
	set(&parent, "old strategies", "old pitfalls", "old analysis");
	strbuf_reset(&why);
	return 0;
}

static int teardown(void **state)
{
	kb_prompt_release(&parent);
	kb_prompt_release(&child);
	strbuf_release(&why);
	return 0;
}

static void rewrite_ok(const char *reply, const char *s, const char *f, const char *a)
{
	int rc = kb_metaprompt_parse_rewrite(&parent, reply, &child, &why);

	if (rc)
		fprintf(stderr, "reply:\n%s\n-- why: %s\n", reply, why.buf);
	assert_int_equal(rc, 0);
	assert_string_equal(child.sections[0], s);
	assert_string_equal(child.sections[1], f);
	assert_string_equal(child.sections[2], a);
	assert_int_equal(child.parent_id, 42);
	assert_int_equal(child.id, 0);
	assert_true(isnan(child.fitness));
}

static void rewrite_bad(const char *reply, const char *reason)
{
	char *before = xstrdup(child.sections[0] ? child.sections[0] : "");
	int rc = kb_metaprompt_parse_rewrite(&parent, reply, &child, &why);

	if (rc != -1 || strcmp(why.buf, reason))
		fprintf(stderr, "reply:\n%s\n-- rc %d why: '%s' want '%s'\n", reply ? reply : "(null)", rc, why.buf, reason);
	assert_int_equal(rc, -1);
	assert_string_equal(why.buf, reason);
	/* the child is untouched */
	assert_string_equal(child.sections[0] ? child.sections[0] : "", before);
	free(before);
}

static void test_rewrite(void **state)
{
	rewrite_ok("## strategies\nTile in shared memory.\n\n## pitfalls\nCheck bounds.\n\n## analysis\nRead nvcc -Xptxas -v.\n",
		   "Tile in shared memory.", "Check bounds.", "Read nvcc -Xptxas -v.");
}

static void test_rewrite_case_order_levels(void **state)
{
	rewrite_ok("Sure! Here are the rewritten sections.\n\n# ANALYSIS:\nLook at occupancy.\n"
		   "### Strategies ###\n- vectorise\n- fuse\n**Pitfalls**\nnot a heading\n",
		   "- vectorise\n- fuse\n**Pitfalls**\nnot a heading", "old pitfalls", "Look at occupancy.");
}

static void test_rewrite_inherit(void **state)
{
	rewrite_ok("## Pitfalls\r\nNever read past n.\r\n", "old strategies", "Never read past n.", "old analysis");
}

static void test_rewrite_subheadings_and_others(void **state)
{
	/* a subheading stays in its section; another heading of the same level ends it */
	rewrite_ok("## strategies\nGeneral.\n### memory\nUse float4.\n## notes from me\nignored\n## analysis\nA.\n",
		   "General.\n### memory\nUse float4.", "old pitfalls", "A.");
}

static void test_rewrite_code_block(void **state)
{
	/* headings inside a fenced code block do not count and stay text */
	rewrite_ok("## strategies\nExample:\n```markdown\n## pitfalls\nfake\n```\nEnd.\n",
		   "Example:\n```markdown\n## pitfalls\nfake\n```\nEnd.", "old pitfalls", "old analysis");
	/* a reply that is only a code block with headings: none */
	rewrite_bad("```\n## strategies\nx\n## pitfalls\ny\n```\n",
		    "reply has none of the sections strategies, pitfalls, analysis");
	/* ~~~ fences too, and a repeated heading is text of the section it is in */
	rewrite_ok("## analysis\n~~~\n## strategies\n~~~\nok\n## analysis\nmore\n",
		   "old strategies", "old pitfalls", "~~~\n## strategies\n~~~\nok\n## analysis\nmore");
}

static void test_rewrite_adversarial(void **state)
{
	struct strbuf big = STRBUF_INIT;

	rewrite_bad(NULL, "reply has none of the sections strategies, pitfalls, analysis");
	rewrite_bad("", "reply has none of the sections strategies, pitfalls, analysis");
	rewrite_bad("I think you should tile more and check bounds.",
		    "reply has none of the sections strategies, pitfalls, analysis");
	rewrite_bad("##strategies\nno space after the hashes\n",
		    "reply has none of the sections strategies, pitfalls, analysis");
	rewrite_bad("####### strategies\nseven hashes\n",
		    "reply has none of the sections strategies, pitfalls, analysis");
	rewrite_bad("    ## strategies\nan indented code line\n",
		    "reply has none of the sections strategies, pitfalls, analysis");
	rewrite_bad("## strategies of mine\nnot the section\n",
		    "reply has none of the sections strategies, pitfalls, analysis");
	rewrite_bad("## strategies\n\n   \n## pitfalls\nfine\n", "section 'strategies' is empty");
	rewrite_bad("## strategies\nfine\n## analysis", "section 'analysis' is empty");

	strbuf_addstr(&big, "## pitfalls\n");
	for (int i = 0; i < 1000; i++)
		strbuf_addstr(&big, "too long. ");
	rewrite_bad(big.buf, "section 'pitfalls' is longer than 8 KiB");
	/* just under the limit is fine */
	strbuf_reset(&big);
	strbuf_addstr(&big, "## pitfalls\n");
	for (int i = 0; i < 8192; i++)
		strbuf_addch(&big, 'x');
	assert_int_equal(kb_metaprompt_parse_rewrite(&parent, big.buf, &child, NULL), 0);
	assert_int_equal(strlen(child.sections[1]), 8192);
	strbuf_release(&big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prompt_basics),
		cmocka_unit_test(test_select),
		cmocka_unit_test_setup_teardown(test_rewrite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewrite_case_order_levels, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewrite_inherit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewrite_subheadings_and_others, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewrite_code_block, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewrite_adversarial, setup, teardown),
	};

	return cmocka_run_group_tests(tests, quiet, NULL);
}
