#ifndef KB_WEBHOOK_H
#define KB_WEBHOOK_H
/*
 * The webhook listener: libmicrohttpd on its own thread, with its own
 * state store handle. A delivery is checked in this order, and nothing is
 * stored unless every step passes:
 *
 *   POST, body at most [bot] webhook_max_kb (413 unread when
 *   Content-Length says more) -> X-Hub-Signature-256 against
 *   [github] webhook_secret, HMAC-SHA256 compared in constant time,
 *   BEFORE anything parses the body (401) -> X-GitHub-Event and
 *   X-GitHub-Delivery present (400) -> JSON -> `ping` answered 200 ->
 *   events the bot uses (pull_request labeled/unlabeled/closed,
 *   issue_comment created on a pull request) reduced to the few fields it
 *   needs and, in one transaction, the delivery id recorded in
 *   webhook_deliveries and the event queued in webhook_events (202); a
 *   delivery id seen before is answered 200 and ignored.
 *
 * The daemon's main loop takes the queued events (kb_webhook_next) and
 * acts on them; permissions are checked there, through the forge.
 */
#include "core/common.h"

struct kb_config;
struct kb_state;
struct strbuf;

struct kb_webhook;

/*
 * Start listening on cfg's [bot] webhook_listen ("host:port", port 0: a
 * free one). Fails when webhook_secret is empty: unsigned deliveries are
 * never accepted. The listener opens its own handle on the state store.
 */
int kb_webhook_start(struct kb_webhook **out, const struct kb_config *cfg);
/* The port it listens on. */
unsigned kb_webhook_port(const struct kb_webhook *w);
/* Stop (waits for the request in hand); NULL is fine. */
void kb_webhook_stop(struct kb_webhook *w);

/*
 * True when header ("sha256=" and 64 hex digits, any case) is the
 * HMAC-SHA256 of body under secret. Constant time in the digest.
 */
bool kb_webhook_signature_ok(const char *secret, const void *body, size_t len,
			     const char *header);

/*
 * The fields of an event the bot acts on, as a small JSON object, into
 * out: {"event", "action", "repo", "number", "head_sha", "label",
 * "sender", "command", "comment_id", "installation_id"}. KB_ENOTFOUND (nothing logged)
 * for an event or action the bot ignores; -1 for a payload without the
 * fields its event must have. Numbers are whole, in [1, 2^53]: a pull
 * request number that is not is missing; an id that is not is left out.
 */
int kb_webhook_extract(struct strbuf *out, const char *event, const char *body, size_t len);

/*
 * Record delivery and queue its event (payload from kb_webhook_extract,
 * NULL: record only), one transaction. KB_EEXISTS (nothing logged) when
 * the delivery was seen before, or when the payload names a comment
 * ("repo" and "comment_id") already recorded under
 * kb_webhook_comment_key: a slash command seen by webhook and by polling
 * the comments is acted on once.
 */
int kb_webhook_store(struct kb_state *st, const char *delivery, const char *event,
		     const char *payload);

/* "comment:<repo lower-cased>:<id>": the delivery id a polled comment is stored under. */
void kb_webhook_comment_key(struct strbuf *out, const char *repo, int64_t comment_id);

/*
 * The oldest queued event not yet handled: its id and payload (appended).
 * KB_ENOTFOUND when none. kb_webhook_done marks it handled.
 */
int kb_webhook_next(struct kb_state *st, int64_t *id, struct strbuf *payload);
int kb_webhook_done(struct kb_state *st, int64_t id);

#endif
