#include "core/common.h"
#include "search/llm_verifiers.h"
#include "core/log.h"
#include "core/util.h"
#include "search/search_priv.h"

#include <ctype.h>
#include <math.h>

const char *kb_soft_verifier_name(enum kb_soft_verifier v)
{
	switch (v) {
	case KB_SV_COMPILE: return "compile";
	case KB_SV_NUMERICS: return "numerics";
	case KB_SV_MEMORY: return "memory";
	}
	return "?";
}

/* 1/0 when line (len bytes) is a verdict line, else -1. */
static int verdict_line(const char *line, size_t len)
{
	size_t i = 0, j;

	while (i < len && (isspace((unsigned char)line[i]) || line[i] == '*' || line[i] == '_' ||
			   line[i] == '#' || line[i] == '>' || line[i] == '`'))
		i++;
	if (len - i < 8 || strncasecmp(line + i, "verdict", 7))
		return -1;
	i += 7;
	while (i < len && (line[i] == '*' || line[i] == '_' || line[i] == ' '))
		i++;
	if (i >= len || line[i] != ':')
		return -1;
	i++;
	while (i < len && (line[i] == ' ' || line[i] == '*' || line[i] == '_' || line[i] == '`'))
		i++;
	for (j = i; j < len && isalpha((unsigned char)line[j]); j++)
		;
	if (j - i == 4 && !strncasecmp(line + i, "pass", 4))
		return 1;
	if (j - i == 4 && !strncasecmp(line + i, "fail", 4))
		return 0;
	return -1;
}

int kb_soft_verdict_parse(const char *reply)
{
	const char *p = reply;
	int last = -1;

	while (p && *p) {
		const char *end = strchrnul(p, '\n');
		int v = verdict_line(p, (size_t)(end - p));

		if (v >= 0)
			last = v;
		p = *end ? end + 1 : NULL;
	}
	return last;
}

void kb_verifier_stats_add(struct kb_verifier_stats *s, bool predicted_bad, bool bad)
{
	if (predicted_bad && bad)
		s->tp++;
	else if (predicted_bad)
		s->fp++;
	else if (bad)
		s->fn++;
	else
		s->tn++;
}

/* 1 bad, 0 good, -1 no ground truth (the harness's verdict is the truth) */
static int truth(const char *verdict)
{
	if (!verdict)
		return -1;
	if (!strcmp(verdict, "verified"))
		return 0;
	if (!strcmp(verdict, "rejected") || !strcmp(verdict, "build"))
		return 1;
	return -1;
}

int kb_verifier_stats_add_candidate(struct kb_verifier_stats *s, const cJSON *verifiers,
				    const char *verdict)
{
	const cJSON *pass = cJSON_GetObjectItemCaseSensitive(verifiers, "pass");
	int bad = truth(verdict);

	if (!cJSON_IsBool(pass) || bad < 0)
		return 0;
	kb_verifier_stats_add(s, cJSON_IsFalse(pass), bad == 1);
	return 1;
}

int kb_verifier_stats_add_one(struct kb_verifier_stats *s, const cJSON *verifiers,
			      enum kb_soft_verifier v, const char *verdict)
{
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(verifiers, kb_soft_verifier_name(v));
	const cJSON *said = cJSON_GetObjectItemCaseSensitive(one, "verdict");
	int bad = truth(verdict);

	if (!cJSON_IsString(said) || bad < 0)
		return 0;
	if (strcmp(said->valuestring, "PASS") && strcmp(said->valuestring, "FAIL"))
		return 0;
	kb_verifier_stats_add(s, !strcmp(said->valuestring, "FAIL"), bad == 1);
	return 1;
}

double kb_verifier_precision(const struct kb_verifier_stats *s)
{
	return s->tp + s->fp ? (double)s->tp / (double)(s->tp + s->fp) : NAN;
}

double kb_verifier_recall(const struct kb_verifier_stats *s)
{
	return s->tp + s->fn ? (double)s->tp / (double)(s->tp + s->fn) : NAN;
}

static void add_ratio(cJSON *o, const char *name, double v)
{
	if (isnan(v))
		cJSON_AddNullToObject(o, name);
	else
		cJSON_AddNumberToObject(o, name, round(v * 1000) / 1000);
}

cJSON *kb_verifier_stats_json(const struct kb_verifier_stats *s)
{
	cJSON *o = cJSON_CreateObject();

	add_ratio(o, "precision", kb_verifier_precision(s));
	add_ratio(o, "recall", kb_verifier_recall(s));
	cJSON_AddNumberToObject(o, "tp", (double)s->tp);
	cJSON_AddNumberToObject(o, "fp", (double)s->fp);
	cJSON_AddNumberToObject(o, "fn", (double)s->fn);
	cJSON_AddNumberToObject(o, "tn", (double)s->tn);
	return o;
}

/* --- running them (the search's side) --- */

static const enum srch_tmpl verifier_tmpl[KB_SV_NR] = {
	[KB_SV_COMPILE] = T_VERIFY_COMPILE,
	[KB_SV_NUMERICS] = T_VERIFY_NUMERICS,
	[KB_SV_MEMORY] = T_VERIFY_MEMORY,
};

/* The reasoning before the verdict, shortened to one line for the store. */
static void note_of(const char *reply, struct strbuf *out)
{
	size_t n = 0;

	for (const char *p = reply; *p && n < 240; p++) {
		if (*p == '\n' || *p == '\r' || *p == '\t') {
			if (out->len && out->buf[out->len - 1] != ' ')
				strbuf_addch(out, ' ');
			continue;
		}
		strbuf_addch(out, *p);
		n++;
	}
	strbuf_trim(out);
}

int srch_verify_prompt(struct srch *s, const struct kb_search_cand *c, int k, struct strbuf *prompt,
		       struct strbuf *purpose)
{
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	int rc;

	kb_prompt_var(&v, "candidate_source", c->source);
	strbuf_reset(prompt);
	strbuf_reset(purpose);
	strbuf_addf(purpose, "verify-%s", kb_soft_verifier_name((enum kb_soft_verifier)k));
	rc = srch_render(s, verifier_tmpl[k], &v, prompt);
	kb_prompt_vars_release(&v);
	return rc;
}

void srch_verify_note(cJSON *all, int k, int rc, const struct kb_llm_reply *reply, int *answered, bool *pass)
{
	const char *name = kb_soft_verifier_name((enum kb_soft_verifier)k);
	cJSON *one = cJSON_AddObjectToObject(all, name);
	struct strbuf note = STRBUF_INIT;
	int verdict;

	if (rc) {
		/* a failed call or a budget: no verdict, no veto */
		cJSON_AddStringToObject(one, "verdict", rc == KB_EBUDGET ? "skipped" : "error");
		if (reply && reply->error.len)
			cJSON_AddStringToObject(one, "note", reply->error.buf);
		return;
	}
	verdict = kb_soft_verdict_parse(reply->text.buf);
	/* a reply with no verdict line is no prediction: neither a pass nor a veto */
	if (verdict >= 0)
		(*answered)++;
	cJSON_AddStringToObject(one, "verdict", verdict == 1 ? "PASS" : verdict == 0 ? "FAIL" : "none");
	cJSON_AddStringToObject(one, "model", reply->model);
	note_of(reply->text.buf, &note);
	cJSON_AddStringToObject(one, "note", note.buf);
	if (verdict == 0)
		*pass = false;
	strbuf_release(&note);
}

void srch_verify_finish(struct kb_search_cand *c, cJSON *all, int answered, bool pass)
{
	/* no answer at all (budget, failed calls): no prediction to score */
	if (answered)
		cJSON_AddBoolToObject(all, "pass", pass);
	cJSON_Delete(c->verifiers);
	c->verifiers = all;
}
