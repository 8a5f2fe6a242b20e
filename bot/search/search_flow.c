#include "core/common.h"
#include "core/json.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/signals.h"
#include "core/util.h"
#include "llm/pool.h"
#include "search/llm_verifiers.h"
#include "search/search_priv.h"

/*
 * The generations as one flow of model calls and evaluations (issue 16):
 * a generation's proposals are asked at once (up to [search]
 * calls_in_flight in flight, llm/pool.h); each reply, as it completes,
 * becomes a candidate, is screened statically and sent to the three LLM
 * verifiers (asked at once too); once its verdicts are in it is ready,
 * and the harness evaluates everything ready in one batch while the other
 * calls go on. A candidate that fails gets its repair asked right after
 * its evaluation.
 *
 * Two generations overlap: the next one is planned as soon as every
 * proposal of the current one is judged, while its repairs (each a chain
 * of a repair call, its verifiers and an evaluation) still run; otherwise
 * the calls in flight would drain to one or two at every generation's
 * end, the model's latency paid per hop of the longest chain. A
 * generation ends when nothing of it is in flight or waiting: then its
 * migration, its meta-prompt rewrite (a call of the flow like the
 * others), and its commit, generations in order. A third is not begun
 * before the first is committed.
 *
 * Replies come back in completion order, so the archive, the islands and
 * the prompts' credit follow that order: deterministic for a given seed
 * and order of completions. Answers stored by an earlier run (a kill, a
 * replay) are taken from the store at once, in slot order, and a slot
 * asked before keeps its kind, so its key (srch_generation_plan). Every
 * completed call is stored by the pool's thread when it ends, so a search
 * killed while evaluating never asks a completed call again.
 */

enum job_kind { J_PROPOSE, J_REPAIR, J_VERIFY, J_TEMPLATIZE, J_META };

struct job {
	enum job_kind kind;
	int64_t gen;                    /* the generation it belongs to: whose end waits for it */
	struct kb_search_cand like;     /* generation, island, slot, round, parents, prompt of the kernel asked for */
	struct kb_search_cand *c;       /* J_REPAIR: the failed one; J_VERIFY: the candidate; J_TEMPLATIZE: the base */
	int verifier;                   /* J_VERIFY */
	size_t model;                   /* SIZE_MAX: drawn from the key */
	struct srch_meta meta;          /* J_META */
	char *purpose;
	char *key;
};

/* A generation begun and not committed yet. */
struct gen {
	int64_t g;
	char *stage;                    /* "translate", "evolve G/N" */
	size_t in_flight;               /* its calls in the pool */
	size_t proposing;               /* its proposals among them */
	bool ended;                     /* migrated, its rewrite asked (or none due) */
};

/* The generations open at once: the one ending, the next. */
#define OPEN_GENS 2

/* A candidate waiting for its verifiers' answers. */
struct verifying {
	struct kb_search_cand *c;
	cJSON *all;
	int left, answered;
	bool pass;
};

struct flow {
	struct srch *s;
	size_t taken;                   /* replies taken during harness waits since the loop looked */
	bool taking;                    /* in take_in_wait */
	int wait_rc;                    /* the first error of a reply taken there */
	int64_t next, last;             /* the next generation to plan; the last one */
	struct gen gens[OPEN_GENS];     /* oldest first */
	size_t nr_gens;
	struct kb_search_cand **ready;
	size_t nr_ready, alloc_ready;
	struct verifying *v;
	size_t nr_v, alloc_v;
};

static void job_free(struct job *j)
{
	if (!j)
		return;
	free(j->purpose);
	free(j->key);
	free(j);
}

static struct job *job_new(enum job_kind kind, const char *purpose, int64_t gen)
{
	struct job *j = xcalloc(1, sizeof(*j));

	j->kind = kind;
	j->gen = gen;
	j->model = SIZE_MAX;
	j->purpose = xstrdup(purpose);
	kb_search_cand_init(&j->like);
	return j;
}

static struct gen *gen_of(struct flow *f, int64_t g)
{
	for (size_t i = 0; i < f->nr_gens; i++)
		if (f->gens[i].g == g)
			return &f->gens[i];
	return NULL;
}

/* A call of j went to the pool (in, true) or came back. */
static void count_call(struct flow *f, const struct job *j, bool in)
{
	struct gen *gn = gen_of(f, j->gen);

	if (!gn) {
		log_warn("search: a %s call of generation %lld, which is not open", j->purpose, (long long)j->gen);
		return;
	}
	if (in) {
		gn->in_flight++;
		gn->proposing += j->kind == J_PROPOSE;
	} else {
		gn->in_flight--;
		gn->proposing -= j->kind == J_PROPOSE;
	}
}

static void ready_push(struct flow *f, struct kb_search_cand *c)
{
	if (f->nr_ready == f->alloc_ready) {
		f->alloc_ready = f->alloc_ready ? 2 * f->alloc_ready : 16;
		f->ready = xrealloc(f->ready, f->alloc_ready * sizeof(*f->ready));
	}
	f->ready[f->nr_ready++] = c;
}

static int on_reply(struct flow *f, struct job *j, int rc, struct kb_llm_reply *reply);

/*
 * Ask for j: replayed answers are taken at once (on_reply), live ones go
 * to the pool (j then belongs to it until it completes). A budget or a
 * failed call just ends the job. 0, -1, KB_ECANCELLED.
 */
static int ask(struct flow *f, struct job *j, const char *prompt)
{
	struct srch *s = f->s;
	struct kb_llm_reply reply;
	struct strbuf key = STRBUF_INIT;
	int64_t ticket;
	int rc;

	kb_llm_reply_init(&reply);
	rc = srch_ask_begin(s, j->like.generation, j->like.island, j->like.slot, j->purpose, j->like.round,
			    j->model, prompt, &reply, &key, j, &ticket);
	j->key = strbuf_detach(&key, NULL);
	if (rc == SRCH_ASKED) {
		count_call(f, j, true);
		kb_llm_reply_release(&reply);
		return 0;
	}
	if (rc == KB_ECANCELLED || rc == -1) {
		kb_llm_reply_release(&reply);
		job_free(j);
		return rc;
	}
	/* 0: a stored answer; 1: a stored failure; KB_EBUDGET: not asked */
	rc = on_reply(f, j, rc, &reply);
	kb_llm_reply_release(&reply);
	return rc;
}

/* The three verifiers of c asked (or c ready at once when they are off or known). */
static int verify(struct flow *f, struct kb_search_cand *c)
{
	struct srch *s = f->s;
	struct strbuf prompt = STRBUF_INIT, purpose = STRBUF_INIT;
	struct verifying *v;
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(c->verifiers, "pass");
	size_t vi;
	int rc = 0;

	if (!s->cfg->search_llm_verifiers) {
		ready_push(f, c);
		return 0;
	}
	if (cJSON_IsBool(p)) {
		bool run;

		rc = srch_screen_llm(s, c, cJSON_IsTrue(p), &run);
		if (!rc && run)
			ready_push(f, c);
		return rc;
	}
	if (f->nr_v == f->alloc_v) {
		f->alloc_v = f->alloc_v ? 2 * f->alloc_v : 16;
		f->v = xrealloc(f->v, f->alloc_v * sizeof(*f->v));
	}
	vi = f->nr_v++;
	v = &f->v[vi];
	v->c = c;
	v->all = cJSON_CreateObject();
	v->left = KB_SV_NR;
	v->answered = 0;
	v->pass = true;
	for (int k = 0; k < KB_SV_NR && !rc; k++) {
		struct job *j = job_new(J_VERIFY, "verify", c->generation);

		if (srch_verify_prompt(s, c, k, &prompt, &purpose)) {
			job_free(j);
			rc = -1;
			break;
		}
		free(j->purpose);
		j->purpose = strbuf_detach(&purpose, NULL);
		j->like = *c;
		j->c = c;
		j->verifier = k;
		rc = ask(f, j, prompt.buf);
	}
	strbuf_release(&prompt);
	strbuf_release(&purpose);
	return rc;
}

/* A new candidate from a proposal or a repair: decided earlier, or screened and verified. */
static int take_candidate(struct flow *f, struct kb_search_cand *c)
{
	struct srch *s = f->s;
	bool rejected;
	int rc;

	if (strcmp(c->verdict, "pending")) {
		/* decided by an earlier run: its failure lines are this run's too */
		srch_diagnoses_restore(s, c->id);
		ready_push(f, c);
		return 0;
	}
	rc = srch_screen_static(s, c, &rejected);
	if (rc)
		return rc;
	if (rejected) {
		ready_push(f, c); /* nothing to run: its repair follows */
		return 0;
	}
	return verify(f, c);
}

static struct verifying *verifying_of(struct flow *f, const struct kb_search_cand *c)
{
	for (size_t i = 0; i < f->nr_v; i++)
		if (f->v[i].c == c)
			return &f->v[i];
	return NULL;
}

static int verifier_answered(struct flow *f, struct job *j, int rc, const struct kb_llm_reply *reply)
{
	struct verifying *v = verifying_of(f, j->c);
	struct kb_search_cand *c = j->c;
	bool run;

	if (!v)
		return 0;
	srch_verify_note(v->all, j->verifier, rc, reply, &v->answered, &v->pass);
	if (--v->left)
		return 0;
	srch_verify_finish(c, v->all, v->answered, v->pass);
	rc = srch_screen_llm(f->s, c, v->pass, &run);
	*v = f->v[--f->nr_v];
	if (!rc && run)
		ready_push(f, c);
	return rc;
}

/* A completed (or replayed, or refused) call of j. 0, -1, KB_ECANCELLED. */
static int on_reply(struct flow *f, struct job *j, int rc, struct kb_llm_reply *reply)
{
	struct srch *s = f->s;
	struct kb_search_cand *c = NULL;

	if (rc == KB_ECANCELLED || rc == -1)
		goto out;
	if (j->kind == J_VERIFY) {
		rc = verifier_answered(f, j, rc == KB_EBUDGET ? KB_EBUDGET : rc ? 1 : 0, reply);
		goto out;
	}
	if (j->kind == J_TEMPLATIZE) {
		rc = rc ? 0 : srch_tune_take(s, j->c, j->key, reply);
		goto out;
	}
	if (j->kind == J_META) {
		srch_meta_take(s, &j->meta, rc ? NULL : reply);
		rc = 0;
		goto out;
	}
	if (rc) {
		rc = 0; /* a failed call or a budget: the slot yields nothing */
		goto out;
	}
	rc = srch_reply_cand(s, j->kind == J_REPAIR ? "repair" : j->purpose, reply, j->key, &j->like, &c);
	if (!rc && c)
		rc = take_candidate(f, c);
out:
	job_free(j);
	return rc;
}

static bool repairable(const struct kb_search_cand *c)
{
	return !strcmp(c->verdict, "build") || !strcmp(c->verdict, "static") || !strcmp(c->verdict, "rejected");
}

/* After its evaluation (or a static rejection): c's repair, when it failed and rounds are left. */
static int repair(struct flow *f, struct kb_search_cand *c)
{
	struct srch *s = f->s;
	struct strbuf prompt = STRBUF_INIT;
	struct job *j;
	int rc;

	if (!repairable(c) || s->cut_short || c->round >= s->cfg->search_repair_rounds)
		return 0;
	j = job_new(J_REPAIR, "repair", c->generation);
	j->like = *c;
	j->like.round = c->round + 1;
	j->like.parent_id = c->id;
	j->like.second_parent_id = 0;
	j->c = c;
	if (srch_repair_prompt(s, c, &prompt)) {
		job_free(j);
		strbuf_release(&prompt);
		return -1;
	}
	rc = ask(f, j, prompt.buf);
	strbuf_release(&prompt);
	return rc;
}

/* Evaluate everything ready (one harness batch), offer it, ask for the repairs. */
static int run_ready(struct flow *f)
{
	struct srch *s = f->s;
	size_t n = f->nr_ready, m = 0;
	struct kb_search_cand **batch = f->ready, **to_run = xcalloc(n ? n : 1, sizeof(*to_run));
	int rc;

	f->ready = NULL;
	f->nr_ready = f->alloc_ready = 0;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(batch[i]->verdict, "pending"))
			to_run[m++] = batch[i];
	/* the newest generation's stage: the progress line counts its work */
	rc = srch_run_batch(s, to_run, m, batch, n, f->gens[f->nr_gens - 1].stage);
	for (size_t i = 0; i < n && !rc; i++)
		rc = repair(f, batch[i]);
	free(to_run);
	free(batch);
	return rc;
}

/* After an error or a stop: the calls in flight aborted and their jobs freed, then the rest. */
static void job_free_payload(void *payload)
{
	job_free(payload);
}

static void drain(struct flow *f, bool abort)
{
	if (abort)
		srch_pool_abort(f->s, job_free_payload);
	for (size_t i = 0; i < f->nr_v; i++)
		cJSON_Delete(f->v[i].all);
	free(f->v);
	free(f->ready);
	for (size_t i = 0; i < f->nr_gens; i++)
		free(f->gens[i].stage);
}

/*
 * The archive's fittest LLM elite not yet rewritten, templatized
 * (tune_llm.c), asked first: its points fill the harness's idle time
 * from the first reply on. Its key is
 * the base's own place, so a resumed run or a replay asks it again only
 * from the store.
 */
static int ask_templatize(struct flow *f, int64_t g)
{
	struct kb_search_cand *base = srch_tune_wanted(f->s);
	struct strbuf prompt = STRBUF_INIT;
	struct job *j;
	int rc;

	if (!base)
		return 0;
	if (srch_tune_prompt(f->s, base, &prompt)) {
		strbuf_release(&prompt);
		return -1;
	}
	j = job_new(J_TEMPLATIZE, "templatize", g);
	j->like = *base;
	j->c = base;
	rc = ask(f, j, prompt.buf);
	strbuf_release(&prompt);
	return rc;
}

/* Whether g has a call in flight or a candidate waiting (for its verifiers, for the harness). */
static bool gen_busy(const struct flow *f, const struct gen *gn, bool proposals_only)
{
	if (proposals_only ? gn->proposing > 0 : gn->in_flight > 0)
		return true;
	for (size_t i = 0; i < f->nr_v; i++)
		if (f->v[i].c->generation == gn->g && (!proposals_only || f->v[i].c->round == 0))
			return true;
	for (size_t i = 0; i < f->nr_ready; i++)
		if (f->ready[i]->generation == gn->g && (!proposals_only || f->ready[i]->round == 0))
			return true;
	return false;
}

/* The next generation planned and its calls asked: its rewrite first, then its proposals. */
static int begin_next(struct flow *f)
{
	struct srch *s = f->s;
	struct srch_flow_spec *specs = NULL;
	struct strbuf stage = STRBUF_INIT;
	int64_t g = f->next++;
	size_t n = 0;
	int rc;

	rc = srch_generation_plan(s, g, &specs, &n, &stage);
	if (rc) {
		strbuf_release(&stage);
		return rc;
	}
	f->gens[f->nr_gens++] = (struct gen){ .g = g, .stage = strbuf_detach(&stage, NULL) };
	rc = ask_templatize(f, g);
	for (size_t i = 0; i < n && !rc && !s->cut_short; i++) {
		struct srch_flow_spec *sp = &specs[i];
		struct job *j = job_new(J_PROPOSE, srch_kind_name(sp->kind), g);

		j->like.generation = sp->g;
		j->like.island = sp->island;
		j->like.slot = sp->slot;
		j->like.parent_id = sp->parent_id;
		j->like.second_parent_id = sp->second_id;
		j->like.prompt_id = sp->prompt_id;
		if (kb_stop_requested()) {
			job_free(j);
			rc = KB_ECANCELLED;
			break;
		}
		rc = ask(f, j, sp->prompt.buf);
	}
	srch_flow_specs_free(specs, n);
	return rc;
}

/* Nothing of the oldest generation left: its migration and its rewrite asked. */
static int end_oldest(struct flow *f)
{
	struct srch *s = f->s;
	struct gen *gn = &f->gens[0];
	struct strbuf prompt = STRBUF_INIT;
	struct job *j;
	int rc;

	gn->ended = true;
	srch_generation_migrate(s, gn->g);
	j = job_new(J_META, "meta", gn->g);
	rc = srch_meta_prompt(s, gn->g, &j->meta, &prompt);
	if (rc || !j->meta.due) {
		job_free(j);
		strbuf_release(&prompt);
		return rc;
	}
	j->like.generation = gn->g;
	j->model = j->meta.model;
	rc = ask(f, j, prompt.buf);
	strbuf_release(&prompt);
	return rc;
}

/*
 * Move the generations on as far as they go: the oldest ended (migration,
 * rewrite) and committed once nothing of it is left, the next begun once
 * every proposal of the newest is judged. 0, -1, KB_ECANCELLED.
 */
static int advance(struct flow *f)
{
	struct srch *s = f->s;
	int rc = 0;

	while (!rc) {
		struct gen *old = f->nr_gens ? &f->gens[0] : NULL;

		if (old && !gen_busy(f, old, false)) {
			if (!old->ended) {
				rc = end_oldest(f);
				continue;
			}
			rc = srch_commit(s, old->g);
			free(old->stage);
			memmove(&f->gens[0], &f->gens[1], (f->nr_gens - 1) * sizeof(f->gens[0]));
			f->nr_gens--;
			continue;
		}
		if (f->next <= f->last && f->nr_gens < OPEN_GENS && !s->cut_short &&
		    (!f->nr_gens || !gen_busy(f, &f->gens[f->nr_gens - 1], true))) {
			rc = begin_next(f);
			continue;
		}
		break;
	}
	return rc;
}

/* A completed call taken from the pool: counted, recorded, handled. */
static int take(struct flow *f, struct kb_llm_pool_done *done)
{
	struct job *j = done->payload;
	int rc;

	count_call(f, j, false);
	rc = srch_ask_end(f->s, j->purpose, j->key, done->rc, &done->reply);
	rc = on_reply(f, j, rc, &done->reply);
	kb_llm_reply_release(&done->reply);
	return rc;
}

/*
 * s->idle while the harness judges a batch: the replies completed by now
 * are taken, so their verifiers, repairs and candidates go on without
 * waiting for the batch (a tune step or a candidate takes 3-10 s on the
 * H200). Nothing here runs the harness: what becomes ready waits in
 * f->ready for the loop.
 */
static void take_in_wait(void *ctx)
{
	struct flow *f = ctx;
	struct kb_llm_pool_done done;

	if (f->taking)
		return;
	f->taking = true;
	while (!f->wait_rc) {
		int rc = kb_llm_pool_next(f->s->pool, 0, &done);

		if (rc == KB_ETIMEOUT || rc == KB_ENOTFOUND)
			break;
		if (rc) {
			f->wait_rc = rc;
			break;
		}
		f->taken++;
		f->wait_rc = take(f, &done);
	}
	f->taking = false;
}

static bool flow_waits(void *ctx)
{
	const struct flow *f = ctx;

	return f->taken || f->nr_ready || f->wait_rc;
}

int srch_flow_generations(struct srch *s, int64_t first, int64_t last)
{
	struct flow f = { .s = s, .next = first, .last = last };
	int rc = 0;

	s->idle = take_in_wait;
	s->flow_waits = flow_waits;
	s->flow = &f;
	while (!rc) {
		struct kb_llm_pool_done done;

		rc = advance(&f);
		if (rc || !f.nr_gens)
			break;
		f.taken = 0;
		if (f.nr_ready) {
			rc = run_ready(&f);
		} else {
			rc = srch_tune_await(s, &done);
			if (!rc)
				rc = take(&f, &done);
			else if (rc == KB_ETIMEOUT || (rc == KB_ENOTFOUND && f.taken))
				rc = 0; /* replies taken during a tune step: the loop looks again */
			else if (rc == KB_ENOTFOUND)
				/* nothing in flight and nothing ready, yet a generation is open: a bug, not a hang */
				rc = error("search: generation %lld has nothing in flight and cannot end",
					   (long long)f.gens[0].g);
		}
		if (!rc)
			rc = f.wait_rc;
	}
	s->idle = NULL;
	s->flow_waits = NULL;
	s->flow = NULL;
	if (rc == -1 && kb_stop_requested())
		rc = KB_ECANCELLED;
	drain(&f, rc != 0);
	return rc;
}

void srch_flow_specs_free(struct srch_flow_spec *specs, size_t n)
{
	for (size_t i = 0; specs && i < n; i++)
		strbuf_release(&specs[i].prompt);
	free(specs);
}
