#include "core/common.h"
#include "core/http.h"
#include "core/util.h"
#include "forge/github/http.h"


int gh_http_init(struct gh_http *h, int64_t timeout_ms, size_t max_body)
{
	memset(h, 0, sizeof(*h));
	if (kb_http_global_init())
		return -1;
	h->curl = curl_easy_init();
	if (!h->curl)
		return error("could not create a libcurl handle");
	h->timeout_ms = timeout_ms;
	h->connect_timeout_ms = kb_http_connect_timeout_ms(timeout_ms);
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

	return kb_http_body_add(&r->body, &r->too_big, data, size * nmemb);
}

/* A header's integer value, freeing it; -1 when it is not one. */
static int64_t int_value(char *v)
{
	int64_t n;

	if (kb_parse_i64(v, &n))
		n = -1;
	free(v);
	return n;
}

size_t gh_http_header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct gh_http_resp *r = userdata;
	size_t n = size * nmemb;
	char *v;

	/* a new response (a redirect, a 100 Continue): forget the last one's */
	if (kb_http_is_status_line(data, n)) {
		clear_headers(r);
		strbuf_reset(&r->body);
		return n;
	}
	if ((v = kb_http_header_value(data, n, "etag"))) {
		free(r->etag);
		r->etag = v;
	} else if ((v = kb_http_header_value(data, n, "link"))) {
		free(r->link);
		r->link = v;
	} else if ((v = kb_http_header_value(data, n, "retry-after"))) {
		free(r->retry_after);
		r->retry_after = v;
	} else if ((v = kb_http_header_value(data, n, "x-ratelimit-remaining"))) {
		r->rl_remaining = int_value(v);
	} else if ((v = kb_http_header_value(data, n, "x-ratelimit-reset"))) {
		r->rl_reset = int_value(v);
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
	list = kb_http_headers(req->headers);
	kb_http_set_common(c, req->url, list, h->timeout_ms, h->connect_timeout_ms, resp->errbuf,
			   h->max_body);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 3L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, gh_http_body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, gh_http_header_cb);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, resp);
	if (req->fresh_connection)
		curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);

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
	kb_http_unset_common(c);
	kb_http_headers_free(list);
	return ret;
}
