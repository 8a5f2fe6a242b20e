#ifndef KB_FORGE_GITHUB_H
#define KB_FORGE_GITHUB_H
/*
 * The github forge backend: GitHub's REST API over libcurl, JSON by cJSON.
 *
 * Credentials: a token (personal access token, or the Actions
 * GITHUB_TOKEN) sent as "Authorization: Bearer"; or a GitHub App (app_id +
 * private_key_file) whose RS256 JWT buys installation tokens, cached per
 * installation and renewed five minutes before their hour ends. The
 * installation is installation_id, or looked up per repository
 * (GET /repos/{o}/{r}/installation) and cached.
 *
 * Manners (see policy.h): one request at a time; mutating requests at
 * least mutation_gap_ms apart; GETs conditional on a cached ETag (a 304
 * costs no quota); Link pagination; rate limits honoured (retry-after,
 * else x-ratelimit-reset when remaining is 0, else exponential backoff
 * with jitter); 5xx and timeouts retried with backoff; bodies capped.
 *
 * api_url must be https, or http to a loopback address (simulators).
 */
#include "forge/forge.h"

struct kb_config;

/* Why the client wants to sleep; handed to the sleep function. */
enum kb_github_wait {
	KB_GITHUB_WAIT_MUTATION_GAP, /* spacing between mutating requests */
	KB_GITHUB_WAIT_RATE_LIMIT,   /* primary or secondary rate limit */
	KB_GITHUB_WAIT_BACKOFF       /* 5xx, timeout, connection error */
};

struct kb_github_opts {
	const char *api_url;          /* https://api.github.com, or https://HOST/api/v3 */
	const char *token;            /* personal access token; ignored with an App */
	int64_t app_id;               /* 0: no App */
	const char *private_key_file; /* the App's PEM key */
	int64_t installation_id;      /* 0: look it up per repository */
	int64_t timeout_ms;           /* per request, whole transfer; 0: 30 s */
	size_t max_body;              /* response body cap in bytes; 0: 32 MiB */
	/* retry policy; 0 (or 0 < value where noted) means the default */
	int max_attempts;             /* tries per request, first included; 0: 5 */
	int64_t mutation_gap_ms;      /* 0: 1000 (GitHub asks for at least a second) */
	int64_t base_backoff_ms;      /* 0: 1000 */
	int64_t max_wait_ms;          /* longest single wait before giving up; 0: 65 min */
	/*
	 * Sleep ms milliseconds (tests make it record and shorten). Return 0,
	 * or KB_ECANCELLED to give up. NULL: kb_sleep_ms (core/signals.h),
	 * short slices that watch kb_stop_requested().
	 */
	int (*sleep_fn)(void *payload, int64_t ms, enum kb_github_wait why);
	void *sleep_payload;
};
#define KB_GITHUB_OPTS_INIT { "https://api.github.com", NULL, 0, NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL }

/* Fill opts from the [github] section; strings point into cfg. */
void kb_github_opts_from_config(struct kb_github_opts *opts, const struct kb_config *cfg);

/*
 * Create the backend. Fails (logged) on a bad api_url, an unreadable or
 * invalid private key, or neither token nor App. Nothing is sent yet.
 */
int kb_forge_github_new(struct kb_forge **out, const struct kb_github_opts *opts);

#endif
