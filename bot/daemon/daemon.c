#include "core/common.h"
#include "core/json.h"
#include "core/config.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "daemon/daemon.h"
#include "daemon/daemon_db.h"
#include "daemon/webhook.h"
#include "forge/forge.h"
#include "jobs/jobs.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <time.h>

/* One tick of the cron; run_with_period(ms) as in redis's serverCron. */
#define TICK_MS 100
#define run_with_period(ms) if ((ms) <= TICK_MS || !(d->cronloops % ((ms) / TICK_MS)))

/*
 * Where the comment listing of one repository stands (slash commands
 * while polling). In memory: a restart lists again from the last poll
 * that saw a change, and the store's delivery records keep a command
 * from being acted on twice.
 */
struct watch {
	char *repo;
	int64_t since;        /* list comments updated at or after this (the forge's clock) */
	int64_t floor;        /* comments created before it are history, not commands */
	struct strbuf etag;   /* of the last answer asked with since */
};

/* How far before the last poll that saw a change a first listing reaches (clock skew). */
#define COMMENTS_SLACK_S 300

struct daemon {
	struct kb_config *cfg;
	const struct kb_daemon_opts *opts;
	struct kb_state *st;
	struct kb_forge *forge;
	struct kb_jobs *jobs;
	struct kb_webhook *hook;
	struct strvec repos;
	struct watch *watches;
	size_t nr_watches, alloc_watches;
	int64_t cronloops;
	int64_t cycles;        /* poll cycles completed */
	bool events_seen;      /* one pass over webhook events ran */
};

static const char *forge_kind(const struct kb_config *cfg)
{
	return cfg->bot_forge == KB_FORGE_LOCAL ? "local" : "github";
}

static bool listed(const struct strvec *v, const char *name)
{
	for (size_t i = 0; i < v->nr; i++)
		if (!strcasecmp(v->v[i], name))
			return true;
	return false;
}

/* Names separated by any of seps ('#' to the end of a line is a comment) into d->repos. */
static int add_repos(struct daemon *d, const char *p, const char *seps, const char *where)
{
	while (*p) {
		size_t n = strcspn(p, seps);
		char *name = xstrndup(p, n), *hash = strchr(name, '#');
		struct strbuf sb = STRBUF_INIT;

		if (hash)
			*hash = '\0';
		strbuf_addstr(&sb, name);
		strbuf_trim(&sb);
		free(name);
		if (sb.len && !kb_forge_repo_valid(sb.buf)) {
			error("%s: '%s' is not owner/name", where, sb.buf);
			strbuf_release(&sb);
			return -1;
		}
		if (sb.len && !listed(&d->repos, sb.buf))
			strvec_push(&d->repos, sb.buf);
		strbuf_release(&sb);
		p += n;
		if (*p)
			p++;
	}
	return 0;
}

/* [bot] repositories and repositories_file into d->repos; every name must be owner/name. */
static int load_repos(struct daemon *d)
{
	struct strbuf file = STRBUF_INIT;
	int rc;

	strvec_clear(&d->repos);
	if (add_repos(d, d->cfg->bot_repositories, ",", "[bot] repositories"))
		return -1;
	if (!*d->cfg->bot_repositories_file)
		return 0;
	if (strbuf_read_file(&file, d->cfg->bot_repositories_file, 4 << 20)) {
		strbuf_release(&file);
		return error("could not read [bot] repositories_file '%s'",
			     d->cfg->bot_repositories_file);
	}
	rc = add_repos(d, file.buf, "\n", d->cfg->bot_repositories_file);
	strbuf_release(&file);
	return rc;
}

static bool repo_configured(struct daemon *d, const char *repo)
{
	if (!d->repos.nr)
		return true; /* none listed: whatever the webhook's sender installed us on */
	for (size_t i = 0; i < d->repos.nr; i++)
		if (!strcasecmp(d->repos.v[i], repo))
			return true;
	return false;
}

/* --- polling --- */

static struct watch *watch_of(struct daemon *d, const char *repo, int64_t last_polled_at)
{
	struct watch *w;

	for (size_t i = 0; i < d->nr_watches; i++)
		if (!strcasecmp(d->watches[i].repo, repo))
			return &d->watches[i];
	if (d->nr_watches == d->alloc_watches) {
		d->alloc_watches = d->alloc_watches ? 2 * d->alloc_watches : 8;
		d->watches = xrealloc(d->watches, d->alloc_watches * sizeof(*d->watches));
	}
	w = &d->watches[d->nr_watches++];
	w->repo = xstrdup(repo);
	/* commands posted while no daemon ran are read once; older ones never */
	w->since = (last_polled_at > 0 ? last_polled_at : kb_wall_s()) - COMMENTS_SLACK_S;
	w->floor = w->since;
	strbuf_init(&w->etag, 0);
	return w;
}

static void watches_release(struct daemon *d)
{
	for (size_t i = 0; i < d->nr_watches; i++) {
		free(d->watches[i].repo);
		strbuf_release(&d->watches[i].etag);
	}
	FREE_AND_NULL(d->watches);
	d->nr_watches = d->alloc_watches = 0;
}

/* Jobs of repo_id's active triggers still queued or running. */
static bool has_pending(struct daemon *d, int64_t repo_id)
{
	return ddb_pending_jobs(d->st, repo_id) > 0;
}

/* Is pull request pr one the bot watches: labelled now, or triggered once? */
static bool watched(struct daemon *d, int64_t repo_id, const struct kb_forge_pr_list *labelled,
		    int64_t pr)
{
	for (size_t i = 0; labelled && i < labelled->nr; i++)
		if (labelled->v[i].number == pr)
			return true;
	return ddb_trigger_count(d->st, repo_id, pr) > 0;
}

/*
 * Slash commands by polling: one conditional listing of the repository's
 * comments updated since the last one; each `/kernelbot stop|run` by
 * someone else than the bot, on a pull request the bot watches, is queued
 * as the same event a webhook delivery makes (kb_webhook_store, keyed by
 * the comment, so a command is acted on once however it arrived), and the
 * main loop acts on it through kb_jobs_command. labelled: the poll's list
 * when it was read this cycle, NULL when it did not change.
 */
static int poll_commands(struct daemon *d, const char *repo, int64_t repo_id,
			 const struct kb_forge_pr_list *labelled, int64_t last_polled_at)
{
	struct watch *w = watch_of(d, repo, last_polled_at);
	struct kb_forge_comment_list cl = KB_FORGE_COMMENT_LIST_INIT;
	struct strbuf key = STRBUF_INIT, payload = STRBUF_INIT;
	bool not_modified = false;
	char *me = NULL;
	int64_t newest = w->since;
	int rc;

	rc = kb_forge_list_repo_comments(d->forge, &cl, &not_modified, &w->etag, repo, w->since);
	if (rc || not_modified)
		goto out;
	if (kb_forge_whoami(d->forge, &me))
		me = NULL;
	/* newest first on the wire: act oldest first */
	for (size_t k = cl.nr; k-- > 0;) {
		const struct kb_forge_comment *c = &cl.v[k];
		const char *cmd;

		if (c->updated_at > newest)
			newest = c->updated_at;
		if (!c->issue || !c->author || !c->body || c->created_at < w->floor)
			continue;
		if (me && !strcasecmp(me, c->author))
			continue; /* the bot's own comments */
		if (!(cmd = kb_jobs_parse_command(c->body)))
			continue;
		if (!watched(d, repo_id, labelled, c->issue)) {
			log_debug("%s#%" PRId64 ": '/kernelbot %s' on a pull request the bot does not"
				  " watch; ignored", repo, c->issue, cmd);
			continue;
		}
		strbuf_reset(&key);
		strbuf_reset(&payload);
		kb_webhook_comment_key(&key, repo, c->id);
		strbuf_addstr(&payload, "{\"event\": \"issue_comment\", \"action\": \"created\","
			      " \"source\": \"poll\", \"repo\": \"");
		strbuf_add_json_escaped(&payload, repo);
		strbuf_addf(&payload, "\", \"number\": %" PRId64 ", \"comment_id\": %" PRId64
			    ", \"command\": \"%s\", \"sender\": \"", c->issue, c->id, cmd);
		strbuf_add_json_escaped(&payload, c->author);
		strbuf_addstr(&payload, "\"}");
		rc = kb_webhook_store(d->st, key.buf, "issue_comment", payload.buf);
		if (rc == KB_EEXISTS) {
			rc = 0; /* seen before: by a webhook, or by an earlier poll */
			continue;
		}
		if (rc)
			goto out; /* the cursor stays: read again next cycle */
		log_info("%s#%" PRId64 ": '/kernelbot %s' from '%s' (comment %" PRId64 ", polled)",
			 repo, c->issue, cmd, c->author, c->id);
	}
	if (newest > w->since) {
		/* inclusive: the newest comment is listed again, and the answer stays a 304 */
		w->since = newest;
		strbuf_reset(&w->etag);
	}
out:
	free(me);
	kb_forge_comment_list_release(&cl);
	strbuf_release(&key);
	strbuf_release(&payload);
	return rc;
}

static int poll_repo(struct daemon *d, const char *repo)
{
	struct kb_forge_pr_list list = KB_FORGE_PR_LIST_INIT;
	struct strbuf etag = STRBUF_INIT;
	int64_t repo_id, *active = NULL, last_polled_at = 0;
	size_t nr_active = 0;
	bool not_modified = false, ok = true;
	int rc;

	if (kb_state_repo_upsert(d->st, &repo_id, d->forge->name, repo))
		return -1;
	if (ddb_poll_get(d->st, repo_id, &etag, &last_polled_at))
		return -1;

	rc = kb_forge_list_labelled_prs(d->forge, &list, &not_modified, &etag, repo,
					d->cfg->bot_label);
	if (rc)
		goto out;
	if (not_modified) {
		/*
		 * Nothing new on any labelled pull request: a comment would
		 * have changed the list (its comments count). Only a running
		 * job's pull request is read for commands regardless.
		 */
		if (has_pending(d, repo_id))
			rc = poll_commands(d, repo, repo_id, NULL, last_polled_at);
		goto out;
	}

	/* new labels: a trigger each (an active one makes this a no-op) */
	for (size_t i = 0; i < list.nr && !kb_stop_requested(); i++) {
		struct kb_trigger_req req;

		memset(&req, 0, sizeof(req));
		req.repo = repo;
		req.pr = list.v[i].number;
		req.head_sha = list.v[i].head_sha;
		req.source = "poll";
		if (kb_jobs_trigger(d->jobs, &req, NULL) < 0)
			ok = false;
	}
	/* labels gone (or pull requests closed): cancel what they started */
	if (ddb_active_prs(d->st, repo_id, &active, &nr_active)) {
		rc = -1;
		goto out;
	}
	for (size_t i = 0; i < nr_active; i++) {
		bool listed = false;

		for (size_t k = 0; k < list.nr; k++)
			if (list.v[k].number == active[i])
				listed = true;
		if (!listed && kb_jobs_cancel(d->jobs, repo, active[i], NULL) < 0)
			ok = false;
	}
	/* the list changed: a new comment on a labelled pull request may be why */
	if ((list.nr || has_pending(d, repo_id)) &&
	    poll_commands(d, repo, repo_id, &list, last_polled_at))
		ok = false;
	/* keep the old ETag after a failure: the next poll sees the list again */
	if (ok && !kb_state_begin(d->st)) {
		if (ddb_poll_put(d->st, repo_id, etag.buf)) {
			kb_state_rollback(d->st);
			rc = error("could not store the ETag of '%s'", repo);
			goto out;
		}
		kb_state_commit(d->st);
	}
	rc = ok ? 0 : -1;
out:
	free(active);
	kb_forge_pr_list_release(&list);
	strbuf_release(&etag);
	return rc;
}

static void poll_all(struct daemon *d)
{
	struct kb_forge_stats before = d->forge->stats;

	for (size_t i = 0; i < d->repos.nr && !kb_stop_requested(); i++)
		if (poll_repo(d, d->repos.v[i]))
			log_warn("poll of '%s' failed; retried next cycle", d->repos.v[i]);
	d->cycles++;
	log_debug("poll cycle %" PRId64 ": %zu repositories, %" PRId64 " requests, %" PRId64
		  " not modified", d->cycles, d->repos.nr, d->forge->stats.requests - before.requests,
		  d->forge->stats.not_modified - before.not_modified);
}

/* --- webhook events --- */

/* May sender act on repo (write, maintain, admin)? */
static bool may_act(struct daemon *d, const char *repo, const char *sender)
{
	enum kb_forge_perm perm = KB_PERM_NONE;

	if (!sender || kb_forge_permission(d->forge, &perm, repo, sender))
		return false;
	if (perm < KB_PERM_WRITE)
		log_info("%s: '%s' has %s access, not write; ignored", repo, sender,
			 kb_forge_perm_name(perm));
	return perm >= KB_PERM_WRITE;
}

static void handle_event(struct daemon *d, const char *text)
{
	cJSON *e = cJSON_Parse(text);
	const char *event = kb_json_str(e, "event"), *action = kb_json_str(e, "action"), *repo = kb_json_str(e, "repo");
	const char *sender = kb_json_str(e, "sender"), *label = kb_json_str(e, "label");
	const cJSON *num = cJSON_GetObjectItemCaseSensitive(e, "number");
	struct kb_trigger_req req;
	char *me = NULL;

	if (!event || !action || !repo || !cJSON_IsNumber(num) || !kb_forge_repo_valid(repo))
		goto out;
	if (!repo_configured(d, repo)) {
		log_info("webhook: '%s' is not among the configured repositories; ignored", repo);
		goto out;
	}
	if (sender && !kb_forge_whoami(d->forge, &me) && me && !strcmp(me, sender))
		goto out; /* the bot's own doing (its labels, its comments) */
	memset(&req, 0, sizeof(req));
	req.repo = repo;
	req.pr = (int64_t)num->valuedouble;
	req.actor = sender;
	if (!strcmp(event, "pull_request")) {
		if (!strcmp(action, "closed")) {
			kb_jobs_cancel(d->jobs, repo, req.pr, NULL);
			goto out;
		}
		if (!label || strcmp(label, d->cfg->bot_label))
			goto out;
		if (!strcmp(action, "labeled")) {
			/* the sha at labelling; kb_jobs_trigger checks the sender may */
			req.head_sha = kb_json_str(e, "head_sha");
			req.source = "webhook";
			kb_jobs_trigger(d->jobs, &req, NULL);
		} else if (!strcmp(action, "unlabeled") && may_act(d, repo, sender)) {
			kb_jobs_cancel(d->jobs, repo, req.pr, sender);
		}
	} else if (!strcmp(event, "issue_comment")) {
		/* a webhook's, or a comment the poll found: the same path */
		kb_jobs_command(d->jobs, repo, req.pr, sender, kb_json_str(e, "command"));
	}
out:
	free(me);
	cJSON_Delete(e);
}

static void take_events(struct daemon *d)
{
	for (int n = 0; n < 32 && !kb_stop_requested(); n++) {
		struct strbuf payload = STRBUF_INIT;
		int64_t id;
		int rc = kb_webhook_next(d->st, &id, &payload);

		if (!rc) {
			handle_event(d, payload.buf);
			kb_webhook_done(d->st, id);
		}
		strbuf_release(&payload);
		if (rc)
			break;
	}
	d->events_seen = true;
}

/* --- the loop --- */

static int write_pidfile(struct daemon *d)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	int rc;

	strbuf_addf(&path, "%s/daemon.json", d->cfg->state_dir);
	strbuf_addf(&text, "{\"pid\": %d, \"webhook_port\": %u}\n", (int)getpid(),
		    d->hook ? kb_webhook_port(d->hook) : 0);
	rc = kb_write_file_atomic(path.buf, text.buf, text.len);
	strbuf_release(&path);
	strbuf_release(&text);
	return rc;
}

static void remove_pidfile(struct daemon *d)
{
	struct strbuf path = STRBUF_INIT;

	strbuf_addf(&path, "%s/daemon.json", d->cfg->state_dir);
	unlink(path.buf);
	strbuf_release(&path);
}

static bool idle(struct daemon *d)
{
	return ddb_idle(d->st);
}

/* SIGHUP: a new config, and a forge opened with it (a rotated token). */
static void reload(struct daemon *d)
{
	struct kb_forge *f = NULL;

	if (!d->opts->config_path) {
		log_info("SIGHUP: no config file to reload");
		return;
	}
	if (kb_config_reload(d->cfg, d->opts->config_path))
		return;
	log_set_level(d->cfg->log_level);
	if (load_repos(d))
		log_warn("SIGHUP: [bot] repositories is invalid; no repository is polled");
	if (kb_forge_open(&f, forge_kind(d->cfg), d->cfg)) {
		log_warn("SIGHUP: could not reopen the forge; keeping the running one");
		return;
	}
	kb_jobs_set_forge(d->jobs, f);
	kb_forge_free(d->forge);
	d->forge = f;
}

int kb_daemon_run(struct kb_config *cfg, const struct kb_daemon_opts *opts)
{
	struct daemon dd, *d = &dd;
	struct kb_jobs_opts jo = { opts->kernelbot_bin, opts->config_path };
	int n, rc = -1;

	memset(d, 0, sizeof(*d));
	d->cfg = cfg;
	d->opts = opts;
	strvec_init(&d->repos);
	if (load_repos(d))
		goto out;
	if (!d->repos.nr && !*cfg->bot_webhook_listen) {
		error("nothing to watch: set [bot] repositories or webhook_listen");
		goto out;
	}
	if (kb_state_open(&d->st, cfg->state_dir))
		goto out;
	n = kb_state_requeue_running(d->st);
	if (n < 0)
		goto out;
	if (n)
		log_info("%d job(s) interrupted by a restart are queued again", n);
	if (kb_forge_open(&d->forge, forge_kind(cfg), cfg))
		goto out;
	if (kb_jobs_new(&d->jobs, cfg, d->st, d->forge, &jo))
		goto out;
	if (*cfg->bot_webhook_listen && kb_webhook_start(&d->hook, cfg))
		goto out;
	if (write_pidfile(d))
		goto out;
	log_info("kernelbot daemon: %s forge, %zu repositories, label '%s', polling %s",
		 d->forge->name, d->repos.nr, cfg->bot_label,
		 cfg->bot_poll_interval_s ? "on" : "off");

	while (!kb_stop_requested()) {
		struct timespec ts = { 0, TICK_MS * 1000 * 1000 };

		if (kb_reload_requested())
			reload(d);
		if (cfg->bot_poll_interval_s > 0 && d->repos.nr) {
			run_with_period(cfg->bot_poll_interval_s * 1000) poll_all(d);
		}
		/* webhook deliveries, and the commands a poll found */
		run_with_period(200) take_events(d);
		run_with_period(200) {
			if (kb_jobs_tick(d->jobs) < 0)
				log_warn("the job loop could not read the state store");
		}
		if (opts->cycles > 0 && d->cycles >= opts->cycles)
			break;
		if (opts->until_idle && (d->cycles || !cfg->bot_poll_interval_s || !d->repos.nr) &&
		    d->events_seen && idle(d))
			break;
		d->cronloops++;
		nanosleep(&ts, NULL);
	}
	if (kb_stop_requested())
		log_info("kernelbot daemon: stopping (signal %d)", kb_stop_signal());
	rc = 0;
out:
	kb_webhook_stop(d->hook);
	kb_jobs_free(d->jobs);
	kb_forge_free(d->forge);
	if (d->st)
		remove_pidfile(d);
	kb_state_close(d->st);
	strvec_clear(&d->repos);
	watches_release(d);
	return rc;
}
