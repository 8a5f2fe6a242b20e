#include "core/common.h"
#include "core/http.h"
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

struct curl_slist *kb_http_headers(const struct strvec *lines)
{
	struct curl_slist *list = NULL;

	for (size_t i = 0; i < lines->nr; i++) {
		struct curl_slist *n = curl_slist_append(list, lines->v[i]);

		if (!n)
			die("out of memory");
		list = n;
	}
	return list;
}

void kb_http_headers_free(struct curl_slist *list)
{
	for (struct curl_slist *n = list; n; n = n->next)
		explicit_bzero(n->data, strlen(n->data));
	curl_slist_free_all(list);
}

int64_t kb_http_connect_timeout_ms(int64_t timeout_ms)
{
	return timeout_ms < 10000 ? timeout_ms : 10000;
}

void kb_http_set_common(CURL *c, const char *url, struct curl_slist *headers,
			int64_t timeout_ms, int64_t connect_timeout_ms, char *errbuf, size_t max_body)
{
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_timeout_ms);
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* decoded bytes count against the cap */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	if (max_body)
		curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_body);
}

void kb_http_unset_common(CURL *c)
{
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
}

bool kb_http_is_status_line(const char *line, size_t n)
{
	return n >= 5 && !strncmp(line, "HTTP/", 5);
}

char *kb_http_header_value(const char *line, size_t n, const char *name)
{
	const char *colon = memchr(line, ':', n);
	size_t name_len = strlen(name), len;
	const char *v;

	if (!colon || (size_t)(colon - line) != name_len || strncasecmp(line, name, name_len))
		return NULL;
	v = colon + 1;
	len = n - name_len - 1;
	while (len && (*v == ' ' || *v == '\t')) {
		v++;
		len--;
	}
	while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' ' ||
		       v[len - 1] == '\t'))
		len--;
	return xstrndup(v, len);
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
