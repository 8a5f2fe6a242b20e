#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sys/stat.h>

#include <ini.h>

/*
 * One table drives defaults, parsing, validation and printing. Adding a key
 * is one field in config.h, one row here and its documented line in
 * config.ini.
 */
enum cfg_type {
	CFG_STRING,
	CFG_PATH,   /* a string naming a file, directory or program */
	CFG_INT,    /* int64_t in [imin, imax] */
	CFG_DOUBLE, /* double in [dmin, dmax], or (dmin, dmax] with CFG_GT_MIN */
	CFG_BOOL,
	CFG_ENUM,   /* int-sized enum, one of names[] */
	CFG_LIST,   /* comma list of names[], normalised, may be empty */
	CFG_MODELS  /* [llm] models: "NAME[:WEIGHT], ...", may be empty */
};

#define CFG_SECRET   (1u << 0) /* redacted from logs, printed as *** */
#define CFG_REQUIRED (1u << 1) /* a string that may not be empty */
#define CFG_GT_MIN   (1u << 2) /* a double strictly above dmin */
#define CFG_URL      (1u << 3) /* a string that is an http:// or https:// URL */
#define CFG_NAN_OK   (1u << 4) /* a double that may be empty: NAN */
#define CFG_CHOICE   (1u << 5) /* a string that is empty or one of names[] */
#define CFG_MUST     (1u << 6) /* an [llm.NAME] key the section must set */
#define CFG_DEVICES  (1u << 7) /* "auto" or a comma list of CUDA device ids (valid_devices) */

struct cfg_row {
	const char *section;
	const char *key;
	enum cfg_type type;
	size_t offset;
	const char *def;
	int64_t imin, imax;
	double dmin, dmax;
	unsigned flags;
	const char *const *names; /* NULL-terminated, for CFG_ENUM and CFG_LIST */
};

/* Enum fields are written through an int; both enums hold small values. */
_Static_assert(sizeof(enum kb_log_level) == sizeof(int), "enum kb_log_level is int-sized");
_Static_assert(sizeof(enum kb_backend) == sizeof(int), "enum kb_backend is int-sized");
_Static_assert(sizeof(enum kb_forge_kind) == sizeof(int), "enum kb_forge_kind is int-sized");
_Static_assert(sizeof(enum kb_slower_policy) == sizeof(int), "enum kb_slower_policy is int-sized");

/* Index = enum value. */
static const char *const log_level_names[] = { "debug", "info", "warn", "error", NULL };
static const char *const backend_names[] = { "auto", "cuda", "cpu", NULL };
static const char *const baseline_names[] = { "eager", "compile", NULL };
static const char *const forge_names[] = { "github", "local", NULL };
static const char *const slower_names[] = { "flag", "refuse", NULL };
/* enum kb_llm_provider (llm/llm.h asserts the order) */
static const char *const provider_names[] = { "openai", "anthropic", NULL };
#define PROVIDER_ANTHROPIC 1
static const char *const effort_names[] = { "low", "medium", "high", NULL };

#define OFF(f) offsetof(struct kb_config, f)
#define STR(s, k, f, d, fl) { s, k, CFG_STRING, OFF(f), d, 0, 0, 0, 0, fl, NULL }
#define PATH(s, k, f, d, fl) { s, k, CFG_PATH, OFF(f), d, 0, 0, 0, 0, fl, NULL }
#define INT(s, k, f, d, lo, hi) { s, k, CFG_INT, OFF(f), d, lo, hi, 0, 0, 0, NULL }
#define DBL(s, k, f, d, lo, hi, fl) { s, k, CFG_DOUBLE, OFF(f), d, 0, 0, lo, hi, fl, NULL }
#define BOOL(s, k, f, d) { s, k, CFG_BOOL, OFF(f), d, 0, 0, 0, 0, 0, NULL }
#define ENUM(s, k, f, d, n) { s, k, CFG_ENUM, OFF(f), d, 0, 0, 0, 0, 0, n }
#define LIST(s, k, f, d, n) { s, k, CFG_LIST, OFF(f), d, 0, 0, 0, 0, 0, n }

static const struct cfg_row rows[] = {
	/* "": the XDG state dir (kb_config_default_state_dir), filled in at load */
	PATH("core", "state_dir", state_dir, "", 0),
	PATH("core", "log_file", log_file, "", 0),
	ENUM("core", "log_level", log_level, "info", log_level_names),

	PATH("harness", "python", python, "", 0),
	ENUM("harness", "backend", backend, "auto", backend_names),
	INT("harness", "timeout_s", timeout_s, "300", 1, 86400),
	INT("harness", "baseline_timeout_s", baseline_timeout_s, "600", 1, 86400),
	DBL("harness", "baseline_drift", baseline_drift, "0.1", 0, 100, CFG_GT_MIN),
	INT("harness", "seeds", seeds, "5", 1, 100),
	INT("harness", "max_configs", max_configs, "16", 1, 256),
	DBL("harness", "atol_fp32", atol_fp32, "1e-4", 0, 1, CFG_GT_MIN),
	DBL("harness", "rtol_fp32", rtol_fp32, "1e-4", 0, 1, CFG_GT_MIN),
	DBL("harness", "atol_fp16", atol_fp16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "rtol_fp16", rtol_fp16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "atol_bf16", atol_bf16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "rtol_bf16", rtol_bf16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "error_factor", error_factor, "16", 0, 1e6, 0),
	DBL("harness", "suspicious_speedup", suspicious_speedup, "10", 1, 1e6, CFG_GT_MIN),
	INT("harness", "memory_limit_mb", memory_limit_mb, "0", 0, 1048576),
	INT("harness", "build_jobs", build_jobs, "0", 0, 256),
	STR("harness", "devices", devices, "auto", CFG_REQUIRED | CFG_DEVICES),
	INT("harness", "workers_per_device", workers_per_device, "1", 1, 16),
	PATH("harness", "nvcc", nvcc, "nvcc", CFG_REQUIRED),
	PATH("harness", "cxx", cxx, "g++", CFG_REQUIRED),
	STR("harness", "cuda_arch", cuda_arch, "auto", CFG_REQUIRED),
	PATH("harness", "data_dir", data_dir, "", 0),

	BOOL("sandbox", "enabled", sandbox_enabled, "on"),
	PATH("sandbox", "bwrap", sandbox_bwrap, "bwrap", CFG_REQUIRED),
	BOOL("sandbox", "seccomp", sandbox_seccomp, "on"),
	INT("sandbox", "memory_mb", sandbox_memory_mb, "16384", 0, 16777216),
	INT("sandbox", "file_size_mb", sandbox_file_size_mb, "4096", 0, 16777216),
	INT("sandbox", "cpu_s", sandbox_cpu_s, "7200", 0, 604800),
	INT("sandbox", "open_files", sandbox_open_files, "4096", 64, 1048576),
	INT("sandbox", "processes", sandbox_processes, "1024", 0, 1000000),
	STR("sandbox", "ro_paths", sandbox_ro_paths, "", 0),

	INT("bench", "warmup", warmup, "5", 0, 10000),
	INT("bench", "min_time_ms", min_time_ms, "100", 1, 600000),
	INT("bench", "max_reps", max_reps, "1000", 1, 1000000),
	BOOL("bench", "l2_flush", l2_flush, "on"),
	LIST("bench", "baselines", baselines, "eager,compile", baseline_names),

	INT("templates", "max_points", tune_max_points, "64", 1, 100000),
	INT("templates", "exhaustive_limit", tune_exhaustive_limit, "32", 1, 100000),
	INT("templates", "refine_rounds", tune_refine_rounds, "2", 0, 100),

	STR("github", "api_url", github_api_url, "https://api.github.com", CFG_REQUIRED),
	STR("github", "token", github_token, "", CFG_SECRET),
	STR("github", "webhook_secret", github_webhook_secret, "", CFG_SECRET),
	INT("github", "app_id", github_app_id, "0", 0, INT64_MAX),
	PATH("github", "private_key_file", github_private_key_file, "", 0),
	INT("github", "installation_id", github_installation_id, "0", 0, INT64_MAX),
	INT("github", "timeout_s", github_timeout_s, "30", 1, 600),
	INT("github", "max_response_mb", github_max_response_mb, "32", 1, 1024),

	ENUM("bot", "forge", bot_forge, "github", forge_names),
	STR("bot", "repositories", bot_repositories, "", 0),
	PATH("bot", "repositories_file", bot_repositories_file, "", 0),
	STR("bot", "label", bot_label, "optimize-kernel", CFG_REQUIRED),
	INT("bot", "poll_interval_s", bot_poll_interval_s, "60", 0, 86400),
	STR("bot", "webhook_listen", bot_webhook_listen, "", 0),
	INT("bot", "webhook_max_kb", bot_webhook_max_kb, "2048", 16, 25600),
	STR("bot", "author_name", bot_author_name, "kernelbot", CFG_REQUIRED),
	STR("bot", "author_email", bot_author_email, "kernelbot@users.noreply.github.com", CFG_REQUIRED),
	STR("bot", "branch_prefix", bot_branch_prefix, "kernelbot", CFG_REQUIRED),
	DBL("bot", "improve_margin", bot_improve_margin, "0.05", 0, 100, 0),
	DBL("bot", "min_speedup", bot_min_speedup, "1.0", 0, 1e6, 0),
	DBL("bot", "wire_min_speedup", bot_wire_min_speedup, "1.0", 0, 1e6, 0),
	INT("bot", "max_jobs", bot_max_jobs, "1", 1, 64),
	INT("bot", "devices_per_job", bot_devices_per_job, "0", 0, 64),
	INT("bot", "max_operators", bot_max_operators, "8", 1, 100),
	INT("bot", "time_budget_s", bot_time_budget_s, "1800", 1, 604800),
	INT("bot", "max_time_budget_s", bot_max_time_budget_s, "7200", 1, 604800),
	INT("bot", "progress_interval_s", bot_progress_interval_s, "30", 0, 3600),
	STR("bot", "git_url", bot_git_url, "", 0),
	STR("bot", "check_name", bot_check_name, "kernelbot", CFG_REQUIRED),

	DBL("report", "noise_band", report_noise_band, "0.03", 0, 1, CFG_GT_MIN),
	ENUM("report", "slower_configs", report_slower_configs, "flag", slower_names),

	{ "llm", "models", CFG_MODELS, OFF(llm_models_spec), "", 0, 0, 0, 0, 0, NULL },
	STR("llm", "aux_model", llm_aux_model, "", 0),
	INT("llm", "timeout_s", llm_timeout_s, "120", 1, 3600),
	INT("llm", "max_retries", llm_max_retries, "4", 0, 20),
	INT("llm", "max_response_kb", llm_max_response_kb, "4096", 16, 1048576),
	DBL("llm", "daily_budget_usd", llm_daily_budget_usd, "0", 0, 1e9, 0),
	INT("llm", "daily_budget_tokens", llm_daily_budget_tokens, "0", 0, INT64_MAX),

	BOOL("search", "llm_verifiers", search_llm_verifiers, "on"),
	DBL("search", "verifier_audit", search_verifier_audit, "0.25", 0, 1, 0),
	INT("search", "islands", search_islands, "2", 1, 64),
	INT("search", "generations", search_generations, "8", 0, 100000),
	INT("search", "per_generation", search_per_generation, "2", 1, 1000),
	INT("search", "initial", search_initial, "3", 1, 1000),
	INT("search", "repair_rounds", search_repair_rounds, "2", 0, 20),
	INT("search", "calls_in_flight", search_calls_in_flight, "8", 1, 256),
	INT("search", "migration_interval", search_migration_interval, "2", 0, 100000),
	DBL("search", "explore", search_explore, "0.3", 0, 1, 0),
	DBL("search", "exploit", search_exploit, "0.5", 0, 1, 0),
	INT("search", "inspirations", search_inspirations, "2", 0, 16),
	DBL("search", "crossover", search_crossover, "0.2", 0, 1, 0),
	INT("search", "meta_interval", search_meta_interval, "2", 0, 100000),
	DBL("search", "prompt_exploration", search_prompt_exploration, "0.2", 0, 1, 0),
	DBL("search", "prompt_temperature", search_prompt_temperature, "0.5", 0, 100, CFG_GT_MIN),
	BOOL("search", "tune_templates", search_tune_templates, "on"),
	INT("search", "tune_points", search_tune_points, "64", 1, 100000),
	DBL("search", "job_budget_usd", search_job_budget_usd, "5", 0, 1e9, 0),
	INT("search", "job_budget_tokens", search_job_budget_tokens, "0", 0, INT64_MAX),
	INT("search", "seed", search_seed, "0", 0, INT64_MAX),
};

/*
 * The keys of each [llm.NAME] section, stored in a struct kb_llm_model_cfg.
 * CFG_MUST rows have no default: the section must set them.
 */
#define MOFF(f) offsetof(struct kb_llm_model_cfg, f)
#define MODEL_SECTION "llm."
#define MODEL_NAME_MAX 40 /* inih keeps section names below 50 bytes */

static const struct cfg_row model_rows[] = {
	{ "llm.*", "provider", CFG_ENUM, MOFF(provider), NULL, 0, 0, 0, 0, CFG_MUST, provider_names },
	{ "llm.*", "base_url", CFG_STRING, MOFF(base_url), NULL, 0, 0, 0, 0, CFG_MUST | CFG_URL, NULL },
	{ "llm.*", "model", CFG_STRING, MOFF(model), NULL, 0, 0, 0, 0, CFG_MUST | CFG_REQUIRED, NULL },
	{ "llm.*", "api_key", CFG_STRING, MOFF(api_key), "", 0, 0, 0, 0, CFG_SECRET, NULL },
	{ "llm.*", "temperature", CFG_DOUBLE, MOFF(temperature), "", 0, 0, 0, 2, CFG_NAN_OK, NULL },
	{ "llm.*", "reasoning_effort", CFG_STRING, MOFF(reasoning_effort), "", 0, 0, 0, 0, CFG_CHOICE,
	  effort_names },
	{ "llm.*", "max_tokens", CFG_INT, MOFF(max_tokens), "8192", 1, 1000000, 0, 0, 0, NULL },
	{ "llm.*", "max_in_flight", CFG_INT, MOFF(max_in_flight), "8", 1, 256, 0, 0, 0, NULL },
	{ "llm.*", "price_in_per_mtok", CFG_DOUBLE, MOFF(price_in_per_mtok), "0", 0, 0, 0, 1e6, 0, NULL },
	{ "llm.*", "price_out_per_mtok", CFG_DOUBLE, MOFF(price_out_per_mtok), "0", 0, 0, 0, 1e6, 0,
	  NULL },
};

#define NR_MODEL_ROWS ARRAY_SIZE(model_rows)

#define NR_ROWS ARRAY_SIZE(rows)
#define BUILTIN_SOURCE "(built-in defaults)"
#define MAX_CONFIG_BYTES (1024 * 1024)

static char **str_field(void *base, const struct cfg_row *row)
{
	return (char **)((char *)base + row->offset);
}

static const void *const_field(const void *base, const struct cfg_row *row)
{
	return (const char *)base + row->offset;
}

static bool is_string_type(enum cfg_type t)
{
	return t == CFG_STRING || t == CFG_PATH || t == CFG_LIST || t == CFG_MODELS;
}

static bool is_model_section(const char *name)
{
	return !strncmp(name, MODEL_SECTION, strlen(MODEL_SECTION));
}

/* NAME of [llm.NAME]: letters, digits, '-', '_', '.'; len bytes of s. */
static bool valid_model_name(const char *s, size_t len)
{
	if (!len || len > MODEL_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return false;
	return true;
}

static bool known_section(const char *name, size_t len)
{
	for (size_t i = 0; i < NR_ROWS; i++)
		if (strlen(rows[i].section) == len && !memcmp(rows[i].section, name, len))
			return true;
	return false;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "on", "true", "yes", "1" };
	static const char *const no[] = { "off", "false", "no", "0" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

static int name_index(const char *const *names, const char *s, size_t len)
{
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == len && !strncasecmp(names[i], s, len))
			return i;
	return -1;
}

static void add_names(struct strbuf *sb, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		strbuf_addf(sb, "%s%s", i ? "|" : "", names[i]);
}

/* "eager , compile" -> "eager,compile"; unknown or repeated items are errors. */
static int normalise_list(const struct cfg_row *row, const char *val,
			  struct strbuf *out, struct strbuf *why)
{
	unsigned seen = 0;
	const char *p = val;

	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return 0;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		int idx;

		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		idx = name_index(row->names, p, len);
		if (idx < 0) {
			strbuf_addf(why, "'%.*s' is not one of ", (int)len, p);
			add_names(why, row->names);
			strbuf_addstr(why, " (a comma list, may be empty)");
			return -1;
		}
		if (seen & (1u << idx)) {
			strbuf_addf(why, "'%s' is listed twice", row->names[idx]);
			return -1;
		}
		seen |= 1u << idx;
		strbuf_addf(out, "%s%s", out->len ? "," : "", row->names[idx]);
		if (!end)
			return 0;
		p = end + 1;
		while (*p == ' ' || *p == '\t')
			p++;
	}
}

struct model_item {
	char *name;
	double weight;
};

static void model_items_free(struct model_item *items, size_t nr)
{
	for (size_t i = 0; i < nr; i++)
		free(items[i].name);
	free(items);
}

/*
 * "a:2, b" -> {a, 2}, {b, 1}. Names as in [llm.NAME]; a weight is a number
 * > 0; no name twice; empty means no model.
 */
static int parse_models(const char *spec, struct model_item **out, size_t *nr_out,
			struct strbuf *why)
{
	struct model_item *items = NULL;
	size_t nr = 0;
	const char *p = spec;

	*out = NULL;
	*nr_out = 0;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return 0;
	for (;;) {
		const char *end = strchr(p, ','), *colon;
		size_t len = end ? (size_t)(end - p) : strlen(p), nlen;
		double w = 1;

		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		colon = memchr(p, ':', len);
		nlen = colon ? (size_t)(colon - p) : len;
		while (nlen && (p[nlen - 1] == ' ' || p[nlen - 1] == '\t'))
			nlen--;
		if (!len) {
			strbuf_addstr(why, "an empty item (write NAME[:WEIGHT], ...)");
			goto fail;
		}
		if (!valid_model_name(p, nlen)) {
			strbuf_addf(why, "'%.*s' is not a model name (letters, digits, '-', '_', '.';"
				    " at most %d)", (int)nlen, p, MODEL_NAME_MAX);
			goto fail;
		}
		if (colon) {
			char *ws = xstrndup(colon + 1, len - (size_t)(colon - p) - 1);
			const char *wp = ws;
			int bad;

			while (*wp == ' ' || *wp == '\t')
				wp++;
			bad = kb_parse_double(wp, &w) || !isfinite(w) || w <= 0 || w > 1e6;
			if (bad)
				strbuf_addf(why, "model '%.*s': weight '%s' is not a number > 0 and <= 1e6",
					    (int)nlen, p, wp);
			free(ws);
			if (bad)
				goto fail;
		}
		for (size_t i = 0; i < nr; i++)
			if (strlen(items[i].name) == nlen && !memcmp(items[i].name, p, nlen)) {
				strbuf_addf(why, "model '%s' is listed twice", items[i].name);
				goto fail;
			}
		items = xrealloc(items, (nr + 1) * sizeof(*items));
		items[nr].name = xstrndup(p, nlen);
		items[nr].weight = w;
		nr++;
		if (!end)
			break;
		p = end + 1;
		while (*p == ' ' || *p == '\t')
			p++;
	}
	*out = items;
	*nr_out = nr;
	return 0;
fail:
	model_items_free(items, nr);
	return -1;
}

/* An http:// or https:// URL with a host, no blanks. */
static bool valid_url(const char *s)
{
	size_t skip;

	if (!strncasecmp(s, "http://", 7))
		skip = 7;
	else if (!strncasecmp(s, "https://", 8))
		skip = 8;
	else
		return false;
	if (!s[skip] || s[skip] == '/' || s[skip] == ':')
		return false;
	for (const char *p = s; *p; p++)
		if (*p == ' ' || *p == '\t')
			return false;
	return true;
}

/* One CUDA_VISIBLE_DEVICES entry: an index, or a GPU-/MIG- UUID. */
static bool valid_device(const char *p, size_t n)
{
	size_t skip = 0;

	if (n > 4 && (!strncmp(p, "GPU-", 4) || !strncmp(p, "MIG-", 4)))
		skip = 4;
	for (size_t i = skip; i < n; i++)
		if (skip ? !(isxdigit((unsigned char)p[i]) || p[i] == '-' || p[i] == '/')
			 : !isdigit((unsigned char)p[i]))
			return false;
	return n > skip;
}

/* The entry at p, up to the next comma, without its blanks; its length in *len. */
static const char *device_entry(const char *p, size_t *len)
{
	size_t n = strcspn(p, ",");

	while (n && *p == ' ') {
		p++;
		n--;
	}
	while (n && p[n - 1] == ' ')
		n--;
	*len = n;
	return p;
}

int kb_config_devices(const char *list, struct strvec *out, struct strbuf *why)
{
	for (const char *p = list;; p += strcspn(p, ",") + 1) {
		size_t n;
		const char *d = device_entry(p, &n);
		char *id;

		if (!valid_device(d, n)) {
			strbuf_addf(why, "'%.*s' is not a device: write auto, or CUDA device ids "
				    "(0, 1, ... or GPU-<uuid>) separated by commas", (int)n, d);
			return -1;
		}
		id = xstrndup(d, n);
		for (size_t i = 0; i < out->nr; i++)
			if (!strcmp(out->v[i], id)) {
				strbuf_addf(why, "device '%s' is listed twice", id);
				free(id);
				return -1;
			}
		strvec_push(out, id);
		free(id);
		if (!p[strcspn(p, ",")])
			return 0;
	}
}

/* The forms some strings must have: a URL, a device list. */
static bool string_format_ok(const struct cfg_row *row, const char *val, const char *shown,
			     struct strbuf *why)
{
	if ((row->flags & CFG_URL) && !valid_url(val)) {
		strbuf_addf(why, "'%s' is not an http:// or https:// URL", shown);
		return false;
	}
	if ((row->flags & CFG_DEVICES) && strcmp(val, "auto")) {
		struct strvec ids = STRVEC_INIT;
		int bad = kb_config_devices(val, &ids, why);

		strvec_clear(&ids);
		return !bad;
	}
	return true;
}

/*
 * Convert val for row and store it in the struct at base (a kb_config, or
 * a kb_llm_model_cfg for model_rows). On failure nothing is stored and why
 * says what is wrong (without file, line or key).
 */
static int set_value(void *base, const struct cfg_row *row,
		     const char *val, struct strbuf *why)
{
	void *field = (char *)base + row->offset;
	struct model_item *items;
	size_t nr_items;
	struct strbuf list = STRBUF_INIT;
	const char *shown = (row->flags & CFG_SECRET) ? "***" : val;
	int64_t i;
	double d;
	bool b;
	int idx;

	switch (row->type) {
	case CFG_STRING:
	case CFG_PATH:
		if (!*val && (row->flags & (CFG_REQUIRED | CFG_URL))) {
			strbuf_addstr(why, "a value is required");
			return -1;
		}
		for (const char *p = val; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f) {
				strbuf_addstr(why, "the value contains a control character");
				return -1;
			}
		if (!string_format_ok(row, val, shown, why))
			return -1;
		if ((row->flags & CFG_CHOICE) && *val) {
			idx = name_index(row->names, val, strlen(val));
			if (idx < 0) {
				strbuf_addf(why, "'%s' is not one of ", shown);
				add_names(why, row->names);
				strbuf_addstr(why, " (or empty)");
				return -1;
			}
			val = row->names[idx];
		}
		free(*(char **)field);
		*(char **)field = xstrdup(val);
		if (row->flags & CFG_SECRET)
			log_add_secret(val);
		return 0;
	case CFG_MODELS:
		if (parse_models(val, &items, &nr_items, why))
			return -1;
		model_items_free(items, nr_items);
		free(*(char **)field);
		*(char **)field = xstrdup(val);
		return 0;
	case CFG_LIST:
		if (normalise_list(row, val, &list, why)) {
			strbuf_release(&list);
			return -1;
		}
		free(*(char **)field);
		*(char **)field = strbuf_detach(&list, NULL);
		return 0;
	case CFG_INT:
		if (!*val) {
			strbuf_addstr(why, "a value is required (an integer)");
			return -1;
		}
		if (kb_parse_i64(val, &i)) {
			strbuf_addf(why, "'%s' is not an integer", shown);
			return -1;
		}
		if (i < row->imin || i > row->imax) {
			if (row->imax == INT64_MAX)
				strbuf_addf(why, "%s is out of range (must be >= %" PRId64 ")",
					    shown, row->imin);
			else
				strbuf_addf(why, "%s is out of range (%" PRId64 "..%" PRId64 ")",
					    shown, row->imin, row->imax);
			return -1;
		}
		*(int64_t *)field = i;
		return 0;
	case CFG_DOUBLE:
		if (!*val && (row->flags & CFG_NAN_OK)) {
			*(double *)field = NAN;
			return 0;
		}
		if (!*val) {
			strbuf_addstr(why, "a value is required (a number)");
			return -1;
		}
		if (kb_parse_double(val, &d) || !isfinite(d)) {
			strbuf_addf(why, "'%s' is not a number", shown);
			return -1;
		}
		if (((row->flags & CFG_GT_MIN) ? d <= row->dmin : d < row->dmin) || d > row->dmax) {
			strbuf_addf(why, "%s is out of range (must be %s %g and <= %g)", shown,
				    (row->flags & CFG_GT_MIN) ? ">" : ">=", row->dmin, row->dmax);
			return -1;
		}
		*(double *)field = d;
		return 0;
	case CFG_BOOL:
		if (parse_bool(val, &b)) {
			strbuf_addf(why, "'%s' is not a boolean (on|off|true|false|yes|no|1|0)", shown);
			return -1;
		}
		*(bool *)field = b;
		return 0;
	case CFG_ENUM:
		idx = name_index(row->names, val, strlen(val));
		if (idx < 0) {
			strbuf_addf(why, "'%s' is not one of ", shown);
			add_names(why, row->names);
			return -1;
		}
		*(int *)field = idx;
		return 0;
	}
	strbuf_addstr(why, "internal error: bad row type");
	return -1;
}

static bool is_var_start(char c)
{
	return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static bool is_var_char(char c)
{
	return is_var_start(c) || (c >= '0' && c <= '9');
}

/*
 * Expand ${VAR} from the environment; "$$" is a literal '$', and a '$'
 * followed by anything else is kept as is.
 */
static int expand_env(const char *val, struct strbuf *out, struct strbuf *why)
{
	for (const char *p = val; *p; p++) {
		const char *name, *end, *env;
		char *var;

		if (*p != '$') {
			strbuf_addch(out, *p);
			continue;
		}
		if (p[1] == '$') {
			strbuf_addch(out, '$');
			p++;
			continue;
		}
		if (p[1] != '{') {
			strbuf_addch(out, '$');
			continue;
		}
		name = p + 2;
		end = strchr(name, '}');
		if (!end) {
			strbuf_addstr(why, "unterminated '${' (write '$$' for a literal '$')");
			return -1;
		}
		if (end == name || !is_var_start(*name)) {
			strbuf_addf(why, "bad variable name '${%.*s}'", (int)(end - name), name);
			return -1;
		}
		for (const char *q = name; q < end; q++)
			if (!is_var_char(*q)) {
				strbuf_addf(why, "bad variable name '${%.*s}'", (int)(end - name), name);
				return -1;
			}
		var = xstrndup(name, (size_t)(end - name));
		env = getenv(var);
		if (!env) {
			strbuf_addf(why, "environment variable '%s' is not set", var);
			free(var);
			return -1;
		}
		free(var);
		strbuf_addstr(out, env);
		p = end;
	}
	return 0;
}

/* KB_CONFIG_SETTABLE's keys, one by one */
static const char *const settable[] = {
	"bench.warmup", "bench.min_time_ms", "bench.max_reps", "bench.l2_flush", "bench.baselines",
	"harness.atol_fp32", "harness.rtol_fp32", "harness.atol_fp16", "harness.rtol_fp16",
	"harness.atol_bf16", "harness.rtol_bf16", "harness.error_factor",
};

static bool is_settable(const char *section, const char *key)
{
	size_t ls = strlen(section);

	for (size_t i = 0; i < ARRAY_SIZE(settable); i++)
		if (!strncmp(settable[i], section, ls) && settable[i][ls] == '.' &&
		    !strcmp(settable[i] + ls + 1, key))
			return true;
	return false;
}

static const struct cfg_row *find_row(const char *section, const char *key)
{
	for (size_t i = 0; i < NR_ROWS; i++)
		if (!strcmp(rows[i].section, section) && !strcmp(rows[i].key, key))
			return &rows[i];
	return NULL;
}


static const char *closest_key(const struct cfg_row *table, size_t n, const char *section,
			       const char *key)
{
	const char *best = NULL;
	size_t best_d = 3; /* suggest only close misspellings */

	for (size_t i = 0; i < n; i++) {
		size_t d;

		if (section && strcmp(table[i].section, section))
			continue;
		d = kb_edit_distance(table[i].key, key);
		if (d < best_d) {
			best_d = d;
			best = table[i].key;
		}
	}
	return best;
}

/* "unknown section [X]", with the known section closest to X when one is close. */
static void unknown_section_message(const char *name, size_t len, struct strbuf *out)
{
	char *want = xstrndup(name, len);
	const char *best = NULL;
	size_t best_d = 3; /* suggest only close misspellings */

	for (size_t i = 0; i < NR_ROWS; i++) {
		size_t d = kb_edit_distance(rows[i].section, want);

		if (d < best_d) {
			best_d = d;
			best = rows[i].section;
		}
	}
	strbuf_addf(out, "unknown section [%s]", want);
	if (best)
		strbuf_addf(out, " (did you mean [%s]?)", best);
	else if (!strncasecmp(want, "llm", 3))
		strbuf_addstr(out, " (models are [llm.NAME])");
	free(want);
}

struct load_ctx {
	struct kb_config *cfg;
	const char *data; /* the whole file */
	size_t len, pos;
	int lineno;       /* line last handed to inih */
	size_t max_line;  /* the longest line inih takes, its end included */
	int err_line;     /* 0: no error yet */
	struct strbuf err;
	int set_on[NR_ROWS]; /* line each key was set on, for duplicates */
	/* [llm.NAME] sections in file order (cfg->llm_models until resolved) */
	int (*model_set_on)[NR_MODEL_ROWS];
	size_t model_alloc;
};

static void vfail_at(struct load_ctx *ctx, int line, const char *fmt, va_list ap)
{
	if (ctx->err_line)
		return;
	ctx->err_line = line > 0 ? line : 1; /* 0 would mean "no error" */
	strbuf_vaddf(&ctx->err, fmt, ap);
}

static void fail(struct load_ctx *ctx, const char *fmt, ...) KB_PRINTF(2, 3);
static void fail(struct load_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_at(ctx, ctx->lineno, fmt, ap);
	va_end(ap);
}

/* An error found after the whole file was read, at a line of its own. */
static void fail_at(struct load_ctx *ctx, int line, const char *fmt, ...) KB_PRINTF(3, 4);
static void fail_at(struct load_ctx *ctx, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_at(ctx, line, fmt, ap);
	va_end(ap);
}

static void model_release(struct kb_llm_model_cfg *m)
{
	for (size_t i = 0; i < NR_MODEL_ROWS; i++)
		if (is_string_type(model_rows[i].type))
			FREE_AND_NULL(*str_field(m, &model_rows[i]));
	FREE_AND_NULL(m->name);
}

static long find_model(const struct kb_config *cfg, const char *name, size_t len)
{
	for (size_t i = 0; i < cfg->nr_llm_models; i++)
		if (strlen(cfg->llm_models[i].name) == len && !memcmp(cfg->llm_models[i].name, name, len))
			return (long)i;
	return -1;
}

/* The section [llm.NAME] as first seen on line: its defaults. */
static void add_model(struct load_ctx *ctx, const char *name, size_t len, int line)
{
	struct kb_config *cfg = ctx->cfg;
	struct kb_llm_model_cfg *m;
	struct strbuf why = STRBUF_INIT;

	if (cfg->nr_llm_models == ctx->model_alloc) {
		ctx->model_alloc = ctx->model_alloc ? 2 * ctx->model_alloc : 4;
		cfg->llm_models = xrealloc(cfg->llm_models, ctx->model_alloc * sizeof(*cfg->llm_models));
		ctx->model_set_on = xrealloc(ctx->model_set_on,
					     ctx->model_alloc * sizeof(*ctx->model_set_on));
	}
	m = &cfg->llm_models[cfg->nr_llm_models];
	memset(m, 0, sizeof(*m));
	memset(ctx->model_set_on[cfg->nr_llm_models], 0, sizeof(*ctx->model_set_on));
	cfg->nr_llm_models++;
	m->name = xstrndup(name, len);
	m->line = line;
	m->weight = 1;
	for (size_t i = 0; i < NR_MODEL_ROWS; i++) {
		const struct cfg_row *row = &model_rows[i];

		if (!row->def) {
			if (is_string_type(row->type))
				*str_field(m, row) = xstrdup("");
		} else if (set_value(m, row, row->def, &why)) {
			die("bad built-in default for [llm.NAME] %s: %s", row->key, why.buf);
		}
	}
	strbuf_release(&why);
}

/*
 * inih reads through this, one line per call, so ctx->lineno is the line
 * of every handler call (Debian's inih has no INI_HANDLER_LINENO). It also
 * strips leading blanks, which turns off inih's multi-line continuation (an
 * indented "key = value" is a key, not part of the previous value), checks
 * section names (an empty unknown section never reaches the handler), and
 * ends the stream at the first error.
 */
static char *read_line(char *str, int num, void *stream)
{
	struct load_ctx *ctx = stream;
	const char *line, *nl, *end;
	size_t len;

	if (ctx->err_line || ctx->pos >= ctx->len)
		return NULL;
	line = ctx->data + ctx->pos;
	nl = memchr(line, '\n', ctx->len - ctx->pos);
	end = nl ? nl + 1 : ctx->data + ctx->len;
	ctx->pos = (size_t)(end - ctx->data);
	ctx->lineno++;

	if (memchr(line, '\0', (size_t)(end - line))) {
		fail(ctx, "the line contains a NUL byte");
		return NULL;
	}
	if (ctx->lineno == 1 && end - line >= 3 && !memcmp(line, "\xef\xbb\xbf", 3))
		line += 3; /* a UTF-8 byte order mark */
	while (line < end && (*line == ' ' || *line == '\t'))
		line++;
	len = (size_t)(end - line);
	/* inih needs room for "\r\n\0"; it would split a longer line silently */
	ctx->max_line = num > 3 ? (size_t)num - 3 : 0;
	if (num < 4 || len > (size_t)num - 3) {
		fail(ctx, "the line is longer than %d bytes", num > 3 ? num - 3 : 0);
		return NULL;
	}
	memcpy(str, line, len);
	str[len] = '\0';

	if (*str == '[') {
		const char *close = strchr(str + 1, ']');
		size_t slen = close ? (size_t)(close - str - 1) : 0;
		size_t plen = strlen(MODEL_SECTION);

		if (close && slen >= plen && !strncmp(str + 1, MODEL_SECTION, plen)) {
			const char *name = str + 1 + plen;
			size_t nlen = slen - plen;

			if (!valid_model_name(name, nlen)) {
				fail(ctx, "bad section name [%.*s]: NAME of [llm.NAME] is letters, digits,"
				     " '-', '_' or '.', at most %d", (int)slen, str + 1, MODEL_NAME_MAX);
				return NULL;
			}
			if (find_model(ctx->cfg, name, nlen) < 0)
				add_model(ctx, name, nlen, ctx->lineno);
		} else if (close && !known_section(str + 1, slen)) {
			struct strbuf msg = STRBUF_INIT;

			unknown_section_message(str + 1, slen, &msg);
			fail(ctx, "%s", msg.buf);
			strbuf_release(&msg);
			return NULL;
		}
	}
	return str;
}

static void print_row(FILE *fp, const void *base, const struct cfg_row *row);

/*
 * The job loop hands each child this configuration as kb_config_print
 * writes it ('$' doubled, ${VAR} expanded, lists normalised): a value
 * whose line would not fit a line of that file is refused here, where the
 * message names the key, instead of failing every job. -1 after fail().
 */
static int check_printed(struct load_ctx *ctx, const char *section, const void *base,
			 const struct cfg_row *row)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);

	if (!fp)
		die("out of memory");
	print_row(fp, base, row);
	fclose(fp);
	free(buf);
	if (!ctx->max_line || len <= ctx->max_line)
		return 0;
	fail(ctx, "[%s] %s: the value is too long: written for the job's children ('$' as '$$',"
	     " ${VAR} expanded) its line has %zu bytes, at most %zu fit", section, row->key, len,
	     ctx->max_line);
	return -1;
}

/* "unknown key" in section, with the closest key of table[0..n) when one is close. */
static void fail_unknown_key(struct load_ctx *ctx, const struct cfg_row *table, size_t n,
			     const char *filter, const char *section, const char *key)
{
	const char *hint = closest_key(table, n, filter, key);

	if (hint)
		fail(ctx, "unknown key '%s' in section [%s] (did you mean '%s'?)", key, section, hint);
	else
		fail(ctx, "unknown key '%s' in section [%s]", key, section);
}

/*
 * Store one known key of a section into base (struct kb_config or one
 * model's struct): refuse it when *set_on says another line set it first,
 * expand ${VAR}s, parse it by row, check what it prints. 1, or 0 after
 * fail().
 */
static int store_key(struct load_ctx *ctx, const char *section, const char *key,
		     const char *value, const struct cfg_row *row, void *base, int *set_on)
{
	struct strbuf val = STRBUF_INIT, why = STRBUF_INIT;
	int ok = 0;

	if (*set_on) {
		fail(ctx, "[%s] %s: duplicate key (first set on line %d)", section, key, *set_on);
		goto out;
	}
	*set_on = ctx->lineno;
	if (expand_env(value ? value : "", &val, &why) || set_value(base, row, val.buf, &why)) {
		fail(ctx, "[%s] %s: %s", section, key, why.buf);
		goto out;
	}
	if (check_printed(ctx, section, base, row))
		goto out;
	ok = 1;
out:
	strbuf_release(&val);
	strbuf_release(&why);
	return ok;
}

/* A key of [llm.NAME]. */
static int handle_model(struct load_ctx *ctx, const char *section, const char *key,
			const char *value)
{
	const char *name = section + strlen(MODEL_SECTION);
	long mi = find_model(ctx->cfg, name, strlen(name));
	size_t idx;

	if (mi < 0) { /* read_line() saw every section header */
		fail(ctx, "internal error: unknown section [%s]", section);
		return 0;
	}
	for (idx = 0; idx < NR_MODEL_ROWS; idx++)
		if (!strcmp(model_rows[idx].key, key))
			break;
	if (idx == NR_MODEL_ROWS) {
		fail_unknown_key(ctx, model_rows, NR_MODEL_ROWS, NULL, section, key);
		return 0;
	}
	return store_key(ctx, section, key, value, &model_rows[idx], &ctx->cfg->llm_models[mi],
			 &ctx->model_set_on[mi][idx]);
}

static int handle(void *user, const char *section, const char *key, const char *value)
{
	struct load_ctx *ctx = user;
	const struct cfg_row *row;

	if (ctx->err_line)
		return 0;
	if (!*section) {
		fail(ctx, "key '%s' is outside any section", key);
		return 0;
	}
	if (is_model_section(section))
		return handle_model(ctx, section, key, value);
	if (!known_section(section, strlen(section))) {
		struct strbuf why = STRBUF_INIT;

		/* read_line() normally reports it at the section's own line */
		unknown_section_message(section, strlen(section), &why);
		fail(ctx, "%s", why.buf);
		strbuf_release(&why);
		return 0;
	}
	row = find_row(section, key);
	if (!row) {
		fail_unknown_key(ctx, rows, NR_ROWS, section, section, key);
		return 0;
	}
	return store_key(ctx, section, key, value, row, ctx->cfg, &ctx->set_on[(size_t)(row - rows)]);
}

static int row_line(const struct load_ctx *ctx, const char *section, const char *key)
{
	return ctx->set_on[find_row(section, key) - rows];
}

static const char *model_key_hint(const struct cfg_row *row)
{
	if (row->type == CFG_ENUM)
		return "openai|anthropic";
	if (row->flags & CFG_URL)
		return "an http:// or https:// URL";
	return "the provider's model id";
}

/*
 * After the whole file: every [llm.NAME] complete and named in [llm]
 * models (or aux_model), every name there with its section; then
 * cfg->llm_models is put in models order with the weights, an aux-only
 * model last with weight 0 (never drawn by kb_llm_pick). Cross-key
 * checks of [search] too.
 */
static void resolve(struct load_ctx *ctx)
{
	struct kb_config *cfg = ctx->cfg;
	struct model_item *items = NULL;
	struct kb_llm_model_cfg *sorted;
	struct strbuf why = STRBUF_INIT;
	bool *used;
	size_t nr_items = 0, n = 0;
	int models_line = row_line(ctx, "llm", "models");
	int aux_line = row_line(ctx, "llm", "aux_model");
	const char *aux = cfg->llm_aux_model;

	if (cfg->search_explore + cfg->search_exploit > 1) {
		int le = row_line(ctx, "search", "explore"), lx = row_line(ctx, "search", "exploit");

		fail_at(ctx, lx > le ? lx : le, "[search] %s: explore + exploit must be <= 1 (%g + %g)",
			lx > le ? "exploit" : "explore", cfg->search_explore, cfg->search_exploit);
		goto out;
	}
	if (parse_models(cfg->llm_models_spec, &items, &nr_items, &why)) {
		fail_at(ctx, models_line, "[llm] models: %s", why.buf); /* checked when read */
		goto out;
	}
	for (size_t i = 0; i < cfg->nr_llm_models; i++) {
		const struct kb_llm_model_cfg *m = &cfg->llm_models[i];
		bool named = *aux && !strcmp(aux, m->name);

		for (size_t k = 0; k < nr_items && !named; k++)
			named = !strcmp(items[k].name, m->name);
		if (!named) {
			fail_at(ctx, m->line, "[llm.%s]: model '%s' is not named in [llm] models%s",
				m->name, m->name, nr_items ? " (a typo?)" : " (which is empty)");
			goto out;
		}
		for (size_t r = 0; r < NR_MODEL_ROWS; r++)
			if ((model_rows[r].flags & CFG_MUST) && !ctx->model_set_on[i][r]) {
				fail_at(ctx, m->line, "[llm.%s] %s: a value is required (%s)", m->name,
					model_rows[r].key, model_key_hint(&model_rows[r]));
				goto out;
			}
		if (m->provider == PROVIDER_ANTHROPIC && !isnan(m->temperature) && m->temperature > 1) {
			size_t r = 0;

			while (strcmp(model_rows[r].key, "temperature"))
				r++;
			fail_at(ctx, ctx->model_set_on[i][r], "[llm.%s] temperature: %g is out of range"
				" for anthropic (must be >= 0 and <= 1)", m->name, m->temperature);
			goto out;
		}
	}
	for (size_t k = 0; k < nr_items; k++)
		if (find_model(cfg, items[k].name, strlen(items[k].name)) < 0) {
			fail_at(ctx, models_line, "[llm] models: no section [llm.%s] for model '%s'",
				items[k].name, items[k].name);
			goto out;
		}
	if (*aux && !nr_items) {
		fail_at(ctx, aux_line, "[llm] aux_model: '%s' needs [llm] models (which is empty)", aux);
		goto out;
	}
	if (*aux && find_model(cfg, aux, strlen(aux)) < 0) {
		fail_at(ctx, aux_line, "[llm] aux_model: no section [llm.%s] for model '%s'", aux, aux);
		goto out;
	}

	sorted = xcalloc(cfg->nr_llm_models ? cfg->nr_llm_models : 1, sizeof(*sorted));
	used = xcalloc(cfg->nr_llm_models ? cfg->nr_llm_models : 1, sizeof(*used));
	for (size_t k = 0; k < nr_items; k++) {
		long i = find_model(cfg, items[k].name, strlen(items[k].name));

		sorted[n] = cfg->llm_models[i];
		sorted[n++].weight = items[k].weight;
		used[i] = true;
	}
	for (size_t i = 0; i < cfg->nr_llm_models; i++)
		if (!used[i]) { /* aux only */
			sorted[n] = cfg->llm_models[i];
			sorted[n++].weight = 0;
		}
	free(used);
	free(cfg->llm_models);
	cfg->llm_models = sorted;
	cfg->nr_llm_models = n;
out:
	model_items_free(items, nr_items);
	strbuf_release(&why);
}

static int read_config_file(const char *path, struct strbuf *sb)
{
	char chunk[8192];
	struct stat st;
	int fd, rc = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_errno("could not open config file '%s'", path);
	if (fstat(fd, &st)) {
		error_errno("could not stat config file '%s'", path);
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		error("config file '%s' is a directory", path);
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			error_errno("could not read config file '%s'", path);
			goto out;
		}
		if (!n)
			break;
		if (sb->len + (size_t)n > MAX_CONFIG_BYTES) {
			error("config file '%s' is larger than %d bytes", path, MAX_CONFIG_BYTES);
			goto out;
		}
		strbuf_add(sb, chunk, (size_t)n);
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

void kb_config_default_state_dir(struct strbuf *out)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

	/* the XDG base directory spec ignores a relative XDG_STATE_HOME */
	if (xdg && *xdg == '/')
		strbuf_addf(out, "%s/kernelbot", xdg);
	else if (home && *home == '/')
		strbuf_addf(out, "%s/.local/state/kernelbot", home);
	else
		strbuf_addstr(out, ".kernelbot"); /* no home at all (a bare service account) */
}

/* An empty state_dir means the default: one place per user, not one per working directory. */
static void fill_state_dir(struct kb_config *cfg)
{
	struct strbuf sb = STRBUF_INIT;

	if (cfg->state_dir && *cfg->state_dir)
		return;
	kb_config_default_state_dir(&sb);
	free(cfg->state_dir);
	cfg->state_dir = strbuf_detach(&sb, NULL);
}

void kb_config_init(struct kb_config *cfg)
{
	struct strbuf why = STRBUF_INIT;

	memset(cfg, 0, sizeof(*cfg));
	cfg->source = xstrdup(BUILTIN_SOURCE);
	for (size_t i = 0; i < NR_ROWS; i++)
		if (set_value(cfg, &rows[i], rows[i].def, &why))
			die("bad built-in default for [%s] %s: %s",
			    rows[i].section, rows[i].key, why.buf);
	fill_state_dir(cfg);
	strbuf_release(&why);
}

int kb_config_load(struct kb_config *cfg, const char *path)
{
	struct load_ctx ctx;
	struct strbuf data = STRBUF_INIT;
	int ret, rc = -1;

	kb_config_init(cfg);
	free(cfg->source);
	cfg->source = xstrdup(path);

	memset(&ctx, 0, sizeof(ctx));
	ctx.cfg = cfg;
	strbuf_init(&ctx.err, 0);
	if (read_config_file(path, &data))
		goto out;
	ctx.data = data.buf;
	ctx.len = data.len;

	ret = ini_parse_stream(read_line, &ctx, handle, &ctx);
	if (ret == -2) {
		error("%s: out of memory while parsing", path);
		goto out;
	}
	/* inih reports the first bad line; a syntax error never reaches handle() */
	if (ret > 0 && (!ctx.err_line || ret < ctx.err_line)) {
		error("%s:%d: expected '[section]', 'key = value' or a comment", path, ret);
		goto out;
	}
	if (!ctx.err_line)
		resolve(&ctx);
	if (ctx.err_line) {
		error("%s:%d: %s", path, ctx.err_line, ctx.err.buf);
		goto out;
	}
	fill_state_dir(cfg);
	rc = 0;
out:
	free(ctx.model_set_on);
	strbuf_release(&ctx.err);
	strbuf_release(&data);
	return rc;
}

int kb_config_set(struct kb_config *cfg, const char *assignment, struct strbuf *why)
{
	const char *eq = strchr(assignment, '='), *dot = strchr(assignment, '.');
	struct load_ctx ctx;
	char *section = NULL, *key = NULL;
	const struct cfg_row *row;
	int set_on = 0, rc = -1;

	if (!eq || !dot || dot > eq) {
		strbuf_addf(why, "'%s' is not SECTION.KEY=VALUE", assignment);
		return -1;
	}
	section = xstrndup(assignment, (size_t)(dot - assignment));
	key = xstrndup(dot + 1, (size_t)(eq - dot - 1));
	row = find_row(section, key);
	if (!row || !is_settable(section, key)) {
		strbuf_addf(why, "%s.%s cannot be set on the command line (these can: %s)", section, key,
			    KB_CONFIG_SETTABLE);
		goto out;
	}
	memset(&ctx, 0, sizeof(ctx));
	ctx.cfg = cfg;
	strbuf_init(&ctx.err, 0);
	if (!store_key(&ctx, section, key, eq + 1, row, cfg, &set_on) || ctx.err_line || ctx.err.len) {
		strbuf_addstr(why, ctx.err.buf);
		strbuf_release(&ctx.err);
		goto out;
	}
	strbuf_release(&ctx.err);
	rc = 0;
out:
	free(section);
	free(key);
	return rc;
}

int kb_config_reload(struct kb_config *cfg, const char *path)
{
	struct kb_config fresh;

	if (kb_config_load(&fresh, path)) {
		kb_config_release(&fresh);
		log_warn("configuration not reloaded: '%s' is invalid; keeping the running one", path);
		return -1;
	}
	kb_config_release(cfg);
	*cfg = fresh;
	log_info("configuration reloaded from '%s'", path);
	return 0;
}

void kb_config_release(struct kb_config *cfg)
{
	for (size_t i = 0; i < NR_ROWS; i++)
		if (is_string_type(rows[i].type))
			FREE_AND_NULL(*str_field(cfg, &rows[i]));
	for (size_t i = 0; i < cfg->nr_llm_models; i++)
		model_release(&cfg->llm_models[i]);
	FREE_AND_NULL(cfg->llm_models);
	cfg->nr_llm_models = 0;
	FREE_AND_NULL(cfg->source);
}

/* The shortest form that reads back as the same double. */
static void print_double(FILE *fp, double d)
{
	char buf[64];

	for (int prec = 6; prec <= 17; prec++) {
		xsnprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	fputs(buf, fp);
}

/* '$' doubled so that the printed file reads back as the same value. */
static void print_string(FILE *fp, const char *s)
{
	for (; *s; s++) {
		if (*s == '$')
			fputc('$', fp);
		fputc(*s, fp);
	}
}

/* row's value in the struct at base; a secret that is set reads "***". */
static void row_entry(const void *base, const struct cfg_row *row, struct kb_config_entry *e)
{
	const void *field = const_field(base, row);

	memset(e, 0, sizeof(*e));
	e->section = row->section;
	e->key = row->key;
	switch (row->type) {
	case CFG_STRING:
	case CFG_PATH:
	case CFG_LIST:
	case CFG_MODELS: {
		const char *s = *(char *const *)field;

		e->type = KB_CONFIG_TEXT;
		e->text = !s || !*s ? "" : row->flags & CFG_SECRET ? "***" : s;
		break;
	}
	case CFG_INT:
		e->type = KB_CONFIG_INT;
		e->i = *(const int64_t *)field;
		break;
	case CFG_DOUBLE:
		e->type = KB_CONFIG_DOUBLE;
		e->d = *(const double *)field;
		break;
	case CFG_BOOL:
		e->type = KB_CONFIG_BOOL;
		e->b = *(const bool *)field;
		break;
	case CFG_ENUM: {
		int v = *(const int *)field, n = 0;

		while (row->names[n])
			n++;
		e->type = KB_CONFIG_TEXT;
		e->text = v >= 0 && v < n ? row->names[v] : "?";
		break;
	}
	}
}

/* "key = value" of row in the struct at base, secrets as ***. */
static void print_row(FILE *fp, const void *base, const struct cfg_row *row)
{
	struct kb_config_entry e;

	row_entry(base, row, &e);
	fprintf(fp, "%s =", row->key);
	switch (e.type) {
	case KB_CONFIG_TEXT:
		if (*e.text) {
			fputc(' ', fp);
			print_string(fp, e.text);
		}
		break;
	case KB_CONFIG_INT:
		fprintf(fp, " %" PRId64, e.i);
		break;
	case KB_CONFIG_DOUBLE:
		if (isnan(e.d))
			break; /* unset: reads back as NAN (CFG_NAN_OK) */
		fputc(' ', fp);
		print_double(fp, e.d);
		break;
	case KB_CONFIG_BOOL:
		fprintf(fp, " %s", e.b ? "on" : "off");
		break;
	}
	fputc('\n', fp);
}

static void print_config(const struct kb_config *cfg, FILE *fp, bool child);

void kb_config_print(const struct kb_config *cfg, FILE *fp)
{
	print_config(cfg, fp, false);
}

void kb_config_print_for_child(const struct kb_config *cfg, FILE *fp)
{
	print_config(cfg, fp, true);
}

static void print_config(const struct kb_config *cfg, FILE *fp, bool child)
{
	const char *section = NULL;

	fprintf(fp, "# effective configuration from %s\n",
		cfg->source ? cfg->source : BUILTIN_SOURCE);
	fprintf(fp, "# secrets are shown as ***\n");
	for (size_t i = 0; i < NR_ROWS; i++) {
		const struct cfg_row *row = &rows[i];

		if (!section || strcmp(section, row->section)) {
			section = row->section;
			fprintf(fp, "\n[%s]\n", section);
		}
		print_row(fp, cfg, row);
	}
	/* in models order; an aux-only model (weight 0) last */
	for (size_t i = 0; i < cfg->nr_llm_models; i++) {
		fprintf(fp, "\n[%s%s]\n", MODEL_SECTION, cfg->llm_models[i].name);
		for (size_t r = 0; r < NR_MODEL_ROWS; r++) {
			const char *key = cfg->llm_models[i].api_key;

			/* the child reads its key from its environment, never from a file */
			if (child && !strcmp(model_rows[r].key, "api_key") && key && *key)
				fprintf(fp, "api_key = ${%s%zu}\n", KB_CHILD_LLM_KEY_ENV, i);
			else
				print_row(fp, &cfg->llm_models[i], &model_rows[r]);
		}
	}
}

void kb_config_foreach(const struct kb_config *cfg, const char *section,
		       void (*cb)(const struct kb_config_entry *e, void *payload), void *payload)
{
	for (size_t i = 0; i < NR_ROWS; i++) {
		struct kb_config_entry e;

		if (section && strcmp(section, rows[i].section))
			continue;
		row_entry(cfg, &rows[i], &e);
		cb(&e, payload);
	}
}

const char *kb_config_default_path(const char *explicit_path)
{
	static const char *const candidates[] = { "config.ini", "/etc/kernelbot/config.ini" };

	if (explicit_path)
		return access(explicit_path, F_OK) ? NULL : explicit_path;
	for (size_t i = 0; i < ARRAY_SIZE(candidates); i++)
		if (!access(candidates[i], F_OK))
			return candidates[i];
	return NULL;
}
