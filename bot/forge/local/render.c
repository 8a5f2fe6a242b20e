#include "core/common.h"
#include "core/util.h"
#include "forge/local/local_priv.h"

#include <inttypes.h>
#include <sys/stat.h>
#include <time.h>

/* The markdown view of one pull request: what a person reads instead of GitHub's page. */

static void add_time(struct strbuf *sb, int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;
	char buf[32];

	gmtime_r(&tt, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	strbuf_addstr(sb, buf);
}

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

/* True when a later entry of arr has the same context: only the latest status counts. */
static bool superseded(const cJSON *st)
{
	const char *ctx = kb_json_str(st, "context"), *sha = kb_json_str(st, "sha");

	for (const cJSON *n = st->next; n; n = n->next) {
		const char *nctx = kb_json_str(n, "context"), *nsha = kb_json_str(n, "sha");

		if (ctx && nctx && sha && nsha && !strcmp(ctx, nctx) && !strcmp(sha, nsha))
			return true;
	}
	return false;
}

static void render_checks(struct strbuf *sb, const cJSON *doc, const char *head_sha)
{
	const cJSON *e;
	bool any = false;

	if (!head_sha)
		return;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "statuses")) {
		const char *sha = kb_json_str(e, "sha");

		if (!sha || strcmp(sha, head_sha) || superseded(e))
			continue;
		if (!any)
			strbuf_addstr(sb, "\n## Checks\n\n");
		any = true;
		strbuf_addf(sb, "- status **%s**: %s", or_empty(kb_json_str(e, "context")),
			    or_empty(kb_json_str(e, "state")));
		if (kb_json_str(e, "description"))
			strbuf_addf(sb, " - %s", kb_json_str(e, "description"));
		if (kb_json_str(e, "target_url"))
			strbuf_addf(sb, " ([details](%s))", kb_json_str(e, "target_url"));
		strbuf_addch(sb, '\n');
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "check_runs")) {
		const char *sha = kb_json_str(e, "head_sha");

		if (!sha || strcmp(sha, head_sha))
			continue;
		if (!any)
			strbuf_addstr(sb, "\n## Checks\n\n");
		any = true;
		strbuf_addf(sb, "- check run **%s** (id %" PRId64 "): %s", or_empty(kb_json_str(e, "name")),
			    kb_json_i64(e, "id", 0), or_empty(kb_json_str(e, "status")));
		if (kb_json_str(e, "conclusion"))
			strbuf_addf(sb, ", %s", kb_json_str(e, "conclusion"));
		if (kb_json_str(e, "title"))
			strbuf_addf(sb, " - %s", kb_json_str(e, "title"));
		strbuf_addch(sb, '\n');
		if (kb_json_str(e, "summary") && *kb_json_str(e, "summary"))
			strbuf_addf(sb, "\n<details><summary>summary</summary>\n\n%s\n\n</details>\n\n",
				    kb_json_str(e, "summary"));
	}
}

int lf_render_pr(const char *dir, const cJSON *doc, const cJSON *pr, const char *head_sha)
{
	struct strbuf sb = STRBUF_INIT, path = STRBUF_INIT;
	const cJSON *e;
	int64_t n = kb_json_i64(pr, "number", 0);
	bool first = true;
	int rc;

	strbuf_addf(&sb, "# #%" PRId64 " %s\n\n", n, or_empty(kb_json_str(pr, "title")));
	strbuf_addstr(&sb, "| | |\n| --- | --- |\n");
	strbuf_addf(&sb, "| state | %s%s |\n", or_empty(kb_json_str(pr, "state")),
		    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pr, "merged")) ? " (merged)" : "");
	strbuf_addf(&sb, "| author | @%s |\n", or_empty(kb_json_str(pr, "author")));
	strbuf_addf(&sb, "| head | `%s`", or_empty(kb_json_str(pr, "head")));
	if (head_sha)
		strbuf_addf(&sb, " at `%.12s`", head_sha);
	strbuf_addf(&sb, " |\n| base | `%s` |\n", or_empty(kb_json_str(pr, "base")));
	strbuf_addf(&sb, "| draft | %s |\n",
		    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pr, "draft")) ? "yes" : "no");
	strbuf_addstr(&sb, "| labels | ");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pr, "labels")) {
		if (cJSON_IsString(e))
			strbuf_addf(&sb, "%s`%s`", first ? "" : ", ", e->valuestring);
		first = false;
	}
	strbuf_addstr(&sb, " |\n\n");
	if (kb_json_str(pr, "body") && *kb_json_str(pr, "body"))
		strbuf_addf(&sb, "%s\n", kb_json_str(pr, "body"));

	render_checks(&sb, doc, head_sha);

	first = true;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pr, "reviews")) {
		if (first)
			strbuf_addstr(&sb, "\n## Reviews\n");
		first = false;
		strbuf_addf(&sb, "\n### review %" PRId64 " by @%s on `%.12s`", kb_json_i64(e, "id", 0),
			    or_empty(kb_json_str(e, "author")), or_empty(kb_json_str(e, "commit_id")));
		if (kb_json_str(e, "path"))
			strbuf_addf(&sb, " at `%s:%" PRId64 "`", kb_json_str(e, "path"),
				    kb_json_i64(e, "line", 0));
		strbuf_addf(&sb, "\n\n%s\n", or_empty(kb_json_str(e, "body")));
	}

	first = true;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pr, "comments")) {
		int64_t created = kb_json_i64(e, "created_at", 0), updated = kb_json_i64(e, "updated_at", 0);

		if (first)
			strbuf_addstr(&sb, "\n## Comments\n");
		first = false;
		strbuf_addf(&sb, "\n### comment %" PRId64 " by @%s, ", kb_json_i64(e, "id", 0),
			    or_empty(kb_json_str(e, "author")));
		add_time(&sb, created);
		if (updated > created) {
			strbuf_addstr(&sb, " (edited ");
			add_time(&sb, updated);
			strbuf_addch(&sb, ')');
		}
		strbuf_addf(&sb, "\n\n%s\n", or_empty(kb_json_str(e, "body")));
	}

	strbuf_addf(&path, "%s/pulls", dir);
	if (kb_mkdir_p(path.buf, 0755)) {
		rc = error_errno("could not create '%s'", path.buf);
		goto out;
	}
	strbuf_addf(&path, "/%" PRId64 ".md", n);
	rc = kb_write_file_atomic(path.buf, sb.buf, sb.len);
out:
	strbuf_release(&sb);
	strbuf_release(&path);
	return rc;
}
