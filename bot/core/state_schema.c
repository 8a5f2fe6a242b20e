#include "core/common.h"
#include "core/state.h"

/*
 * The ordered schema migrations. Rules:
 *  - Never edit a migration that has shipped; append a new one.
 *  - Each runs inside one BEGIN IMMEDIATE transaction with its user_version
 *    bump, so it must not contain BEGIN/COMMIT or PRAGMA foreign_keys
 *    (a no-op inside a transaction). A table rebuild (to change a CHECK)
 *    follows SQLite's "12 steps" with ALTER TABLE ... RENAME and must leave
 *    `PRAGMA foreign_key_check` empty.
 *  - JSON columns are TEXT checked with json_valid() (built in since 3.38).
 *  - Timestamps are INTEGER Unix seconds. Open sets (proposer, backend,
 *    status) have no CHECK, so adding a value needs no migration.
 */

static const char schema_v1[] =
	"CREATE TABLE repositories ("
	"  id INTEGER PRIMARY KEY,"
	"  forge TEXT NOT NULL CHECK (forge IN ('github', 'local')),"
	"  full_name TEXT NOT NULL,"
	"  etag TEXT,"                       /* of the last poll, for If-None-Match */
	"  last_polled_at INTEGER,"
	"  created_at INTEGER NOT NULL,"
	"  UNIQUE (forge, full_name)"
	");"

	/* One job per (pull request, head sha pinned at labelling, operator). */
	"CREATE TABLE jobs ("
	"  id INTEGER PRIMARY KEY,"
	"  repository_id INTEGER NOT NULL REFERENCES repositories(id),"
	"  pr_number INTEGER NOT NULL CHECK (pr_number >= 0),"
	"  head_sha TEXT NOT NULL,"
	"  operator TEXT NOT NULL,"          /* path in the repository */
	"  state TEXT NOT NULL DEFAULT 'queued'"
	"    CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),"
	"  stage TEXT,"
	"  attempts INTEGER NOT NULL DEFAULT 0,"
	"  error TEXT,"
	"  best_candidate_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL,"
	"  created_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL,"
	"  started_at INTEGER,"
	"  finished_at INTEGER,"
	"  UNIQUE (repository_id, pr_number, head_sha, operator)"
	");"
	/* claim_next and status --state: oldest first within a state */
	"CREATE INDEX jobs_by_state ON jobs (state, created_at, id);"

	/* Meta-prompts; job_id NULL for prompts shared by every job. */
	"CREATE TABLE prompts ("
	"  id INTEGER PRIMARY KEY,"
	"  job_id INTEGER REFERENCES jobs(id) ON DELETE CASCADE,"
	"  parent_id INTEGER REFERENCES prompts(id) ON DELETE SET NULL,"
	"  sections TEXT NOT NULL CHECK (json_valid(sections)),"
	"  fitness REAL,"                    /* best score of the kernels it produced */
	"  uses INTEGER NOT NULL DEFAULT 0,"
	"  created_at INTEGER NOT NULL"
	");"
	"CREATE INDEX prompts_by_job ON prompts (job_id, fitness);"

	"CREATE TABLE candidates ("
	"  id INTEGER PRIMARY KEY,"
	"  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
	"  parent_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL,"
	"  second_parent_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL,"
	"  proposer TEXT NOT NULL,"          /* template, llm, ... */
	"  model TEXT,"
	"  prompt_id INTEGER REFERENCES prompts(id) ON DELETE SET NULL,"
	"  source TEXT NOT NULL,"
	"  source_hash TEXT NOT NULL,"       /* of the normalised source: duplicates */
	"  backend TEXT NOT NULL,"
	"  generation INTEGER NOT NULL DEFAULT 0,"
	"  island INTEGER NOT NULL DEFAULT 0,"
	"  verdict TEXT NOT NULL DEFAULT 'pending'"
	"    CHECK (verdict IN ('pending', 'verified', 'rejected', 'error')),"
	"  reasons TEXT CHECK (reasons IS NULL OR json_valid(reasons)),"
	"  speedup REAL,"
	"  evidence TEXT CHECK (evidence IS NULL OR json_valid(evidence)),"
	"  cell_memory INTEGER CHECK (cell_memory BETWEEN 0 AND 3),"
	"  cell_compute INTEGER CHECK (cell_compute BETWEEN 0 AND 3),"
	"  cell_parallel INTEGER CHECK (cell_parallel BETWEEN 0 AND 3),"
	"  build_info TEXT CHECK (build_info IS NULL OR json_valid(build_info)),"
	"  created_at INTEGER NOT NULL,"
	"  UNIQUE (job_id, source_hash)"     /* also serves "candidates of a job" */
	");"
	"CREATE INDEX candidates_by_verdict ON candidates (job_id, verdict, speedup);"
	"CREATE INDEX candidates_by_parent ON candidates (parent_id);"
	"CREATE INDEX candidates_by_second_parent ON candidates (second_parent_id);"
	"CREATE INDEX candidates_by_prompt ON candidates (prompt_id);"

	/* The MAP-Elites archive: the elite of each cell of each island. */
	"CREATE TABLE archive_cells ("
	"  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
	"  island INTEGER NOT NULL,"
	"  memory INTEGER NOT NULL CHECK (memory BETWEEN 0 AND 3),"
	"  compute INTEGER NOT NULL CHECK (compute BETWEEN 0 AND 3),"
	"  parallel INTEGER NOT NULL CHECK (parallel BETWEEN 0 AND 3),"
	"  candidate_id INTEGER NOT NULL REFERENCES candidates(id) ON DELETE CASCADE,"
	"  fitness REAL NOT NULL,"
	"  updated_at INTEGER NOT NULL,"
	"  PRIMARY KEY (job_id, island, memory, compute, parallel)"
	") WITHOUT ROWID;"
	"CREATE INDEX archive_cells_by_candidate ON archive_cells (candidate_id);"

	/*
	 * What the bot put on the forge, found again by marker after a restart
	 * so nothing is posted twice. job_id NULL for repository-wide objects.
	 */
	"CREATE TABLE forge_objects ("
	"  id INTEGER PRIMARY KEY,"
	"  job_id INTEGER REFERENCES jobs(id) ON DELETE SET NULL,"
	"  repository_id INTEGER NOT NULL REFERENCES repositories(id),"
	"  kind TEXT NOT NULL CHECK (kind IN ('branch', 'pull_request', 'comment',"
	"    'review_comment', 'check_run', 'status', 'label')),"
	"  remote_id TEXT,"                  /* GitHub id, or branch name */
	"  url TEXT,"
	"  marker TEXT NOT NULL,"
	"  body_hash TEXT,"                  /* skip an edit that changes nothing */
	"  created_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL,"
	"  UNIQUE (repository_id, kind, marker)"
	");"
	"CREATE INDEX forge_objects_by_job ON forge_objects (job_id);"

	/* Usage, cost and the responses themselves (replay from a seed). */
	"CREATE TABLE llm_calls ("
	"  id INTEGER PRIMARY KEY,"
	"  job_id INTEGER REFERENCES jobs(id) ON DELETE SET NULL,"
	"  model TEXT NOT NULL,"
	"  prompt_tokens INTEGER NOT NULL DEFAULT 0,"
	"  completion_tokens INTEGER NOT NULL DEFAULT 0,"
	"  cost_usd REAL NOT NULL DEFAULT 0,"
	"  latency_ms INTEGER,"
	"  status TEXT NOT NULL,"            /* ok, http_429, timeout, ... */
	"  request_hash TEXT,"
	"  response TEXT,"
	"  created_at INTEGER NOT NULL"
	");"
	"CREATE INDEX llm_calls_by_job ON llm_calls (job_id);"
	"CREATE INDEX llm_calls_by_request ON llm_calls (request_hash);"
	"CREATE INDEX llm_calls_by_time ON llm_calls (created_at);" /* daily budgets */

	/* X-GitHub-Delivery ids already handled. */
	"CREATE TABLE webhook_deliveries ("
	"  delivery_id TEXT PRIMARY KEY,"
	"  event TEXT NOT NULL,"
	"  received_at INTEGER NOT NULL"
	");"
	"CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (received_at);"

	/* Autotuning results keyed by e.g. GPU model + operator + shape. */
	"CREATE TABLE timings ("
	"  key TEXT PRIMARY KEY,"
	"  value TEXT NOT NULL CHECK (json_valid(value)),"
	"  updated_at INTEGER NOT NULL"
	");";

/*
 * The bot's job loop (bot/jobs, bot/daemon): what started a job, webhook
 * deliveries waiting for the main loop, and a job's progress.
 */
static const char schema_v2[] =
	/*
	 * A pull request labelled for the bot, with the head sha seen at
	 * labelling: its jobs run that sha even when the branch moves later.
	 * One active trigger per pull request at most.
	 */
	"CREATE TABLE triggers ("
	"  id INTEGER PRIMARY KEY,"
	"  repository_id INTEGER NOT NULL REFERENCES repositories(id),"
	"  pr_number INTEGER NOT NULL CHECK (pr_number > 0),"
	"  head_sha TEXT NOT NULL,"
	"  actor TEXT,"                      /* who added the label or asked */
	"  source TEXT NOT NULL,"            /* poll, webhook, command, action */
	"  state TEXT NOT NULL DEFAULT 'active'"
	"    CHECK (state IN ('active', 'cancelled', 'replaced')),"
	"  created_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL"
	");"
	"CREATE UNIQUE INDEX triggers_one_active ON triggers (repository_id, pr_number)"
	"  WHERE state = 'active';"

	/* Verified, de-duplicated deliveries the main loop has yet to act on. */
	"CREATE TABLE webhook_events ("
	"  id INTEGER PRIMARY KEY,"
	"  delivery_id TEXT NOT NULL REFERENCES webhook_deliveries(delivery_id),"
	"  event TEXT NOT NULL,"
	"  payload TEXT NOT NULL CHECK (json_valid(payload)),"  /* the fields the bot uses */
	"  received_at INTEGER NOT NULL,"
	"  handled_at INTEGER"
	");"
	"CREATE INDEX webhook_events_pending ON webhook_events (handled_at, id);"

	"ALTER TABLE jobs ADD COLUMN trigger_id INTEGER REFERENCES triggers(id);"
	/* the child's last progress report, as it wrote it */
	"ALTER TABLE jobs ADD COLUMN progress TEXT CHECK (progress IS NULL OR json_valid(progress));"
	"ALTER TABLE jobs ADD COLUMN best_speedup REAL;"
	/* best speedup the last review comment announced */
	"ALTER TABLE jobs ADD COLUMN reviewed_speedup REAL;"
	/* {pr_url, speedup, ...} once published */
	"ALTER TABLE jobs ADD COLUMN result TEXT CHECK (result IS NULL OR json_valid(result));"
	"CREATE INDEX jobs_by_trigger ON jobs (trigger_id);";

/*
 * The search (bot/search, issue 6). The v1 candidates, archive_cells and
 * prompts tables were keyed by job and never written; a search also runs
 * without a job (`kernelbot run`), so they are rebuilt keyed by search.
 * jobs.best_candidate_id keeps pointing at candidates(id) by name.
 */
static const char schema_v3[] =
	"DROP TABLE archive_cells;"
	"DROP TABLE candidates;"
	"DROP TABLE prompts;"

	/* One search of one operator; key = what makes it the same search. */
	"CREATE TABLE searches ("
	"  id INTEGER PRIMARY KEY,"
	"  key TEXT NOT NULL UNIQUE,"        /* ophash|backend|pass|settings|seed */
	"  job_id INTEGER REFERENCES jobs(id) ON DELETE SET NULL,"
	"  operator TEXT NOT NULL,"          /* path as given */
	"  backend TEXT NOT NULL,"
	"  pass TEXT NOT NULL,"
	"  seed INTEGER NOT NULL,"
	"  state TEXT NOT NULL DEFAULT 'running'"
	"    CHECK (state IN ('running', 'done', 'failed', 'cancelled')),"
	"  generation INTEGER NOT NULL DEFAULT 0," /* generations completed */
	"  rng INTEGER NOT NULL,"            /* RNG state after them (uint64 bits) */
	"  best_candidate_id INTEGER,"
	"  wall_s REAL NOT NULL DEFAULT 0,"  /* summed over resumes */
	"  info TEXT CHECK (info IS NULL OR json_valid(info)),"
	"  started_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL,"
	"  finished_at INTEGER"
	");"
	"CREATE INDEX searches_by_job ON searches (job_id);"

	/* Meta-prompts and their fitness (best fitness of their kernels). */
	"CREATE TABLE prompts ("
	"  id INTEGER PRIMARY KEY,"
	"  search_id INTEGER NOT NULL REFERENCES searches(id) ON DELETE CASCADE,"
	"  parent_id INTEGER REFERENCES prompts(id) ON DELETE SET NULL,"
	"  sections TEXT NOT NULL CHECK (json_valid(sections)),"
	"  fitness REAL,"
	"  uses INTEGER NOT NULL DEFAULT 0,"
	"  generation INTEGER NOT NULL DEFAULT 0,"
	"  created_at INTEGER NOT NULL"
	");"
	"CREATE INDEX prompts_by_search ON prompts (search_id);"

	"CREATE TABLE candidates ("
	"  id INTEGER PRIMARY KEY,"
	"  search_id INTEGER NOT NULL REFERENCES searches(id) ON DELETE CASCADE,"
	"  parent_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL,"
	"  second_parent_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL,"
	"  proposer TEXT NOT NULL,"          /* template, translate, repair, mutate, crossover, tune */
	"  model TEXT,"
	"  prompt_id INTEGER REFERENCES prompts(id) ON DELETE SET NULL,"
	"  call_key TEXT,"                   /* the LLM call that produced it */
	"  source TEXT NOT NULL,"
	"  source_hash TEXT NOT NULL,"       /* of the normalised source */
	"  backend TEXT NOT NULL,"
	"  generation INTEGER NOT NULL DEFAULT 0,"
	"  island INTEGER NOT NULL DEFAULT 0,"
	"  verdict TEXT NOT NULL DEFAULT 'pending',"  /* pending, verified, rejected, error, filtered, static, build */
	"  reasons TEXT CHECK (reasons IS NULL OR json_valid(reasons)),"
	"  speedup REAL,"                    /* geomean over eager */
	"  speedup_compile REAL,"
	"  evidence TEXT CHECK (evidence IS NULL OR json_valid(evidence)),"
	"  cell INTEGER CHECK (cell IS NULL OR cell BETWEEN 0 AND 63),"
	"  build_info TEXT CHECK (build_info IS NULL OR json_valid(build_info)),"
	"  verifiers TEXT CHECK (verifiers IS NULL OR json_valid(verifiers)),"  /* LLM verifiers' verdicts */
	"  created_at INTEGER NOT NULL,"
	"  UNIQUE (search_id, source_hash)"
	");"
	"CREATE INDEX candidates_by_verdict ON candidates (search_id, verdict, speedup);"
	"CREATE INDEX candidates_by_parent ON candidates (parent_id);"
	"CREATE INDEX candidates_by_second_parent ON candidates (second_parent_id);"
	"CREATE INDEX candidates_by_prompt ON candidates (prompt_id);"

	/* The MAP-Elites archive: the elite of each cell of each island. */
	"CREATE TABLE archive_cells ("
	"  search_id INTEGER NOT NULL REFERENCES searches(id) ON DELETE CASCADE,"
	"  island INTEGER NOT NULL,"
	"  cell INTEGER NOT NULL CHECK (cell BETWEEN 0 AND 63),"
	"  candidate_id INTEGER NOT NULL REFERENCES candidates(id) ON DELETE CASCADE,"
	"  fitness REAL NOT NULL,"
	"  chosen INTEGER NOT NULL DEFAULT 0,"
	"  updated_at INTEGER NOT NULL,"
	"  PRIMARY KEY (search_id, island, cell)"
	") WITHOUT ROWID;"
	"CREATE INDEX archive_cells_by_candidate ON archive_cells (candidate_id);"

	/* Best speedup over time (the PR body's chart). */
	"CREATE TABLE search_history ("
	"  search_id INTEGER NOT NULL REFERENCES searches(id) ON DELETE CASCADE,"
	"  t_s REAL NOT NULL,"               /* search wall seconds */
	"  best REAL NOT NULL,"
	"  candidate_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL"
	");"
	"CREATE INDEX search_history_by_search ON search_history (search_id, t_s);"

	/* LLM calls: which search, which logical call (replay), what for. */
	"ALTER TABLE llm_calls ADD COLUMN search_id INTEGER REFERENCES searches(id) ON DELETE SET NULL;"
	"ALTER TABLE llm_calls ADD COLUMN call_key TEXT;"
	"ALTER TABLE llm_calls ADD COLUMN purpose TEXT;"
	"CREATE INDEX llm_calls_by_search ON llm_calls (search_id);"
	"CREATE INDEX llm_calls_by_key ON llm_calls (call_key);";

/*
 * Evidence stops carrying what untrusted processes printed (issue 12):
 * drop the harness's log_tail, the local operator-log pointer and the
 * compiler's messages from what earlier versions stored. Reasons stay;
 * their messages are redacted as they are written from now on.
 */
static const char schema_v4[] =
	"UPDATE candidates SET evidence = json_remove(evidence, '$.log_tail', '$.operator_log',"
	"  '$.kernelbot.build.errors') WHERE evidence IS NOT NULL;"
	"UPDATE candidates SET build_info = json_remove(build_info, '$.errors')"
	"  WHERE build_info IS NOT NULL;"
	"UPDATE searches SET info = json_remove(info, '$.evidence.log_tail', '$.evidence.operator_log',"
	"  '$.evidence.kernelbot.build.errors') WHERE info IS NOT NULL;"
	"UPDATE timings SET value = json_remove(value, '$.log_tail', '$.operator_log',"
	"  '$.kernelbot.build.errors');";

/*
 * Every `kernelbot run`, standalone or a job's child (issue 14): what
 * `kernelbot status` lists beside the jobs. A row still 'running' whose
 * process is gone is shown as such; nothing here is needed to resume.
 * IF NOT EXISTS: a test that rewinds user_version replays it on a
 * database that has the table.
 */
static const char schema_v5[] =
	"CREATE TABLE IF NOT EXISTS runs ("
	"  id INTEGER PRIMARY KEY,"
	"  job_id INTEGER REFERENCES jobs(id) ON DELETE SET NULL,"
	"  operator TEXT NOT NULL,"          /* path as given */
	"  backend TEXT NOT NULL,"
	"  pass TEXT NOT NULL,"
	"  out_dir TEXT,"
	"  pid INTEGER,"
	"  state TEXT NOT NULL DEFAULT 'running'"
	"    CHECK (state IN ('running', 'done', 'failed', 'cancelled')),"
	"  stage TEXT,"                      /* the progress stage, e.g. 'verify 3/8' */
	"  best_speedup REAL,"
	"  error TEXT,"
	"  started_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL,"
	"  finished_at INTEGER"
	");"
	"CREATE INDEX IF NOT EXISTS runs_by_job ON runs (job_id);";

/*
 * The baseline cache (issue 15, verifier/baseline_db.h): the judge's
 * figures for an operator's baselines (eager, torch.compile) per operator
 * content and the harness's key (torch, device, pass, config, timing
 * settings), reused by every candidate, job and bench call.
 */
static const char schema_v6[] =
	"CREATE TABLE IF NOT EXISTS baselines ("
	"  operator_hash TEXT NOT NULL,"     /* kb_operator_hash */
	"  key TEXT NOT NULL,"               /* the harness's, opaque here */
	"  figures TEXT NOT NULL CHECK (json_valid(figures)),"
	"  created_at INTEGER NOT NULL,"
	"  PRIMARY KEY (operator_hash, key)"
	");";

/*
 * What a search sent and decided (issue 16): the text of every prompt
 * (redacted, capped; its length before either), every island migration,
 * and every failure diagnosis, with whether it was still waiting for the
 * next meta-prompt rewrite when its generation was committed (a resumed
 * search reads those back). IF NOT EXISTS: see v5.
 */
static const char schema_v7[] =
	"CREATE TABLE IF NOT EXISTS search_prompt_texts ("
	"  search_id INTEGER NOT NULL REFERENCES searches(id) ON DELETE CASCADE,"
	"  call_key TEXT NOT NULL,"          /* llm_calls.call_key, candidates.call_key */
	"  purpose TEXT NOT NULL,"
	"  text TEXT NOT NULL,"              /* redacted, at most 64 KiB */
	"  length INTEGER NOT NULL,"         /* bytes as rendered */
	"  created_at INTEGER NOT NULL,"
	"  PRIMARY KEY (search_id, call_key)"
	") WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS search_migrations ("
	"  search_id INTEGER NOT NULL REFERENCES searches(id) ON DELETE CASCADE,"
	"  generation INTEGER NOT NULL,"
	"  from_island INTEGER NOT NULL,"
	"  to_island INTEGER NOT NULL,"
	"  candidate_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL,"
	"  cell INTEGER,"
	"  fitness REAL,"
	"  accepted INTEGER NOT NULL,"       /* it became the elite of its cell there */
	"  created_at INTEGER NOT NULL,"
	"  PRIMARY KEY (search_id, generation, from_island)"
	") WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS search_migrations_by_candidate ON search_migrations (candidate_id);"
	"CREATE TABLE IF NOT EXISTS search_diagnoses ("
	"  id INTEGER PRIMARY KEY,"
	"  search_id INTEGER NOT NULL REFERENCES searches(id) ON DELETE CASCADE,"
	"  generation INTEGER NOT NULL,"
	"  candidate_id INTEGER REFERENCES candidates(id) ON DELETE SET NULL,"
	"  text TEXT NOT NULL,"              /* redacted, as the meta-prompt gets it */
	"  pending INTEGER NOT NULL DEFAULT 0," /* waiting for a rewrite at the last commit */
	"  created_at INTEGER NOT NULL"
	");"
	"CREATE INDEX IF NOT EXISTS search_diagnoses_by_search ON search_diagnoses (search_id, pending);"
	"CREATE INDEX IF NOT EXISTS search_diagnoses_by_candidate ON search_diagnoses (candidate_id);";

const struct kb_state_migration kb_state_migrations[] = {
	{ 1, "initial schema", schema_v1 },
	{ 2, "triggers, webhook events, job progress", schema_v2 },
	{ 3, "searches: candidates, archive, prompts, history", schema_v3 },
	{ 4, "evidence without untrusted output", schema_v4 },
	{ 5, "runs: every kernelbot run, for status", schema_v5 },
	{ 6, "baselines: cached baseline figures per operator", schema_v6 },
	{ 7, "search prompt texts, migrations, diagnoses", schema_v7 },
};
const size_t kb_state_nr_migrations = ARRAY_SIZE(kb_state_migrations);
