#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"

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
	CFG_LIST    /* comma list of names[], normalised, may be empty */
};

#define CFG_SECRET   (1u << 0) /* redacted from logs, printed as *** */
#define CFG_REQUIRED (1u << 1) /* a string that may not be empty */
#define CFG_GT_MIN   (1u << 2) /* a double strictly above dmin */

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

/* Index = enum value. */
static const char *const log_level_names[] = { "debug", "info", "warn", "error", NULL };
static const char *const backend_names[] = { "auto", "cuda", "cpu", NULL };
static const char *const baseline_names[] = { "eager", "compile", NULL };
static const char *const forge_names[] = { "github", "local", NULL };

#define OFF(f) offsetof(struct kb_config, f)
#define STR(s, k, f, d, fl) { s, k, CFG_STRING, OFF(f), d, 0, 0, 0, 0, fl, NULL }
#define PATH(s, k, f, d, fl) { s, k, CFG_PATH, OFF(f), d, 0, 0, 0, 0, fl, NULL }
#define INT(s, k, f, d, lo, hi) { s, k, CFG_INT, OFF(f), d, lo, hi, 0, 0, 0, NULL }
#define DBL(s, k, f, d, lo, hi, fl) { s, k, CFG_DOUBLE, OFF(f), d, 0, 0, lo, hi, fl, NULL }
#define BOOL(s, k, f, d) { s, k, CFG_BOOL, OFF(f), d, 0, 0, 0, 0, 0, NULL }
#define ENUM(s, k, f, d, n) { s, k, CFG_ENUM, OFF(f), d, 0, 0, 0, 0, 0, n }
#define LIST(s, k, f, d, n) { s, k, CFG_LIST, OFF(f), d, 0, 0, 0, 0, 0, n }

static const struct cfg_row rows[] = {
	PATH("core", "state_dir", state_dir, ".kernelbot", CFG_REQUIRED),
	PATH("core", "log_file", log_file, "", 0),
	ENUM("core", "log_level", log_level, "info", log_level_names),

	PATH("harness", "python", python, "", 0),
	ENUM("harness", "backend", backend, "auto", backend_names),
	INT("harness", "timeout_s", timeout_s, "300", 1, 86400),
	INT("harness", "seeds", seeds, "5", 1, 100),
	INT("harness", "max_configs", max_configs, "16", 1, 256),
	DBL("harness", "atol_fp32", atol_fp32, "1e-4", 0, 1, CFG_GT_MIN),
	DBL("harness", "rtol_fp32", rtol_fp32, "1e-4", 0, 1, CFG_GT_MIN),
	DBL("harness", "atol_fp16", atol_fp16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "rtol_fp16", rtol_fp16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "atol_bf16", atol_bf16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "rtol_bf16", rtol_bf16, "1e-2", 0, 1, CFG_GT_MIN),
	DBL("harness", "suspicious_speedup", suspicious_speedup, "10", 1, 1e6, CFG_GT_MIN),
	INT("harness", "memory_limit_mb", memory_limit_mb, "0", 0, 1048576),
	INT("harness", "build_jobs", build_jobs, "0", 0, 256),
	PATH("harness", "nvcc", nvcc, "nvcc", CFG_REQUIRED),
	PATH("harness", "cxx", cxx, "g++", CFG_REQUIRED),
	STR("harness", "cuda_arch", cuda_arch, "auto", CFG_REQUIRED),
	PATH("harness", "data_dir", data_dir, "", 0),

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
	INT("bot", "max_jobs", bot_max_jobs, "1", 1, 64),
	INT("bot", "max_operators", bot_max_operators, "8", 1, 100),
	INT("bot", "time_budget_s", bot_time_budget_s, "1800", 1, 604800),
	INT("bot", "max_time_budget_s", bot_max_time_budget_s, "7200", 1, 604800),
	INT("bot", "progress_interval_s", bot_progress_interval_s, "30", 0, 3600),
	STR("bot", "git_url", bot_git_url, "", 0),
	STR("bot", "check_name", bot_check_name, "kernelbot", CFG_REQUIRED),
};

#define NR_ROWS ARRAY_SIZE(rows)
#define BUILTIN_SOURCE "(built-in defaults)"
#define MAX_CONFIG_BYTES (1024 * 1024)

static char **str_field(struct kb_config *cfg, const struct cfg_row *row)
{
	return (char **)((char *)cfg + row->offset);
}

static const void *const_field(const struct kb_config *cfg, const struct cfg_row *row)
{
	return (const char *)cfg + row->offset;
}

static bool is_string_type(enum cfg_type t)
{
	return t == CFG_STRING || t == CFG_PATH || t == CFG_LIST;
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

/*
 * Convert val for row and store it in cfg. On failure nothing is stored
 * and why says what is wrong (without file, line or key).
 */
static int set_value(struct kb_config *cfg, const struct cfg_row *row,
		     const char *val, struct strbuf *why)
{
	void *field = (char *)cfg + row->offset;
	struct strbuf list = STRBUF_INIT;
	const char *shown = (row->flags & CFG_SECRET) ? "***" : val;
	int64_t i;
	double d;
	bool b;
	int idx;

	switch (row->type) {
	case CFG_STRING:
	case CFG_PATH:
		if (!*val && (row->flags & CFG_REQUIRED)) {
			strbuf_addstr(why, "a value is required");
			return -1;
		}
		for (const char *p = val; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f) {
				strbuf_addstr(why, "the value contains a control character");
				return -1;
			}
		free(*(char **)field);
		*(char **)field = xstrdup(val);
		if (row->flags & CFG_SECRET)
			log_add_secret(val);
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

static const struct cfg_row *find_row(const char *section, const char *key)
{
	for (size_t i = 0; i < NR_ROWS; i++)
		if (!strcmp(rows[i].section, section) && !strcmp(rows[i].key, key))
			return &rows[i];
	return NULL;
}

/* Edit distance for "did you mean"; keys are short. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), prev[64], cur[64];

	if (la >= ARRAY_SIZE(prev) || lb >= ARRAY_SIZE(prev))
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;

			cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
		}
		memcpy(prev, cur, (lb + 1) * sizeof(*prev));
	}
	return prev[lb];
}

static const char *closest_key(const char *section, const char *key)
{
	const char *best = NULL;
	size_t best_d = 3; /* suggest only close misspellings */

	for (size_t i = 0; i < NR_ROWS; i++) {
		size_t d;

		if (strcmp(rows[i].section, section))
			continue;
		d = edit_distance(rows[i].key, key);
		if (d < best_d) {
			best_d = d;
			best = rows[i].key;
		}
	}
	return best;
}

struct load_ctx {
	struct kb_config *cfg;
	const char *data; /* the whole file */
	size_t len, pos;
	int lineno;       /* line last handed to inih */
	int err_line;     /* 0: no error yet */
	struct strbuf err;
	int set_on[NR_ROWS]; /* line each key was set on, for duplicates */
};

static void fail(struct load_ctx *ctx, const char *fmt, ...) KB_PRINTF(2, 3);
static void fail(struct load_ctx *ctx, const char *fmt, ...)
{
	va_list ap;

	if (ctx->err_line)
		return;
	ctx->err_line = ctx->lineno;
	va_start(ap, fmt);
	strbuf_vaddf(&ctx->err, fmt, ap);
	va_end(ap);
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
	if (num < 4 || len > (size_t)num - 3) {
		fail(ctx, "the line is longer than %d bytes", num > 3 ? num - 3 : 0);
		return NULL;
	}
	memcpy(str, line, len);
	str[len] = '\0';

	if (*str == '[') {
		const char *close = strchr(str + 1, ']');

		if (close && !known_section(str + 1, (size_t)(close - str - 1))) {
			fail(ctx, "unknown section [%.*s]", (int)(close - str - 1), str + 1);
			return NULL;
		}
	}
	return str;
}

static int handle(void *user, const char *section, const char *key, const char *value)
{
	struct load_ctx *ctx = user;
	struct strbuf val = STRBUF_INIT, why = STRBUF_INIT;
	const struct cfg_row *row;
	size_t idx;
	int ok = 0;

	if (ctx->err_line)
		return 0;
	if (!*section) {
		fail(ctx, "key '%s' is outside any section", key);
		goto out;
	}
	if (!known_section(section, strlen(section))) {
		/* read_line() normally reports it at the section's own line */
		fail(ctx, "unknown section [%s]", section);
		goto out;
	}
	row = find_row(section, key);
	if (!row) {
		const char *hint = closest_key(section, key);

		if (hint)
			fail(ctx, "unknown key '%s' in section [%s] (did you mean '%s'?)",
			     key, section, hint);
		else
			fail(ctx, "unknown key '%s' in section [%s]", key, section);
		goto out;
	}
	idx = (size_t)(row - rows);
	if (ctx->set_on[idx]) {
		fail(ctx, "[%s] %s: duplicate key (first set on line %d)",
		     section, key, ctx->set_on[idx]);
		goto out;
	}
	ctx->set_on[idx] = ctx->lineno;
	if (expand_env(value ? value : "", &val, &why) ||
	    set_value(ctx->cfg, row, val.buf, &why)) {
		fail(ctx, "[%s] %s: %s", section, key, why.buf);
		goto out;
	}
	ok = 1;
out:
	strbuf_release(&val);
	strbuf_release(&why);
	return ok;
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

void kb_config_init(struct kb_config *cfg)
{
	struct strbuf why = STRBUF_INIT;

	memset(cfg, 0, sizeof(*cfg));
	cfg->source = xstrdup(BUILTIN_SOURCE);
	for (size_t i = 0; i < NR_ROWS; i++)
		if (set_value(cfg, &rows[i], rows[i].def, &why))
			die("bad built-in default for [%s] %s: %s",
			    rows[i].section, rows[i].key, why.buf);
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
	if (ctx.err_line) {
		error("%s:%d: %s", path, ctx.err_line, ctx.err.buf);
		goto out;
	}
	rc = 0;
out:
	strbuf_release(&ctx.err);
	strbuf_release(&data);
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

void kb_config_print(const struct kb_config *cfg, FILE *fp)
{
	const char *section = NULL;

	fprintf(fp, "# effective configuration from %s\n",
		cfg->source ? cfg->source : BUILTIN_SOURCE);
	fprintf(fp, "# secrets are shown as ***\n");
	for (size_t i = 0; i < NR_ROWS; i++) {
		const struct cfg_row *row = &rows[i];
		const void *field = const_field(cfg, row);

		if (!section || strcmp(section, row->section)) {
			section = row->section;
			fprintf(fp, "\n[%s]\n", section);
		}
		fprintf(fp, "%s =", row->key);
		switch (row->type) {
		case CFG_STRING:
		case CFG_PATH:
		case CFG_LIST: {
			const char *s = *(char *const *)field;

			if (s && *s) {
				fputc(' ', fp);
				if (row->flags & CFG_SECRET)
					fputs("***", fp);
				else
					print_string(fp, s);
			}
			break;
		}
		case CFG_INT:
			fprintf(fp, " %" PRId64, *(const int64_t *)field);
			break;
		case CFG_DOUBLE:
			fputc(' ', fp);
			print_double(fp, *(const double *)field);
			break;
		case CFG_BOOL:
			fprintf(fp, " %s", *(const bool *)field ? "on" : "off");
			break;
		case CFG_ENUM: {
			int v = *(const int *)field, n = 0;

			while (row->names[n])
				n++;
			fprintf(fp, " %s", v >= 0 && v < n ? row->names[v] : "?");
			break;
		}
		}
		fputc('\n', fp);
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
