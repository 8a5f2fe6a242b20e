#include "core/common.h"
#include "core/json.h"
#include "cli/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "forge/forge.h"
#include "jobs/jobs.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <sys/random.h>
#include <time.h>

/*
 * `kernelbot action`: one job of a GitHub Actions run. The job loop is the
 * daemon's (bot/jobs), run in this process until the trigger of the
 * event's pull request is finished; then the step summary and the step
 * outputs are written.
 */

#define MAX_EVENT (32 * 1024 * 1024)
#define MAX_SUMMARY (1024 * 1024)

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot action [-c FILE] [--time-budget SECONDS] [--event FILE]\n"
		"\n"
		"Run the job of a `pull_request` `labeled` event to completion, as one step\n"
		"of a GitHub Actions workflow on a self-hosted runner (see\n"
		"actions/optimize-kernel/action.yml). Reads GITHUB_EVENT_PATH (or --event),\n"
		"GITHUB_REPOSITORY, GITHUB_API_URL and the token ([github] token, else\n"
		"GITHUB_TOKEN); writes the step summary to GITHUB_STEP_SUMMARY and the\n"
		"outputs pr-url and speedup to GITHUB_OUTPUT. An event for another label, a\n"
		"label added by someone without write access, or one removed again before\n"
		"this step ran, does nothing.\n"
		"\n"
		"  -c, --config FILE        configuration (default ./config.ini, ...)\n"
		"      --time-budget S      seconds per operator (at most [bot] max_time_budget_s)\n"
		"      --event FILE         the event payload (default $GITHUB_EVENT_PATH)\n"
		"  -h, --help               this text\n"
		"\n"
		"exit: 0 done (or nothing to do), 1 a job failed or was cancelled, 2 usage or\n"
		"      environment error\n");
}

static const cJSON *jobj(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsObject(v) ? v : NULL;
}

/* Append to a file named by an environment variable; nothing when it is unset. */
static int append_env_file(const char *var, const char *data, size_t len)
{
	const char *path = getenv(var);
	int fd;
	ssize_t n;

	if (!path || !*path)
		return 0;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return error_errno("could not open '%s' (%s)", path, var);
	while (len) {
		n = write(fd, data, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return error_errno("could not write '%s' (%s)", path, var);
		}
		data += n;
		len -= (size_t)n;
	}
	if (close(fd))
		return error_errno("could not write '%s' (%s)", path, var);
	return 0;
}

/* name<<DELIM / value / DELIM, with a random delimiter the value cannot hold. */
static void add_output(struct strbuf *out, const char *name, const char *value)
{
	unsigned char rnd[16];
	char delim[64];
	size_t off;

	do {
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			/* no entropy: time and pid still make a delimiter no value holds by chance */
			uint64_t t = (uint64_t)kb_now_ms() ^ ((uint64_t)getpid() << 32);

			memcpy(rnd, &t, sizeof(t));
			memcpy(rnd + 8, &t, sizeof(t));
		}
		off = (size_t)snprintf(delim, sizeof(delim), "ghadelimiter_");
		for (size_t i = 0; i < sizeof(rnd); i++)
			off += (size_t)snprintf(delim + off, sizeof(delim) - off, "%02x", rnd[i]);
	} while (strstr(value, delim));
	strbuf_addf(out, "%s<<%s\n%s\n%s\n", name, delim, value, delim);
}

static int write_outputs(const char *pr_url, double speedup, const char *summary)
{
	struct strbuf out = STRBUF_INIT;
	char sp[32] = "";
	size_t len = strlen(summary);
	int rc = 0;

	if (speedup > 0)
		xsnprintf(sp, sizeof(sp), "%.2f", speedup);
	add_output(&out, "pr-url", pr_url);
	add_output(&out, "speedup", sp);
	if (append_env_file("GITHUB_OUTPUT", out.buf, out.len))
		rc = -1;
	if (len > MAX_SUMMARY) {
		len = MAX_SUMMARY;
		while (len && ((unsigned char)summary[len] & 0xC0) == 0x80)
			len--;
	}
	if (append_env_file("GITHUB_STEP_SUMMARY", summary, len))
		rc = -1;
	strbuf_release(&out);
	return rc;
}

struct action_args {
	const char *config_path, *event_path;
	int64_t budget;
};

/* The options into a; false when the command ends here, with *rc its exit code. */
static bool parse_args(int argc, char **argv, struct action_args *a, int *rc)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "time-budget", required_argument, NULL, 't' },
		{ "event", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int c;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			a->config_path = optarg;
			break;
		case 't':
			if (kb_parse_i64(optarg, &a->budget) || a->budget < 1) {
				*rc = cli_usage_error("action", "--time-budget '%s' is not a positive number",
						      optarg);
				return false;
			}
			break;
		case 'e':
			a->event_path = optarg;
			break;
		case 'h':
			usage(stdout);
			*rc = KB_EXIT_OK;
			return false;
		default:
			*rc = cli_usage_error("action", "unknown option");
			return false;
		}
	}
	if (optind != argc) {
		*rc = cli_usage_error("action", "unexpected argument '%s'", argv[optind]);
		return false;
	}
	if (!a->event_path || !*a->event_path) {
		*rc = cli_usage_error("action", "no event: GITHUB_EVENT_PATH is not set (run it as "
				      "a step of a workflow, or give --event FILE)");
		return false;
	}
	return true;
}

/* The runner's environment completes the config; --time-budget, capped, replaces its budget. */
static void complete_config(struct kb_config *cfg, int64_t budget)
{
	const char *api = getenv("GITHUB_API_URL");

	if (api && *api) {
		free(cfg->github_api_url);
		cfg->github_api_url = xstrdup(api);
	}
	if (!*cfg->github_token && getenv("GITHUB_TOKEN") && *getenv("GITHUB_TOKEN")) {
		free(cfg->github_token);
		cfg->github_token = xstrdup(getenv("GITHUB_TOKEN"));
	}
	log_add_secret(cfg->github_token);
	if (budget) {
		if (budget > cfg->bot_max_time_budget_s) {
			log_warn("--time-budget %" PRId64 " is above [bot] max_time_budget_s; %" PRId64 " used",
				 budget, cfg->bot_max_time_budget_s);
			budget = cfg->bot_max_time_budget_s;
		}
		cfg->bot_time_budget_s = budget;
	}
}

/* What the job needs of a pull_request event; the strings point into ev (free it with cJSON_Delete). */
struct action_event {
	cJSON *ev;
	const char *action, *label, *repo, *sha, *sender;
	int64_t pr;
};

/* Read and check the event at event_path, for the repository repo_env (when set); -1 with a message. */
static int read_event(const char *event_path, const char *repo_env, struct action_event *e)
{
	struct strbuf data = STRBUF_INIT;
	const cJSON *pr, *num;
	int rc = -1;

	memset(e, 0, sizeof(*e));
	if (strbuf_read_file(&data, event_path, MAX_EVENT)) {
		fprintf(stderr, "kernelbot action: could not read the event '%s'\n", event_path);
		goto out;
	}
	e->ev = cJSON_Parse(data.buf);
	pr = jobj(e->ev, "pull_request");
	num = cJSON_GetObjectItemCaseSensitive(pr, "number");
	e->action = kb_json_str(e->ev, "action");
	e->label = kb_json_str(jobj(e->ev, "label"), "name");
	e->repo = kb_json_str(jobj(e->ev, "repository"), "full_name");
	e->sha = kb_json_str(jobj(pr, "head"), "sha");
	e->sender = kb_json_str(jobj(e->ev, "sender"), "login");
	if (!e->repo)
		e->repo = repo_env;
	if (!e->ev || !pr || !cJSON_IsNumber(num) || !e->repo || !e->sha) {
		fprintf(stderr, "kernelbot action: '%s' is not a pull_request event payload\n", event_path);
		goto out;
	}
	if (repo_env && *repo_env && strcasecmp(e->repo, repo_env)) {
		fprintf(stderr, "kernelbot action: the event is for '%s', GITHUB_REPOSITORY is '%s'\n",
			e->repo, repo_env);
		goto out;
	}
	e->pr = (int64_t)num->valuedouble;
	rc = 0;
out:
	strbuf_release(&data);
	return rc;
}

/* Run the event's job to its end in this process; its outcome into md, the outputs written. */
static int run_job(struct kb_config *cfg, const struct action_event *e, struct strbuf *md)
{
	struct kb_state *st = NULL;
	struct kb_forge *forge = NULL;
	struct kb_jobs *jobs = NULL;
	struct strbuf url = STRBUF_INIT;
	struct kb_trigger_req req;
	int64_t tid = 0;
	double speedup = 0;
	int n, rc = KB_EXIT_USAGE;

	if (kb_state_open(&st, cfg->state_dir))
		goto out;
	n = kb_state_requeue_running(st);
	if (n < 0)
		goto out;
	if (kb_forge_open(&forge, cfg->bot_forge == KB_FORGE_LOCAL ? "local" : "github", cfg) ||
	    kb_jobs_new(&jobs, cfg, st, forge, NULL))
		goto out;
	memset(&req, 0, sizeof(req));
	req.repo = e->repo;
	req.pr = e->pr;
	req.head_sha = e->sha;
	req.actor = e->sender;
	req.source = "action";
	/* each labelled event is a request of its own: it replaces what an
	 * earlier run on this runner left active for the pull request; the
	 * label must still be on (a queued run may start after its removal) */
	req.rerun = true;
	if (kb_jobs_trigger(jobs, &req, &tid) < 0) {
		fprintf(stderr, "kernelbot action: could not start the job (see the error above)\n");
		rc = KB_EXIT_NO;
		goto out;
	}
	if (!tid) {
		printf("kernelbot: nothing to run for %s#%" PRId64 " (see the log)\n", e->repo, req.pr);
		strbuf_addf(md, "## kernelbot\n\nNothing to run for #%" PRId64 ": the `%s` label is "
			    "no longer on it, it is closed, or whoever added the label has no write "
			    "access (the log says which).\n", req.pr, cfg->bot_label);
		rc = write_outputs("", 0, md->buf) ? KB_EXIT_USAGE : KB_EXIT_OK;
		goto out;
	}
	while (!kb_stop_requested()) {
		struct timespec ts = { 0, 200 * 1000 * 1000 };

		if (kb_jobs_tick(jobs) < 0)
			goto out;
		n = kb_jobs_trigger_pending(jobs, tid);
		if (n <= 0)
			break;
		nanosleep(&ts, NULL);
	}
	if (kb_stop_requested()) {
		fprintf(stderr, "kernelbot action: stopped (signal %d)\n", kb_stop_signal());
		rc = KB_EXIT_NO;
		goto out;
	}
	n = kb_jobs_trigger_outcome(jobs, tid, md, &url, &speedup);
	if (n < 0)
		goto out;
	printf("%s", md->buf);
	if (write_outputs(url.buf, speedup, md->buf))
		goto out;
	rc = n ? KB_EXIT_NO : KB_EXIT_OK;
out:
	kb_jobs_free(jobs);
	kb_forge_free(forge);
	kb_state_close(st);
	strbuf_release(&url);
	return rc;
}

int cmd_action(int argc, char **argv)
{
	struct action_args a = { NULL, getenv("GITHUB_EVENT_PATH"), 0 };
	struct action_event e = { NULL, NULL, NULL, NULL, NULL, NULL, 0 };
	struct kb_config cfg;
	struct strbuf md = STRBUF_INIT;
	int rc = KB_EXIT_USAGE;

	if (!parse_args(argc, argv, &a, &rc))
		return rc;
	rc = cli_load_config(a.config_path, &cfg);
	if (rc)
		goto out;
	rc = KB_EXIT_USAGE;
	complete_config(&cfg, a.budget);
	if (read_event(a.event_path, getenv("GITHUB_REPOSITORY"), &e))
		goto out;
	if (!e.action || strcmp(e.action, "labeled") || !e.label || strcmp(e.label, cfg.bot_label)) {
		printf("kernelbot: not a '%s' label event (%s %s); nothing to do\n", cfg.bot_label,
		       e.action ? e.action : "?", e.label ? e.label : "");
		strbuf_addf(&md, "## kernelbot\n\nNothing to do: the event is not the `%s` label "
			    "being added.\n", cfg.bot_label);
		rc = write_outputs("", 0, md.buf) ? KB_EXIT_USAGE : KB_EXIT_OK;
		goto out;
	}
	rc = run_job(&cfg, &e, &md);
out:
	cJSON_Delete(e.ev);
	strbuf_release(&md);
	kb_config_release(&cfg);
	return rc;
}
