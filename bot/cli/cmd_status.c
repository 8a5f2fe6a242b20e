#include "core/common.h"
#include "cli/cli.h"
#include "cli/runs_db.h"
#include "core/config.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <time.h>

static void print_help(void)
{
	printf("usage: kernelbot status [-c FILE] [--state STATE] [--json]\n"
	       "\n"
	       "List the jobs in the state database (<state_dir>/" KB_STATE_DB_NAME "),\n"
	       "oldest first, then every `kernelbot run` (standalone, or a job's child)\n"
	       "with its stage and best speedup so far. A run whose process is gone\n"
	       "without ending it shows as 'died'.\n"
	       "\n"
	       "options:\n"
	       "  -c, --config FILE  config file (default ./config.ini, then /etc/kernelbot/config.ini)\n"
	       "  -s, --state STATE  only jobs and runs in STATE: queued, running, done, failed, cancelled\n"
	       "  -j, --json         print a JSON array instead of tables: jobs, then runs, each\n"
	       "                     object with \"kind\": \"job\" or \"run\"\n"
	       "  -h, --help         show this help\n"
	       "\n"
	       "exit codes: 0 ok, 2 usage or environment error\n");
}

/* "2026-12-02 10:04:11Z" (or "-" when unset) into buf. */
static const char *format_time(char *buf, size_t size, int64_t t, bool iso)
{
	struct tm tm;
	time_t tt = (time_t)t;

	if (!t || !gmtime_r(&tt, &tm)) {
		kb_strlcpy(buf, "-", size);
		return buf;
	}
	strftime(buf, size, iso ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M:%SZ", &tm);
	return buf;
}

/* The rows as strings, collected so that the table can size its columns. */
#define NR_COLUMNS 8
static const char *const column_names[NR_COLUMNS] = {
	"id", "repository", "pr", "sha", "operator", "state", "stage", "updated"
};
static const char *const run_column_names[NR_COLUMNS] = {
	"run", "job", "operator", "backend", "state", "stage", "best", "updated"
};

struct table {
	char **cells; /* nr * NR_COLUMNS */
	size_t nr, alloc;
	const char *filter; /* --state, NULL: all (the runs; jobs are filtered by the query) */
};

static char **new_row(struct table *t)
{
	if (t->nr == t->alloc) {
		t->alloc = t->alloc ? 2 * t->alloc : 16;
		t->cells = xrealloc(t->cells, t->alloc * NR_COLUMNS * sizeof(*t->cells));
	}
	return t->cells + t->nr++ * NR_COLUMNS;
}

static int add_row(const struct kb_job *job, void *payload)
{
	struct table *t = payload;
	char when[32];
	char **row = new_row(t);

	row[0] = xmalloc(24);
	xsnprintf(row[0], 24, "%lld", (long long)job->id);
	row[1] = xstrdup(job->repository ? job->repository : "");
	row[2] = xmalloc(24);
	xsnprintf(row[2], 24, "%lld", (long long)job->pr_number);
	row[3] = xstrndup(job->head_sha ? job->head_sha : "", 12);
	row[4] = xstrdup(job->operator_path ? job->operator_path : "");
	row[5] = xstrdup(kb_job_state_name(job->state));
	row[6] = xstrdup(job->stage && *job->stage ? job->stage : "-");
	row[7] = xstrdup(format_time(when, sizeof(when), job->updated_at, false));
	return 0;
}

/* Columns padded to width, the last one not (no trailing blanks). */
static void print_row(const char *const *cells, const size_t *width)
{
	for (size_t c = 0; c + 1 < NR_COLUMNS; c++)
		printf("%-*s  ", (int)width[c], cells[c]);
	printf("%s\n", cells[NR_COLUMNS - 1]);
}

static void print_table(const struct table *t, const char *const *names)
{
	size_t width[NR_COLUMNS];

	for (size_t c = 0; c < NR_COLUMNS; c++) {
		width[c] = strlen(names[c]);
		for (size_t r = 0; r < t->nr; r++)
			if (strlen(t->cells[r * NR_COLUMNS + c]) > width[c])
				width[c] = strlen(t->cells[r * NR_COLUMNS + c]);
	}
	print_row(names, width);
	for (size_t r = 0; r < t->nr; r++)
		print_row((const char *const *)t->cells + r * NR_COLUMNS, width);
}

static void table_release(struct table *t)
{
	for (size_t i = 0; i < t->nr * NR_COLUMNS; i++)
		free(t->cells[i]);
	FREE_AND_NULL(t->cells);
	t->nr = t->alloc = 0;
}

/*
 * The state to show: a run still 'running' whose process is gone ended
 * without saying so (killed, or the machine went down): 'died'.
 */
static const char *run_state(const struct kb_run_row *r)
{
	if (r->state && !strcmp(r->state, "running") && r->pid > 0 && kill((pid_t)r->pid, 0) &&
	    errno == ESRCH)
		return "died";
	return r->state ? r->state : "?";
}

static int add_run_row(const struct kb_run_row *r, void *payload)
{
	struct table *t = payload;
	char when[32], num[32];
	char **row;

	if (t->filter && strcmp(t->filter, run_state(r)))
		return 0;
	row = new_row(t);
	xsnprintf(num, sizeof(num), "%lld", (long long)r->id);
	row[0] = xstrdup(num);
	xsnprintf(num, sizeof(num), "%lld", (long long)r->job_id);
	row[1] = xstrdup(r->job_id ? num : "-");
	row[2] = xstrdup(r->operator_path ? r->operator_path : "");
	row[3] = xstrdup(r->backend ? r->backend : "");
	row[4] = xstrdup(run_state(r));
	row[5] = xstrdup(r->error && *r->error ? r->error : r->stage && *r->stage ? r->stage : "-");
	if (isfinite(r->best_speedup))
		xsnprintf(num, sizeof(num), "%.2fx", r->best_speedup);
	else
		kb_strlcpy(num, "-", sizeof(num));
	row[6] = xstrdup(num);
	row[7] = xstrdup(format_time(when, sizeof(when), r->updated_at, false));
	return 0;
}

static void add_string_or_null(cJSON *obj, const char *key, const char *value)
{
	if (value)
		cJSON_AddStringToObject(obj, key, value);
	else
		cJSON_AddNullToObject(obj, key);
}

static void add_time(cJSON *obj, const char *key, int64_t t)
{
	char buf[32];

	add_string_or_null(obj, key, t ? format_time(buf, sizeof(buf), t, true) : NULL);
}

static int add_json(const struct kb_job *job, void *payload)
{
	cJSON *obj = cJSON_CreateObject();

	if (!obj)
		die("out of memory");
	cJSON_AddStringToObject(obj, "kind", "job");
	cJSON_AddNumberToObject(obj, "id", (double)job->id);
	add_string_or_null(obj, "forge", job->forge);
	add_string_or_null(obj, "repository", job->repository);
	cJSON_AddNumberToObject(obj, "pr", (double)job->pr_number);
	add_string_or_null(obj, "head_sha", job->head_sha);
	add_string_or_null(obj, "operator", job->operator_path);
	add_string_or_null(obj, "state", kb_job_state_name(job->state));
	add_string_or_null(obj, "stage", job->stage);
	cJSON_AddNumberToObject(obj, "attempts", (double)job->attempts);
	add_string_or_null(obj, "error", job->error);
	if (job->best_candidate_id)
		cJSON_AddNumberToObject(obj, "best_candidate_id", (double)job->best_candidate_id);
	else
		cJSON_AddNullToObject(obj, "best_candidate_id");
	add_time(obj, "created_at", job->created_at);
	add_time(obj, "updated_at", job->updated_at);
	add_time(obj, "started_at", job->started_at);
	add_time(obj, "finished_at", job->finished_at);
	cJSON_AddItemToArray(payload, obj);
	return 0;
}

struct run_json {
	cJSON *array;
	const char *filter;
};

static int add_run_json(const struct kb_run_row *r, void *payload)
{
	struct run_json *rj = payload;
	cJSON *obj;

	if (rj->filter && strcmp(rj->filter, run_state(r)))
		return 0;
	obj = cJSON_CreateObject();
	if (!obj)
		die("out of memory");
	cJSON_AddStringToObject(obj, "kind", "run");
	cJSON_AddNumberToObject(obj, "id", (double)r->id);
	if (r->job_id)
		cJSON_AddNumberToObject(obj, "job_id", (double)r->job_id);
	else
		cJSON_AddNullToObject(obj, "job_id");
	add_string_or_null(obj, "operator", r->operator_path);
	add_string_or_null(obj, "backend", r->backend);
	add_string_or_null(obj, "pass", r->pass);
	add_string_or_null(obj, "out_dir", r->out_dir);
	cJSON_AddNumberToObject(obj, "pid", (double)r->pid);
	add_string_or_null(obj, "state", run_state(r));
	add_string_or_null(obj, "stage", r->stage);
	if (isfinite(r->best_speedup))
		cJSON_AddNumberToObject(obj, "best_speedup", r->best_speedup);
	else
		cJSON_AddNullToObject(obj, "best_speedup");
	add_string_or_null(obj, "error", r->error);
	add_time(obj, "started_at", r->started_at);
	add_time(obj, "updated_at", r->updated_at);
	add_time(obj, "finished_at", r->finished_at);
	cJSON_AddItemToArray(rj->array, obj);
	return 0;
}

int cmd_status(int argc, char **argv)
{
	static const struct option options[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "state", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct kb_config cfg;
	struct strbuf db_path = STRBUF_INIT;
	struct kb_state *st = NULL;
	struct table table = { 0 }, runs = { 0 };
	struct run_json rj = { 0 };
	const char *config_path = NULL, *filter = NULL;
	enum kb_job_state unused;
	cJSON *array = NULL;
	bool json = false;
	int opt, rc = KB_EXIT_USAGE;

	while ((opt = getopt_long(argc, argv, "c:s:jh", options, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config_path = optarg;
			break;
		case 's':
			filter = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			print_help();
			return KB_EXIT_OK;
		default:
			return cli_usage_error("status", "unknown option");
		}
	}
	if (optind < argc)
		return cli_usage_error("status", "unexpected argument '%s'", argv[optind]);
	if (filter && kb_job_state_parse(filter, &unused))
		return cli_usage_error("status", "unknown state '%s' (queued, running, done, failed, cancelled)",
				       filter);

	if (cli_load_config(config_path, &cfg))
		goto out;
	if (!cfg.state_dir || !*cfg.state_dir) {
		fprintf(stderr, "kernelbot status: state_dir is empty in '%s'\n",
			cfg.source ? cfg.source : "(built-in defaults)");
		goto out;
	}
	if (json) {
		array = cJSON_CreateArray();
		if (!array)
			die("out of memory");
	}
	/* A fresh install has no database yet: nothing to list, nothing to create. */
	strbuf_addf(&db_path, "%s/%s", cfg.state_dir, KB_STATE_DB_NAME);
	if (kb_is_file(db_path.buf)) {
		if (kb_state_open(&st, cfg.state_dir))
			goto out;
		if (kb_state_jobs_foreach(st, filter, json ? add_json : add_row,
					  json ? (void *)array : (void *)&table))
			goto out;
		runs.filter = rj.filter = filter;
		rj.array = array;
		if (kb_runs_db_foreach(st, json ? add_run_json : add_run_row,
				       json ? (void *)&rj : (void *)&runs))
			goto out;
	}
	if (json) {
		char *text = cJSON_Print(array);

		if (!text)
			die("out of memory");
		printf("%s\n", text);
		cJSON_free(text);
	} else {
		if (!table.nr)
			printf("no jobs\n");
		else
			print_table(&table, column_names);
		/* a machine that never ran `kernelbot run` keeps the one line */
		if (runs.nr) {
			printf("\n");
			print_table(&runs, run_column_names);
		}
	}
	rc = fflush(stdout) ? KB_EXIT_USAGE : KB_EXIT_OK;
out:
	cJSON_Delete(array);
	table_release(&table);
	table_release(&runs);
	kb_state_close(st);
	strbuf_release(&db_path);
	kb_config_release(&cfg);
	return rc;
}
