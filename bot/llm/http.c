#include "core/common.h"
#include "core/signals.h"
#include "core/util.h"
#include "llm/llm_priv.h"

#include <pthread.h>

/*
 * One POST over the client's reused easy handle, driven by its multi
 * handle (which keeps the connections). The same manners as the github
 * client's transport (forge/github/http.c): http and https only, a capped
 * body, the request headers wiped after use; plus a stop check every
 * STOP_POLL_MS, so that a stop request ends a long generation at once
 * (curl's progress callback may wait a second on an idle socket).
 */

#define STOP_POLL_MS 100

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int llm_http_global_init(void)
{
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return error("could not initialise libcurl: %s", curl_easy_strerror(global_rc));
	return 0;
}

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
	size_t n = size * nmemb;

	if (strbuf_add(&r->body, data, n)) {
		r->too_big = true;
		return 0; /* curl stops with CURLE_WRITE_ERROR */
	}
	return n;
}

static size_t header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	static const char name[] = "retry-after:";
	struct llm_http_resp *r = userdata;
	size_t n = size * nmemb, len;
	const char *v;

	/* a new response (100 Continue, a redirect): forget the last one's */
	if (n >= 5 && !strncmp(data, "HTTP/", 5)) {
		FREE_AND_NULL(r->retry_after);
		strbuf_reset(&r->body);
		return n;
	}
	if (n < sizeof(name) - 1 || strncasecmp(data, name, sizeof(name) - 1))
		return n;
	v = data + sizeof(name) - 1;
	len = n - (sizeof(name) - 1);
	while (len && (*v == ' ' || *v == '\t'))
		v++, len--;
	while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' ' ||
		       v[len - 1] == '\t'))
		len--;
	free(r->retry_after);
	r->retry_after = xstrndup(v, len);
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
	for (size_t i = 0; i < headers->nr; i++) {
		struct curl_slist *n = curl_slist_append(list, headers->v[i]);

		if (!n)
			die("out of memory");
		list = n;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	/* a POST is not replayed across a redirect: an API never sends one */
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout_ms < 10000 ? timeout_ms : 10000));
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* decoded bytes count against the cap */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->errbuf);
	if (r->body.cap)
		curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)r->body.cap);

	r->rc = perform(multi, c);
	if (r->rc == CURLE_FILESIZE_EXCEEDED)
		r->too_big = true;
	if (r->rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	else if (!r->errbuf[0])
		kb_strlcpy(r->errbuf, curl_easy_strerror(r->rc), sizeof(r->errbuf));

	/* the list holds the key: drop it with the request */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
	for (struct curl_slist *n = list; n; n = n->next)
		explicit_bzero(n->data, strlen(n->data));
	curl_slist_free_all(list);
}
