/*
 * verifier/evidence.c on evidence from outside: the printers (and
 * report.md's, report/run_report.c) with numbers no int holds (issue 13's fuzzing: a float-to-int overflow, which gcc's
 * UBSan cannot see without -fsanitize=float-cast-overflow) and the scrub
 * with repeated keys and keys that redaction cleans into a removed one.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "report/run_report.h"
#include "verifier/evidence.h"

#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

/* What a printer writes for the JSON text, as a new string. */
static char *printed(void (*print)(const cJSON *, FILE *), const char *json)
{
	cJSON *ev = cJSON_Parse(json);
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);

	assert_non_null(ev);
	assert_non_null(fp);
	print(ev, fp);
	fclose(fp);
	cJSON_Delete(ev);
	return buf;
}

static void test_summary_counts_saturate(void **state)
{
	char *out = printed(kb_evidence_print_summary, "{\"summary\":{\"configs\":116360220765}}");

	assert_string_equal(out, "verdict: \nchecked: 2147483647 configs x 0 seeds\n");
	free(out);
	out = printed(kb_evidence_print_summary,
		      "{\"verdict\":\"verified\",\"summary\":{\"configs\":-1e300,\"seeds\":1e999,"
		      "\"trials\":-0.5}}");
	assert_non_null(strstr(out, "checked: -2147483648 configs x 2147483647 seeds\n"));
	free(out);
	/* the table's index column the same way */
	out = printed(kb_evidence_print_table,
		      "{\"configs\":[{\"index\":1e20,\"timing\":{\"speedup_eager\":2}}]}");
	assert_non_null(strstr(out, "#2147483647 "));
	free(out);
}

/* report.md reads the same summary: the same counts, saturated */
static void test_run_report_counts_saturate(void **state)
{
	cJSON *ev = cJSON_Parse("{\"verdict\":\"verified\",\"summary\":{\"configs\":116360220765,"
				"\"seeds\":-1e20,\"geomean_speedup_eager\":2}}");
	struct kb_run_report r = {
		"ops/relu.py", "relu", "out", "kernel.cu", "cuda", NULL, 3, ev,
		{ "pointwise", "pointwise", "block=256", 6, 6, 5, 0, 0, 0, false, false, false, 1 },
		NULL, NULL, 0
	};
	struct strbuf md = STRBUF_INIT;

	assert_non_null(ev);
	kb_run_report_markdown(&md, &r);
	/* no per-config timings: the summary's geometric mean is the headline */
	assert_non_null(strstr(md.buf, "**2.00x** faster than torch eager (geometric mean over the configs)"));
	assert_non_null(strstr(md.buf, "; 2147483647 configs x -2147483648 seeds passed"));
	strbuf_release(&md);
	cJSON_Delete(ev);
}

static void test_scrub_every_copy(void **state)
{
	cJSON *ev = cJSON_Parse("{\"verdict\":\"rejected\",\"operator_log\":\"/state/a.log\","
				"\"operator_log\":\"/state/b.log\",\"log_tail\":\"x\",\"log_tail\":\"y\","
				"\"o\\u000b\\u000bperator_log\":\"/state/c.log\","
				"\"kernelbot\":{\"build\":{\"errors\":\"e1\",\"err\\u0001ors\":\"e2\"}}}");
	char *text;

	assert_non_null(ev);
	kb_evidence_scrub(ev);
	text = cJSON_PrintUnformatted(ev);
	assert_null(strstr(text, "operator"));
	assert_null(strstr(text, "log_tail"));
	assert_null(strstr(text, "err"));
	assert_non_null(strstr(text, "\"verdict\":\"rejected\""));
	free(text);
	kb_evidence_scrub(ev); /* idempotent */
	cJSON_Delete(ev);
	kb_evidence_scrub(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_summary_counts_saturate),
		cmocka_unit_test(test_run_report_counts_saturate),
		cmocka_unit_test(test_scrub_every_copy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
