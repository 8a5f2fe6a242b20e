#include "core/common.h"
#include "core/http.h"
#include "core/signals.h"
#include "core/util.h"
#include "llm/llm_priv.h"


/*
 * One POST over the client's reused easy handle, driven by its multi
 * handle (which keeps the connections). The same manners as the github
 * client's transport, from core/http.h: http and https only, a capped
 * body, the request headers wiped after use; plus a stop check every
 * STOP_POLL_MS, so that a stop request ends a long generation at once
 * (curl's progress callback may wait a second on an idle socket).
 */

#define STOP_POLL_MS 100

void llm_http_resp_init(struct llm_http_resp *r, size_t max_body)
{
	memset(r, 0, sizeof(*r));
	strbuf_init_capped(&r->body, max_body);
}

void llm_http_resp_release(struct llm_http_resp *r)
{
	strbuf_release(&r->body);
	FREE_AND_NULL(r->retry_after);
}

static size_t body_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct llm_http_resp *r = userdata;

	return kb_http_body_add(&r->body, &r->too_big, data, size * nmemb);
}

static size_t header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct llm_http_resp *r = userdata;
	size_t n = size * nmemb;
	char *v;

	/* a new response (100 Continue, a redirect): forget the last one's */
	if (kb_http_is_status_line(data, n)) {
		FREE_AND_NULL(r->retry_after);
		strbuf_reset(&r->body);
		return n;
	}
	if ((v = kb_http_header_value(data, n, "retry-after"))) {
		free(r->retry_after);
		r->retry_after = v;
	}
	return n;
}

/* Run the transfer; CURLE_ABORTED_BY_CALLBACK on a stop request. */
static CURLcode perform(CURLM *multi, CURL *c)
{
	CURLcode rc = CURLE_OK;
	CURLMcode mc;
	CURLMsg *msg;
	int running = 1, left;

	if ((mc = curl_multi_add_handle(multi, c)) != CURLM_OK)
		return CURLE_FAILED_INIT;
	for (;;) {
		mc = curl_multi_perform(multi, &running);
		if (mc != CURLM_OK) {
			rc = CURLE_FAILED_INIT;
			break;
		}
		if (!running)
			break;
		if (kb_stop_requested()) {
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

void llm_http_post(CURLM *multi, CURL *c, const char *url, const struct strvec *headers, const char *body,
		   int64_t timeout_ms, struct llm_http_resp *r)
{
	struct curl_slist *list = NULL;

	strbuf_reset(&r->body);
	FREE_AND_NULL(r->retry_after);
	r->too_big = false;
	r->status = 0;
	r->errbuf[0] = '\0';

	curl_easy_reset(c);
	list = kb_http_headers(headers);
	kb_http_set_common(c, url, list, timeout_ms, kb_http_connect_timeout_ms(timeout_ms), r->errbuf,
			   r->body.cap);
	/* a POST is not replayed across a redirect: an API never sends one */
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);

	r->rc = perform(multi, c);
	if (r->rc == CURLE_FILESIZE_EXCEEDED)
		r->too_big = true;
	if (r->rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	else if (!r->errbuf[0])
		kb_strlcpy(r->errbuf, curl_easy_strerror(r->rc), sizeof(r->errbuf));

	/* the list holds the key: drop it with the request */
	kb_http_unset_common(c);
	kb_http_headers_free(list);
}
