#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "report/torch_op.h"
#include "report/wire.h"
#include "verifier/wiring.h"

#include <cjson/cJSON.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * The wired kernel's pieces that need no torch: ops.py from a verified
 * evidence (verified classes, identifiers, the custom_op signature and the
 * Library schema), the wiring check's record taken strictly (hostile
 * fields dropped, a claimed "wired" not taken on faith), and the pull
 * request's section from it.
 */

static const char evidence_text[] =
	"{\"verdict\": \"verified\", \"environment\": {\"backend\": \"cpu\"},"
	" \"operator\": {\"pass\": \"forward\", \"n_outputs\": 2},"
	" \"configs\": ["
	"  {\"name\": \"own\", \"inputs\": [{\"name\": \"input0\", \"shape\": [8, 256], \"dtype\": \"float32\"},"
	"    {\"name\": \"scale\", \"shape\": [], \"dtype\": \"float64\", \"scalar\": true},"
	"    {\"name\": \"param:fc.weight\", \"shape\": [512, 256], \"dtype\": \"float32\"},"
	"    {\"name\": \"param:fc-weight\", \"shape\": [3], \"dtype\": \"float16\"}]},"
	"  {\"name\": \"half\", \"inputs\": [{\"name\": \"input0\", \"shape\": [4, 256], \"dtype\": \"float32\"},"
	"    {\"name\": \"scale\", \"shape\": [], \"dtype\": \"float64\", \"scalar\": true},"
	"    {\"name\": \"param:fc.weight\", \"shape\": [512, 256], \"dtype\": \"float32\"},"
	"    {\"name\": \"param:fc-weight\", \"shape\": [3, 1], \"dtype\": \"bfloat16\"}]}]}";

static void test_ops_py(void **state)
{
	struct kb_torch_op op;
	struct strbuf out = STRBUF_INIT, why = STRBUF_INIT;
	cJSON *ev = cJSON_Parse(evidence_text);

	(void)state;
	kb_torch_op_init(&op);
	assert_int_equal(kb_torch_op_from_evidence(&op, ev, "3-fused.mlp", &why), 0);
	assert_string_equal(op.name, "op_3_fused_mlp");
	assert_int_equal(op.nr_inputs, 4);
	assert_int_equal(op.inputs[1].kind, KB_OP_FLOAT);
	/* two names that sanitise alike stay apart */
	assert_string_equal(op.inputs[2].arg, "param_fc_weight");
	assert_string_equal(op.inputs[3].arg, "param_fc_weight_3");
	kb_torch_op_render(&out, &op);
	/* the batch varied, the features did not */
	assert_non_null(strstr(out.buf, "    (\"input0\", \"tensor\", (\"float32\",), (2,), {1: 256}),\n"));
	assert_non_null(strstr(out.buf, "    (\"param:fc.weight\", \"tensor\", (\"float32\",), (2,), {0: 512, 1: 256}),\n"));
	assert_non_null(strstr(out.buf, "    (\"scale\", \"float\", (), (), {}),\n"));
	/* two ranks verified: no size is fixed */
	assert_non_null(strstr(out.buf, "(\"param:fc-weight\", \"tensor\", (\"float16\",\"bfloat16\",), (1,2,), {}),"));
	assert_non_null(strstr(out.buf, "    def op(input0: torch.Tensor, scale: float, param_fc_weight: torch.Tensor, "
				   "param_fc_weight_3: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:\n"));
	assert_non_null(strstr(out.buf, "lib.define(\"op_3_fused_mlp(Tensor input0, float scale, Tensor param_fc_weight, "
				   "Tensor param_fc_weight_3) -> (Tensor, Tensor)\")"));
	assert_non_null(strstr(out.buf, "def backward_op(input0: torch.Tensor, scale: float, param_fc_weight: "
				   "torch.Tensor, param_fc_weight_3: torch.Tensor, grad0: torch.Tensor, grad1: "
				   "torch.Tensor) -> List[torch.Tensor]:"));
	assert_non_null(strstr(out.buf, "\ndef op_3_fused_mlp(*args):\n"));
	/* every slot filled: no "@NAME" is left (decorators are lower case) */
	for (const char *at = strchr(out.buf, '@'); at; at = strchr(at + 1, '@'))
		assert_false(at[1] >= 'A' && at[1] <= 'Z');
	strbuf_release(&out);

	/* what ops.py cannot name is refused */
	cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
		cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ev, "configs"), 1), "inputs"), 0),
		"dtype", cJSON_CreateString("torch.float32); import os; ("));
	assert_int_equal(kb_torch_op_from_evidence(&op, ev, "x", &why), -1);
	assert_non_null(strstr(why.buf, "which ops.py cannot name"));
	strbuf_reset(&why);
	cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "operator"), "pass",
					       cJSON_CreateString("backward"));
	assert_int_equal(kb_torch_op_from_evidence(&op, ev, "x", &why), -1);
	assert_non_null(strstr(why.buf, "backward pass"));
	kb_torch_op_release(&op);
	strbuf_release(&why);
	cJSON_Delete(ev);
}

static void test_sanitize(void **state)
{
	const char *hostile =
		"{\"verdict\": \"wired\", \"implementation\": \"custom_op\\\"; rm\", \"extra\": \"x\","
		" \"configs\": [{\"config\": \"own ghp_0123456789abcdef0123456789abcdef0123\", \"seed\": 0,"
		"   \"kernel_calls\": 1, \"outputs_max_abs\": 1e-7, \"grads_max_abs\": -1, \"gradients\": 2.5,"
		"   \"buffers_ok\": true, \"eval_ok\": true, \"ok\": true, \"note\": \"dropped\"},"
		"  {\"config\": \"half\", \"seed\": 1, \"kernel_calls\": 0, \"buffers_ok\": true, \"eval_ok\": true,"
		"   \"ok\": true}],"
		" \"fallback\": {\"dtype\": \"float64\", \"kernel_calls\": 0, \"ok\": true},"
		" \"attributes\": {\"\": {\"scale\": 0.5, \"mode\": \"tanh\"}, \"fc\": {\"dims\": [2, 3]}},"
		" \"tests\": {\"ran\": true, \"passed\": 3, \"failed\": 1e30, \"skipped\": \"2\"}}";
	cJSON *raw = cJSON_Parse(hostile), *w = kb_wiring_sanitize(raw), *c0, *t;
	char *text = cJSON_PrintUnformatted(w);

	(void)state;
	/* a config with no kernel call is no proof: not wired, whatever the record says */
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "verdict")), "mismatch");
	assert_null(cJSON_GetObjectItemCaseSensitive(w, "implementation"));
	assert_null(cJSON_GetObjectItemCaseSensitive(w, "extra"));
	c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(w, "configs"), 0);
	assert_null(strstr(text, "ghp_0123456789"));
	assert_null(cJSON_GetObjectItemCaseSensitive(c0, "note"));
	assert_null(cJSON_GetObjectItemCaseSensitive(c0, "gradients"));
	assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c0, "grads_max_abs")));
	t = cJSON_GetObjectItemCaseSensitive(w, "tests");
	assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "passed")), 3);
	assert_null(cJSON_GetObjectItemCaseSensitive(t, "failed"));
	assert_null(cJSON_GetObjectItemCaseSensitive(t, "skipped"));
	free(text);
	cJSON_Delete(w);
	/* the second config called the kernel too: now it is wired */
	cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(raw, "configs"), 1),
					       "kernel_calls", cJSON_CreateNumber(2));
	w = kb_wiring_sanitize(raw);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "verdict")), "wired");
	text = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(w, "attributes"));
	assert_string_equal(text, "{\"\":{\"scale\":0.5,\"mode\":\"tanh\"},\"fc\":{\"dims\":[2,3]}}");
	free(text);
	cJSON_Delete(w);
	/* settings no guard can compare, named or dropped: agreeing runs, but not wired */
	{
		static const char *const bad[] = {
			"{\"\": {\"x\": {\"nested\": 1}}}", "{\"a b\": {\"x\": 1}}", "{\"\": {\"x-y\": 1}}",
			"{\"\": {\"token\": \"ghp_0123456789abcdef0123456789abcdef0123\"}}", "[1]",
		};
		cJSON *keep = cJSON_DetachItemFromObjectCaseSensitive(raw, "attributes");

		for (size_t k = 0; k <= ARRAY_SIZE(bad); k++) {
			if (k < ARRAY_SIZE(bad))
				cJSON_AddItemToObject(raw, "attributes", cJSON_Parse(bad[k]));
			else
				cJSON_AddItemToObject(raw, "attributes_unknown", cJSON_Parse("[\"mask (Tensor)\"]"));
			w = kb_wiring_sanitize(raw);
			assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "verdict")),
					    "unguarded");
			cJSON_Delete(w);
			cJSON_DeleteItemFromObjectCaseSensitive(raw, "attributes");
		}
		cJSON_DeleteItemFromObjectCaseSensitive(raw, "attributes_unknown");
		cJSON_AddItemToObject(raw, "attributes", keep);
	}
	/* an eval-mode forward or buffers that differ: no proof, whatever "ok" says */
	for (int k = 0; k < 2; k++) {
		cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(raw, "configs"), 1);
		const char *key = k ? "buffers_ok" : "eval_ok";

		cJSON_ReplaceItemInObjectCaseSensitive(c1, key, cJSON_CreateFalse());
		w = kb_wiring_sanitize(raw);
		assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "verdict")), "mismatch");
		cJSON_Delete(w);
		cJSON_ReplaceItemInObjectCaseSensitive(c1, key, cJSON_CreateTrue());
	}
	/* a fallback that called the kernel is no fallback */
	cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(raw, "fallback"), "kernel_calls",
					       cJSON_CreateNumber(1));
	w = kb_wiring_sanitize(raw);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "verdict")), "mismatch");
	cJSON_Delete(w);
	cJSON_Delete(raw);
	/* no record at all */
	w = kb_wiring_sanitize(NULL);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "verdict")), "error");
	cJSON_Delete(w);
}

static void test_markdown(void **state)
{
	const char *rec =
		"{\"verdict\": \"wired\", \"implementation\": \"library\", \"module\": \"src/m|x.py\","
		" \"class\": \"Block\", \"import_line\": 5, \"guard_line\": 15, \"call\": \"x, self.w\","
		" \"op_dir\": \"kernelbot/lg\", \"build\": \"No setup.py.\", \"configs_other_init\": 2,"
		" \"configs\": [{\"config\": \"own|<b>\", \"seed\": 0, \"kernel_calls\": 1,"
		"   \"outputs_max_abs\": 1e-6, \"grads_max_abs\": 0, \"ok\": true}],"
		" \"fallback\": {\"dtype\": \"float64\", \"kernel_calls\": 0, \"ok\": true},"
		" \"tests\": {\"ran\": true, \"passed\": 2, \"failed\": 0, \"skipped\": 1, \"errors\": 0,"
		"   \"kernel_calls\": 4}, \"tests_selection\": [\"tests/test_m.py\"]}";
	cJSON *w = cJSON_Parse(rec);
	struct strbuf md = STRBUF_INIT;

	(void)state;
	kb_wire_markdown(&md, w);
	assert_non_null(strstr(md.buf, "### Wired into the model"));
	assert_non_null(strstr(md.buf, "(line 5), two lines at the top of `forward` (line 15)"));
	assert_non_null(strstr(md.buf, "**wired**: 1 of 1 config and seed runs agree"));
	assert_non_null(strstr(md.buf, "a float64 call ran the original code; 2 verified configs"));
	assert_non_null(strstr(md.buf, "**2 passed, 0 failed**, 1 skipped, 0 errors; the kernel ran 4 times."));
	/* the table stays a table */
	assert_null(strstr(md.buf, "own|<b>"));
	cJSON_Delete(w);
	strbuf_reset(&md);
	kb_wire_markdown(&md, NULL);
	assert_int_equal(md.len, 0);
	strbuf_release(&md);
}

/* kb_torch_op_speed_gate on n timed configs of one input: numels and speedups. */
static int gate_of(struct kb_torch_op *op, const int *numel, const double *speedup, size_t n,
		   double min, struct strbuf *why)
{
	cJSON *ev = cJSON_CreateObject(), *configs = cJSON_AddArrayToObject(ev, "configs");
	int rc;

	for (size_t i = 0; i < n; i++) {
		cJSON *c = cJSON_CreateObject(), *in = cJSON_CreateObject(), *shape = cJSON_CreateArray();
		char name[16];

		xsnprintf(name, sizeof(name), "c%zu", i);
		cJSON_AddStringToObject(c, "name", name);
		cJSON_AddStringToObject(in, "name", "input0");
		cJSON_AddStringToObject(in, "dtype", "float32");
		cJSON_AddItemToArray(shape, cJSON_CreateNumber(numel[i]));
		cJSON_AddItemToObject(in, "shape", shape);
		cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "inputs"), in);
		if (speedup[i] > 0)
			cJSON_AddNumberToObject(cJSON_AddObjectToObject(c, "timing"), "speedup_eager", speedup[i]);
		cJSON_AddItemToArray(configs, c);
	}
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(ev, "operator"), "n_outputs", 1);
	kb_torch_op_init(op);
	assert_int_equal(kb_torch_op_from_evidence(op, ev, "gate", why), 0);
	rc = kb_torch_op_speed_gate(op, ev, min, why);
	cJSON_Delete(ev);
	return rc;
}

static void test_speed_gate(void **state)
{
	/* unsorted; 300 twice (one slow: that size is not fast); 50 untimed (left out) */
	const int numel[] = { 400, 100, 300, 200, 300, 50, 500 };
	const double fast[] = { 1.5, 2.0, 1.1, 1.2, 0.9, 0, 1.0 };
	const double slow[] = { 0.5, 0.2, 0.3, 0.9, 0.4, 0, 0.1 };
	struct kb_torch_op op;
	struct strbuf why = STRBUF_INIT, py = STRBUF_INIT;
	cJSON *j;
	char *text;

	(void)state;
	assert_int_equal(gate_of(&op, numel, fast, ARRAY_SIZE(numel), 1.0, &why), 0);
	assert_int_equal(op.nr_speed, 1);
	assert_string_equal(op.speed[0].dtype, "float32");
	/* 100, 200 fast from the smallest: open below; 300 slow; 400, 500 fast to the largest: open above */
	assert_int_equal(op.speed[0].nr_ranges, 2);
	assert_true(op.speed[0].ranges[0].lo == 0 && op.speed[0].ranges[0].hi == 200);
	assert_true(op.speed[0].ranges[1].lo == 400 && op.speed[0].ranges[1].hi == -1);
	kb_torch_op_render(&py, &op);
	assert_non_null(strstr(py.buf, "MIN_SPEEDUP = 1\nFASTER = {\n    \"float32\": ((0, 200), (400, None)),\n}\n"));
	j = kb_torch_op_speed_json(&op);
	text = cJSON_PrintUnformatted(j);
	assert_string_equal(text, "{\"min_speedup\":1,\"faster\":{\"float32\":[[0,200],[400,null]]}}");
	free(text);
	cJSON_Delete(j);
	kb_torch_op_release(&op);

	/* slower everywhere: refused with the best figure named */
	assert_int_equal(gate_of(&op, numel, slow, ARRAY_SIZE(numel), 1.0, &why), KB_ENOTSUPPORTED);
	assert_non_null(strstr(why.buf, "below 1.00x the module's own code on every timed config (best 0.90x at 'c3'; [bot] wire_min_speedup)"));
	kb_torch_op_release(&op);
	/* no gate: nothing asked of the evidence */
	strbuf_reset(&why);
	assert_int_equal(gate_of(&op, numel, slow, ARRAY_SIZE(numel), 0, &why), 0);
	assert_null(kb_torch_op_speed_json(&op));
	strbuf_reset(&py);
	kb_torch_op_render(&py, &op);
	assert_non_null(strstr(py.buf, "MIN_SPEEDUP = 0\nFASTER = None\n"));
	kb_torch_op_release(&op);
	/* nothing timed */
	assert_int_equal(gate_of(&op, numel, (const double[]){ 0, 0, 0, 0, 0, 0, 0 }, ARRAY_SIZE(numel), 1.0, &why),
			 KB_ENOTSUPPORTED);
	assert_non_null(strstr(why.buf, "no config of the evidence was timed"));
	kb_torch_op_release(&op);
	strbuf_release(&why);
	strbuf_release(&py);
}

static void test_markdown_speed_gate(void **state)
{
	const char *rec =
		"{\"verdict\": \"wired\", \"implementation\": \"library\", \"module\": \"m.py\","
		" \"class\": \"Block\", \"import_line\": 5, \"guard_line\": 15, \"call\": \"x\","
		" \"op_dir\": \"kernelbot/lg\", \"build\": \"\","
		" \"speed_gate\": {\"min_speedup\": 1, \"faster\": {\"float32\": [[0, 200], [400, null]]}},"
		" \"attributes\": {\"\": {\"scale\": 0.5}, \"fc\": {\"in_features\": 256}},"
		" \"configs\": [{\"config\": \"a\", \"seed\": 0, \"kernel_calls\": 1, \"ok\": true, \"used\": true},"
		"   {\"config\": \"b\", \"seed\": 0, \"kernel_calls\": 1, \"ok\": true, \"used\": false}],"
		" \"fallback\": {\"dtype\": \"float64\", \"kernel_calls\": 0, \"ok\": true}}";
	cJSON *w = cJSON_Parse(rec);
	struct strbuf md = STRBUF_INIT;

	(void)state;
	kb_wire_markdown(&md, w);
	assert_non_null(strstr(md.buf, "**Speed gate**: the module calls the kernel only where the evidence timed it "
				  "at 1.00x its own code or faster: `float32` arguments of up to 200 elements or "
				  "of 400 elements or more"));
	assert_non_null(strstr(md.buf, "The kernel is used on 1 of the 2 config and seed runs below."));
	assert_non_null(strstr(md.buf, "| no: slower here |"));
	assert_non_null(strstr(md.buf, "**Settings guard**: the kernel computes with the verified module's settings "
				  "baked in, so `ops.configured(self)` lets it run only in a module built alike: "
				  "`scale` = `0.5`, `fc.in_features` = `256`.\n"));
	cJSON_Delete(w);
	strbuf_reset(&md);
	w = cJSON_Parse("{\"verdict\": \"not_wired\", \"module\": \"m.py\", \"class\": \"B\","
			" \"reasons\": [{\"message\": \"it measured below 1.00x <b>\"}]}");
	kb_wire_markdown(&md, w);
	assert_non_null(strstr(md.buf, "### Not wired into the model\n\n`m.py`: `B` is left unchanged: it "
				  "measured below 1.00x"));
	assert_null(strstr(md.buf, "<b>"));
	cJSON_Delete(w);
	strbuf_release(&md);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ops_py),
		cmocka_unit_test(test_sanitize),
		cmocka_unit_test(test_markdown),
		cmocka_unit_test(test_speed_gate),
		cmocka_unit_test(test_markdown_speed_gate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
