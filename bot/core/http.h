#ifndef KB_CORE_HTTP_H
#define KB_CORE_HTTP_H
/*
 * The bot's one HTTP transport, used by forge/github and llm: a client
 * owning a reused libcurl easy handle driven by a multi handle (which
 * keeps the connections), one exchange per kb_http_perform with its
 * deadline, a capped body, the response headers kept as lines, and a stop
 * check for the requests that ask for one; plus the one reading of
 * Retry-After and rate-limit reset times. No retries and no policy: each
 * caller reads the headers it cares about (GitHub's rate limit, ETag and
 * Link; the LLM's Retry-After) and decides. Nothing is logged here, and
 * never verbosely: request headers hold tokens, and their copies are
 * wiped when the exchange ends.
 *
 * Waits computed from a server's numbers saturate (core/util.h kb_sat_*):
 * an absurd value is a very long wait that the caller refuses or caps,
 * never a negative or wrapped one.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

#include <curl/curl.h>

/* How a transfer ended, as far as a retry rule cares. */
enum kb_http_error {
	KB_HTTP_OK,      /* a complete response arrived (any status) */
	KB_HTTP_TIMEOUT, /* the deadline passed */
	KB_HTTP_NETWORK, /* connect, resolve, send, receive, TLS handshake, a cut-off reply */
	KB_HTTP_TOOBIG,  /* the body (or the headers) passed the cap */
	KB_HTTP_STOPPED, /* a stop request ended it (stop-aware requests only) */
	KB_HTTP_SETUP,   /* no retry can mend it: URL, protocol, memory, redirect loop */
	KB_HTTP_OTHER    /* anything else */
};

struct kb_http_request {
	const char *method;            /* GET, POST, PATCH, PUT, DELETE */
	const char *url;               /* absolute; http and https only */
	const struct strvec *headers;  /* "Name: value" lines; NULL: none */
	const char *body;              /* NULL: none (a POST, PATCH or PUT sends "") */
	int64_t timeout_ms;            /* the whole transfer; connecting at most 10 s of it */
	long max_redirects;            /* 0: none followed (curl drops Authorization on a new host) */
	/*
	 * A connection of its own: libcurl silently sends a request again
	 * when a reused connection dies before the answer, and a create the
	 * server already carried out would then be made twice.
	 */
	bool fresh_connect;
	bool stop_aware;               /* end with KB_HTTP_STOPPED on kb_stop_requested() */
	const int *abort;              /* NULL, or end with KB_HTTP_STOPPED once another
					* thread makes *abort non-zero (llm/pool.h) */
};

struct kb_http_response {
	enum kb_http_error error;
	CURLcode curl_code;
	long status;                   /* when error is KB_HTTP_OK */
	struct strbuf body;            /* capped at the size given to _init */
	bool too_big;
	struct strvec headers;         /* the last response's "Name: value" lines, trimmed */
	size_t header_bytes;
	char errbuf[CURL_ERROR_SIZE];  /* curl's reason when error is not KB_HTTP_OK */
};

struct kb_http_client;
/*
 * An exchange without the network, for the tests and fuzz targets: it
 * fills resp through kb_http_response_header_cb and _body_cb as libcurl
 * would, sets resp->error (and status), and returns what kb_http_perform
 * returns.
 */
typedef int (*kb_http_fake_fn)(void *payload, const struct kb_http_request *req,
			       struct kb_http_response *resp);

struct kb_http_client {
	CURL *easy;
	CURLM *multi;
	kb_http_fake_fn fake;          /* NULL (always, outside tests): libcurl */
	void *fake_payload;
};

/* curl_global_init once per process, thread-safely. 0 or -1 (logged). */
int kb_http_global_init(void);

/* The handles (and libcurl's global set-up). 0 or -1 (logged). */
int kb_http_client_init(struct kb_http_client *c);
void kb_http_client_release(struct kb_http_client *c);

void kb_http_response_init(struct kb_http_response *r, size_t max_body);
/* Forget the previous exchange (keeps the cap). */
void kb_http_response_reset(struct kb_http_response *r);
void kb_http_response_release(struct kb_http_response *r);
/*
 * The value of the last response header named name (any case), blanks
 * around it removed; NULL when absent. Valid until the next reset.
 */
const char *kb_http_response_header(const struct kb_http_response *r, const char *name);

/*
 * Perform one request (resp is reset first). 0 when a complete response
 * arrived (any status), -1 otherwise with resp->error saying which
 * failure and resp->errbuf curl's words.
 */
int kb_http_perform(struct kb_http_client *c, const struct kb_http_request *req,
		    struct kb_http_response *resp);

/* The libcurl callbacks, for the fakes and the tests; userdata is a struct kb_http_response. */
size_t kb_http_response_body_cb(char *data, size_t size, size_t nmemb, void *userdata);
size_t kb_http_response_header_cb(char *data, size_t size, size_t nmemb, void *userdata);

/* The class of a finished transfer's curl code (too_big: the cap stopped it). */
enum kb_http_error kb_http_classify(CURLcode rc, bool too_big);

/* The connect deadline for a transfer deadline: the same, at most 10 s. */
int64_t kb_http_connect_timeout_ms(int64_t timeout_ms);

/* True for a status line ("HTTP/..."): a new response starts (100 Continue, a redirect). */
bool kb_http_is_status_line(const char *line, size_t n);

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
