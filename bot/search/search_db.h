#ifndef KB_SEARCH_DB_H
#define KB_SEARCH_DB_H
/*
 * The search's persistence (state schema v3: searches, candidates,
 * archive_cells, prompts, search_history; llm_calls.search_id/call_key;
 * v7: search_prompt_texts, search_migrations, search_diagnoses).
 *
 * Identity. A search is named by its key
 *
 *     srch/1|OPHASH|BACKEND|PASS|SETTINGS|SEED[|fresh-N]
 *
 * SETTINGS (16 hex) covers everything that changes what the search does:
 * the harness and timing settings (kb_tune_settings_hash), the [search]
 * shape (islands, generations, shares, ...; not the budgets, so a bigger
 * budget resumes the same search) and the models (names, ids, providers,
 * weights, temperatures). `--fresh` appends "|fresh-N" (N the first
 * unused number) for a new search of the same operator.
 *
 * Every LLM call of a search has a call key
 *
 *     CALLBASE/g<generation>/i<island>/k<slot>/<purpose>/a<attempt>
 *
 * CALLBASE is 16 hex of the SHA-256 of the key WITHOUT the fresh suffix,
 * so a resumed search and a `--fresh` search with the same seed ask the
 * same questions under the same keys, and usage.h answers them from
 * llm_calls: a kill costs nothing twice and a replay makes no request.
 *
 * All functions run in their own transaction, or inside the caller's
 * kb_state_begin() (as a savepoint): search.c commits a generation's
 * archive, prompts, history and counters together.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

#include <cjson/cJSON.h>

struct kb_state;
struct kb_config;
struct kb_archive;
struct kb_migration;
struct kb_prompt;

/* --- keys (pure) --- */

/*
 * 16 hex characters over the settings that make two searches the same one.
 * The [search] part walks the config table (kb_config_foreach): every key
 * of [search] is in it unless kb_search_setting_resumable() says otherwise,
 * so a key added to the table is covered without a change here.
 */
void kb_search_settings_hash(const struct kb_config *cfg, char out[17]);
/*
 * True for the [search] keys a resumed search may change (the budgets,
 * which only stop it sooner, and the seed, a field of the key itself):
 * the ones left out of the settings hash.
 */
bool kb_search_setting_resumable(const char *key);
/* "srch/1|OPHASH|BACKEND|PASS|SETTINGS|SEED" appended to out. */
void kb_search_key(struct strbuf *out, const char *op_hash, const char *backend, const char *pass,
		   const char *settings, uint64_t seed);
/* The call base of a search key (its fresh suffix ignored): 16 hex. */
void kb_search_call_base(const char *key, char out[17]);
/* "CALLBASE/gG/iI/kK/PURPOSE/aA" appended to out. */
void kb_search_call_key(struct strbuf *out, const char *call_base, int64_t generation,
			int64_t island, int64_t slot, const char *purpose, int64_t attempt);

/* --- searches --- */

struct kb_search_row {
	int64_t id;
	char *key;
	int64_t job_id;         /* 0: none */
	char *operator_path, *backend, *pass;
	uint64_t seed;
	char *state;            /* running, done, failed, cancelled */
	int64_t generation;     /* generations completed */
	uint64_t rng;
	int64_t best_candidate_id; /* 0: none */
	double wall_s;
	cJSON *info;            /* NULL: none */
	int64_t started_at, updated_at, finished_at;
};

void kb_search_row_release(struct kb_search_row *r);

/* The search with key. 0, KB_ENOTFOUND (nothing logged), -1. */
int kb_search_db_find(struct kb_state *st, const char *key, struct kb_search_row *out);
/* A new running search from r (key, job_id, operator_path, backend, pass, seed, rng); r->id is set. */
int kb_search_db_create(struct kb_state *st, struct kb_search_row *r);
/* base + "|fresh-N" with the smallest N >= 1 no search uses, appended to out. */
int kb_search_db_fresh_key(struct kb_state *st, const char *base, struct strbuf *out);
/* generation, rng, best_candidate_id, wall_s (and updated_at) of r->id. */
int kb_search_db_checkpoint(struct kb_state *st, const struct kb_search_row *r);
/* state (running: finished_at cleared; else set), info (NULL keeps it), wall_s. */
int kb_search_db_set_state(struct kb_state *st, int64_t id, const char *state, const cJSON *info,
			   double wall_s);

/* --- candidates --- */

struct kb_search_cand {
	int64_t id;
	int64_t parent_id, second_parent_id, prompt_id; /* 0: none */
	char *proposer;         /* template, translate, repair, mutate, crossover, tune */
	char *model;            /* NULL: none */
	char *call_key;         /* NULL: none */
	char *source;
	char hash[65];          /* kb_source_hash */
	char *backend;
	int64_t generation, island;
	char verdict[16];       /* pending, verified, rejected, error, filtered, static, build */
	cJSON *reasons;         /* [{"check", "message", ...}] or NULL */
	double speedup, speedup_compile; /* NAN: not measured */
	cJSON *evidence;        /* the search-time evidence, NULL: none */
	int cell;               /* -1: none */
	cJSON *build_info;      /* build.json fields, NULL: none */
	cJSON *verifiers;       /* the LLM verifiers' verdicts, NULL: none ran */
	int64_t created_at;
	/* in memory only */
	int64_t slot, round;    /* the slot of its generation and island; repair round */
	bool audited;           /* rejected by the verifiers, evaluated anyway */
};

void kb_search_cand_init(struct kb_search_cand *c);
void kb_search_cand_release(struct kb_search_cand *c);
void kb_search_cand_free(struct kb_search_cand *c);

/*
 * Insert c (every field but id) and set c->id. KB_EEXISTS (nothing
 * logged) when the search already holds a candidate of c->hash: c->id is
 * then that candidate's id and nothing was written.
 */
int kb_search_db_cand_insert(struct kb_state *st, int64_t search_id, struct kb_search_cand *c);
/* Write c's outcome: verdict, reasons, speedups, evidence, cell, build_info, verifiers. */
int kb_search_db_cand_update(struct kb_state *st, const struct kb_search_cand *c);
/* Candidate id into *out (init'ed by the caller). 0, KB_ENOTFOUND, -1. */
int kb_search_db_cand_get(struct kb_state *st, int64_t id, struct kb_search_cand *out);
/* Every candidate of the search, in id order: *out is an array of *n allocated candidates. */
int kb_search_db_cands_load(struct kb_state *st, int64_t search_id, struct kb_search_cand ***out,
			    size_t *n);

/* --- archive, prompts, history --- */

/* Replace the search's stored cells by a's filled cells. */
int kb_search_db_archive_save(struct kb_state *st, int64_t search_id, const struct kb_archive *a);
/* Fill a (initialised, empty) from the store; cells of islands a does not have are skipped. */
int kb_search_db_archive_load(struct kb_state *st, int64_t search_id, struct kb_archive *a);

/* Insert p (sections, parent, fitness, uses) made in generation; sets p->id. */
int kb_search_db_prompt_insert(struct kb_state *st, int64_t search_id, int64_t generation,
			       struct kb_prompt *p);
/* fitness and uses of p->id. */
int kb_search_db_prompt_update(struct kb_state *st, const struct kb_prompt *p);
/* Every prompt of the search in id order into a new array *out of *n. */
int kb_search_db_prompts_load(struct kb_state *st, int64_t search_id, struct kb_prompt **out,
			      size_t *n);

int kb_search_db_history_add(struct kb_state *st, int64_t search_id, double t_s, double best,
			     int64_t candidate_id);
/* [{"t_s", "speedup", "candidate_id"}] in time order; NULL on error (logged). */
cJSON *kb_search_db_history(struct kb_state *st, int64_t search_id);

/* --- LLM calls of a search (their totals: llm/usage.h) --- */

/*
 * Whether call_key was asked before: a call recorded under it (any
 * search: a replay shares the keys) or a prompt this search sent under it
 * (asked, maybe still in flight at a kill). 0 or -1.
 */
int kb_search_db_key_known(struct kb_state *st, int64_t search_id, const char *call_key, bool *known);
/*
 * A call under call_key that failed in a way that is the model's answer,
 * not the network's (status "empty" or "malformed"): its status and error
 * line. A resumed or replayed search takes it as the answer again instead
 * of asking once more. 0, KB_ENOTFOUND (nothing logged), -1.
 */
int kb_search_db_call_failure(struct kb_state *st, const char *call_key, struct strbuf *status,
			      struct strbuf *error);

/* --- what a search sent and decided (schema v7; search_db_record.c) --- */

/* A stored prompt text is cut to this many bytes (after redaction). */
#define KB_SEARCH_PROMPT_TEXT_MAX (64 * 1024)

/*
 * The prompt sent under call_key: redacted (core/redact.h) and cut to
 * KB_SEARCH_PROMPT_TEXT_MAX, with its rendered length. The first text
 * of a key stays (the stored answer is that prompt's), so a resumed or
 * replayed ask writes nothing new. 0 or -1 (logged).
 */
int kb_search_db_prompt_text_add(struct kb_state *st, int64_t search_id, const char *call_key,
				 const char *purpose, const char *text);

/* One ring-migration move of generation (a rerun of the generation replaces it). 0 or -1. */
int kb_search_db_migration_add(struct kb_state *st, int64_t search_id, int64_t generation,
			       const struct kb_migration *m);

/*
 * A failure diagnosis made in generation about candidate_id (0: none),
 * stored not pending; *id gets its row. 0 or -1 (logged).
 */
int kb_search_db_diagnosis_add(struct kb_state *st, int64_t search_id, int64_t generation,
			       int64_t candidate_id, const char *text, int64_t *id);
/*
 * Make exactly ids[0..n) the search's pending diagnoses (those a
 * meta-prompt rewrite has not consumed); run in the generation's commit.
 */
int kb_search_db_diagnoses_mark(struct kb_state *st, int64_t search_id, const int64_t *ids, size_t n);
/*
 * Diagnoses in id order, appended to texts and *ids (realloc'ed, one per
 * text): with candidate_id 0 the pending ones, else every one made about
 * that candidate. 0 or -1 (logged).
 */
int kb_search_db_diagnoses_load(struct kb_state *st, int64_t search_id, int64_t candidate_id,
				struct strvec *texts, int64_t **ids);

#endif
