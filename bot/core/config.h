#ifndef KB_CONFIG_H
#define KB_CONFIG_H
/*
 * The daemon's configuration: one typed struct filled from an INI file
 * (inih) through a table of (section, key, type, default, validator) rows
 * in config.c. Adding a key means one struct field here and one table row
 * there, plus its documented line in config.ini.
 *
 * Values may contain ${VAR}, expanded from the environment at load time
 * (an unset variable is an error naming file, line and key). Keys marked
 * secret are registered with the log redaction filter and printed as ***.
 */
#include "core/common.h"
#include "core/log.h"

enum kb_backend { KB_BACKEND_AUTO, KB_BACKEND_CUDA, KB_BACKEND_CPU };
enum kb_forge_kind { KB_FORGE_GITHUB, KB_FORGE_LOCAL };
/* [report] slower_configs: a kernel slower than eager on some config (bot/report/HEADLINE.md) */
enum kb_slower_policy { KB_SLOWER_FLAG, KB_SLOWER_REFUSE };

struct kb_config {
	char *source; /* path of the file read, or "(built-in defaults)" */

	/* [core] */
	char *state_dir;              /* SQLite database, work trees, caches; never empty
	                               * after init or load (kb_config_default_state_dir) */
	char *log_file;               /* "" or "-": stderr */
	enum kb_log_level log_level;

	/* [harness]: how candidates are built and judged (verifier/) */
	char *python;                 /* "" : auto (first python3 that imports torch) */
	enum kb_backend backend;      /* auto: cuda when a GPU is present, else cpu */
	int64_t timeout_s;            /* the candidate's stages per evaluation (baselines not counted) */
	int64_t baseline_timeout_s;   /* allowance for the judge's baseline measurement */
	double baseline_drift;        /* a cached baseline is stale beyond this eager drift (ratio) */
	int64_t seeds;                /* trials per config */
	int64_t max_configs;          /* configs evaluated per operator */
	double atol_fp32, rtol_fp32;
	double error_factor;     /* the error bound's factor (PROTOCOL.md "Error bound"); 0: off */
	double atol_fp16, rtol_fp16;
	double atol_bf16, rtol_bf16;
	double suspicious_speedup;    /* flag speedups above this */
	int64_t memory_limit_mb;      /* RLIMIT_AS of a CPU-backend evaluation, 0: none */
	int64_t build_jobs;           /* parallel compiles, 0: number of cores */
	char *devices;                /* "auto" or a comma list of CUDA device ids: one worker set each */
	int64_t workers_per_device;   /* harness workers per device (more than 1: shared timing) */
	char *nvcc;                   /* CUDA compiler */
	char *cxx;                    /* C++ compiler for the CPU backend */
	char *cuda_arch;              /* "auto" or e.g. "sm_90" */
	char *data_dir;               /* "" : auto (repo checkout or PREFIX/share/kernelbot) */

	/* [sandbox]: where untrusted code runs (verifier/sandbox.h) */
	bool sandbox_enabled;
	char *sandbox_bwrap;          /* bubblewrap */
	bool sandbox_seccomp;
	int64_t sandbox_memory_mb;    /* RLIMIT_AS of CPU-only sandboxed processes, 0: none */
	int64_t sandbox_file_size_mb; /* RLIMIT_FSIZE, 0: none */
	int64_t sandbox_cpu_s;        /* RLIMIT_CPU, 0: none */
	int64_t sandbox_open_files;   /* RLIMIT_NOFILE */
	int64_t sandbox_processes;    /* tasks a sandbox may add, 0: no limit */
	char *sandbox_ro_paths;       /* comma list of more read-only paths */

	/* [bench]: timing */
	int64_t warmup;               /* untimed calls before timing */
	int64_t min_time_ms;          /* keep repeating until this much was measured */
	int64_t max_reps;
	bool l2_flush;
	char *baselines;              /* comma list of eager, compile */

	/* [templates]: the built-in templates' autotuner (kernelbot run) */
	int64_t tune_max_points;      /* most points evaluated per operator */
	int64_t tune_exhaustive_limit; /* spaces this small are searched whole */
	int64_t tune_refine_rounds;   /* coordinate-search rounds after sampling */

	/* [github]: used by the github forge */
	char *github_api_url;
	char *github_token;           /* secret */
	char *github_webhook_secret;  /* secret */
	int64_t github_app_id;
	char *github_private_key_file;
	int64_t github_installation_id; /* 0: looked up per repository */
	int64_t github_timeout_s;     /* per API request */
	int64_t github_max_response_mb; /* cap on one response body */

	/* [bot]: the daemon and `kernelbot action` (bot/jobs, bot/daemon) */
	enum kb_forge_kind bot_forge;
	char *bot_repositories;       /* comma list of owner/name the daemon polls */
	char *bot_repositories_file;  /* more of them, one per line */
	char *bot_label;              /* the label that asks for a job */
	int64_t bot_poll_interval_s;  /* 0: no polling (webhooks only) */
	char *bot_webhook_listen;     /* host:port, "": no listener */
	int64_t bot_webhook_max_kb;   /* cap on one webhook body */
	char *bot_author_name, *bot_author_email; /* of the bot's commits */
	char *bot_branch_prefix;      /* branches are PREFIX/pr-N/operator */
	double bot_improve_margin;    /* review comment when best >= last * (1 + margin) */
	double bot_min_speedup;       /* a pull request only for a kernel at least this fast */
	double bot_wire_min_speedup;  /* the module calls the kernel only where it measured this fast */
	int64_t bot_max_jobs;         /* jobs run at once */
	int64_t bot_devices_per_job;  /* devices leased to a job (jobs/devices.h), 0: devices / max_jobs */
	int64_t bot_max_operators;    /* operators per pull request */
	int64_t bot_time_budget_s;    /* per operator, unless .kernelbot.ini asks less */
	int64_t bot_max_time_budget_s; /* the most a .kernelbot.ini may ask */
	int64_t bot_progress_interval_s; /* least seconds between progress comment edits */
	char *bot_git_url;            /* "": the forge's clone URL; else BASE/owner/name.git */
	char *bot_check_name;         /* check run / commit status context */

	/* [report]: what the reviewer sees (bot/report/HEADLINE.md) */
	double report_noise_band;     /* floor of a speedup's noise band, a ratio */
	enum kb_slower_policy report_slower_configs; /* flag it in the title, or open no PR */

	/* [llm]: models for the search (bot/llm); none: built-in proposer only */
	struct kb_llm_model_cfg *llm_models; /* in [llm] models order */
	size_t nr_llm_models;
	char *llm_models_spec;        /* the raw "NAME[:WEIGHT], ..." value */
	char *llm_aux_model;          /* meta-prompt rewriting; "": the first model */
	int64_t llm_timeout_s;        /* per HTTP attempt */
	int64_t llm_max_retries;      /* on 429, 5xx, timeouts, transport errors */
	int64_t llm_max_response_kb;  /* cap on one response body */
	double llm_daily_budget_usd;  /* 0: none; over all jobs, last 24 h */
	int64_t llm_daily_budget_tokens; /* 0: none */

	/* [search]: the evolutionary search (bot/search) */
	bool search_llm_verifiers;    /* compile / numerics / memory soft verifiers */
	double search_verifier_audit; /* share of verifier-rejected candidates still run, to measure precision */
	int64_t search_islands;
	int64_t search_generations;   /* most generations (the budgets may end it sooner) */
	int64_t search_per_generation; /* candidates proposed per island per generation */
	int64_t search_initial;       /* first translations */
	int64_t search_repair_rounds; /* repair prompts per failed candidate */
	int64_t search_calls_in_flight; /* model calls of one search at once (llm/pool.h) */
	int64_t search_migration_interval; /* generations between ring migrations */
	double search_explore, search_exploit; /* parent selection shares; the rest is random */
	int64_t search_inspirations;  /* other kernels shown in a mutation prompt */
	double search_crossover;      /* share of children made by crossover */
	int64_t search_meta_interval; /* generations between meta-prompt rewrites; 0: off */
	double search_prompt_exploration; /* share of uniform prompt picks */
	double search_prompt_temperature; /* softmax temperature over prompt fitness */
	bool search_tune_templates;   /* rewrite good kernels with tunable parameters */
	int64_t search_tune_points;   /* most points of one rewritten kernel's space tuned */
	double search_job_budget_usd; /* per search; 0: none */
	int64_t search_job_budget_tokens; /* per search; 0: none */
	int64_t search_seed;          /* 0: derived from the operator's hash */
};

/* One [llm.NAME] section. */
struct kb_llm_model_cfg {
	char *name;                   /* NAME */
	int provider;                 /* enum kb_llm_provider (llm/llm.h) */
	char *base_url;               /* e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1 */
	char *model;                  /* the provider's model id */
	char *api_key;                /* secret; "" for local servers */
	double weight;                /* from [llm] models NAME:WEIGHT (default 1) */
	double temperature;           /* NAN: the provider's default */
	char *reasoning_effort;       /* "": none; openai reasoning_effort, anthropic thinking budget (low/medium/high) */
	int64_t max_tokens;
	int64_t max_in_flight;        /* this model's calls at once, over a search's calls in flight */
	double price_in_per_mtok, price_out_per_mtok; /* USD per million tokens */
	int line;                     /* where the section starts, for messages */
};

/* Fill every field with its default. */
void kb_config_init(struct kb_config *cfg);
/*
 * kb_config_init + the file's values. Returns 0, or -1 after logging one
 * message "FILE:LINE: ..." that names the offending section/key. On error
 * cfg still holds defaults plus whatever preceded the bad line, and must
 * be released.
 */
int kb_config_load(struct kb_config *cfg, const char *path);
/*
 * SIGHUP: load path into a fresh struct and swap it in only when it is
 * valid. On error cfg is left exactly as it was (a typo in a deployed file
 * must not take a running daemon down) and -1 is returned.
 */
int kb_config_reload(struct kb_config *cfg, const char *path);
/* Free every string the struct owns. */
void kb_config_release(struct kb_config *cfg);

/*
 * One "SECTION.KEY=VALUE" over a loaded config (the command line's --set),
 * for the keys that only say how a candidate is measured and judged
 * (KB_CONFIG_SETTABLE: [bench] timing, [harness] tolerances and the
 * error bound): a pull request's Reproduce command pins them, and no
 * command line turns off the sandbox or points at another python this
 * way. 0, or -1 with why.
 */
#define KB_CONFIG_SETTABLE "bench.warmup, bench.min_time_ms, bench.max_reps, bench.l2_flush, " \
	"bench.baselines, harness.atol_fp32, harness.rtol_fp32, harness.atol_fp16, " \
	"harness.rtol_fp16, harness.atol_bf16, harness.rtol_bf16, harness.error_factor"
int kb_config_set(struct kb_config *cfg, const char *assignment, struct strbuf *why);
/* Print the effective configuration as INI, secrets as ***. */
void kb_config_print(const struct kb_config *cfg, FILE *fp);
/*
 * The same for a `kernelbot run` child of the job loop, except that each
 * [llm.NAME] api_key reads ${KERNELBOT_LLM_KEY_<i>} (i: the model's index),
 * which the job loop puts in that child's environment only: the key never
 * lands in a file, and the harness below the child never sees it (its
 * environment is scrubbed of registered secrets).
 */
#define KB_CHILD_LLM_KEY_ENV "KERNELBOT_LLM_KEY_"
void kb_config_print_for_child(const struct kb_config *cfg, FILE *fp);

/*
 * In a job's children: the devices the daemon leased to the job (a comma
 * list, as CUDA_VISIBLE_DEVICES; jobs/devices.h), which no other job of
 * that daemon held meanwhile. The harness client records it in the
 * evidence (kernelbot.placement.lease).
 */
#define KB_DEVICE_LEASE_ENV "KB_DEVICE_LEASE"

/* One key of the table, as kb_config_foreach shows it. */
enum kb_config_type {
	KB_CONFIG_TEXT,   /* strings, paths, lists and enums (by name) */
	KB_CONFIG_INT,
	KB_CONFIG_DOUBLE, /* NAN: unset */
	KB_CONFIG_BOOL
};

struct kb_config_entry {
	const char *section;
	const char *key;
	enum kb_config_type type;
	const char *text; /* KB_CONFIG_TEXT: the value, "" when unset, "***" for a secret that is set */
	int64_t i;        /* KB_CONFIG_INT */
	double d;         /* KB_CONFIG_DOUBLE */
	bool b;           /* KB_CONFIG_BOOL */
};

/*
 * Call cb for every key of [section] (every section when NULL; the
 * [llm.NAME] model sections are not in the table) in the table's order,
 * with its value in cfg. A new key in the table shows up here with no
 * other change, so code that must cover every key of a section (the
 * search's settings hash) walks the table instead of listing fields.
 */
void kb_config_foreach(const struct kb_config *cfg, const char *section,
		       void (*cb)(const struct kb_config_entry *e, void *payload), void *payload);

/*
 * Pick the config file for a command: explicit (must exist), else
 * ./config.ini, else /etc/kernelbot/config.ini, else NULL (built-in
 * defaults). Returns a pointer to a static or to explicit.
 */
const char *kb_config_default_path(const char *explicit_path);

/*
 * Where state lives when [core] state_dir is empty or unset: one place per
 * user, whatever directory a command runs from (the XDG base directory
 * spec): $XDG_STATE_HOME/kernelbot, else $HOME/.local/state/kernelbot,
 * else .kernelbot when neither is an absolute path. Appended to out.
 */
struct strbuf;
void kb_config_default_state_dir(struct strbuf *out);

/*
 * A comma list of CUDA device ids as [harness] devices and
 * CUDA_VISIBLE_DEVICES write them (an index, or a GPU-/MIG- UUID; blanks
 * around an entry ignored), appended to out. 0, or -1 with why naming the
 * entry that is not a device or is listed twice.
 */
struct strvec;
int kb_config_devices(const char *list, struct strvec *out, struct strbuf *why);

#endif
