#ifndef KB_CORE_HTTP_H
#define KB_CORE_HTTP_H
/*
 * What the bot's two HTTP clients share (forge/github/http.c and
 * llm/http.c): libcurl's one-time global set-up, the options every
 * exchange sets on its reused easy handle, the request header list (which
 * holds a token, so it is wiped when freed), the response header line
 * parser, and the one reading of Retry-After and rate-limit reset times.
 *
 * Waits computed from a server's numbers saturate (core/util.h kb_sat_*):
 * an absurd value is a very long wait that the caller refuses or caps,
 * never a negative or wrapped one.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

#include <curl/curl.h>

/* curl_global_init once per process, thread-safely. 0 or -1 (logged). */
int kb_http_global_init(void);

/*
 * The "Name: value" lines as a curl list; the caller owns it and frees it
 * with kb_http_headers_free, which overwrites every line first (they hold
 * Authorization or API keys).
 */
struct curl_slist *kb_http_headers(const struct strvec *lines);
void kb_http_headers_free(struct curl_slist *list);

/*
 * After curl_easy_reset: the URL, http and https only (redirects too), no
 * signals, the whole-transfer and connect deadlines, decoded bytes (so
 * that they count against the cap), the header list, curl's error text
 * into errbuf (CURL_ERROR_SIZE bytes) and, when max_body is not 0, a
 * size cap on the body. Redirects and the method are left to the caller.
 */
void kb_http_set_common(CURL *c, const char *url, struct curl_slist *headers,
			int64_t timeout_ms, int64_t connect_timeout_ms, char *errbuf, size_t max_body);
/* Unhook the header list and the error buffer from c before they are freed. */
void kb_http_unset_common(CURL *c);

/* The connect deadline for a transfer deadline: the same, at most 10 s. */
int64_t kb_http_connect_timeout_ms(int64_t timeout_ms);

/* True for a status line ("HTTP/..."): a new response starts (100 Continue, a redirect). */
bool kb_http_is_status_line(const char *line, size_t n);
/*
 * When the header line (n bytes, its line end included) is named name (any
 * case), a new string with its value, surrounding blanks and the line end
 * removed; NULL otherwise. The caller frees it.
 */
char *kb_http_header_value(const char *line, size_t n, const char *name);

/*
 * Append a body chunk to a capped strbuf (a libcurl write callback's
 * work): n when it fits; 0 with *too_big set when the cap is hit, which
 * makes curl stop with CURLE_WRITE_ERROR.
 */
size_t kb_http_body_add(struct strbuf *body, bool *too_big, const char *data, size_t n);

/*
 * Milliseconds a Retry-After value asks for: delta seconds (a fraction
 * rounds up; any number of digits; 0 or less is 0) or an HTTP date (from
 * now_s, 0 when past); -1 when absent or unreadable. Not capped: values
 * beyond 10^9 s read as INT64_MAX / 2, so the caller's cap decides.
 */
int64_t kb_http_retry_after_ms(const char *value, int64_t now_s);
/* Milliseconds until a rate-limit reset time (epoch seconds) plus one second; saturating. */
int64_t kb_http_until_reset_ms(int64_t reset_s, int64_t now_s);

#endif
