/*
 * An evidence file (PROTOCOL.md "Evidence", verifier/evidence.c): what the
 * harness and the judge wrote, read back by the printers of `kernelbot
 * verify`/`run`/`bench`, the pull request body and title
 * (report/pr_body.c), the check run summary (report/comments.c) and
 * report.md (report/run_report.c).
 *
 * Invariants: the body fits GitHub's limits and ends with its pr marker,
 * whose body-sha is kb_body_hash of the body; the check summary fits its
 * limit; scrubbing removes the machine-only fields.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "report/comments.h"
#include "report/markdown.h"
#include "report/pr_body.h"
#include "report/run_report.h"
#include "verifier/evidence.h"
#include "fuzz.h"

#include <cjson/cJSON.h>

static void check_pr_body(const cJSON *ev)
{
	struct kb_speedup_point hist[] = { { 1764700000, 1.1 }, { 1764700600, 2.5 } };
	struct kb_pr_report r;
	struct strbuf title = STRBUF_INIT, body = STRBUF_INIT;
	struct kb_marker m;
	char hex[65];

	memset(&r, 0, sizeof(r));
	r.job.id = 12;
	r.job.repo = "acme/ops";
	r.job.pr_number = 7;
	r.job.head_sha = "0123456789abcdef0123456789abcdef01234567";
	r.job.operator_path = "ops/relu.py";
	r.evidence = ev;
	r.search.candidates = 40;
	r.search.verified = 9;
	r.search.generations = 4;
	r.history = hist;
	r.history_nr = ARRAY_SIZE(hist);
	r.branch = "kernelbot/pr-7/relu";
	r.kernel_path = "kernelbot/relu/kernel.cu";
	r.evidence_path = "kernelbot/relu/evidence.json";
	FUZZ_CHECK(!kb_pr_title(&title, &r));
	FUZZ_CHECK(title.len && !strchr(title.buf, '\n'));
	if (!kb_pr_body(&body, &r, NULL)) {
		FUZZ_CHECK(body.len <= KB_PR_BODY_MAX_BYTES);
		FUZZ_CHECK(kb_utf8_chars(body.buf, body.len) <= KB_MD_BODY_MAX_CHARS);
		FUZZ_CHECK(!kb_marker_find(body.buf, "pr", &m));
		kb_body_hash(body.buf, hex);
		FUZZ_CHECK(!strcmp(m.body_sha, hex));
	}
	strbuf_release(&title);
	strbuf_release(&body);
}

static void check_check_summary(const cJSON *ev)
{
	struct kb_progress_job pj;
	struct strbuf title = STRBUF_INIT, summary = STRBUF_INIT;

	memset(&pj, 0, sizeof(pj));
	pj.job_id = 12;
	pj.operator_path = "ops/relu.py";
	pj.stage = KB_STAGE_DONE;
	pj.best_speedup = 1.5;
	pj.candidates = 40;
	if (!kb_check_render(&title, &summary, &pj, "0123456789abcdef0123456789abcdef01234567", ev))
		FUZZ_CHECK(summary.len <= KB_MD_CHECK_MAX_CHARS);
	strbuf_release(&title);
	strbuf_release(&summary);
}

/* report.md of `kernelbot run`, which goes into the bot's pull request too. */
static void check_run_report(const cJSON *ev)
{
	struct kb_run_report r;
	struct strbuf md = STRBUF_INIT;

	memset(&r, 0, sizeof(r));
	r.operator_path = "ops/relu.py";
	r.operator_name = "relu";
	r.out_dir = "out";
	r.kernel_file = "kernel.cu";
	r.backend = "cuda";
	r.seeds = 3;
	r.evidence = ev;
	r.tuning.family = "pointwise";
	r.tuning.kind = "pointwise";
	r.tuning.point = "block=256";
	r.tuning.space_size = 6;
	r.tuning.tried = 6;
	r.tuning.verified = 5;
	kb_run_report_markdown(&md, &r);
	FUZZ_CHECK(md.len);
	strbuf_release(&md);
}

int kb_fuzz_evidence(const uint8_t *data, size_t size)
{
	cJSON *ev = cJSON_ParseWithLength((const char *)data, size);
	FILE *fp = kb_fuzz_null();

	kb_fuzz_init();
	if (!ev)
		return 0;
	kb_evidence_verdict(ev);
	kb_evidence_print_reasons(ev, fp);
	kb_evidence_print_summary(ev, fp);
	kb_evidence_print_table(ev, fp);
	if (cJSON_IsObject(ev)) {
		check_pr_body(ev);
		check_check_summary(ev);
		check_run_report(ev);
	}
	kb_evidence_scrub(ev);
	FUZZ_CHECK(!cJSON_GetObjectItemCaseSensitive(ev, "operator_log"));
	FUZZ_CHECK(!cJSON_GetObjectItemCaseSensitive(ev, "log_tail"));
	FUZZ_CHECK(!cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "kernelbot"), "build"),
		"errors"));
	kb_evidence_print_summary(ev, fp);
	cJSON_Delete(ev);
	return 0;
}

KB_FUZZ_ENTRY(evidence)
