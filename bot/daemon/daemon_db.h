#ifndef KB_DAEMON_DB_H
#define KB_DAEMON_DB_H
/*
 * Private to bot/daemon/: every SQL statement of the daemon and the webhook
 * receiver (repositories' poll columns, triggers and jobs read to decide
 * what to poll, webhook_deliveries and webhook_events). daemon_db.c also
 * implements kb_webhook_next and kb_webhook_done of daemon/webhook.h.
 * Each call joins a transaction the caller holds unless it says it opens
 * its own.
 */
#include "core/common.h"
#include "core/state.h"
#include "core/strbuf.h"

/*
 * Record a delivery in webhook_deliveries (and key, a comment's own key,
 * when it is not NULL, empty or delivery itself), then queue payload (may
 * be NULL: nothing queued) in webhook_events, in one transaction of its
 * own. KB_EEXISTS (nothing logged, nothing changed) when either was
 * recorded before; -1 (logged) on an error.
 */
int ddb_webhook_record(struct kb_state *st, const char *delivery, const char *key,
		       const char *event, const char *payload);

/* Queued or running jobs of repo_id's active triggers; 0 on an error (quiet). */
int64_t ddb_pending_jobs(struct kb_state *st, int64_t repo_id);
/* Triggers ever made for pull request pr of repo_id; 0 on an error (quiet). */
int64_t ddb_trigger_count(struct kb_state *st, int64_t repo_id, int64_t pr);
/* Pull requests of repo_id's active triggers into *prs (free it) and *nr. 0 or -1 (logged). */
int ddb_active_prs(struct kb_state *st, int64_t repo_id, int64_t **prs, size_t *nr);

/* The repository's last listing ETag (appended to etag) and poll time (0: never). 0 or -1 (logged). */
int ddb_poll_get(struct kb_state *st, int64_t repo_id, struct strbuf *etag,
		 int64_t *last_polled_at);
/* Store the listing's ETag and now as the poll time. 0 or -1 (nothing logged). */
int ddb_poll_put(struct kb_state *st, int64_t repo_id, const char *etag);

/* True when no job is queued or running and every webhook event is handled; false on an error. */
bool ddb_idle(struct kb_state *st);

#endif
