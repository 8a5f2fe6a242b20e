#include "core/common.h"
#include "core/json.h"
#include "core/config.h"
#include "core/log.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "daemon/daemon_db.h"
#include "daemon/webhook.h"
#include "jobs/jobs.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <inttypes.h>
#include <netdb.h>
#include <sys/socket.h>

#include <microhttpd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

struct kb_webhook {
	struct MHD_Daemon *mhd;
	struct kb_state *st;       /* used by the listener thread only */
	char *secret;
	size_t max_body;
	unsigned port;
};

/* Per-request state, from the first call of the handler to the completed callback. */
struct req {
	struct strbuf body;
	bool too_big;
};

/* --- pure parts (unit-tested) --- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool kb_webhook_signature_ok(const char *secret, const void *body, size_t len,
			     const char *header)
{
	unsigned char want[32], got[EVP_MAX_MD_SIZE];
	unsigned int got_len = 0;

	if (!secret || !*secret || !header || strncmp(header, "sha256=", 7) ||
	    strlen(header + 7) != 64)
		return false;
	for (int i = 0; i < 32; i++) {
		int hi = hexval(header[7 + 2 * i]), lo = hexval(header[8 + 2 * i]);

		if (hi < 0 || lo < 0)
			return false;
		want[i] = (unsigned char)(hi << 4 | lo);
	}
	if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), body, len, got, &got_len) ||
	    got_len != 32)
		return false;
	return CRYPTO_memcmp(want, got, 32) == 0;
}

static const cJSON *jobj(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsObject(v) ? v : NULL;
}

/*
 * A pull request number or an id: a whole number in [1, 2^53], else NULL.
 * What is queued is read back as int64_t, and 1e300 or -0.5 is not one.
 */
static const cJSON *jid(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble <= 9007199254740992.0) ||
	    v->valuedouble != floor(v->valuedouble))
		return NULL;
	return v;
}

int kb_webhook_extract(struct strbuf *out, const char *event, const char *body, size_t len)
{
	cJSON *j = cJSON_ParseWithLength(body, len), *o = NULL;
	const cJSON *repo, *sender, *inst, *pr, *issue, *label, *comment, *num;
	const char *action, *full, *cmd = NULL;
	int rc = KB_ENOTFOUND;

	if (!cJSON_IsObject(j)) {
		rc = error("webhook '%s': the body is not a JSON object", event);
		goto out;
	}
	action = kb_json_str(j, "action");
	repo = jobj(j, "repository");
	sender = jobj(j, "sender");
	inst = jobj(j, "installation");
	full = kb_json_str(repo, "full_name");
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "event", event);
	if (!strcmp(event, "pull_request")) {
		if (!action || (strcmp(action, "labeled") && strcmp(action, "unlabeled") &&
				strcmp(action, "closed")))
			goto out;
		pr = jobj(j, "pull_request");
		num = jid(pr, "number");
		if (!full || !num || !kb_json_str(jobj(pr, "head"), "sha")) {
			rc = error("webhook 'pull_request': no repository, number or head sha");
			goto out;
		}
		label = jobj(j, "label");
		if (strcmp(action, "closed") && !kb_json_str(label, "name")) {
			rc = error("webhook 'pull_request' %s: no label", action);
			goto out;
		}
		cJSON_AddNumberToObject(o, "number", num->valuedouble);
		cJSON_AddStringToObject(o, "head_sha", kb_json_str(jobj(pr, "head"), "sha"));
		if (kb_json_str(label, "name"))
			cJSON_AddStringToObject(o, "label", kb_json_str(label, "name"));
	} else if (!strcmp(event, "issue_comment")) {
		if (!action || strcmp(action, "created"))
			goto out;
		issue = jobj(j, "issue");
		comment = jobj(j, "comment");
		/* comments on plain issues carry no pull_request key */
		if (!cJSON_GetObjectItemCaseSensitive(issue, "pull_request"))
			goto out;
		if (!kb_json_str(comment, "body") || !(cmd = kb_jobs_parse_command(kb_json_str(comment, "body"))))
			goto out;
		num = jid(issue, "number");
		if (!full || !num) {
			rc = error("webhook 'issue_comment': no repository or number");
			goto out;
		}
		cJSON_AddNumberToObject(o, "number", num->valuedouble);
		cJSON_AddStringToObject(o, "command", cmd);
		if (jid(comment, "id"))
			cJSON_AddNumberToObject(o, "comment_id", jid(comment, "id")->valuedouble);
	} else {
		goto out;
	}
	cJSON_AddStringToObject(o, "action", action);
	cJSON_AddStringToObject(o, "repo", full);
	if (kb_json_str(sender, "login"))
		cJSON_AddStringToObject(o, "sender", kb_json_str(sender, "login"));
	if (jid(inst, "id"))
		cJSON_AddNumberToObject(o, "installation_id", jid(inst, "id")->valuedouble);
	{
		char *text = cJSON_PrintUnformatted(o);

		strbuf_addstr(out, text);
		free(text);
	}
	rc = 0;
out:
	cJSON_Delete(o);
	cJSON_Delete(j);
	return rc;
}

void kb_webhook_comment_key(struct strbuf *out, const char *repo, int64_t comment_id)
{
	strbuf_addstr(out, "comment:");
	for (const char *p = repo; *p; p++)
		strbuf_addch(out, (char)tolower((unsigned char)*p));
	strbuf_addf(out, ":%" PRId64, comment_id);
}

int kb_webhook_store(struct kb_state *st, const char *delivery, const char *event,
		     const char *payload)
{
	struct strbuf key = STRBUF_INIT;
	int rc;

	/* a comment is one command however often it arrives: webhook, poll, both */
	if (payload) {
		cJSON *p = cJSON_Parse(payload);
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(p, "comment_id");
		const char *repo = kb_json_str(p, "repo");

		if (cJSON_IsNumber(id) && repo)
			kb_webhook_comment_key(&key, repo, (int64_t)id->valuedouble);
		cJSON_Delete(p);
	}
	rc = ddb_webhook_record(st, delivery, key.buf, event, payload);
	strbuf_release(&key);
	return rc;
}

/* --- the listener --- */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* Printable and short: a delivery id or event name goes to the log and the store. */
static bool token_ok(const char *s, size_t max)
{
	size_t n = 0;

	if (!s || !*s)
		return false;
	for (; *s; s++, n++)
		if (n >= max || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
				  (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return false;
	return true;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct kb_webhook *w = cls;
	struct req *rq = *con_cls;
	struct strbuf payload = STRBUF_INIT;
	const char *sig, *event, *delivery;
	int rc;

	if (!rq) {
		const char *cl;
		int64_t n;

		if (strcmp(method, "POST"))
			return reply(c, 405, "only POST\n");
		if (strcmp(url, "/") && strcmp(url, "/webhook"))
			return reply(c, 404, "not found\n");
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && !kb_parse_i64(cl, &n) && (n < 0 || (uint64_t)n > w->max_body))
			return reply(c, 413, "body too large\n");
		rq = xcalloc(1, sizeof(*rq));
		strbuf_init_capped(&rq->body, w->max_body);
		*con_cls = rq;
		return MHD_YES;
	}
	if (*upload_size) {
		if (!rq->too_big && strbuf_add(&rq->body, upload, *upload_size))
			rq->too_big = true;
		*upload_size = 0;
		return MHD_YES;
	}
	if (rq->too_big)
		return reply(c, 413, "body too large\n");

	/* the signature before anything looks inside the body */
	sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Hub-Signature-256");
	if (!kb_webhook_signature_ok(w->secret, rq->body.buf, rq->body.len, sig)) {
		log_warn("webhook: refused a delivery with %s signature",
			 sig ? "a bad" : "no");
		return reply(c, 401, "bad signature\n");
	}
	event = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-GitHub-Event");
	delivery = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-GitHub-Delivery");
	if (!token_ok(event, 64) || !token_ok(delivery, 128))
		return reply(c, 400, "missing or bad X-GitHub-Event or X-GitHub-Delivery\n");
	if (!strcmp(event, "ping")) {
		log_info("webhook: ping (delivery %s)", delivery);
		return reply(c, 200, "pong\n");
	}
	rc = kb_webhook_extract(&payload, event, rq->body.buf, rq->body.len);
	if (rc == -1) {
		strbuf_release(&payload);
		return reply(c, 400, "malformed payload\n");
	}
	rc = kb_webhook_store(w->st, delivery, event, rc ? NULL : payload.buf);
	strbuf_release(&payload);
	if (rc == KB_EEXISTS) {
		log_info("webhook: delivery %s seen before; ignored", delivery);
		return reply(c, 200, "duplicate delivery; ignored\n");
	}
	if (rc)
		return reply(c, 500, "could not store the delivery\n");
	log_info("webhook: %s (delivery %s) accepted", event, delivery);
	return reply(c, 202, "accepted\n");
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *rq = *con_cls;

	if (rq) {
		strbuf_release(&rq->body);
		free(rq);
		*con_cls = NULL;
	}
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_vaddf(&sb, fmt, ap);
	strbuf_trim(&sb);
	log_warn("webhook: %s", sb.buf);
	strbuf_release(&sb);
}

int kb_webhook_start(struct kb_webhook **out, const struct kb_config *cfg)
{
	struct kb_webhook *w;
	struct addrinfo hints, *ai = NULL;
	const char *listen = cfg->bot_webhook_listen, *colon;
	const union MHD_DaemonInfo *info;
	char *host = NULL;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	int grc;

	*out = NULL;
	if (!*cfg->github_webhook_secret)
		return error("webhook_listen is set but [github] webhook_secret is empty: "
			     "unsigned deliveries are never accepted");
	colon = strrchr(listen, ':');
	if (!colon || colon == listen || !colon[1])
		return error("webhook_listen '%s' is not host:port", listen);
	if (*listen == '[' && colon[-1] == ']')
		host = xstrndup(listen + 1, (size_t)(colon - listen - 2));
	else
		host = xstrndup(listen, (size_t)(colon - listen));
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	grc = getaddrinfo(host, colon + 1, &hints, &ai);
	free(host);
	if (grc)
		return error("webhook_listen '%s': %s", listen, gai_strerror(grc));
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;

	w = xcalloc(1, sizeof(*w));
	w->secret = xstrdup(cfg->github_webhook_secret);
	w->max_body = (size_t)cfg->bot_webhook_max_kb * 1024;
	if (kb_state_open(&w->st, cfg->state_dir))
		goto fail;
	w->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handle, w,
				  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				  MHD_OPTION_NOTIFY_COMPLETED, completed, w,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, w,
				  MHD_OPTION_END);
	if (!w->mhd) {
		error("could not listen for webhooks on '%s'", listen);
		goto fail;
	}
	info = MHD_get_daemon_info(w->mhd, MHD_DAEMON_INFO_BIND_PORT);
	w->port = info ? info->port : 0;
	freeaddrinfo(ai);
	log_info("webhook: listening on %s (port %u)", listen, w->port);
	*out = w;
	return 0;
fail:
	freeaddrinfo(ai);
	kb_webhook_stop(w);
	return -1;
}

unsigned kb_webhook_port(const struct kb_webhook *w)
{
	return w->port;
}

void kb_webhook_stop(struct kb_webhook *w)
{
	if (!w)
		return;
	if (w->mhd)
		MHD_stop_daemon(w->mhd);
	kb_state_close(w->st);
	if (w->secret) {
		volatile char *p = w->secret;

		while (*p)
			*p++ = 0;
		free(w->secret);
	}
	free(w);
}
