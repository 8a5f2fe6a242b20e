#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/util.h"
#include "forge/github/gh.h"
#include "forge/github/jwt.h"

#include <time.h>

#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_MAX_BODY (32u * 1024 * 1024)
#define ETAG_CACHE_ENTRIES 512
#define ETAG_CACHE_BYTES (16u * 1024 * 1024)

static void gh_free(struct kb_forge *f)
{
	struct gh *gh = gh_of(f);

	kb_http_client_release(&gh->http);
	gh_etag_cache_release(&gh->etags);
	gh_tokens_release(gh);
	if (gh->token) {
		explicit_bzero(gh->token, strlen(gh->token));
		free(gh->token);
	}
	EVP_PKEY_free(gh->key);
	free(gh->api_url);
	free(gh->origin);
	free(gh->login);
	free(gh);
}

static const struct kb_forge_ops gh_ops = {
	.list_labelled_prs = gh_list_labelled_prs,
	.label_actor = gh_label_actor,
	.permission = gh_permission,
	.get_pr = gh_get_pr,
	.pr_files = gh_pr_files,
	.find_pr_by_head = gh_find_pr_by_head,
	.open_pr = gh_open_pr,
	.update_pr = gh_update_pr,
	.find_comment = gh_find_comment,
	.list_comments = gh_list_comments,
	.list_repo_comments = gh_list_repo_comments,
	.post_comment = gh_post_comment,
	.edit_comment = gh_edit_comment,
	.post_review = gh_post_review,
	.set_status = gh_set_status,
	.check_run = gh_check_run,
	.add_labels = gh_add_labels,
	.remove_label = gh_remove_label,
	.git_remote = gh_git_remote,
	.whoami = gh_whoami,
	.free = gh_free,
};

static bool is_loopback(const char *host, size_t len)
{
	return (len == 9 && !strncasecmp(host, "localhost", 9)) ||
	       (len >= 4 && !strncmp(host, "127.", 4)) || (len == 5 && !strncmp(host, "[::1]", 5));
}

/* Check api_url and split off its origin (scheme://host[:port]). */
static int parse_api_url(const char *api_url, char **url_out, char **origin_out)
{
	const char *host, *end;
	size_t len = strlen(api_url), host_len;
	bool https;

	while (len && api_url[len - 1] == '/')
		len--;
	if (!strncasecmp(api_url, "https://", 8))
		https = true, host = api_url + 8;
	else if (!strncasecmp(api_url, "http://", 7))
		https = false, host = api_url + 7;
	else
		return error("github api_url '%s' is not an https URL", api_url);
	end = host + strcspn(host, "/?#");
	if (end > api_url + len)
		end = api_url + len;
	if (end == host || memchr(host, '@', (size_t)(end - host)))
		return error("github api_url '%s' has no usable host", api_url);
	host_len = strcspn(host, ":/");
	if (host[0] == '[')
		host_len = strcspn(host, "]") + 1;
	if (!https && !is_loopback(host, host_len))
		return error("github api_url '%s': plain http only to a loopback address", api_url);
	if (strchr(api_url, '?') || strchr(api_url, '#'))
		return error("github api_url '%s' may not hold a query", api_url);
	*url_out = xstrndup(api_url, len);
	*origin_out = xstrndup(api_url, (size_t)(end - api_url));
	return 0;
}

void kb_github_opts_from_config(struct kb_github_opts *opts, const struct kb_config *cfg)
{
	opts->api_url = cfg->github_api_url;
	opts->token = cfg->github_token;
	opts->app_id = cfg->github_app_id;
	opts->private_key_file = cfg->github_private_key_file;
	opts->installation_id = cfg->github_installation_id;
	opts->timeout_ms = cfg->github_timeout_s * 1000;
	opts->max_body = (size_t)cfg->github_max_response_mb * 1024 * 1024;
}

int kb_forge_github_new(struct kb_forge **out, const struct kb_github_opts *opts)
{
	struct gh *gh = xcalloc(1, sizeof(*gh));
	struct gh_policy defaults = GH_POLICY_INIT;
	size_t max_body = opts->max_body ? opts->max_body : DEFAULT_MAX_BODY;

	*out = NULL;
	gh->base.ops = &gh_ops;
	gh->base.name = "github";
	gh->rl_remaining = gh->rl_reset = -1;
	gh->policy = defaults;
	if (opts->max_attempts > 0)
		gh->policy.max_attempts = opts->max_attempts;
	if (opts->mutation_gap_ms > 0)
		gh->policy.mutation_gap_ms = opts->mutation_gap_ms;
	if (opts->base_backoff_ms > 0)
		gh->policy.base_backoff_ms = opts->base_backoff_ms;
	if (opts->max_wait_ms > 0)
		gh->policy.max_wait_ms = opts->max_wait_ms;
	gh->sleep_fn = opts->sleep_fn;
	gh->sleep_payload = opts->sleep_payload;
	gh->rng = (uint64_t)kb_now_ms() * 6364136223846793005ULL ^ (uint64_t)getpid() ^
		  (uint64_t)(uintptr_t)gh;
	if (!gh->rng)
		gh->rng = 88172645463325252ULL;
	gh_etag_cache_init(&gh->etags, ETAG_CACHE_ENTRIES, ETAG_CACHE_BYTES);

	if (parse_api_url(opts->api_url ? opts->api_url : "", &gh->api_url, &gh->origin))
		goto fail;
	if (opts->app_id > 0) {
		if (!opts->private_key_file || !*opts->private_key_file) {
			error("github app_id is set but private_key_file is empty");
			goto fail;
		}
		if (gh_jwt_load_key(&gh->key, opts->private_key_file))
			goto fail;
		gh->app_id = opts->app_id;
		gh->installation_id = opts->installation_id;
	} else if (opts->token && *opts->token) {
		gh->token = xstrdup(opts->token);
		log_add_secret(gh->token);
	} else {
		error("github needs a token or an app (app_id and private_key_file)");
		goto fail;
	}
	gh->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
	gh->max_body = max_body;
	if (kb_http_client_init(&gh->http))
		goto fail;
	*out = &gh->base;
	return 0;
fail:
	gh_free(&gh->base);
	return -1;
}
