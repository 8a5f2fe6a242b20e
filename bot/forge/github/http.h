#ifndef KB_GH_HTTP_H
#define KB_GH_HTTP_H
/*
 * One HTTP exchange over a reused libcurl easy handle: no retries, no
 * policy (client.c does that). Only http and https; redirects followed at
 * most three times (curl drops Authorization on a change of host); the
 * body lands in a capped strbuf; the headers the policy needs are kept.
 * Never verbose: request headers hold the token.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "forge/github/policy.h"

#include <curl/curl.h>

struct gh_http_req;
struct gh_http_resp;

/*
 * An exchange without the network, for the fuzz targets (tests/fuzz): it
 * fills resp through gh_http_header_cb and gh_http_body_cb as libcurl
 * would and sets resp->transport (and status); returns what
 * gh_http_perform returns.
 */
typedef int (*gh_http_fake_fn)(void *payload, const struct gh_http_req *req,
			       struct gh_http_resp *resp);

struct gh_http {
	CURL *curl;
	int64_t timeout_ms;         /* whole transfer */
	int64_t connect_timeout_ms;
	size_t max_body;
	gh_http_fake_fn fake;       /* NULL (always, outside tests): libcurl */
	void *fake_payload;
};

struct gh_http_req {
	const char *method;         /* GET, POST, PATCH, PUT, DELETE */
	const char *url;            /* absolute */
	const char *body;           /* NULL: none */
	const struct strvec *headers; /* "Name: value" lines */
	/*
	 * A connection of its own: libcurl silently sends a request again
	 * when a reused connection dies before the answer, and a create that
	 * GitHub already carried out would then be made twice.
	 */
	bool fresh_connection;
};

struct gh_http_resp {
	enum gh_transport transport;
	long status;
	struct strbuf body;         /* capped at max_body */
	bool too_big;
	char *etag;
	char *link;
	char *retry_after;
	int64_t rl_remaining, rl_reset; /* -1: absent */
	char errbuf[CURL_ERROR_SIZE];   /* curl's reason when transport is not OK */
};

/* Create the easy handle (curl_global_init is done once, thread-safely). */
int gh_http_init(struct gh_http *h, int64_t timeout_ms, size_t max_body);
void gh_http_release(struct gh_http *h);

void gh_http_resp_init(struct gh_http_resp *r, size_t max_body);
/* Forget the previous exchange's headers and body (keeps the cap). */
void gh_http_resp_reset(struct gh_http_resp *r);
void gh_http_resp_release(struct gh_http_resp *r);

/*
 * Perform one request. Returns 0 when a complete response arrived (any
 * status) and -1 otherwise; resp->transport says which failure (nothing
 * is logged: the caller decides whether it retries).
 */
int gh_http_perform(struct gh_http *h, const struct gh_http_req *req, struct gh_http_resp *resp);

/* The libcurl callbacks, exposed for the unit tests. userdata is a struct gh_http_resp. */
size_t gh_http_body_cb(char *data, size_t size, size_t nmemb, void *userdata);
size_t gh_http_header_cb(char *data, size_t size, size_t nmemb, void *userdata);

#endif
