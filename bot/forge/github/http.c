#include "core/common.h"
#include "core/util.h"
#include "forge/github/http.h"

#include <pthread.h>

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int gh_http_init(struct gh_http *h, int64_t timeout_ms, size_t max_body)
{
	memset(h, 0, sizeof(*h));
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return error("could not initialise libcurl: %s", curl_easy_strerror(global_rc));
	h->curl = curl_easy_init();
	if (!h->curl)
		return error("could not create a libcurl handle");
	h->timeout_ms = timeout_ms;
	h->connect_timeout_ms = timeout_ms < 10000 ? timeout_ms : 10000;
	h->max_body = max_body;
	return 0;
}

void gh_http_release(struct gh_http *h)
{
	if (h->curl)
		curl_easy_cleanup(h->curl);
	h->curl = NULL;
}

void gh_http_resp_init(struct gh_http_resp *r, size_t max_body)
{
	memset(r, 0, sizeof(*r));
	strbuf_init_capped(&r->body, max_body);
	r->rl_remaining = r->rl_reset = -1;
}

static void clear_headers(struct gh_http_resp *r)
{
	FREE_AND_NULL(r->etag);
	FREE_AND_NULL(r->link);
	FREE_AND_NULL(r->retry_after);
	r->rl_remaining = r->rl_reset = -1;
}

void gh_http_resp_reset(struct gh_http_resp *r)
{
	clear_headers(r);
	strbuf_reset(&r->body);
	r->too_big = false;
	r->status = 0;
	r->transport = GH_T_OK;
	r->errbuf[0] = '\0';
}

void gh_http_resp_release(struct gh_http_resp *r)
{
	clear_headers(r);
	strbuf_release(&r->body);
}

size_t gh_http_body_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct gh_http_resp *r = userdata;
	size_t n = size * nmemb;

	if (strbuf_add(&r->body, data, n)) {
		r->too_big = true;
		return 0; /* curl stops with CURLE_WRITE_ERROR */
	}
	return n;
}

/* Header value without surrounding blanks and the line end, as a new string. */
static char *header_value(const char *v, size_t len)
{
	while (len && (*v == ' ' || *v == '\t')) {
		v++;
		len--;
	}
	while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' ' ||
		       v[len - 1] == '\t'))
		len--;
	return xstrndup(v, len);
}

static bool header_is(const char *line, size_t name_len, const char *name)
{
	return strlen(name) == name_len && !strncasecmp(line, name, name_len);
}

static int64_t header_int(const char *v, size_t len)
{
	char *s = header_value(v, len);
	int64_t n;

	if (kb_parse_i64(s, &n))
		n = -1;
	free(s);
	return n;
}

size_t gh_http_header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct gh_http_resp *r = userdata;
	size_t n = size * nmemb;
	const char *colon = memchr(data, ':', n);
	const char *v;
	size_t name_len, vlen;

	/* a new response (a redirect, a 100 Continue): forget the last one's */
	if (n >= 5 && !strncmp(data, "HTTP/", 5)) {
		clear_headers(r);
		strbuf_reset(&r->body);
		return n;
	}
	if (!colon)
		return n;
	name_len = (size_t)(colon - data);
	v = colon + 1;
	vlen = n - name_len - 1;
	if (header_is(data, name_len, "etag")) {
		free(r->etag);
		r->etag = header_value(v, vlen);
	} else if (header_is(data, name_len, "link")) {
		free(r->link);
		r->link = header_value(v, vlen);
	} else if (header_is(data, name_len, "retry-after")) {
		free(r->retry_after);
		r->retry_after = header_value(v, vlen);
	} else if (header_is(data, name_len, "x-ratelimit-remaining")) {
		r->rl_remaining = header_int(v, vlen);
	} else if (header_is(data, name_len, "x-ratelimit-reset")) {
		r->rl_reset = header_int(v, vlen);
	}
	return n;
}

static enum gh_transport classify(CURLcode rc, bool too_big)
{
	switch (rc) {
	case CURLE_OK:
		return GH_T_OK;
	case CURLE_WRITE_ERROR:
		return too_big ? GH_T_TOOBIG : GH_T_FATAL;
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return GH_T_RETRY;
	default:
		return GH_T_FATAL;
	}
}

int gh_http_perform(struct gh_http *h, const struct gh_http_req *req, struct gh_http_resp *resp)
{
	struct curl_slist *list = NULL;
	CURL *c = h->curl;
	CURLcode rc;
	int ret = -1;

	gh_http_resp_reset(resp);
	if (h->fake)
		return h->fake(h->fake_payload, req, resp);
	curl_easy_reset(c);
	for (size_t i = 0; i < req->headers->nr; i++) {
		struct curl_slist *n = curl_slist_append(list, req->headers->v[i]);

		if (!n)
			die("out of memory");
		list = n;
	}
	curl_easy_setopt(c, CURLOPT_URL, req->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 3L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)h->timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)h->connect_timeout_ms);
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* decoded bytes count against the cap */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gh_http_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, gh_http_header_cb);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, resp);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, resp->errbuf);
	if (h->max_body)
		curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)h->max_body);

	if (!strcmp(req->method, "GET")) {
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	} else {
		if (strcmp(req->method, "POST"))
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
		if (req->body || strcmp(req->method, "DELETE")) {
			const char *b = req->body ? req->body : "";

			curl_easy_setopt(c, CURLOPT_POSTFIELDS, b);
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(b));
		}
	}

	rc = curl_easy_perform(c);
	if (rc == CURLE_FILESIZE_EXCEEDED)
		resp->too_big = true, rc = CURLE_WRITE_ERROR;
	resp->transport = classify(rc, resp->too_big);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
		ret = 0;
	} else if (!resp->errbuf[0]) {
		kb_strlcpy(resp->errbuf, curl_easy_strerror(rc), sizeof(resp->errbuf));
	}
	/* the list holds the Authorization line: drop it with the request */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
	for (struct curl_slist *n = list; n; n = n->next)
		explicit_bzero(n->data, strlen(n->data));
	curl_slist_free_all(list);
	return ret;
}
