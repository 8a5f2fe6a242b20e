#ifndef KB_DAEMON_H
#define KB_DAEMON_H
/*
 * The daemon: one loop with one cron (redis's serverCron): every tick
 * (100 ms) it runs what is due with run_with_period(ms):
 *
 *   - poll every configured repository each [bot] poll_interval_s: one
 *     conditional request each (the ETag of the last answer is kept in the
 *     store); a 304 costs nothing and changes nothing;
 *   - slash commands by polling: when a repository's labelled list changed
 *     (a new comment changes it: its comments count) or one of its jobs
 *     is queued or running, one more conditional request lists its
 *     comments updated since the last listing; `/kernelbot stop|run` on a
 *     watched pull request is queued as the event a webhook delivery makes
 *     (keyed by the comment: acted on once, however it arrived). An idle
 *     repository stays at one request a cycle;
 *   - act on queued events (webhook deliveries, polled commands);
 *   - tick the job loop (bot/jobs): reap, progress, start queued jobs;
 *   - SIGHUP: reload the config (kb_config_reload keeps the running one
 *     when the file is bad) and reopen the forge with it;
 *   - SIGTERM/SIGINT: finish the transaction in hand, kill the children,
 *     exit 0; the jobs stay "running" in the store and resume at the next
 *     start (kb_state_requeue_running).
 *
 * <state_dir>/daemon.json says {"pid", "webhook_port"} while it runs.
 */
#include "core/common.h"

struct kb_config;

struct kb_daemon_opts {
	const char *config_path;   /* reloaded on SIGHUP; NULL: built-in defaults, no reload */
	const char *kernelbot_bin; /* for the `run` children; NULL: this executable */
	int64_t cycles;            /* > 0: exit after this many poll cycles (tests, benchmarks) */
	bool until_idle;           /* exit once a poll cycle ran and no job is queued or running */
};

/* Run until stopped. 0 on a clean stop, -1 when it could not start (logged). */
int kb_daemon_run(struct kb_config *cfg, const struct kb_daemon_opts *opts);

#endif
