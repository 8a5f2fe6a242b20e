#include "core/common.h"
#include "core/strbuf.h"
#include "report/comments.h"
#include "report/passes.h"
#include "report/pr_body.h"

#include <cjson/cJSON.h>
#include <math.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * A job of both passes in the texts (report/passes.h): the pull request's
 * forward, backward and forward+backward rows over the configs both passes
 * timed (matched by name and parameters), the sums behind them, the n/a
 * when no config matches, the backward kernel's Reproduce command and what
 * apply() differentiates with; a job whose backward found nothing says so
 * and shows no sums; the progress comment names the backward pass.
 */

/* A config's evidence: name, params and median times (kernel, eager). */
static void add_config(cJSON *configs, const char *name, int n, double kernel_ms, double eager_ms)
{
	cJSON *c = cJSON_CreateObject(), *t = cJSON_AddObjectToObject(c, "timing");

	cJSON_AddNumberToObject(c, "index", cJSON_GetArraySize(configs));
	cJSON_AddStringToObject(c, "name", name);
	cJSON_AddStringToObject(c, "kind", "rk");
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(c, "params"), "n", n);
	cJSON_AddItemToObject(c, "inputs", cJSON_Parse("[{\"name\": \"x\", \"shape\": [4, 8], \"dtype\": \"float32\"}]"));
	cJSON_AddItemToObject(c, "outputs", cJSON_Parse("[{\"shape\": [4, 8], \"dtype\": \"float32\"}]"));
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(t, "kernel"), "median_ms", kernel_ms);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(t, "eager"), "median_ms", eager_ms);
	cJSON_AddNumberToObject(t, "speedup_eager", eager_ms / kernel_ms);
	cJSON_AddItemToArray(configs, c);
}

static cJSON *evidence(const char *pass)
{
	cJSON *ev = cJSON_CreateObject();

	cJSON_AddStringToObject(ev, "verdict", "verified");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(ev, "operator"), "pass", pass);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(ev, "summary"), "seeds", 1);
	cJSON_AddStringToObject(cJSON_AddObjectToObject(ev, "environment"), "backend", "cpu");
	cJSON_AddArrayToObject(ev, "configs");
	return ev;
}

static void report(struct kb_pr_report *r, const cJSON *fwd, const struct kb_passes_report *p)
{
	memset(r, 0, sizeof(*r));
	r->job.id = 4;
	r->job.repo = "acme/ops";
	r->job.pr_number = 1;
	r->job.head_sha = "0123456789abcdef0123456789abcdef01234567";
	r->job.operator_path = "ops/scale_shift";
	r->evidence = fwd;
	r->branch = "kernelbot/pr-1/scale_shift";
	r->kernel_path = "kernelbot/scale_shift/kernel.cpp";
	r->evidence_path = "kernelbot/scale_shift/evidence.json";
	r->passes = p;
}

static void test_three_rows(void **state)
{
	cJSON *fwd = evidence("forward"), *bwd = evidence("backward");
	struct kb_passes_report p = { bwd, "kernelbot/scale_shift/backward/kernel.cpp", NULL };
	struct kb_pr_report r;
	struct kb_pass_times f, b;
	struct strbuf body = STRBUF_INIT;

	(void)state;
	/* a: in both; b: the same name, other parameters (other shapes); c: forward only */
	add_config(cJSON_GetObjectItem(fwd, "configs"), "a", 1, 0.5, 1.0);
	add_config(cJSON_GetObjectItem(fwd, "configs"), "b", 2, 1.5, 3.0);
	add_config(cJSON_GetObjectItem(fwd, "configs"), "c", 3, 9.0, 9.0);
	add_config(cJSON_GetObjectItem(bwd, "configs"), "a", 1, 1.0, 4.0);
	add_config(cJSON_GetObjectItem(bwd, "configs"), "b", 5, 2.0, 2.0);
	assert_int_equal(kb_passes_times(fwd, bwd, &f, &b), 1);
	assert_true(f.kernel_ms == 0.5 && f.eager_ms == 1.0 && b.kernel_ms == 1.0 && b.eager_ms == 4.0);

	report(&r, fwd, &p);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_non_null(strstr(body.buf, "### Forward and backward\n"));
	assert_non_null(strstr(body.buf, "| pass | eager ms | kernel ms | speedup |\n"));
	assert_non_null(strstr(body.buf, "| forward | 1.000 | 0.5 | 2.00x |\n"));
	assert_non_null(strstr(body.buf, "| backward | 4.000 | 1.000 | 4.00x |\n"));
	/* the sum of the two kernel times against the sum of the two baselines */
	assert_non_null(strstr(body.buf, "| **forward+backward** | 5.000 | 1.500 | 3.33x |\n"));
	assert_non_null(strstr(body.buf, "summed over the 1 config both passes timed (`a`)"));
	assert_non_null(strstr(body.buf, "the sum of the two kernel times against the sum of the two baselines"));
	assert_non_null(strstr(body.buf, "The backward's baseline is eager autograd"));
	assert_non_null(strstr(body.buf, "Forward and backward together: **3.33x**"));
	/* both kernels reproduced, and apply() uses the backward kernel */
	assert_non_null(strstr(body.buf, "kernelbot bench ops/scale_shift kernelbot/scale_shift/kernel.cpp --backend cpu --seeds 1"));
	assert_non_null(strstr(body.buf, "kernelbot bench ops/scale_shift kernelbot/scale_shift/backward/kernel.cpp "
				      "--backend cpu --pass backward --seeds 1 --max-configs 2"));
	assert_non_null(strstr(body.buf, "its backward is the backward kernel's `kb_backward` "
				      "(`kernelbot/scale_shift/backward/kernel.cpp`)"));
	assert_null(strstr(body.buf, "No backward kernel"));

	/* no config timed by both: each pass on its own, and no sum of different shapes */
	cJSON_DeleteItemFromArray(cJSON_GetObjectItem(bwd, "configs"), 0);
	assert_int_equal(kb_passes_times(fwd, bwd, &f, &b), 0);
	assert_int_equal(f.configs, 3);
	assert_true(f.kernel_ms == 11.0 && b.kernel_ms == 2.0);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_non_null(strstr(body.buf, "| **forward+backward** | n/a | n/a | n/a |\n"));
	assert_non_null(strstr(body.buf, "timed on different configs"));
	assert_null(strstr(body.buf, "Forward and backward together"));
	cJSON_Delete(fwd);
	cJSON_Delete(bwd);
	strbuf_release(&body);
}

static void test_no_backward_kernel(void **state)
{
	cJSON *fwd = evidence("forward");
	struct kb_passes_report p = { NULL, NULL, "The backward search found no verified kernel: no template" };
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT;

	(void)state;
	add_config(cJSON_GetObjectItem(fwd, "configs"), "a", 1, 0.5, 1.0);
	report(&r, fwd, &p);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_non_null(strstr(body.buf, "### Forward and backward\n"));
	assert_non_null(strstr(body.buf, "**No backward kernel:** The backward search found no verified kernel: "
				      "no template. The binding's `apply()` runs this forward kernel with the "
				      "reference's backward"));
	assert_non_null(strstr(body.buf, "No backward kernel passed: the binding pairs this kernel with the "
				      "reference's backward"));
	assert_null(strstr(body.buf, "forward+backward"));
	assert_null(strstr(body.buf, "--pass backward"));
	assert_non_null(strstr(body.buf, "its backward is the reference's (PyTorch autograd"));

	/* a forward job: no section, and apply() still has the reference's backward */
	r.passes = NULL;
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_null(strstr(body.buf, "Forward and backward"));
	assert_non_null(strstr(body.buf, "its backward is the reference's (PyTorch autograd"));
	cJSON_Delete(fwd);
	strbuf_release(&body);
}

static void test_progress_backward_pass(void **state)
{
	struct kb_progress_job j;
	struct kb_progress p;
	struct strbuf out = STRBUF_INIT;

	(void)state;
	memset(&j, 0, sizeof(j));
	j.job_id = 4;
	j.operator_path = "ops/scale_shift";
	j.stage = KB_STAGE_TUNING;
	j.tune_done = 1;
	j.tune_total = 2;
	j.backward_pass = true;
	memset(&p, 0, sizeof(p));
	p.repo = "acme/ops";
	p.pr_number = 1;
	p.head_sha = "0123456789abcdef0123456789abcdef01234567";
	p.jobs = &j;
	p.nr = 1;
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	assert_non_null(strstr(out.buf, "| tuning 1/2 (backward pass) |"));
	/* once done, the pass is no stage */
	j.stage = KB_STAGE_DONE;
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	assert_null(strstr(out.buf, "(backward pass)"));
	strbuf_release(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_three_rows),
		cmocka_unit_test(test_no_backward_kernel),
		cmocka_unit_test(test_progress_backward_pass),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
