/*
 * The hidden markers in texts on the forge (report/pr_body.c), read back
 * from bodies anyone can edit: kb_marker_find for each kind and
 * kb_body_hash. Input: the body.
 *
 * Invariants: a marker found lies inside the body and starts with its
 * opening; written again with kb_marker_add, it reads back the same.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "report/pr_body.h"
#include "fuzz.h"

static void check_kind(const char *body, size_t len, const char *kind)
{
	struct kb_marker m, again;
	struct strbuf sb = STRBUF_INIT;
	int rc = kb_marker_find(body, kind, &m);

	if (rc)
		return;
	FUZZ_CHECK(m.offset + m.len <= len);
	FUZZ_CHECK(!strncmp(body + m.offset, "<!-- kernelbot:", 15));
	FUZZ_CHECK(!*m.body_sha || strlen(m.body_sha) == 64);
	if (kb_marker_add(&sb, kind, m.job, m.pr, m.candidate, *m.state ? m.state : NULL,
			  *m.body_sha ? m.body_sha : NULL))
		goto out;
	FUZZ_CHECK(!kb_marker_find(sb.buf, kind, &again));
	FUZZ_CHECK(again.job == m.job && again.pr == m.pr && again.candidate == m.candidate);
	FUZZ_CHECK(!strcmp(again.state, m.state) && !strcmp(again.body_sha, m.body_sha));
	FUZZ_CHECK(again.offset == 0 && again.len == sb.len);
out:
	strbuf_release(&sb);
}

int kb_fuzz_pr_marker(const uint8_t *data, size_t size)
{
	char *body = kb_fuzz_str(data, size);
	size_t len = strlen(body);
	char hex[65];

	kb_fuzz_init();
	check_kind(body, len, "pr");
	check_kind(body, len, "progress");
	check_kind(body, len, "review");
	kb_body_hash(body, hex);
	FUZZ_CHECK(strlen(hex) == 64);
	free(body);
	return 0;
}

KB_FUZZ_ENTRY(pr_marker)
