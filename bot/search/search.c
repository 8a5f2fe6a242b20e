#include "core/common.h"
#include "search/search_priv.h"
#include "llm/pool.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/redact.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/util.h"
#include "search/behavior.h"
#include "search/extract.h"
#include "core/rng.h"
#include "templates/final_check.h"
#include "templates/tune.h"
#include "core/hash.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"

#include <math.h>

void kb_search_result_init(struct kb_search_result *r)
{
	memset(r, 0, sizeof(*r));
	strbuf_init(&r->best_source, 0);
}

void kb_search_result_release(struct kb_search_result *r)
{
	free(r->why);
	free(r->cut_short);
	free(r->best_proposer);
	free(r->best_model);
	strbuf_release(&r->best_source);
	cJSON_Delete(r->evidence);
	cJSON_Delete(r->summary);
	kb_search_result_init(r);
}

double srch_wall_s(const struct srch *s)
{
	return s->wall_before + (double)(kb_now_ms() - s->t0_ms) / 1000.0;
}

int64_t srch_final_seeds(const struct srch *s)
{
	return s->o->final_seeds > 0 ? s->o->final_seeds : s->cfg->seeds;
}

int64_t srch_work_deadline_ms(const struct srch *s)
{
	int64_t d;

	if (!s->clock.deadline_ms)
		return 0;
	d = s->clock.deadline_ms - kb_budget_reserve_ms(&s->clock);
	return d > 0 ? d : 1;
}

void srch_cut_short(struct srch *s, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	if (s->cut_short)
		return;
	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	s->cut_short = strbuf_detach(&sb, NULL);
	kb_progress_note(s->pg, "cut short: %s; finishing with the best so far", s->cut_short);
}

/* Drop the oldest n diagnoses (past the cap, or shown to a rewrite). */
static void diagnoses_drop(struct srch *s, size_t n)
{
	if (n > s->diagnoses.nr)
		n = s->diagnoses.nr;
	for (size_t i = 0; i < n; i++)
		free((char *)s->diagnoses.v[i]);
	memmove(s->diagnoses.v, s->diagnoses.v + n, (s->diagnoses.nr - n) * sizeof(*s->diagnoses.v));
	memmove(s->diag_ids, s->diag_ids + n, (s->diagnoses.nr - n) * sizeof(*s->diag_ids));
	s->diagnoses.nr -= n;
	s->diagnoses.v[s->diagnoses.nr] = NULL;
}

/* Keep text (its stored row id) among the recent diagnoses, dropping the oldest past the cap. */
static void diagnosis_push(struct srch *s, int64_t id, const char *text)
{
	if (s->diagnoses.nr == SRCH_MAX_DIAGNOSES)
		diagnoses_drop(s, 1);
	s->diag_ids[s->diagnoses.nr] = id;
	strvec_push(&s->diagnoses, text);
	s->diag_pushed++;
}

void srch_diagnose(struct srch *s, int64_t candidate_id, const char *fmt, ...)
{
	const struct kb_search_cand *c;
	struct strbuf sb = STRBUF_INIT;
	int64_t id = 0;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	/* reasons and model replies, bound for the meta-prompt and the database */
	kb_redact(&sb, 300);
	/* a candidate's own generation: the next one may have begun meanwhile */
	c = candidate_id ? srch_cand(s, candidate_id) : NULL;
	if (kb_search_db_diagnosis_add(s->st, s->row.id, c ? c->generation : s->generation, candidate_id, sb.buf,
				       &id))
		log_warn("search: a diagnosis was not stored; a resumed search will not see it");
	diagnosis_push(s, id, sb.buf);
	strbuf_release(&sb);
}

void srch_diagnoses_restore(struct srch *s, int64_t candidate_id)
{
	struct strvec texts = STRVEC_INIT;
	int64_t *ids = NULL;

	if (kb_search_db_diagnoses_load(s->st, s->row.id, candidate_id, &texts, &ids))
		log_warn("search: the diagnoses of candidate %lld were not read back", (long long)candidate_id);
	for (size_t i = 0; i < texts.nr; i++)
		diagnosis_push(s, ids[i], texts.v[i]);
	strvec_clear(&texts);
	free(ids);
}

struct kb_prompt *srch_prompt(const struct srch *s, int64_t id)
{
	for (size_t i = 0; i < s->nr_prompts; i++)
		if (s->prompts[i].id == id)
			return &s->prompts[i];
	return NULL;
}

static struct kb_prompt *prompt_push(struct srch *s)
{
	if (s->nr_prompts == s->alloc_prompts) {
		s->alloc_prompts = s->alloc_prompts ? 2 * s->alloc_prompts : 8;
		s->prompts = xrealloc(s->prompts, s->alloc_prompts * sizeof(*s->prompts));
	}
	kb_prompt_init(&s->prompts[s->nr_prompts]);
	return &s->prompts[s->nr_prompts++];
}

static int section_index(const char *name)
{
	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++)
		if (!strcmp(kb_prompt_section_names[i], name))
			return i;
	return -1;
}

/* The prompt's section (the seed file's text when it has none). */
static const char *section(const struct srch *s, const struct kb_prompt *p, const char *name)
{
	int i = section_index(name);

	if (p && i >= 0 && p->sections[i] && *p->sections[i])
		return p->sections[i];
	if (!strcmp(name, "strategies"))
		return s->tmpl[T_STRATEGIES].buf;
	if (!strcmp(name, "pitfalls"))
		return s->tmpl[T_PITFALLS].buf;
	return s->tmpl[T_ANALYSIS].buf;
}

static void sections_vars(const struct srch *s, const struct kb_prompt *p, struct kb_prompt_vars *v)
{
	kb_prompt_var(v, "strategies", section(s, p, "strategies"));
	kb_prompt_var(v, "pitfalls", section(s, p, "pitfalls"));
	kb_prompt_var(v, "analysis", section(s, p, "analysis"));
}

/* The seed meta-prompt, from strategies.md, pitfalls.md and analysis.md. */
static struct kb_prompt *seed_prompt(struct srch *s)
{
	struct kb_prompt *p = prompt_push(s);

	for (int i = 0; i < KB_PROMPT_NR_SECTIONS; i++)
		p->sections[i] = xstrdup(section(s, NULL, kb_prompt_section_names[i]));
	return p;
}

/* --- proposing --- */

const char *srch_kind_name(enum srch_kind k)
{
	return k == K_TRANSLATE ? "translate" : k == K_MUTATE ? "mutate" : "crossover";
}

/* Variables describing a parent kernel: NAME_source, NAME_speedup, NAME_behavior, NAME_evidence. */
static void parent_vars(const struct srch *s, const struct kb_search_cand *c, const char *name,
			struct kb_prompt_vars *v)
{
	struct strbuf sb = STRBUF_INIT, key = STRBUF_INIT;

	strbuf_addf(&key, "%s_source", name);
	kb_prompt_var(v, key.buf, c->source);
	strbuf_reset(&key);
	strbuf_addf(&key, "%s_speedup", name);
	srch_fmt_speedup(c->speedup, &sb);
	kb_prompt_var(v, key.buf, sb.buf);
	strbuf_reset(&sb);
	strbuf_reset(&key);
	strbuf_addf(&key, "%s_behavior", name);
	srch_fmt_behavior(c->cell, &sb);
	kb_prompt_var(v, key.buf, sb.buf);
	strbuf_reset(&sb);
	strbuf_reset(&key);
	strbuf_addf(&key, "%s_evidence", name);
	srch_evidence_text(c, &sb);
	kb_prompt_var(v, key.buf, sb.buf);
	strbuf_release(&sb);
	strbuf_release(&key);
	(void)s;
}

/* The inspirations block: one rendered inspiration.md per kernel. */
static int inspirations_text(struct srch *s, const int64_t *ids, size_t n, int64_t skip, struct strbuf *out)
{
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf one = STRBUF_INIT, sb = STRBUF_INIT;
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i++) {
		const struct kb_search_cand *c = srch_cand(s, ids[i]);

		if (!c || c->id == skip)
			continue;
		kb_prompt_varf(&v, "id", "#%lld", (long long)c->id);
		strbuf_reset(&sb);
		srch_fmt_speedup(c->speedup, &sb);
		kb_prompt_var(&v, "speedup", sb.buf);
		strbuf_reset(&sb);
		srch_fmt_behavior(c->cell, &sb);
		kb_prompt_var(&v, "behavior", sb.buf);
		kb_prompt_var(&v, "source", c->source);
		rc = srch_render(s, T_INSPIRATION, &v, &one);
		if (!rc) {
			strbuf_trim(&one);
			strbuf_addf(out, "%s%s\n", out->len ? "\n" : "", one.buf);
		}
	}
	kb_prompt_vars_release(&v);
	strbuf_release(&one);
	strbuf_release(&sb);
	return rc;
}

/* The slot's plan: kind, parents, prompt; drawn from an rng of (seed, g, island, slot) only. */
/*
 * The kind slot (g, island, slot) was asked as before, by a run of this
 * search killed since or by the run a replay repeats: its key names the
 * answer in the store. Generations overlap (search_flow.c), so the
 * archive a slot is planned from depends on when it was planned; a
 * resumed run or a replay must still ask the same question under the
 * same key. false: never asked (or not readable: planned afresh).
 */
static bool asked_kind(struct srch *s, int64_t g, size_t island, int64_t slot, enum srch_kind *kind)
{
	static const enum srch_kind kinds[] = { K_TRANSLATE, K_MUTATE, K_CROSSOVER };
	struct strbuf key = STRBUF_INIT;
	bool known = false;

	for (size_t i = 0; i < ARRAY_SIZE(kinds) && !known; i++) {
		strbuf_reset(&key);
		kb_search_call_key(&key, s->call_base, g, (int64_t)island, slot, srch_kind_name(kinds[i]), 0);
		if (kb_search_db_key_known(s->st, s->row.id, key.buf, &known))
			known = false;
		if (known)
			*kind = kinds[i];
	}
	strbuf_release(&key);
	return known;
}

static void plan_slot(struct srch *s, int64_t g, size_t island, int64_t slot, struct srch_plan *pl)
{
	enum srch_kind asked = K_TRANSLATE;
	bool was_asked;
	bool cross;
	struct strbuf tag = STRBUF_INIT;
	struct kb_select_mix mix = {
		.explore = s->cfg->search_explore, .exploit = s->cfg->search_exploit, .tournament = 0,
	};
	uint64_t r;
	double u;
	size_t want = s->cfg->search_inspirations > 0 ? (size_t)s->cfg->search_inspirations : 0;
	enum kb_select_kind how;
	int cell;

	memset(pl, 0, sizeof(*pl));
	strbuf_addf(&tag, "slot/g%lld/i%zu/k%lld", (long long)g, island, (long long)slot);
	r = srch_rng_for(s, tag.buf);
	strbuf_release(&tag);
	u = kb_rng_double(&r);
	if (s->nr_prompts) {
		size_t pi = kb_metaprompt_select(s->prompts, s->nr_prompts, s->cfg->search_prompt_temperature,
						 s->cfg->search_prompt_exploration, &r);

		pl->prompt = &s->prompts[pi];
		pl->prompt->uses++;
	}
	pl->kind = K_TRANSLATE;
	was_asked = g > 0 && asked_kind(s, g, island, slot, &asked);
	if (g == 0 || (was_asked && asked == K_TRANSLATE) || !kb_archive_filled(&s->archive, island) ||
	    kb_archive_select(&s->archive, island, &mix, &r, &cell, &how))
		return;
	pl->parent = srch_cand(s, kb_archive_get(&s->archive, island, cell)->candidate_id);
	if (!pl->parent)
		return;
	if (want > ARRAY_SIZE(pl->insp))
		want = ARRAY_SIZE(pl->insp);
	/* one more than shown, so a crossover partner leaves the others */
	pl->nr_insp = kb_archive_inspirations(&s->archive, island, cell, want + 1 < ARRAY_SIZE(pl->insp) ? want + 1 : want,
					      &r, pl->insp);
	pl->kind = K_MUTATE;
	/*
	 * Whether a slot is a crossover must not depend on fitness (timings
	 * differ between a run and its replay, and the kind is part of the
	 * call key): two filled cells anywhere always hold a second parent.
	 */
	cross = was_asked ? asked == K_CROSSOVER
			  : u < s->cfg->search_crossover && kb_archive_filled(&s->archive, SIZE_MAX) >= 2;
	if (cross) {
		for (size_t i = 0; i < pl->nr_insp && !pl->second; i++)
			if (pl->insp[i] != pl->parent->id)
				pl->second = srch_cand(s, pl->insp[i]);
		for (size_t i = 0; i < s->archive.nr_islands * KB_BEHAVIOR_CELLS && !pl->second; i++) {
			int64_t id = s->archive.cells[i].candidate_id;

			if (id && id != pl->parent->id)
				pl->second = srch_cand(s, id);
		}
		if (pl->second)
			pl->kind = K_CROSSOVER;
	}
	if (pl->nr_insp > want)
		pl->nr_insp = want;
	log_debug("search: g%lld island %zu slot %lld: %s, parent %lld by %s", (long long)g, island,
		  (long long)slot, srch_kind_name(pl->kind), (long long)pl->parent->id, kb_select_kind_name(how));
}

/* The slot's prompt: the translate, mutate or crossover template with its parents. 0 or -1. */
static int propose_prompt(struct srch *s, const struct srch_plan *pl, struct strbuf *prompt)
{
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf sb = STRBUF_INIT;
	enum srch_tmpl t = pl->kind == K_TRANSLATE ? T_TRANSLATE : pl->kind == K_MUTATE ? T_MUTATE : T_CROSSOVER;
	int rc = 0;

	sections_vars(s, pl->prompt, &v);
	if (pl->parent) {
		parent_vars(s, pl->parent, "parent", &v);
		srch_resources_text(s, pl->parent, &sb);
		kb_prompt_var(&v, "resources", sb.buf);
		strbuf_reset(&sb);
		srch_hints_text(s, pl->parent, &sb);
		kb_prompt_var(&v, "hints", sb.buf);
		strbuf_reset(&sb);
		rc = inspirations_text(s, pl->insp, pl->nr_insp, pl->second ? pl->second->id : 0, &sb);
		kb_prompt_var(&v, "inspirations", sb.buf);
		kb_prompt_var(&v, "direction", "");
	}
	if (pl->second)
		parent_vars(s, pl->second, "second", &v);
	if (!rc)
		rc = srch_render(s, t, &v, prompt);
	kb_prompt_vars_release(&v);
	strbuf_release(&sb);
	return rc;
}

int srch_repair_prompt(struct srch *s, const struct kb_search_cand *c, struct strbuf *prompt)
{
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf err = STRBUF_INIT, kind = STRBUF_INIT;
	int rc;

	srch_failure_text(c, &err, &kind);
	sections_vars(s, c->prompt_id ? srch_prompt(s, c->prompt_id) : NULL, &v);
	kb_prompt_var(&v, "candidate_source", c->source);
	kb_prompt_var(&v, "error", err.buf);
	kb_prompt_var(&v, "failure_kind", kind.buf);
	rc = srch_render(s, T_REPAIR, &v, prompt);
	kb_prompt_vars_release(&v);
	strbuf_release(&err);
	strbuf_release(&kind);
	return rc;
}

/* Plan every slot of generation g (slots k0.. of the islands, or the islands' per-generation slots) into the flow. */
static int plan_proposals(struct srch *s, int64_t g, int64_t n, bool spread, struct srch_flow_spec **out)
{
	struct srch_flow_spec *specs = xcalloc(n ? (size_t)n : 1, sizeof(*specs));
	int64_t per = n / (int64_t)s->nr_islands;
	int rc = 0;

	for (int64_t k = 0; k < n && !rc; k++) {
		struct srch_flow_spec *sp = &specs[k];
		size_t island = spread ? (size_t)k % s->nr_islands : (size_t)(k / (per ? per : 1)) % s->nr_islands;
		int64_t slot = spread ? k : k % (per ? per : 1);
		struct srch_plan pl;

		plan_slot(s, g, island, slot, &pl);
		sp->g = g;
		sp->island = (int64_t)island;
		sp->slot = slot;
		sp->kind = pl.kind;
		sp->parent_id = pl.parent ? pl.parent->id : 0;
		sp->second_id = pl.second ? pl.second->id : 0;
		sp->prompt_id = pl.prompt ? pl.prompt->id : 0;
		strbuf_init(&sp->prompt, 0);
		rc = propose_prompt(s, &pl, &sp->prompt);
	}
	if (rc) {
		srch_flow_specs_free(specs, (size_t)n);
		specs = NULL;
	}
	*out = specs;
	return rc;
}

/* --- generations --- */

int srch_commit(struct srch *s, int64_t g)
{
	int rc = -1;

	if (kb_state_begin(s->st))
		return -1;
	if (kb_search_db_archive_save(s->st, s->row.id, &s->archive))
		goto out;
	for (size_t i = 0; i < s->nr_prompts; i++) {
		struct kb_prompt *p = &s->prompts[i];

		if (p->id ? kb_search_db_prompt_update(s->st, p) : kb_search_db_prompt_insert(s->st, s->row.id, g, p))
			goto out;
	}
	for (size_t i = s->hist_stored; i < s->nr_hist; i++)
		if (kb_search_db_history_add(s->st, s->row.id, s->hist[i].t_s, s->hist[i].best,
					     s->hist[i].candidate_id))
			goto out;
	/* what the next rewrite will see: a resumed search reads these back */
	if (kb_search_db_diagnoses_mark(s->st, s->row.id, s->diag_ids, s->diagnoses.nr))
		goto out;
	s->row.generation = g + 1;
	kb_rng_u64(&s->row.rng);
	s->row.best_candidate_id = s->best_id;
	s->row.wall_s = srch_wall_s(s);
	if (kb_search_db_checkpoint(s->st, &s->row))
		goto out;
	rc = kb_state_commit(s->st);
out:
	if (rc) {
		/* the search stops here: a rerun resumes from the last stored generation */
		kb_state_rollback(s->st);
		return rc;
	}
	s->hist_stored = s->nr_hist;
	srch_write_status(s, NULL);
	return 0;
}

/* The templates' best kernels: verified before the search, elites of every island. */
static int plant_seeds(struct srch *s)
{
	struct strbuf key = STRBUF_INIT;
	int rc = 0;

	for (size_t n = 0; n < s->o->nr_seeds && !rc; n++) {
		const struct kb_search_seed *sd = &s->o->seeds[n];
		struct kb_search_cand *c, *got = NULL;
		struct kb_behavior b;

		if (!sd->source || !(sd->fitness > 0))
			continue;
		c = srch_cand_new(s, "template", sd->source, 0, 0, (int64_t)n, 0);
		strbuf_reset(&key);
		kb_search_call_key(&key, s->call_base, 0, 0, (int64_t)n, "template", 0);
		c->call_key = xstrdup(key.buf);
		kb_strlcpy(c->verdict, "verified", sizeof(c->verdict));
		c->speedup = sd->fitness;
		if (sd->evidence) {
			const cJSON *sum = cJSON_GetObjectItemCaseSensitive(sd->evidence, "summary");
			const cJSON *gc = cJSON_GetObjectItemCaseSensitive(sum, "geomean_speedup_compile");
			const cJSON *kb = cJSON_GetObjectItemCaseSensitive(sd->evidence, "kernelbot");
			const cJSON *build = cJSON_GetObjectItemCaseSensitive(kb, "build");

			c->evidence = cJSON_Duplicate(sd->evidence, true);
			c->speedup_compile = cJSON_IsNumber(gc) ? gc->valuedouble : NAN;
			if (cJSON_IsObject(build))
				c->build_info = cJSON_Duplicate(build, true);
		}
		kb_behavior_score(sd->source, s->o->backend, &b);
		c->cell = kb_behavior_cell(&b);
		rc = srch_register(s, c, &got);
		if (rc || !got || strcmp(got->verdict, "verified") || !isfinite(got->speedup))
			continue;
		for (size_t i = 0; i < s->nr_islands; i++)
			kb_archive_offer(&s->archive, i, got->cell, got->id, got->speedup);
		if (got->speedup > s->best_fitness) {
			s->best_fitness = got->speedup;
			s->best_id = got->id;
			if (s->nr_hist == s->alloc_hist) {
				s->alloc_hist = s->alloc_hist ? 2 * s->alloc_hist : 16;
				s->hist = xrealloc(s->hist, s->alloc_hist * sizeof(*s->hist));
			}
			s->hist[s->nr_hist++] = (struct srch_hist){ srch_wall_s(s), got->speedup, got->id };
		}
		kb_progress_note(s->pg, "seed #%lld: %s, %.2fx", (long long)got->id,
				 sd->label ? sd->label : "template", got->speedup);
	}
	strbuf_release(&key);
	return rc;
}

int srch_generation_plan(struct srch *s, int64_t g, struct srch_flow_spec **specs, size_t *n, struct strbuf *stage)
{
	int64_t per = s->cfg->search_per_generation > 0 ? s->cfg->search_per_generation : 1;
	int64_t initial = s->cfg->search_initial > 0 ? s->cfg->search_initial : (int64_t)s->nr_islands;
	int64_t k = g ? per * (int64_t)s->nr_islands : initial;
	int rc;

	s->generation = g;
	strbuf_reset(stage);
	if (g)
		strbuf_addf(stage, "evolve %lld/%lld", (long long)g, (long long)s->generations);
	else
		strbuf_addstr(stage, "translate");
	kb_progress_stage(s->pg, stage->buf, (size_t)k);
	/* translation: [search] initial first kernels spread over the islands */
	rc = plan_proposals(s, g, k, g == 0, specs);
	*n = rc ? 0 : (size_t)k;
	return rc;
}

void srch_generation_migrate(struct srch *s, int64_t g)
{
	struct kb_migration *moves;
	size_t m, accepted = 0;

	if (g < 1 || s->nr_islands < 2 || s->cfg->search_migration_interval <= 0 ||
	    g % s->cfg->search_migration_interval)
		return;
	moves = xcalloc(s->nr_islands, sizeof(*moves));
	m = kb_archive_migrate(&s->archive, moves);
	for (size_t i = 0; i < m; i++) {
		accepted += moves[i].accepted;
		if (kb_search_db_migration_add(s->st, s->row.id, g, &moves[i]))
			log_warn("search: a migration of generation %lld was not stored", (long long)g);
	}
	kb_progress_note(s->pg, "migration: %zu of %zu island bests accepted by the next island", accepted, m);
	free(moves);
}

int srch_meta_prompt(struct srch *s, int64_t g, struct srch_meta *m, struct strbuf *prompt)
{
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf diag = STRBUF_INIT;
	const char *aux = s->cfg->llm_aux_model;
	long model = aux && *aux ? kb_llm_find_model(s->llm, aux) : 0;
	int rc = 0;

	/* asked every meta_interval generations, failures or not: a replay must ask the same questions */
	m->due = g >= 1 && !s->cut_short && s->cfg->search_meta_interval > 0 &&
		 g % s->cfg->search_meta_interval == 0 && s->nr_prompts;
	if (!m->due)
		return 0;
	m->model = model < 0 ? 0 : (size_t)model;
	m->parent = kb_metaprompt_select(s->prompts, s->nr_prompts, s->cfg->search_prompt_temperature, 0.0,
					 &s->row.rng);
	/* the lines shown: those made later (the next generation's) wait for the next rewrite */
	m->seen_mark = s->diag_pushed;
	m->seen = s->diagnoses.nr;
	for (size_t i = 0; i < s->diagnoses.nr; i++)
		strbuf_addf(&diag, "- %s\n", s->diagnoses.v[i]);
	if (!s->diagnoses.nr)
		strbuf_addstr(&diag, "- no candidate failed since the last rewrite; the slowest kernels are the thing to improve");
	strbuf_trim(&diag);
	sections_vars(s, &s->prompts[m->parent], &v);
	kb_prompt_var(&v, "diagnoses", diag.buf);
	if (srch_render(s, T_META, &v, prompt))
		rc = -1;
	kb_prompt_vars_release(&v);
	strbuf_release(&diag);
	return rc;
}

void srch_meta_take(struct srch *s, const struct srch_meta *m, const struct kb_llm_reply *reply)
{
	struct strbuf why = STRBUF_INIT;
	struct kb_prompt child, *p;
	size_t later = (size_t)(s->diag_pushed - m->seen_mark), seen;
	int64_t parent_id;

	kb_prompt_init(&child);
	if (!reply || reply->status != KB_LLM_OK || !reply->text.len) {
		kb_progress_note(s->pg, "meta-prompt rewrite: no answer from the model (the prompts stay)");
		goto out;
	}
	if (kb_metaprompt_parse_rewrite(&s->prompts[m->parent], reply->text.buf, &child, &why)) {
		kb_progress_note(s->pg, "meta-prompt rewrite refused: %s", why.buf);
		goto out;
	}
	parent_id = s->prompts[m->parent].id;
	p = prompt_push(s);
	*p = child;
	kb_prompt_init(&child);
	p->id = 0;
	p->parent_id = parent_id;
	p->fitness = NAN;
	p->uses = 0;
	/* the lines the rewrite saw: the oldest, as the newest were pushed since */
	seen = s->diagnoses.nr > later ? s->diagnoses.nr - later : 0;
	if (seen > m->seen)
		seen = m->seen;
	kb_progress_note(s->pg, "meta-prompt rewritten from %zu diagnoses (now %zu prompts)", m->seen,
			 s->nr_prompts);
	diagnoses_drop(s, seen);
out:
	kb_prompt_release(&child);
	strbuf_release(&why);
}

/* --- the end --- */

/*
 * Final checks held in the time budget's reserve: the best, and the next
 * best when one fails (a fresh process and full seeds can reject what the
 * screening passed). Past these the walk goes on while the budget lets one
 * more try start; without a budget until a kernel passes.
 */
#define FINAL_RESERVED_TRIES 3
/* How far past the deadline a final check may run (the judge's own grace comes on top). */
#define FINAL_GRACE_MS 20000
/* Final-check failures the result names; the rest are counted. */
#define FINAL_NAMED 4

/* The final check's cache key (kb_tune_final_key) of c for pass, timed or not. */
static void final_key(const struct srch *s, const struct kb_search_cand *c, const char *pass, bool timing,
		      int64_t seeds, struct strbuf *key)
{
	char sha[65], tune_settings[17];

	kb_sha256_hex(c->source, strlen(c->source), sha);
	kb_tune_settings_hash(s->cfg, tune_settings);
	kb_tune_final_key(key, s->device, s->op_hash, s->backend, pass, sha, seeds, tune_settings);
	if (!timing)
		strbuf_addstr(key, "|untimed");
}

/* The templates' verified evidence of c (kb_tune checked it this way already), else NULL. */
static const cJSON *seed_evidence(const struct srch *s, const struct kb_search_cand *c)
{
	for (size_t i = 0; i < s->o->nr_seeds; i++) {
		const struct kb_search_seed *sd = &s->o->seeds[i];
		char h[65];

		if (!sd->source || !sd->evidence || strcmp(kb_evidence_verdict(sd->evidence), "verified"))
			continue;
		kb_source_hash(sd->source, h);
		if (!strcmp(h, c->hash))
			return sd->evidence;
	}
	return NULL;
}

/* Whether c's final check (of the search's pass, timed) is known without running one. */
static bool final_known(struct srch *s, const struct kb_search_cand *c)
{
	struct strbuf key = STRBUF_INIT;
	cJSON *ev;
	bool known;

	if (seed_evidence(s, c))
		return true;
	final_key(s, c, s->pass, true, srch_final_seeds(s), &key);
	ev = kb_timings_get(s->st, key.buf);
	known = ev && *kb_evidence_verdict(ev);
	cJSON_Delete(ev);
	strbuf_release(&key);
	return known;
}

/* The kernel's verdict with the full seeds and timing in a fresh harness process (cached like kb_tune's). */
static int final_check(struct srch *s, const struct kb_search_cand *c, const char *pass, bool timing,
		       cJSON **evidence, bool *cached)
{
	int64_t seeds = srch_final_seeds(s);
	struct kb_eval_opts eo = {
		.operator_path = s->o->operator_path, .mode = timing ? "bench" : "verify", .pass = pass,
		.backend = s->o->backend, .seeds = seeds, .timing = timing,
		/* published within a minute of the deadline, however long the check would take */
		.deadline_ms = s->clock.deadline_ms ? s->clock.deadline_ms + FINAL_GRACE_MS : 0,
	};
	struct strbuf key = STRBUF_INIT, path = STRBUF_INIT;
	const cJSON *sev = timing ? seed_evidence(s, c) : NULL;
	char sha[65];
	int rc;

	*evidence = NULL;
	*cached = false;
	if (sev) {
		*evidence = cJSON_Duplicate(sev, true);
		*cached = true;
		return 0;
	}
	kb_sha256_hex(c->source, strlen(c->source), sha);
	final_key(s, c, pass, timing, seeds, &key);
	strbuf_addf(&path, "%s/final-%.16s%s", s->work.buf, sha, s->ext);
	rc = kb_tune_fresh_verdict(s->vf, s->st, key.buf, c->source, path.buf, &eo, evidence, cached);
	strbuf_release(&key);
	strbuf_release(&path);
	return rc;
}

struct search_final {
	struct srch *s;
	const struct kb_search_cand *c;
};

static int search_final_check(void *ctx, const char *pass, bool timing, cJSON **evidence, bool *cached)
{
	struct search_final *f = ctx;

	return final_check(f->s, f->c, pass, timing, evidence, cached);
}

static void set_why(struct kb_search_result *res, const char *fmt, ...) KB_PRINTF(2, 3);

static void set_why(struct kb_search_result *res, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	free(res->why);
	res->why = strbuf_detach(&sb, NULL);
}

static void take_best(struct srch *s, const struct kb_search_cand *c, cJSON *ev)
{
	struct kb_search_result *res = s->res;

	res->outcome = KB_SEARCH_OK;
	res->best_candidate_id = c->id;
	free(res->best_proposer);
	res->best_proposer = xstrdup(c->proposer);
	free(res->best_model);
	res->best_model = c->model ? xstrdup(c->model) : NULL;
	strbuf_reset(&res->best_source);
	strbuf_addstr(&res->best_source, c->source);
	kb_sha256_hex(res->best_source.buf, res->best_source.len, res->best_sha);
	cJSON_Delete(res->evidence);
	res->evidence = ev;
}

/* The search's side of the final walk (templates/final_check.h). */
struct search_walk {
	struct srch *s;
	struct strbuf failed;        /* the first FINAL_NAMED failures, with their reasons */
	size_t nr_failed;
};

static int64_t walk_next(void *ctx, const int64_t *skip, size_t nr_skip)
{
	struct search_walk *sw = ctx;
	const struct kb_search_cand *c = srch_best(sw->s, skip, nr_skip, false);

	return c ? c->id : -1;
}

static bool walk_known(void *ctx, int64_t id)
{
	struct search_walk *sw = ctx;

	return final_known(sw->s, srch_cand(sw->s, id));
}

static int walk_check(void *ctx, int64_t id, cJSON **evidence, bool *cached, bool *fwd_failed)
{
	struct search_walk *sw = ctx;
	cJSON *fwd = NULL;
	int rc;

	if (kb_stop_requested())
		return KB_ECANCELLED;
	kb_progress_stage(sw->s->pg, "final check", 0);
	rc = kb_final_check_pass(search_final_check, &(struct search_final){ sw->s, srch_cand(sw->s, id) },
				 sw->s->pass, evidence, &fwd, cached, fwd_failed);
	cJSON_Delete(fwd);
	return rc;
}

static void walk_failed(void *ctx, int64_t id, const cJSON *ev, bool fwd_failed)
{
	struct search_walk *sw = ctx;
	struct strbuf sb = STRBUF_INIT;

	if (fwd_failed)
		strbuf_addstr(&sb, "forward pass: ");
	kb_evidence_first_reason(ev, &sb);
	kb_progress_note(sw->s->pg, "final check of #%lld failed in a fresh process: %s", (long long)id, sb.buf);
	if (sw->nr_failed++ < FINAL_NAMED)
		strbuf_addf(&sw->failed, "%s#%lld: %s", sw->failed.len ? "; " : "", (long long)id, sb.buf);
	strbuf_release(&sb);
}

/* Verified candidates the walk did not try. */
static size_t walk_left(const struct srch *s, const struct kb_final_walk *w)
{
	size_t n = 0;

	for (size_t i = 0; i < s->nr_cands; i++) {
		const struct kb_search_cand *c = s->cands[i];
		bool tried = false;

		for (size_t k = 0; k < w->nr_skip && !tried; k++)
			tried = w->skip[k] == c->id;
		n += !tried && !strcmp(c->verdict, "verified") && isfinite(c->speedup) && c->speedup > 0;
	}
	return n;
}

/* The result when no kernel passed. */
static void walk_none(struct srch *s, const struct search_walk *sw, const struct kb_final_walk *w)
{
	struct strbuf sb = STRBUF_INIT;

	s->res->outcome = KB_SEARCH_NONE_VERIFIED;
	if (!sw->nr_failed) {
		set_why(s->res, "no candidate of %zu verified", s->nr_cands);
		return;
	}
	strbuf_addf(&sb, "no kernel passed the final check: %s", sw->failed.buf);
	if (sw->nr_failed > FINAL_NAMED)
		strbuf_addf(&sb, "; %zu more failed it", sw->nr_failed - FINAL_NAMED);
	if (w->out_of_time) {
		size_t left = walk_left(s, w);

		strbuf_addf(&sb, "; the time budget ran out with %zu verified kernel%s not checked", left,
			    left == 1 ? "" : "s");
	}
	set_why(s->res, "%s", sb.buf);
	strbuf_release(&sb);
}

/* The final walk over the verified candidates, best first (templates/final_check.h). */
static int finish(struct srch *s)
{
	struct search_walk sw = { .s = s, .failed = STRBUF_INIT };
	struct kb_final_walk w = {
		.ctx = &sw, .next = walk_next, .known = walk_known, .check = walk_check, .failed = walk_failed,
		.budget = &s->clock, .checks_per_try = strcmp(s->pass, "backward") ? 1 : 2,
	};
	int rc = kb_final_walk(&w);

	if (!rc && w.passed >= 0) {
		const struct kb_search_cand *c = srch_cand(s, w.passed);
		const cJSON *sum = cJSON_GetObjectItemCaseSensitive(w.evidence, "summary");
		const cJSON *ge = cJSON_GetObjectItemCaseSensitive(sum, "geomean_speedup_eager");
		struct strbuf sb = STRBUF_INIT;

		strbuf_addf(&sb, "#%lld %s%s: ", (long long)c->id, c->proposer, w.cached ? " (cached)" : "");
		srch_fmt_speedup(cJSON_IsNumber(ge) ? ge->valuedouble : NAN, &sb);
		kb_progress_step(s->pg, 0, sb.buf);
		strbuf_release(&sb);
		take_best(s, c, w.evidence);
		w.evidence = NULL;
	} else if (!rc) {
		walk_none(s, &sw, &w);
	}
	kb_final_walk_release(&w);
	strbuf_release(&sw.failed);
	return rc;
}

/* What a finished search stored; the same result again without running anything. */
static int load_finished(struct srch *s)
{
	struct kb_search_result *res = s->res;
	const cJSON *info = s->row.info;
	const cJSON *outcome = cJSON_GetObjectItemCaseSensitive(info, "outcome");
	const cJSON *why = cJSON_GetObjectItemCaseSensitive(info, "why");
	const cJSON *cut = cJSON_GetObjectItemCaseSensitive(info, "cut_short");
	const cJSON *summary = cJSON_GetObjectItemCaseSensitive(info, "summary");
	const cJSON *ev = cJSON_GetObjectItemCaseSensitive(info, "evidence");
	const cJSON *best = cJSON_GetObjectItemCaseSensitive(info, "best_candidate_id");
	struct kb_search_cand c;
	int rc = 0;

	res->cached = true;
	res->summary = cJSON_IsObject(summary) ? cJSON_Duplicate(summary, true) : cJSON_CreateObject();
	if (cJSON_IsString(cut))
		res->cut_short = xstrdup(cut->valuestring);
	if (!cJSON_IsString(outcome) || strcmp(outcome->valuestring, "ok") || !cJSON_IsNumber(best)) {
		res->outcome = KB_SEARCH_NONE_VERIFIED;
		set_why(res, "%s", cJSON_IsString(why) ? why->valuestring : "the search found no verified kernel");
		return 0;
	}
	kb_search_cand_init(&c);
	rc = kb_search_db_cand_get(s->st, (int64_t)best->valuedouble, &c);
	if (rc) {
		if (rc == KB_ENOTFOUND)
			rc = error("finished search %lld names a best candidate that is not stored", (long long)s->row.id);
		goto out;
	}
	take_best(s, &c, cJSON_IsObject(ev) ? cJSON_Duplicate(ev, true) : cJSON_CreateObject());
out:
	kb_search_cand_release(&c);
	return rc;
}

static void store_finished(struct srch *s)
{
	struct kb_search_result *res = s->res;
	cJSON *info = cJSON_CreateObject();

	cJSON_AddStringToObject(info, "outcome", res->outcome == KB_SEARCH_OK ? "ok" : "none");
	if (res->why)
		cJSON_AddStringToObject(info, "why", res->why);
	if (s->cut_short)
		cJSON_AddStringToObject(info, "cut_short", s->cut_short);
	else
		cJSON_AddNullToObject(info, "cut_short");
	if (res->outcome == KB_SEARCH_OK) {
		cJSON_AddNumberToObject(info, "best_candidate_id", (double)res->best_candidate_id);
		cJSON_AddItemToObject(info, "evidence", cJSON_Duplicate(res->evidence, true));
	}
	cJSON_AddItemToObject(info, "summary", cJSON_Duplicate(res->summary, true));
	if (kb_search_db_set_state(s->st, s->row.id, "done", info, srch_wall_s(s)))
		log_warn("search %lld: its result was not stored", (long long)s->row.id);
	cJSON_Delete(info);
}

static uint64_t derive_seed(const struct srch *s)
{
	uint64_t seed = s->o->seed ? s->o->seed : (uint64_t)s->cfg->search_seed;

	/* 52 bits: the seed stays exact in JSON (kernel.json, search.json) */
	if (!seed)
		for (int i = 0; i < 13; i++) {
			int ch = s->op_hash[i];

			seed = seed * 16 + (uint64_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
		}
	return seed ? seed : 1;
}

/* Find, resume or create the search row; *done when it had finished. */
static int open_search(struct srch *s, bool *done)
{
	struct strbuf base = STRBUF_INIT, key = STRBUF_INIT;
	int rc;

	*done = false;
	kb_search_key(&base, s->op_hash, s->backend, s->pass, s->settings, s->seed);
	if (s->o->fresh) {
		rc = kb_search_db_fresh_key(s->st, base.buf, &key);
		if (rc)
			goto out;
	} else {
		strbuf_addstr(&key, base.buf);
	}
	kb_search_call_base(key.buf, s->call_base);
	rc = kb_search_db_find(s->st, key.buf, &s->row);
	if (!rc) {
		if (!strcmp(s->row.state, "done")) {
			*done = true;
			goto out;
		}
		s->res->resumed = true;
		if (strcmp(s->row.state, "running"))
			rc = kb_search_db_set_state(s->st, s->row.id, "running", NULL, s->row.wall_s);
		goto out;
	}
	if (rc != KB_ENOTFOUND)
		goto out;
	kb_search_row_release(&s->row);
	s->row.key = strbuf_detach(&key, NULL);
	s->row.job_id = s->o->job_id;
	s->row.operator_path = xstrdup(s->o->operator_path);
	s->row.backend = xstrdup(s->backend);
	s->row.pass = xstrdup(s->pass);
	s->row.seed = s->seed;
	s->row.rng = s->seed ^ 0x6b625f7365617263ULL;
	/* the row and its seed prompt together: a search never exists without a prompt */
	rc = kb_state_begin(s->st);
	if (rc)
		goto out;
	rc = kb_search_db_create(s->st, &s->row);
	if (!rc)
		rc = kb_search_db_prompt_insert(s->st, s->row.id, 0, seed_prompt(s));
	if (!rc)
		rc = kb_state_commit(s->st);
	else
		kb_state_rollback(s->st);
out:
	strbuf_release(&base);
	strbuf_release(&key);
	return rc;
}

/* Everything a resumed search knew at its last stored generation. */
static int load_state(struct srch *s)
{
	cJSON *hist, *h;
	size_t bi;
	int bc;

	if (kb_archive_init(&s->archive, s->nr_islands) ||
	    kb_search_db_archive_load(s->st, s->row.id, &s->archive) ||
	    kb_search_db_cands_load(s->st, s->row.id, &s->cands, &s->nr_cands))
		return -1;
	s->alloc_cands = s->nr_cands;
	if (!s->nr_prompts) {
		if (kb_search_db_prompts_load(s->st, s->row.id, &s->prompts, &s->nr_prompts))
			return -1;
		s->alloc_prompts = s->nr_prompts;
	}
	if (!s->nr_prompts)
		seed_prompt(s); /* stored with the next generation */
	/* the failures the next rewrite would have seen had the search not stopped */
	srch_diagnoses_restore(s, 0);
	hist = kb_search_db_history(s->st, s->row.id);
	if (!hist)
		return -1;
	cJSON_ArrayForEach(h, hist) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "t_s");
		const cJSON *b = cJSON_GetObjectItemCaseSensitive(h, "speedup");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(h, "candidate_id");

		if (s->nr_hist == s->alloc_hist) {
			s->alloc_hist = s->alloc_hist ? 2 * s->alloc_hist : 16;
			s->hist = xrealloc(s->hist, s->alloc_hist * sizeof(*s->hist));
		}
		s->hist[s->nr_hist++] = (struct srch_hist){ t->valuedouble, b->valuedouble,
							    (int64_t)id->valuedouble };
	}
	cJSON_Delete(hist);
	s->hist_stored = s->nr_hist;
	if (!kb_archive_best(&s->archive, SIZE_MAX, &bi, &bc)) {
		const struct kb_elite *e = kb_archive_get(&s->archive, bi, bc);

		s->best_fitness = e->fitness;
		s->best_id = e->candidate_id;
	}
	/* tune points are not archived: the best of them from the candidates */
	for (size_t i = 0; i < s->nr_cands; i++) {
		const struct kb_search_cand *c = s->cands[i];

		if (strcmp(c->proposer, "tune") || strcmp(c->verdict, "verified") || !(c->speedup > s->tuner.best))
			continue;
		s->tuner.best = c->speedup;
		if (c->speedup > s->best_fitness)
			s->best_id = c->id;
	}
	s->wall_before = s->row.wall_s;
	return 0;
}

/* The generations' model calls in flight: threads that store into this search's state store. */
static int pool_new(struct srch *s)
{
	char *dir = xstrdup(kb_state_path(s->st));
	char *slash = strrchr(dir, '/');
	int rc;

	if (slash)
		*slash = '\0';
	rc = kb_llm_pool_new(&s->pool, s->cfg, slash ? dir : ".", (size_t)s->cfg->search_calls_in_flight);
	free(dir);
	return rc;
}

static void srch_release(struct srch *s)
{
	kb_llm_pool_free(s->pool);
	srch_tuner_release(s);
	for (int t = 0; t < T_NR; t++)
		strbuf_release(&s->tmpl[t]);
	kb_prompt_vars_release(&s->base);
	if (s->archive.cells)
		kb_archive_release(&s->archive);
	for (size_t i = 0; i < s->nr_prompts; i++)
		kb_prompt_release(&s->prompts[i]);
	free(s->prompts);
	for (size_t i = 0; i < s->nr_cands; i++)
		kb_search_cand_free(s->cands[i]);
	free(s->cands);
	free(s->hist);
	strvec_clear(&s->diagnoses);
	kb_search_row_release(&s->row);
	strbuf_release(&s->work);
	free(s->device);
	free(s->cut_short);
}

int kb_search_run(struct kb_verifier *vf, struct kb_state *st, struct kb_llm_client *llm,
		  const struct kb_search_opts *o, struct kb_search_result *res)
{
	struct srch s = { .vf = vf, .cfg = vf->cfg, .st = st, .llm = llm, .o = o, .res = res,
			  .pg = o->progress };
	struct strbuf sb = STRBUF_INIT;
	bool done;
	int rc = -1, checks_per_try;

	s.t0_ms = kb_now_ms();
	strbuf_init(&s.work, 0);
	for (int t = 0; t < T_NR; t++)
		strbuf_init(&s.tmpl[t], 0);
	if (o->backend != KB_BACKEND_CUDA && o->backend != KB_BACKEND_CPU) {
		error("the search needs a resolved backend");
		goto out;
	}
	if (!cJSON_IsObject(o->describe)) {
		error("the search of '%s' needs the operator's describe result", o->operator_path);
		goto out;
	}
	if (!llm || !kb_llm_nr_models(llm)) {
		error("the search needs at least one model ([llm] models)");
		goto out;
	}
	s.backend = kb_backend_name(o->backend);
	s.pass = o->pass ? o->pass : "forward";
	/* final checks of the best and the next ones (and their forward passes, for backward) in reserve */
	checks_per_try = strcmp(s.pass, "backward") ? 1 : 2;
	kb_budget_init(&s.clock, o->deadline_ms, FINAL_RESERVED_TRIES * checks_per_try,
		       o->final_seeds > 0 ? o->final_seeds : vf->cfg->seeds, KB_TUNE_SEEDS);
	if (o->deadline_ms)
		kb_budget_cap_reserve(&s.clock, o->deadline_ms - kb_now_ms(), checks_per_try);
	s.ext = o->backend == KB_BACKEND_CUDA ? ".cu" : ".cpp";
	s.nr_islands = s.cfg->search_islands < 1 ? 1 : s.cfg->search_islands > 64 ? 64 : (size_t)s.cfg->search_islands;
	s.generations = s.cfg->search_generations > 0 ? s.cfg->search_generations : 0;
	kb_llm_budget_from_config(&s.budget, s.cfg);
	if (kb_operator_hash(o->operator_path, s.op_hash))
		goto out;
	kb_tune_device_name(vf, o->backend, &sb);
	s.device = strbuf_detach(&sb, NULL);
	kb_search_settings_hash(s.cfg, s.settings);
	s.seed = derive_seed(&s);
	if (srch_context_init(&s))
		goto out;

	kb_progress_stage(s.pg, "search", 0);
	if (open_search(&s, &done))
		goto out;
	if (!done && pool_new(&s))
		goto out;
	res->search_id = s.row.id;
	if (done) {
		kb_progress_note(s.pg, "search %lld finished earlier: its result again", (long long)s.row.id);
		rc = load_finished(&s);
		if (!rc)
			srch_write_status(&s, res->summary);
		goto out;
	}
	strbuf_addf(&s.work, "%s/search/%lld", s.cfg->state_dir, (long long)s.row.id);
	if (load_state(&s))
		goto out;
	if (res->resumed)
		kb_progress_note(s.pg, "resuming search %lld at generation %lld: %zu candidates, %zu archive cells",
				 (long long)s.row.id, (long long)s.row.generation, s.nr_cands,
				 kb_archive_filled(&s.archive, SIZE_MAX));
	else
		kb_progress_note(s.pg, "search %lld: seed %llu, %zu island%s, %lld generation%s", (long long)s.row.id,
				 (unsigned long long)s.seed, s.nr_islands, s.nr_islands == 1 ? "" : "s",
				 (long long)s.generations, s.generations == 1 ? "" : "s");

	rc = 0;
	if (s.row.generation == 0) {
		s.generation = 0;
		rc = plant_seeds(&s);
	}
	/* translation (generation 0) and evolution, the next generation begun while one ends */
	if (!rc && s.row.generation <= s.generations)
		rc = srch_flow_generations(&s, s.row.generation, s.generations);
	if (!rc && !s.cut_short && s.cfg->search_tune_templates && s.row.generation == s.generations + 1) {
		rc = srch_template_step(&s, s.generations + 1);
		if (!rc)
			rc = srch_commit(&s, s.generations + 1);
	}
	if (!rc)
		rc = finish(&s);
	if (rc == -1 && kb_stop_requested())
		rc = KB_ECANCELLED;
	if (rc) {
		if (s.row.id)
			srch_write_status(&s, NULL);
		if (rc == -1 && s.row.id)
			kb_search_db_set_state(st, s.row.id, "failed", NULL, srch_wall_s(&s));
		goto out;
	}
	if (s.cut_short)
		res->cut_short = xstrdup(s.cut_short);
	res->summary = srch_summary(&s, true);
	store_finished(&s);
	srch_write_status(&s, res->summary);
out:
	kb_progress_end(s.pg);
	res->seconds = (double)(kb_now_ms() - s.t0_ms) / 1000.0;
	srch_release(&s);
	strbuf_release(&sb);
	return rc;
}
