#include "core/common.h"
#include "core/http.h"
#include "core/signals.h"
#include "core/util.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <time.h>

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int kb_http_global_init(void)
{
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return error("could not initialise libcurl: %s", curl_easy_strerror(global_rc));
	return 0;
}

/* Response headers beyond this are refused like an over-cap body. */
#define MAX_HEADER_BYTES (256u * 1024)
/*
 * How often a stop-aware transfer looks at kb_stop_requested: a stop ends
 * a long LLM generation at once (curl's progress callback may wait a
 * second on an idle socket).
 */
#define STOP_POLL_MS 100

int kb_http_client_init(struct kb_http_client *c)
{
	memset(c, 0, sizeof(*c));
	if (kb_http_global_init())
		return -1;
	c->easy = curl_easy_init();
	c->multi = curl_multi_init();
	if (!c->easy || !c->multi) {
		kb_http_client_release(c);
		return error("could not create a libcurl handle");
	}
	return 0;
}

void kb_http_client_release(struct kb_http_client *c)
{
	if (c->easy)
		curl_easy_cleanup(c->easy);
	if (c->multi)
		curl_multi_cleanup(c->multi);
	c->easy = NULL;
	c->multi = NULL;
}

void kb_http_response_init(struct kb_http_response *r, size_t max_body)
{
	memset(r, 0, sizeof(*r));
	strbuf_init_capped(&r->body, max_body);
	strvec_init(&r->headers);
}

static void clear_headers(struct kb_http_response *r)
{
	for (size_t i = 0; i < r->headers.nr; i++)
		explicit_bzero((char *)r->headers.v[i], strlen(r->headers.v[i]));
	strvec_clear(&r->headers);
	r->header_bytes = 0;
}

void kb_http_response_reset(struct kb_http_response *r)
{
	clear_headers(r);
	strbuf_reset(&r->body);
	r->too_big = false;
	r->status = 0;
	r->error = KB_HTTP_OK;
	r->curl_code = CURLE_OK;
	r->errbuf[0] = '\0';
}

void kb_http_response_release(struct kb_http_response *r)
{
	clear_headers(r);
	strbuf_release(&r->body);
}

const char *kb_http_response_header(const struct kb_http_response *r, const char *name)
{
	size_t len = strlen(name);

	for (size_t i = r->headers.nr; i-- > 0;) {
		const char *line = r->headers.v[i];

		if (strncasecmp(line, name, len) || line[len] != ':')
			continue;
		line += len + 1;
		while (*line == ' ' || *line == '\t')
			line++;
		return line;
	}
	return NULL;
}

size_t kb_http_response_body_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct kb_http_response *r = userdata;

	return kb_http_body_add(&r->body, &r->too_big, data, size * nmemb);
}

size_t kb_http_response_header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct kb_http_response *r = userdata;
	size_t n = size * nmemb, len = n;
	char *line;

	/* a new response (a redirect, a 100 Continue): forget the last one's */
	if (kb_http_is_status_line(data, n)) {
		clear_headers(r);
		strbuf_reset(&r->body);
		return n;
	}
	while (len && (data[len - 1] == '\r' || data[len - 1] == '\n' || data[len - 1] == ' ' ||
		       data[len - 1] == '\t'))
		len--;
	if (!len || !memchr(data, ':', len))
		return n;
	if (len > MAX_HEADER_BYTES - r->header_bytes) {
		r->too_big = true;
		return 0;
	}
	r->header_bytes += len;
	line = xstrndup(data, len);
	strvec_push(&r->headers, line);
	explicit_bzero(line, len);
	free(line);
	return n;
}

/*
 * The "Name: value" lines as a curl list, which the caller frees with
 * headers_free: that overwrites every line first (they hold Authorization
 * or API keys).
 */
static struct curl_slist *headers_list(const struct strvec *lines)
{
	struct curl_slist *list = NULL;

	for (size_t i = 0; lines && i < lines->nr; i++) {
		struct curl_slist *n = curl_slist_append(list, lines->v[i]);

		if (!n)
			die("out of memory");
		list = n;
	}
	return list;
}

static void headers_free(struct curl_slist *list)
{
	for (struct curl_slist *n = list; n; n = n->next)
		explicit_bzero(n->data, strlen(n->data));
	curl_slist_free_all(list);
}

int64_t kb_http_connect_timeout_ms(int64_t timeout_ms)
{
	return timeout_ms < 10000 ? timeout_ms : 10000;
}

/*
 * After curl_easy_reset: http and https only (redirects too), no signals,
 * the deadlines, decoded bytes (so that they count against the cap), the
 * method and body, the redirects, and the callbacks into resp.
 */
static void set_options(CURL *c, const struct kb_http_request *req, struct curl_slist *headers,
			struct kb_http_response *resp)
{
	curl_easy_setopt(c, CURLOPT_URL, req->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)kb_http_connect_timeout_ms(req->timeout_ms));
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* decoded bytes count against the cap */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, resp->errbuf);
	if (resp->body.cap)
		curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)resp->body.cap);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, req->max_redirects > 0 ? 1L : 0L);
	if (req->max_redirects > 0)
		curl_easy_setopt(c, CURLOPT_MAXREDIRS, req->max_redirects);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, kb_http_response_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, kb_http_response_header_cb);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, resp);
	if (req->fresh_connect)
		curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);

	if (!strcmp(req->method, "GET")) {
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
		return;
	}
	if (strcmp(req->method, "POST"))
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
	if (req->body || strcmp(req->method, "DELETE")) {
		const char *b = req->body ? req->body : "";

		curl_easy_setopt(c, CURLOPT_POSTFIELDS, b);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(b));
	}
}

/* Run the transfer on the multi handle; CURLE_ABORTED_BY_CALLBACK on a stop request. */
static CURLcode drive(CURLM *multi, CURL *c, bool stop_aware, const int *abort)
{
	CURLcode rc = CURLE_OK;
	CURLMsg *msg;
	int running = 1, left;

	if (curl_multi_add_handle(multi, c) != CURLM_OK)
		return CURLE_FAILED_INIT;
	for (;;) {
		if (curl_multi_perform(multi, &running) != CURLM_OK) {
			rc = CURLE_FAILED_INIT;
			break;
		}
		if (!running)
			break;
		if ((stop_aware && kb_stop_requested()) || (abort && __atomic_load_n(abort, __ATOMIC_RELAXED))) {
			rc = CURLE_ABORTED_BY_CALLBACK;
			break;
		}
		if (curl_multi_poll(multi, NULL, 0, STOP_POLL_MS, NULL) != CURLM_OK) {
			rc = CURLE_FAILED_INIT;
			break;
		}
	}
	if (!running) {
		while ((msg = curl_multi_info_read(multi, &left)))
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == c)
				rc = msg->data.result;
	}
	curl_multi_remove_handle(multi, c);
	return rc;
}

enum kb_http_error kb_http_classify(CURLcode rc, bool too_big)
{
	if (rc == CURLE_OK)
		return KB_HTTP_OK;
	if (rc == CURLE_ABORTED_BY_CALLBACK)
		return KB_HTTP_STOPPED;
	if (too_big || rc == CURLE_FILESIZE_EXCEEDED)
		return KB_HTTP_TOOBIG;
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		return KB_HTTP_TIMEOUT;
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return KB_HTTP_NETWORK;
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
	case CURLE_NOT_BUILT_IN:
	case CURLE_OUT_OF_MEMORY:
	case CURLE_FAILED_INIT:
	case CURLE_BAD_FUNCTION_ARGUMENT:
	case CURLE_TOO_MANY_REDIRECTS:
		return KB_HTTP_SETUP;
	default:
		return KB_HTTP_OTHER;
	}
}

int kb_http_perform(struct kb_http_client *c, const struct kb_http_request *req,
		    struct kb_http_response *resp)
{
	struct curl_slist *list;
	CURLcode rc;

	kb_http_response_reset(resp);
	if (c->fake)
		return c->fake(c->fake_payload, req, resp);
	curl_easy_reset(c->easy);
	list = headers_list(req->headers);
	set_options(c->easy, req, list, resp);

	rc = drive(c->multi, c->easy, req->stop_aware, req->abort);
	if (rc == CURLE_FILESIZE_EXCEEDED)
		resp->too_big = true;
	resp->curl_code = rc;
	resp->error = kb_http_classify(rc, resp->too_big);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &resp->status);
	else if (!resp->errbuf[0])
		kb_strlcpy(resp->errbuf, curl_easy_strerror(rc), sizeof(resp->errbuf));

	/* the list holds the token: unhook it and wipe it with the request */
	curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, NULL);
	headers_free(list);
	return rc == CURLE_OK ? 0 : -1;
}

bool kb_http_is_status_line(const char *line, size_t n)
{
	return n >= 5 && !strncmp(line, "HTTP/", 5);
}

size_t kb_http_body_add(struct strbuf *body, bool *too_big, const char *data, size_t n)
{
	if (strbuf_add(body, data, n)) {
		*too_big = true;
		return 0;
	}
	return n;
}

int64_t kb_http_retry_after_ms(const char *value, int64_t now_s)
{
	char buf[128];
	size_t len;
	double secs;
	time_t t;

	if (!value)
		return -1;
	while (*value == ' ' || *value == '\t')
		value++;
	len = strlen(value);
	while (len && (value[len - 1] == ' ' || value[len - 1] == '\t'))
		len--;
	if (!len)
		return -1;
	/* delta seconds of any length: a wait as long as can be (the caller caps it) */
	if (len >= sizeof(buf) && strspn(value, "0123456789") >= len)
		return INT64_MAX / 2;
	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, value, len);
	buf[len] = '\0';
	/* delta seconds; some servers send a fraction */
	if (!kb_parse_double(buf, &secs)) {
		if (!isfinite(secs))
			return -1;
		if (secs <= 0)
			return 0;
		if (secs > 1e9)
			return INT64_MAX / 2;
		return (int64_t)ceil(secs * 1000.0);
	}
	/* an HTTP date names its day and month; curl_getdate reads other numbers oddly */
	for (len = 0; buf[len] && !isalpha((unsigned char)buf[len]); len++)
		;
	if (!buf[len])
		return -1;
	t = curl_getdate(buf, NULL);
	if (t == (time_t)-1)
		return -1;
	/* saturating: a date in the year 801508015 is a very long wait, not a negative one */
	return (int64_t)t > now_s ? kb_sat_mul_i64(kb_sat_sub_i64((int64_t)t, now_s), 1000) : 0;
}

int64_t kb_http_until_reset_ms(int64_t reset_s, int64_t now_s)
{
	int64_t s = reset_s > now_s ? kb_sat_sub_i64(reset_s, now_s) : 0;

	return kb_sat_add_i64(kb_sat_mul_i64(s, 1000), 1000);
}
