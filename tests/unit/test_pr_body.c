#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "report/comments.h"
#include "report/headline.h"
#include "report/markdown.h"
#include "report/pr_body.h"
#include "report/run_report.h"
#include "core/hash.h"
#include "verifier/evidence.h"

#include <cjson/cJSON.h>
#include <math.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * What the maintainer sees: the bot's pull request (title, body, marker,
 * size limit), the progress comment, the review comment and the check run
 * and status texts, rendered from the evidence files in tests/report/
 * (pr_evidence_cpu.json is a real `kernelbot bench --backend cpu` result;
 * pr_evidence_cuda.json the same shape with H200 figures and a compile
 * baseline). KB_TEST_DUMP=DIR writes the rendered texts there to read.
 */

static const char *top(void)
{
	const char *t = getenv("KB_TOP");

	return t && *t ? t : ".";
}

static cJSON *load_evidence(const char *name)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	cJSON *ev;

	strbuf_addf(&path, "%s/tests/report/%s", top(), name);
	assert_int_equal(strbuf_read_file(&text, path.buf, 0), 0);
	ev = cJSON_Parse(text.buf);
	assert_non_null(ev);
	strbuf_release(&path);
	strbuf_release(&text);
	return ev;
}

static void dump(const char *name, const char *text)
{
	const char *dir = getenv("KB_TEST_DUMP");
	struct strbuf path = STRBUF_INIT;

	if (!dir || !*dir)
		return;
	strbuf_addf(&path, "%s/%s", dir, name);
	kb_write_file_atomic(path.buf, text, strlen(text));
	strbuf_release(&path);
}

static const struct kb_speedup_point history[] = {
	{ 1764670000, 0.8 }, { 1764670030, 1.2 }, { 1764670095, 1.2 },
	{ 1764670300, 1.75 }, { 1764670700, 1.97 },
};

static void cuda_report(struct kb_pr_report *r, const cJSON *ev)
{
	memset(r, 0, sizeof(*r));
	r->job.id = 17;
	r->job.repo = "octo/models";
	r->job.pr_number = 12;
	r->job.head_sha = "0123456789abcdef0123456789abcdef01234567";
	r->job.operator_path = "tests/operators/kb_softmax.py";
	r->job.state = "done";
	r->evidence = ev;
	r->search.candidates = 48;
	r->search.verified = 31;
	r->search.generations = 6;
	r->search.wall_s = 724;
	r->search.llm_cost_usd = 1.234;
	r->search.proposer = "claude-x (70%), gpt-y (30%)";
	r->history = history;
	r->history_nr = ARRAY_SIZE(history);
	r->branch = "kernelbot/pr-12/kb_softmax";
	r->kernel_path = "kernels/softmax/kernel.cu";
	r->binding_dir = "kernels/softmax";
	r->evidence_path = "kernels/softmax/evidence.json";
}

static void cpu_report(struct kb_pr_report *r, const cJSON *ev)
{
	cuda_report(r, ev);
	r->search.candidates = 9;
	r->search.verified = 4;
	r->search.generations = 9;
	r->search.generations_label = "template points";
	r->search.llm_cost_usd = 0;
	r->search.proposer = "built-in templates";
	r->kernel_path = "tests/kernels/cpu/ok_softmax.cpp";
	r->binding_dir = NULL;
	r->branch = "kernelbot/pr-3/kb_softmax";
	r->evidence_path = NULL;
}

/* An independent UTF-8 check: every sequence well formed, no surrogates, no overlongs. */
static bool valid_utf8(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; i < len;) {
		unsigned c = p[i];
		size_t n;
		unsigned cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
		else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
		else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
		else return false;
		if (i + n > len)
			return false;
		for (size_t k = 1; k < n; k++) {
			if ((p[i + k] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i + k] & 0x3F);
		}
		if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
		    cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += n;
	}
	return true;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* The lines of the table right after heading (up to the first blank line). */
static void table_after(const char *body, const char *heading, struct strbuf *out)
{
	const char *p = strstr(body, heading), *end;

	strbuf_reset(out);
	assert_non_null(p);
	p = strchr(p, '\n');
	assert_non_null(p);
	p += 2; /* the heading's newline and the blank line */
	end = strstr(p, "\n\n");
	assert_non_null(end);
	strbuf_add(out, p, (size_t)(end - p) + 1);
}

static size_t lines_of(const char *s)
{
	return count(s, "\n");
}

/* --- markdown helpers --- */

static void test_markdown_escape(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	kb_md_escape(&sb, "a|b <!-- x --> *y* _z_ `c` [l](u) \\ & #1\nnext\x01");
	assert_string_equal(sb.buf, "a\\|b &lt;!-- x --&gt; \\*y\\* \\_z\\_ \\`c\\` \\[l\\](u) \\\\ &amp; \\#1 next");
	strbuf_reset(&sb);
	/* invalid bytes become U+FFFD; valid multi-byte text is kept */
	kb_md_escape(&sb, "gr\xc3\xb6\xc3\x9f" "e \xff \xed\xa0\x80");
	assert_string_equal(sb.buf, "gr\xc3\xb6\xc3\x9f" "e \xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
	strbuf_reset(&sb);
	kb_md_escape_n(&sb, "日本語テキスト", 3);
	assert_string_equal(sb.buf, "日本語…");

	strbuf_reset(&sb);
	kb_md_code(&sb, "a`b``c|d", true);
	assert_string_equal(sb.buf, "```a`b``c\\|d```");
	strbuf_reset(&sb);
	kb_md_code(&sb, "`x", false);
	assert_string_equal(sb.buf, "`` `x ``");
	strbuf_reset(&sb);
	kb_md_code(&sb, "", false);
	assert_string_equal(sb.buf, "");

	strbuf_reset(&sb);
	kb_md_fence(&sb, "cuda", "x\n```\ny", 7);
	assert_string_equal(sb.buf, "````cuda\nx\n```\ny\n````\n");

	strbuf_reset(&sb);
	kb_md_link(&sb, "#3", "https://github.com/o/r/pull/3");
	assert_string_equal(sb.buf, "[\\#3](https://github.com/o/r/pull/3)");
	strbuf_reset(&sb);
	kb_md_link(&sb, "x", "https://e.com/a) <b>");
	assert_null(strstr(sb.buf, "]("));

	strbuf_reset(&sb);
	kb_md_details_begin(&sb, "a <b> & *c*");
	kb_md_details_end(&sb);
	assert_string_equal(sb.buf, "<details><summary>a &lt;b&gt; &amp; *c*</summary>\n\n\n</details>\n\n");
	strbuf_release(&sb);
}

static void test_utf8_prefix(void **state)
{
	const char *s = "a\xc3\xa9\xf0\x9f\x98\x80z"; /* a é 😀 z: 1+2+4+1 bytes */
	size_t len = strlen(s);
	const size_t want[] = { 0, 1, 1, 3, 3, 3, 3, 7, 8 };

	for (size_t max = 0; max <= len; max++)
		assert_int_equal(kb_utf8_prefix(s, len, SIZE_MAX, max), want[max]);
	assert_int_equal(kb_utf8_prefix(s, len, 2, SIZE_MAX), 3);
	assert_int_equal(kb_utf8_chars(s, len), 4);
	assert_int_equal(kb_utf8_chars("\xff\xfe", 2), 2);

	{
		char buf[32];

		kb_md_fmt_ms(buf, sizeof(buf), 0.5342765);
		assert_string_equal(buf, "0.534");
		kb_md_fmt_ms(buf, sizeof(buf), 10.0907);
		assert_string_equal(buf, "10.09");
		kb_md_fmt_ms(buf, sizeof(buf), NAN);
		assert_string_equal(buf, "n/a");
		kb_md_fmt_duration(buf, sizeof(buf), 724);
		assert_string_equal(buf, "12m 04s");
		kb_md_fmt_duration(buf, sizeof(buf), 7380);
		assert_string_equal(buf, "2h 03m");
		/* a wall time from kernel.json no long holds: saturated, not undefined */
		kb_md_fmt_duration(buf, sizeof(buf), 1e300);
		assert_string_equal(buf, "2562047788015215h 30m");
	}
}

/* --- title --- */

static void test_title(void **state)
{
	cJSON *cuda = load_evidence("pr_evidence_cuda.json");
	cJSON *cpu = load_evidence("pr_evidence_cpu.json");
	struct kb_pr_report r;
	struct strbuf t = STRBUF_INIT;

	/* the headline: the operator's own shapes (1.85x), not the geometric mean over all (1.97x) */
	cuda_report(&r, cuda);
	assert_int_equal(kb_pr_title(&t, &r), 0);
	assert_string_equal(t.buf, "kernelbot: kb_softmax 1.85x faster on its own shapes");

	/* slower than eager on some configs: the title's first words say so */
	cpu_report(&r, cpu);
	assert_int_equal(kb_pr_title(&t, &r), 0);
	assert_string_equal(t.buf, "kernelbot: slower than eager on 9 of 12 configs: kb_softmax, "
			    "no faster kernel found (0.42x on its own shapes)");

	/* one config, none slower: 1.004 prints as 1.00, not "faster" */
	{
		cJSON *one = cJSON_Duplicate(cJSON_GetArrayItem(cJSON_GetObjectItem(cpu, "configs"), 0), true);
		cJSON *t0 = cJSON_GetObjectItem(one, "timing");

		cJSON_ReplaceItemInObject(cpu, "configs", cJSON_CreateArray());
		cJSON_AddItemToArray(cJSON_GetObjectItem(cpu, "configs"), one);
		cJSON_ReplaceItemInObject(t0, "speedup_eager", cJSON_CreateNumber(1.004));
		assert_int_equal(kb_pr_title(&t, &r), 0);
		assert_string_equal(t.buf, "kernelbot: kb_softmax, no faster kernel found (1.00x on its own shapes)");
		cJSON_ReplaceItemInObject(t0, "speedup_eager", cJSON_CreateNumber(1.006));
		assert_int_equal(kb_pr_title(&t, &r), 0);
		assert_string_equal(t.buf, "kernelbot: kb_softmax 1.01x faster on its own shapes");
		/* no config of the operator's own shapes timed: over all configs, and it says so */
		cJSON_ReplaceItemInObject(one, "kind", cJSON_CreateString("double"));
		assert_int_equal(kb_pr_title(&t, &r), 0);
		assert_string_equal(t.buf, "kernelbot: kb_softmax 1.01x faster over all configs");
	}

	cJSON_ReplaceItemInObject(cpu, "summary", cJSON_CreateNull());
	cJSON_ReplaceItemInObject(cpu, "configs", cJSON_CreateArray());
	assert_int_equal(kb_pr_title(&t, &r), 0);
	assert_string_equal(t.buf, "kernelbot: kb_softmax verified kernel (not timed)");
	cJSON_ReplaceItemInObject(cpu, "verdict", cJSON_CreateString("rejected"));
	assert_int_equal(kb_pr_title(&t, &r), 0);
	assert_string_equal(t.buf, "kernelbot: kb_softmax, no verified kernel");

	/* robust-kbench folders name the task */
	kb_pr_operator_name(&t, "ops/layernorm/func_forward.py");
	assert_string_equal(t.buf, "layernorm");
	kb_pr_operator_name(&t, "tasks/mlp_block/");
	assert_string_equal(t.buf, "mlp_block");
	kb_pr_operator_name(&t, "level1/19_ReLU.py");
	assert_string_equal(t.buf, "19_ReLU");

	r.evidence = NULL;
	log_set_level(KB_LOG_OFF);
	assert_int_equal(kb_pr_title(&t, &r), -1);
	strbuf_release(&t);
	cJSON_Delete(cuda);
	cJSON_Delete(cpu);
}

/* --- body --- */

static void check_mermaid(const char *body, size_t want_points)
{
	const char *m = strstr(body, "```mermaid\nxychart-beta\n"), *end, *x, *line;
	size_t cats = 0, vals = 0;

	assert_non_null(m);
	end = strstr(m + 10, "\n```\n");
	assert_non_null(end);
	assert_non_null(strstr(m, "    title \"Best speedup over time\"\n"));
	x = strstr(m, "    x-axis \"");
	assert_true(x && x < end);
	x = strchr(x, '[');
	/* categories are quoted, comma separated */
	for (const char *p = x + 1; *p != ']'; p++)
		if (*p == '"')
			cats++;
	assert_int_equal(cats % 2, 0);
	cats /= 2;
	assert_non_null(strstr(m, "    y-axis \"speedup vs eager (x)\" 0 --> "));
	line = strstr(m, "    line [");
	assert_true(line && line < end);
	{
		const char *p = line + strlen("    line [");
		char *e;

		for (;;) {
			double v = strtod(p, &e);

			assert_true(e != p);
			assert_true(v >= 0 && v < 100);
			vals++;
			p = e;
			if (*p == ']')
				break;
			assert_true(p[0] == ',' && p[1] == ' ');
			p += 2;
		}
	}
	assert_int_equal(cats, vals);
	if (want_points)
		assert_int_equal(vals, want_points);
	/* a second line: eager at 1.0x */
	assert_non_null(strstr(line + 1, "    line [1, 1"));
}

static void test_body_cuda(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	const cJSON *cfg, *ck;
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT, tbl = STRBUF_INIT, want = STRBUF_INIT;
	size_t rows = 0;

	cuda_report(&r, ev);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	dump("pr_body_cuda.md", body.buf);
	assert_true(valid_utf8(body.buf, body.len));
	/* the headline on the operator's own shapes, then the spread: geomean and worst config */
	assert_true(!strncmp(body.buf, "**kernelbot** found a CUDA kernel for `tests/operators/kb_softmax.py` "
			     "that runs **1.85x faster** than PyTorch eager on the operator's own shapes "
			     "(`own(batch_size=16,dim=16384)`). Against torch.compile there: **1.60x**. "
			     "Over all 12 timed configs: **1.97x** geometric mean; the worst config, "
			     "`odd(batch_size=17,dim=16401)`, runs at **1.45x**. Verified on 12 configs × 5 "
			     "seeds.\n\n",
			     strlen("**kernelbot** found a CUDA kernel for `tests/operators/kb_softmax.py` "
				    "that runs **1.85x faster** than PyTorch eager on the operator's own shapes "
				    "(`own(batch_size=16,dim=16384)`). Against torch.compile there: **1.60x**. "
				    "Over all 12 timed configs: **1.97x** geometric mean; the worst config, "
				    "`odd(batch_size=17,dim=16401)`, runs at **1.45x**. Verified on 12 configs × 5 "
				    "seeds.\n\n")));
	/* nothing slower, twelve configs: no warning */
	assert_null(strstr(body.buf, "[!WARNING]"));
	/* the band the figures are promised within: the timings' spread, at least 3% */
	assert_non_null(strstr(body.buf, "Noise band: **±3.26%** (the timings' 95% confidence, at least 3%)"));

	/* speedup table: header, one row per config, geomean */
	table_after(body.buf, "### Speedup", &tbl);
	assert_true(!strncmp(tbl.buf, "| config | eager ms | torch.compile ms | kernel ms | speedup | roofline share |\n"
			     "| --- | --: | --: | --: | --: | --: |\n", 100));
	cJSON_ArrayForEach(cfg, cJSON_GetObjectItem(ev, "configs")) {
		const cJSON *t = cJSON_GetObjectItem(cfg, "timing");
		char e[32], k[32], c[32], se[32], sc[32];

		kb_md_fmt_ms(e, sizeof(e), cJSON_GetObjectItem(cJSON_GetObjectItem(t, "eager"), "median_ms")->valuedouble);
		kb_md_fmt_ms(c, sizeof(c), cJSON_GetObjectItem(cJSON_GetObjectItem(t, "compile"), "median_ms")->valuedouble);
		kb_md_fmt_ms(k, sizeof(k), cJSON_GetObjectItem(cJSON_GetObjectItem(t, "kernel"), "median_ms")->valuedouble);
		kb_md_fmt_speedup(se, sizeof(se), cJSON_GetObjectItem(t, "speedup_eager")->valuedouble);
		kb_md_fmt_speedup(sc, sizeof(sc), cJSON_GetObjectItem(t, "speedup_compile")->valuedouble);
		strbuf_reset(&want);
		strbuf_addf(&want, "| `%s` | %s | %s | %s | %s / %s | ",
			    cJSON_GetObjectItem(cfg, "name")->valuestring, e, c, k, se, sc);
		assert_non_null(strstr(tbl.buf, want.buf));
		rows++;
	}
	assert_int_equal(rows, 12);
	assert_int_equal(lines_of(tbl.buf), 2 + 12 + 1);
	assert_non_null(strstr(tbl.buf, "| **geomean** |  |  |  | **1.97x / 1.57x** |  |\n"));
	assert_non_null(strstr(tbl.buf, "% BW |"));
	assert_null(strstr(body.buf, "torch.compile n/a"));

	/* correctness: every check of the evidence listed as passed */
	assert_non_null(strstr(body.buf, "Verified on **12 configs × 5 seeds** (60 trials"));
	assert_non_null(strstr(body.buf, "Every check passed on every config:"));
	assert_non_null(strstr(body.buf, "float32 atol 1e-04 rtol 1e-04"));
	cJSON_ArrayForEach(ck, cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "configs"), 0), "checks")) {
		strbuf_reset(&want);
		strbuf_addf(&want, "- ✅ `%s`", ck->string);
		assert_non_null(strstr(body.buf, want.buf));
		strbuf_reset(&want);
		strbuf_addf(&want, "- ✅ `%s`: ", ck->string);
		assert_non_null(strstr(body.buf, want.buf));
	}
	assert_non_null(strstr(body.buf, "(12/12 configs)"));
	assert_non_null(strstr(body.buf, "- ✅ `static`"));
	assert_null(strstr(body.buf, "❌"));

	/* details blocks: balanced, and the long parts are in them */
	assert_int_equal(count(body.buf, "<details><summary>"), 4);
	assert_int_equal(count(body.buf, "</details>"), 4);
	assert_non_null(strstr(body.buf, "<details><summary>Timing details"));
	assert_non_null(strstr(body.buf, "<details><summary>Per-config errors (12 configs)</summary>"));
	assert_non_null(strstr(body.buf, "<details><summary>Configs left out (1)</summary>"));
	assert_non_null(strstr(body.buf, "exceeds max\\_numel 16777216"));
	assert_non_null(strstr(body.buf, "<details><summary>Notes from the harness (1)</summary>"));

	/* environment */
	assert_non_null(strstr(body.buf, "| GPU | NVIDIA H200 |"));
	assert_non_null(strstr(body.buf, "| driver | 570.124.06 |"));
	assert_non_null(strstr(body.buf, "| CUDA | 12.8 |"));
	assert_non_null(strstr(body.buf, "| torch | 2.11.0+cu128 |"));
	assert_non_null(strstr(body.buf, "| python | 3.12.9 |"));
	assert_non_null(strstr(body.buf, "| kernelbot | 0.1.0, backend cuda |"));

	/* use and reproduce */
	assert_non_null(strstr(body.buf, "```python\nfrom kernels.softmax.binding import forward\n\nout = forward(input0)\n```"));
	assert_non_null(strstr(body.buf, "float32 [16, 16384]"));
	/* bench prints the table; the same seeds and configs; the verdict and band promised */
	assert_non_null(strstr(body.buf, "```sh\ngit fetch origin kernelbot/pr-12/kb_softmax && git checkout FETCH_HEAD\n"
				   "kernelbot bench tests/operators/kb_softmax.py kernels/softmax/kernel.cu --backend cuda "
				   "--seeds 5 --max-configs 12\n```"));
	assert_non_null(strstr(body.buf, "prints the same table: the verdict `verified` and every config's "
				   "speedup within **±3.26%** of the table above"));
	/* the one config left out, counted in the correctness section, with its reason below */
	assert_non_null(strstr(body.buf, "**1 more config was left out** by the verifier"));

	/* search figures */
	assert_non_null(strstr(body.buf, "| candidates tried | 48 |"));
	assert_non_null(strstr(body.buf, "| verified | 31 (65%) |"));
	assert_non_null(strstr(body.buf, "| generations | 6 |"));
	assert_non_null(strstr(body.buf, "| wall time | 12m 04s |"));
	assert_non_null(strstr(body.buf, "| LLM cost | $1.23 |"));
	assert_non_null(strstr(body.buf, "| proposer | claude-x (70%), gpt-y (30%) |"));

	/* chart: 700 s on an even grid of 24 points, ending at the last best */
	check_mermaid(body.buf, 24);
	assert_non_null(strstr(body.buf, "\"0:00\", "));
	assert_non_null(strstr(body.buf, "\"11:40\"]"));
	assert_non_null(strstr(body.buf, "line [0.80, "));
	assert_non_null(strstr(body.buf, ", 1.97]\n"));

	/* nothing left out at this size */
	assert_null(strstr(body.buf, "Left out"));
	assert_true(body.len < 65536);

	strbuf_release(&body);
	strbuf_release(&tbl);
	strbuf_release(&want);
	cJSON_Delete(ev);
}

/* The Reproduce command pins what the evidence was taken under (--set). */
static void test_reproduce_pins_settings(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cpu.json");
	cJSON *set = cJSON_Parse("{\"tolerances\": {\"float32\": {\"atol\": 1e-05, \"rtol\": 0.0001}},"
				 " \"error_factor\": 16, \"timing\": {\"warmup\": 1, \"min_time_ms\": 5,"
				 " \"max_reps\": 20, \"l2_flush\": false,"
				 " \"baselines\": [\"eager\", \"x;rm -rf ~\"]}}");
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT;

	(void)state;
	cJSON_AddItemToObject(ev, "settings", set);
	cpu_report(&r, ev);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_non_null(strstr(body.buf, "--backend cpu --seeds 5 --max-configs 12 \\\n"
				   "    --set bench.warmup=1 \\\n    --set bench.min_time_ms=5 \\\n"
				   "    --set bench.max_reps=20 \\\n    --set bench.l2_flush=off \\\n"
				   "    --set bench.baselines=eager \\\n    --set harness.atol_fp32=1e-05 \\\n"
				   "    --set harness.rtol_fp32=0.0001 \\\n    --set harness.error_factor=16\n```"));
	/* a name that is no baseline never reaches the shell */
	assert_null(strstr(body.buf, "rm -rf"));
	strbuf_release(&body);
	cJSON_Delete(ev);
}

static void test_body_cpu(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cpu.json");
	const cJSON *cfg;
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT, tbl = STRBUF_INIT, want = STRBUF_INIT;

	cpu_report(&r, ev);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	dump("pr_body_cpu.md", body.buf);
	assert_non_null(strstr(body.buf, "**kernelbot** found no kernel faster than PyTorch eager for "
				   "`tests/operators/kb_softmax.py`: the best verified CPU kernel runs at **0.42x** "
				   "on the operator's own shapes (`own(batch_size=16,dim=16384)`)."));
	assert_non_null(strstr(body.buf, "the worst config, `double:batch_size(batch_size=32,dim=16384)`, "
				   "runs at **0.07x**."));
	assert_non_null(strstr(body.buf, "merging it would not speed the operator up"));
	/* the slower configs, named, beyond a band wide for these noisy timings */
	assert_non_null(strstr(body.buf, "> [!WARNING]\n> **Slower than PyTorch eager on 9 of 12 configs**, "
				   "beyond the noise band (±120%): `own(batch_size=16,dim=16384)` at 0.42x, "));
	assert_non_null(strstr(body.buf, ", … 4 more. Merging it makes the operator slower on those shapes.\n"));
	/* the fast configs are not named among them */
	assert_null(strstr(body.buf, "`seven(batch_size=7,dim=7)` at"));
	assert_null(strstr(body.buf, "Weak evidence"));
	assert_null(strstr(body.buf, "left out** by the verifier"));

	table_after(body.buf, "### Speedup", &tbl);
	assert_int_equal(lines_of(tbl.buf), 2 + 12 + 1);
	cJSON_ArrayForEach(cfg, cJSON_GetObjectItem(ev, "configs")) {
		strbuf_reset(&want);
		strbuf_addf(&want, "| `%s` | ", cJSON_GetObjectItem(cfg, "name")->valuestring);
		assert_non_null(strstr(tbl.buf, want.buf));
	}
	/* no compile baseline: n/a in every row, the reason said once */
	assert_int_equal(count(tbl.buf, " | n/a | "), 12);
	assert_non_null(strstr(tbl.buf, "| **geomean** |  |  |  | **0.40x** |  |"));
	assert_int_equal(count(body.buf, "torch.compile unavailable in torch 1.13.0a0"), 1);
	assert_non_null(strstr(body.buf, "torch.compile n/a: torch.compile unavailable in torch 1.13.0a0 (needs 2.0 or later)."));
	assert_null(strstr(body.buf, " / "));

	assert_non_null(strstr(body.buf, "| CPU | AMD EPYC |"));
	assert_non_null(strstr(body.buf, "| CUDA | n/a |"));
	assert_non_null(strstr(body.buf, "| template points | 9 |"));
	assert_non_null(strstr(body.buf, "| LLM cost | none |"));
	assert_non_null(strstr(body.buf, "| proposer | built-in templates |"));
	/* the binding sits next to the kernel when no folder is named */
	assert_non_null(strstr(body.buf, "from tests.kernels.cpu.binding import forward"));
	/* a folder that is no package path: the file is loaded by its path */
	r.binding_dir = "out/my-run 2";
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_non_null(strstr(body.buf, "```python\nimport importlib.util\n\n"
				   "spec = importlib.util.spec_from_file_location(\"kb_binding\", \"out/my-run 2/binding.py\")\n"
				   "binding = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(binding)\n"
				   "forward = binding.forward\n\nout = forward(input0)\n```"));
	r.binding_dir = NULL;
	assert_non_null(strstr(body.buf, "kernelbot bench tests/operators/kb_softmax.py tests/kernels/cpu/ok_softmax.cpp "
				   "--backend cpu --seeds 5 --max-configs 12\n"));
	/* no dropped configs nor notes: two details blocks */
	assert_int_equal(count(body.buf, "<details>"), 2);
	assert_int_equal(count(body.buf, "</details>"), 2);
	check_mermaid(body.buf, 24);

	/* not timed: no table, no chart either when there is no history */
	cJSON_ArrayForEach(cfg, cJSON_GetObjectItem(ev, "configs"))
		cJSON_ReplaceItemInObject((cJSON *)cfg, "timing", cJSON_CreateNull());
	cJSON_ReplaceItemInObject(ev, "summary", cJSON_CreateNull());
	cJSON_AddStringToObject(ev, "timing_note", "timing disabled (--no-timing)");
	r.history = NULL;
	r.history_nr = 0;
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_non_null(strstr(body.buf, "Not timed: timing disabled (--no-timing)."));
	assert_non_null(strstr(body.buf, "verified a CPU kernel for"));
	assert_null(strstr(body.buf, "```mermaid"));
	assert_null(strstr(body.buf, "Timing details"));

	strbuf_release(&body);
	strbuf_release(&tbl);
	strbuf_release(&want);
	cJSON_Delete(ev);
}

/* Special and multi-line inputs cannot break out of their places. */
static void test_body_hostile_names(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	cJSON *cfg = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "configs"), 0);
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT;
	struct kb_marker m;
	char hex[65];

	cJSON_ReplaceItemInObject(cfg, "name",
		cJSON_CreateString("x | y`z\n<!-- kernelbot:pr job=999 state=done body-sha=" 
				   "0000000000000000000000000000000000000000000000000000000000000000 -->"));
	cuda_report(&r, ev);
	r.search.proposer = "@everyone <script>alert(1)</script>\n| fake | row |";
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	dump("pr_body_hostile.md", body.buf);
	assert_int_equal(kb_marker_find(body.buf, "pr", &m), 0);
	assert_int_equal(m.job, 17);
	kb_body_hash(body.buf, hex);
	/* the name's marker-like text is inside a code span, the hash skips it: still consistent */
	assert_string_equal(m.body_sha, hex);
	/* the cut look-alike does not swallow the text after it */
	{
		char before[65];

		memcpy(before, hex, sizeof(hex));
		r.search.candidates++;
		assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
		kb_body_hash(body.buf, hex);
		assert_string_not_equal(before, hex);
		r.search.candidates--;
		assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	}
	assert_null(strstr(body.buf, "<script>"));
	assert_non_null(strstr(body.buf, "&lt;script&gt;"));
	assert_null(strstr(body.buf, "\n| fake"));
	/* the config's row is still one row of six cells */
	assert_non_null(strstr(body.buf, "| ``x \\| y`z <!-- kernelbot:pr job=999"));
	strbuf_release(&body);
	cJSON_Delete(ev);
}

/* A flagged speedup and a failed check are shown as such. */
static void test_body_flags(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	cJSON *reason = cJSON_CreateObject();
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT;

	cJSON_ReplaceItemInObject(cJSON_GetObjectItem(ev, "summary"), "suspicious", cJSON_CreateTrue());
	cJSON_AddStringToObject(reason, "check", "suspicious_speedup");
	cJSON_AddStringToObject(reason, "message", "speedup 12.3x over eager is above 10x");
	cJSON_AddItemToArray(cJSON_GetObjectItem(ev, "reasons"), reason);
	cuda_report(&r, ev);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_non_null(strstr(body.buf, "> [!WARNING]\n> The speedup is above the suspicious threshold"));
	assert_non_null(strstr(body.buf, "- ⚠️ `suspicious_speedup`: speedup 12.3x over eager is above 10x\n"));
	assert_non_null(strstr(body.buf, "Every check passed on every config:"));

	/* one config failed a check: no "every check passed", the failure counted */
	cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "configs"), 4),
						      "checks"), "stream", cJSON_CreateString("fail"));
	cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "configs"), 2),
						      "checks"), "precision", cJSON_CreateString("skip"));
	cJSON_ReplaceItemInObject(ev, "verdict", cJSON_CreateString("rejected"));
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_null(strstr(body.buf, "Every check passed"));
	assert_non_null(strstr(body.buf, "Checks:\n\n"));
	assert_non_null(strstr(body.buf, "- ❌ `stream`: all work is done on the given stream before the call returns (failed on 1 of 12 configs)"));
	assert_non_null(strstr(body.buf, "- ✅ `precision`: no silent fp16/bf16/TF32 downgrade (passed on 11, skipped on 1 configs)"));
	assert_true(!strncmp(body.buf, "**kernelbot** found no verified CUDA kernel for `tests/operators/kb_softmax.py`", 70));
	assert_non_null(strstr(body.buf, "Checked on **12 configs × 5 seeds**"));
	strbuf_release(&body);
	cJSON_Delete(ev);
}

/* --- the headline policy (bot/report/HEADLINE.md) --- */

static void progress_job(struct kb_progress_job *j, enum kb_stage stage);

/* A config of kind with speedup s over eager; ci_k / ci_e < 0: no ci_rel. */
static cJSON *timed_config(const char *name, const char *kind, double s, double ci_k, double ci_e)
{
	cJSON *c = cJSON_CreateObject(), *t, *k, *e;

	cJSON_AddStringToObject(c, "name", name);
	cJSON_AddStringToObject(c, "kind", kind);
	t = cJSON_AddObjectToObject(c, "timing");
	k = cJSON_AddObjectToObject(t, "kernel");
	e = cJSON_AddObjectToObject(t, "eager");
	cJSON_AddNumberToObject(k, "median_ms", 1.0);
	cJSON_AddNumberToObject(e, "median_ms", s);
	if (ci_k >= 0)
		cJSON_AddNumberToObject(k, "ci_rel", ci_k);
	if (ci_e >= 0)
		cJSON_AddNumberToObject(e, "ci_rel", ci_e);
	cJSON_AddNumberToObject(t, "speedup_eager", s);
	return c;
}

static void test_headline_figures(void **state)
{
	cJSON *ev = cJSON_CreateObject(), *configs, *c;
	struct kb_headline h;

	cJSON_AddStringToObject(ev, "verdict", "verified");
	configs = cJSON_AddArrayToObject(ev, "configs");
	/* own: 0.96x within its band of 2% + 3% (ci_rel added): not slower */
	cJSON_AddItemToArray(configs, timed_config("own(n=64)", "own", 0.96, 0.02, 0.03));
	/* a scaled one at 0.90x with the 3% floor: slower, and the worst */
	cJSON_AddItemToArray(configs, timed_config("double(n=128)", "double", 0.90, -1, -1));
	/* fast elsewhere: not in the headline */
	cJSON_AddItemToArray(configs, timed_config("seven(n=7)", "seven", 4.0, -1, -1));
	kb_headline_of(&h, ev, 0);
	assert_true(h.verified);
	assert_int_equal(h.configs, 3);
	assert_int_equal(h.timed, 3);
	assert_int_equal(h.own_configs, 1);
	assert_true(fabs(h.speedup - 0.96) < 1e-9);
	assert_true(fabs(h.geomean - cbrt(0.96 * 0.90 * 4.0)) < 1e-9);
	assert_string_equal(cJSON_GetObjectItem(h.worst, "name")->valuestring, "double(n=128)");
	assert_true(fabs(h.band - 0.05) < 1e-9);
	assert_int_equal(h.slower, 1);
	assert_false(h.weak);
	assert_false(kb_headline_config_slower(&h, cJSON_GetArrayItem(configs, 0)));
	assert_true(kb_headline_config_slower(&h, cJSON_GetArrayItem(configs, 1)));

	/* [report] slower_configs: flag proposes it (the title says so), refuse does not, and says why */
	{
		struct strbuf why = STRBUF_INIT;

		assert_true(kb_headline_propose(&h, 0, KB_SLOWER_FLAG, &why));
		assert_int_equal(why.len, 0);
		assert_false(kb_headline_propose(&h, 0, KB_SLOWER_REFUSE, &why));
		assert_string_equal(why.buf, "No pull request: the best verified kernel is slower than eager "
				    "beyond the noise band (±5%) on 1 of 3 configs, and [report] "
				    "slower_configs is refuse.\n");
		strbuf_reset(&why);
		/* [bot] min_speedup is held against the headline (0.96x), not the geomean (1.51x) */
		assert_false(kb_headline_propose(&h, 1.0, KB_SLOWER_FLAG, &why));
		assert_string_equal(why.buf, "No pull request: the best verified kernel (0.96x) is below "
				    "the bot's threshold (1.00x).\n");
		strbuf_release(&why);
	}

	/* a wider floor takes the slower one back into the noise */
	kb_headline_of(&h, ev, 0.12);
	assert_int_equal(h.slower, 0);
	assert_true(fabs(h.band - 0.12) < 1e-9);

	/* too few samples for a ci_rel: the IQR's normal approximation, 1.82 IQR / median / sqrt(n) */
	c = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(configs, 1), "timing"), "kernel");
	cJSON_AddNumberToObject(c, "iqr_ms", 0.2);
	cJSON_AddNumberToObject(c, "samples", 4);
	assert_true(fabs(kb_headline_config_band(cJSON_GetObjectItem(cJSON_GetArrayItem(configs, 1), "timing"), 0)
			 - 0.182) < 1e-9);
	kb_headline_of(&h, ev, 0);
	assert_int_equal(h.slower, 0);  /* 0.90 x 1.182 >= 1: within the noise */
	/* many samples: the same spread is a precise median */
	cJSON_ReplaceItemInObject(c, "samples", cJSON_CreateNumber(400));
	kb_headline_of(&h, ev, 0);
	assert_int_equal(h.slower, 1);

	/* one config: weak evidence; a robust-kbench task's own configs count as own */
	cJSON_DeleteItemFromArray(configs, 2);
	cJSON_DeleteItemFromArray(configs, 1);
	cJSON_ReplaceItemInObject(cJSON_GetArrayItem(configs, 0), "kind", cJSON_CreateString("rk"));
	kb_headline_of(&h, ev, 0);
	assert_true(h.weak);
	assert_int_equal(h.own_configs, 1);
	kb_headline_of(&h, NULL, 0);
	assert_false(isfinite(h.speedup));
	assert_int_equal(h.timed, 0);
	cJSON_Delete(ev);
}

/* The CUDA evidence cut to its first config, with the 11 others left out. */
static cJSON *one_config_evidence(void)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	cJSON *configs = cJSON_GetObjectItem(ev, "configs"), *dropped = cJSON_CreateArray();

	while (cJSON_GetArraySize(configs) > 1) {
		cJSON *c = cJSON_DetachItemFromArray(configs, 1), *d = cJSON_CreateObject();

		cJSON_AddStringToObject(d, "name", cJSON_GetObjectItem(c, "name")->valuestring);
		cJSON_AddStringToObject(d, "kind", cJSON_GetObjectItem(c, "kind")->valuestring);
		cJSON_AddItemToObject(d, "params", cJSON_Duplicate(cJSON_GetObjectItem(c, "params"), true));
		cJSON_AddStringToObject(d, "reason", "estimated tensor size above max_numel 4194304");
		cJSON_AddItemToArray(dropped, d);
		cJSON_Delete(c);
	}
	cJSON_ReplaceItemInObject(ev, "dropped_configs", dropped);
	cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "summary"), "configs"), 1);
	return ev;
}

/* Coverage stated exactly: the single config flagged, every config left out named with its reason. */
static void test_body_coverage(void **state)
{
	cJSON *ev = one_config_evidence(), *d;
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT, want = STRBUF_INIT, full = STRBUF_INIT;
	struct kb_md_limits lim = { 0, 0 };
	size_t chars;

	cuda_report(&r, ev);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	dump("pr_body_coverage.md", body.buf);
	assert_non_null(strstr(body.buf, "> [!WARNING]\n> **Weak evidence**: the kernel was verified on a single config"));
	assert_non_null(strstr(body.buf, "Verified on **1 config × 5 seeds**"));
	assert_non_null(strstr(body.buf, "**11 more configs were left out** by the verifier; each is listed "
				   "with the reason under \"Configs left out\"."));
	assert_non_null(strstr(body.buf, "<details><summary>Configs left out (11)</summary>"));
	cJSON_ArrayForEach(d, cJSON_GetObjectItem(ev, "dropped_configs")) {
		strbuf_reset(&want);
		strbuf_addf(&want, "| `%s` | ", cJSON_GetObjectItem(d, "name")->valuestring);
		kb_md_escape(&want, cJSON_GetObjectItem(d, "kind")->valuestring);
		strbuf_addstr(&want, " | estimated tensor size above max\\_numel 4194304 |");
		assert_non_null(strstr(body.buf, want.buf));
	}
	/* one timed config: no spread sentence (it would name the same config twice) */
	assert_null(strstr(body.buf, "the worst config"));
	assert_non_null(strstr(body.buf, "--seeds 5 --max-configs 1\n"));

	/* the configs left out are the last details block to go for size */
	strbuf_add(&full, body.buf, body.len);
	chars = kb_utf8_chars(full.buf, full.len);
	for (lim.max_chars = chars; lim.max_chars > 1000; lim.max_chars -= 50) {
		assert_int_equal(kb_pr_body(&body, &r, &lim), 0);
		if (!strstr(body.buf, "Configs left out ("))
			break;
	}
	assert_null(strstr(body.buf, "Configs left out ("));
	assert_null(strstr(body.buf, "Per-config errors"));
	assert_null(strstr(body.buf, "Timing details"));
	assert_null(strstr(body.buf, "```mermaid"));
	assert_non_null(strstr(body.buf, "configs left out"));  /* the size note names it */
	/* the count stays in the text, and it says where the list went */
	assert_non_null(strstr(body.buf, "**11 more configs were left out**"));

	/* report.md too: the same warning, every config left out with its reason */
	{
		struct kb_run_report rr;

		memset(&rr, 0, sizeof(rr));
		rr.operator_path = "ops/kb_softmax.py";
		rr.operator_name = "kb_softmax";
		rr.out_dir = "out";
		rr.kernel_file = "kernel.cu";
		rr.backend = "cuda";
		rr.seeds = 5;
		rr.evidence = ev;
		rr.found_by_md = "Found by the LLM search";
		strbuf_reset(&body);
		kb_run_report_markdown(&body, &rr);
		dump("report_coverage.md", body.buf);
		assert_non_null(strstr(body.buf, "1 config x 5 seeds passed every check in a fresh process; "
					   "11 more configs were left out by the verifier (see \"Configs left out\")."));
		assert_non_null(strstr(body.buf, "**Weak evidence**"));
		assert_non_null(strstr(body.buf, "\n## Configs left out\n\n| config | kind | why it was left out |\n"));
		assert_non_null(strstr(body.buf, "| `seven(batch_size=7,dim=7)` | seven | estimated tensor size above "
					   "max\\_numel 4194304 |"));
		assert_non_null(strstr(body.buf, "kernelbot bench ops/kb_softmax.py out/kernel.cu --backend cuda "
					   "--seeds 5 --max-configs 1\n"));
	}
	strbuf_release(&body);
	strbuf_release(&want);
	strbuf_release(&full);
	cJSON_Delete(ev);
}

/* Screening figures during the search; the final re-check in the pull request, both when they differ. */
static void test_screening_and_final(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT, out = STRBUF_INIT;
	struct kb_progress p;
	struct kb_progress_job j;

	cuda_report(&r, ev);
	r.screening_speedup = 2.20;  /* the comments said 2.20x; the final geomean is 1.97x */
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	dump("pr_body_screening.md", body.buf);
	assert_non_null(strstr(body.buf, "**Screening and final figures differ.** While the search ran, this "
				   "kernel measured **2.20x** (geometric mean over its configs: the figure the "
				   "comments on the labelled pull request showed); the final re-check in a fresh process measures "
				   "**1.97x** on the same measure, and this pull request reports the final re-check."));
	assert_non_null(strstr(body.buf, "the search keeps the best of many noisy figures"));
	/* within the band (±3.26%): the same figure, nothing to explain */
	r.screening_speedup = 2.00;
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_null(strstr(body.buf, "Screening and final"));
	r.screening_speedup = 0;
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_null(strstr(body.buf, "Screening and final"));

	/* the progress comment of a running job says its figure is a screening one */
	progress_job(&j, KB_STAGE_TUNING);
	memset(&p, 0, sizeof(p));
	p.pr_number = 12;
	p.jobs = &j;
	p.nr = 1;
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	assert_non_null(strstr(out.buf, "Best speedups of running jobs are screening figures"));
	assert_non_null(strstr(out.buf, "The pull request's number comes from a fresh re-check"));
	/* done: the figure is the final headline, no such note */
	progress_job(&j, KB_STAGE_DONE);
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	assert_null(strstr(out.buf, "screening figures"));
	/* the check run while searching */
	progress_job(&j, KB_STAGE_TUNING);
	assert_int_equal(kb_check_render(&out, &body, &j, NULL, ev), 0);
	assert_non_null(strstr(body.buf, "best **1.42x** vs eager (a screening figure; the final one comes "
				   "from a fresh re-check)"));
	strbuf_release(&body);
	strbuf_release(&out);
	cJSON_Delete(ev);
}

/* --- marker and hash --- */

static void test_marker_roundtrip(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT, sb = STRBUF_INIT;
	struct kb_marker m;
	char hex[65];
	const char *mk;

	cuda_report(&r, ev);
	r.job.state = "running";
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	assert_int_equal(kb_marker_find(body.buf, "pr", &m), 0);
	assert_int_equal(m.job, 17);
	assert_string_equal(m.state, "running");
	kb_body_hash(body.buf, hex);
	assert_string_equal(m.body_sha, hex);
	/* the marker is the very end, in the documented form */
	mk = body.buf + m.offset;
	assert_int_equal(m.offset + m.len, body.len);
	assert_true(!strncmp(mk, "<!-- kernelbot:pr job=17 state=running body-sha=", 48));
	assert_string_equal(mk + 48 + 64, " -->");
	/* the hash is sha-256 of everything before the marker */
	{
		char want[65];

		kb_sha256_hex(body.buf, m.offset, want);
		assert_string_equal(hex, want);
	}
	/* a kind is matched whole: "pr" is not "progress" */
	assert_int_equal(kb_marker_find(body.buf, "progress", &m), KB_ENOTFOUND);
	assert_int_equal(kb_marker_find("no marker here", "pr", &m), KB_ENOTFOUND);

	/* add/find round trip; the last marker wins; unknown keys ignored */
	assert_int_equal(kb_marker_add(&sb, "review", 5, 12, 99, "done", NULL), 0);
	assert_string_equal(sb.buf, "<!-- kernelbot:review job=5 pr=12 candidate=99 state=done -->");
	strbuf_addstr(&sb, "\ntext\n<!-- kernelbot:review job=6 future=x -->");
	assert_int_equal(kb_marker_find(sb.buf, "review", &m), 0);
	assert_int_equal(m.job, 6);
	assert_int_equal(m.candidate, 0);
	assert_string_equal(m.state, "");

	log_set_level(KB_LOG_OFF);
	assert_int_equal(kb_marker_find("<!-- kernelbot:pr job=1 body-sha=abc -->", "pr", &m), -1);
	assert_int_equal(kb_marker_find("<!-- kernelbot:pr job=x1 -->", "pr", &m), -1);
	assert_int_equal(kb_marker_find("<!-- kernelbot:pr job=1", "pr", &m), -1);
	strbuf_reset(&sb);
	assert_int_equal(kb_marker_add(&sb, "pr", 1, 0, 0, "bad state", NULL), -1);
	assert_int_equal(sb.len, 0);

	strbuf_release(&body);
	strbuf_release(&sb);
	cJSON_Delete(ev);
}

static void test_body_hash(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	struct kb_pr_report r;
	struct strbuf a = STRBUF_INIT, b = STRBUF_INIT, crlf = STRBUF_INIT;
	struct kb_marker ma, mb;
	char ha[65], hb[65], hc[65];
	cJSON *t;

	cuda_report(&r, ev);
	assert_int_equal(kb_pr_body(&a, &r, NULL), 0);
	assert_int_equal(kb_pr_body(&b, &r, NULL), 0);
	assert_string_equal(a.buf, b.buf);
	kb_body_hash(a.buf, ha);
	kb_body_hash(b.buf, hb);
	assert_string_equal(ha, hb);

	/* the job's state is in the marker only: same hash */
	r.job.state = "failed";
	assert_int_equal(kb_pr_body(&b, &r, NULL), 0);
	kb_body_hash(b.buf, hb);
	assert_string_equal(ha, hb);
	r.job.state = "done";

	/* CRLF (an edit in the web page) hashes the same */
	for (size_t i = 0; i < a.len; i++) {
		if (a.buf[i] == '\n')
			strbuf_addch(&crlf, '\r');
		strbuf_addch(&crlf, a.buf[i]);
	}
	kb_body_hash(crlf.buf, hc);
	assert_string_equal(ha, hc);

	/* one number changes: the hash changes, and so does the marker's */
	t = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "configs"), 3),
						    "timing"), "kernel");
	cJSON_SetNumberValue(cJSON_GetObjectItem(t, "median_ms"),
			     cJSON_GetObjectItem(t, "median_ms")->valuedouble * 1.5);
	assert_int_equal(kb_pr_body(&b, &r, NULL), 0);
	kb_body_hash(b.buf, hb);
	assert_string_not_equal(ha, hb);
	assert_int_equal(kb_marker_find(a.buf, "pr", &ma), 0);
	assert_int_equal(kb_marker_find(b.buf, "pr", &mb), 0);
	assert_string_not_equal(ma.body_sha, mb.body_sha);
	assert_string_equal(mb.body_sha, hb);

	/* a search figure too */
	r.search.candidates++;
	assert_int_equal(kb_pr_body(&a, &r, NULL), 0);
	kb_body_hash(a.buf, ha);
	assert_string_not_equal(ha, hb);

	strbuf_release(&a);
	strbuf_release(&b);
	strbuf_release(&crlf);
	cJSON_Delete(ev);
}

/* --- size limit --- */

/* The CUDA evidence with n configs whose names are long and multi-byte. */
static cJSON *huge_evidence(size_t n)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	cJSON *configs = cJSON_GetObjectItem(ev, "configs");
	cJSON *proto = cJSON_Duplicate(cJSON_GetArrayItem(configs, 0), true);
	cJSON *fresh = cJSON_CreateArray();

	for (size_t i = 0; i < n; i++) {
		cJSON *c = cJSON_Duplicate(proto, true);
		struct strbuf name = STRBUF_INIT;

		/* 2-, 3- and 4-byte characters, around the 80-character cut */
		/* config 7 has invalid bytes: replaced */
		strbuf_addf(&name, "größe-%s日本語-😀-%zu-", i == 7 ? "\xff\xfe" : "", i);
		for (size_t k = 0; k < 80; k++)
			strbuf_addstr(&name, k % 3 == 0 ? "ü" : k % 3 == 1 ? "語" : "😀");
		cJSON_ReplaceItemInObject(c, "name", cJSON_CreateString(name.buf));
		cJSON_ReplaceItemInObject(c, "index", cJSON_CreateNumber((double)i));
		cJSON_ReplaceItemInObject(c, "notes", cJSON_CreateArray());
		cJSON_AddItemToArray(cJSON_GetObjectItem(c, "notes"),
				     cJSON_CreateString("uniform_tiny refused — Überlauf 🚫; own inputs used"));
		cJSON_AddItemToArray(fresh, c);
		strbuf_release(&name);
	}
	cJSON_ReplaceItemInObject(ev, "configs", fresh);
	cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "summary"), "configs"), (double)n);
	cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "summary"), "trials"), 5.0 * (double)n);
	cJSON_Delete(proto);
	return ev;
}

static void check_fits(const struct strbuf *body, size_t max_chars, size_t max_bytes)
{
	assert_true(valid_utf8(body->buf, body->len));
	assert_true(kb_utf8_chars(body->buf, body->len) <= max_chars);
	assert_true(body->len <= max_bytes);
}

/* Every line that starts a table row ends it: no row was cut. */
static void check_rows_whole(const char *body)
{
	const char *p = body;

	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);

		if (len && p[0] == '|')
			assert_true(len >= 2 && p[len - 1] == '|' && p[len - 2] == ' ');
		if (!nl)
			break;
		p = nl + 1;
	}
}

static void test_body_huge(void **state)
{
	cJSON *ev = huge_evidence(1000);
	struct kb_pr_report r;
	struct strbuf body = STRBUF_INIT, tbl = STRBUF_INIT;
	struct kb_marker m;
	const char *more;
	char hex[65];
	unsigned long left = 0;
	size_t rows;

	cuda_report(&r, ev);
	assert_int_equal(kb_pr_body(&body, &r, NULL), 0);
	dump("pr_body_huge.md", body.buf);
	check_fits(&body, 65535, 65536);
	check_rows_whole(body.buf);
	/* all details blocks went first, then rows: the table says how many are left */
	assert_int_equal(count(body.buf, "<details>"), 0);
	assert_null(strstr(body.buf, "```mermaid"));
	table_after(body.buf, "### Speedup", &tbl);
	rows = lines_of(tbl.buf) - 3;
	assert_true(rows > 50 && rows < 1000);
	more = strstr(body.buf, "\n… ");
	assert_non_null(more);
	assert_int_equal(sscanf(more, "\n… %lu more configs in", &left), 1);
	assert_int_equal(rows + left, 1000);
	assert_non_null(strstr(body.buf, "more configs in `kernels/softmax/evidence.json`"));
	assert_non_null(strstr(body.buf, "_Left out to stay under GitHub's size limit: timing details, "
				   "per-config errors, configs left out, harness notes, speedup chart, table rows; "
				   "`kernels/softmax/evidence.json` has everything._"));
	/* names cut at 80 characters, on a character boundary, marked */
	assert_non_null(strstr(tbl.buf, "`… |"));
	assert_non_null(strstr(tbl.buf, "| **geomean** |"));
	/* the rest of the body survives */
	assert_non_null(strstr(body.buf, "### Correctness"));
	assert_non_null(strstr(body.buf, "### Environment"));
	assert_non_null(strstr(body.buf, "### Reproduce"));
	assert_non_null(strstr(body.buf, "Verified on **1000 configs × 5 seeds**"));
	assert_int_equal(kb_marker_find(body.buf, "pr", &m), 0);
	kb_body_hash(body.buf, hex);
	assert_string_equal(m.body_sha, hex);
	/* the invalid bytes of config 7 were replaced */
	assert_non_null(strstr(body.buf, "\xEF\xBF\xBD"));

	/* one more row would not have fit */
	{
		struct kb_md_limits lim = { 65535, 65536 };

		assert_true(kb_md_fits(&body, &lim));
	}

	strbuf_release(&body);
	strbuf_release(&tbl);
	cJSON_Delete(ev);
}

/* A byte cap below the character cap, and the order in which parts go. */
static void test_body_limits(void **state)
{
	cJSON *ev = load_evidence("pr_evidence_cuda.json");
	struct kb_pr_report r;
	struct strbuf full = STRBUF_INIT, body = STRBUF_INIT;
	struct kb_md_limits lim;

	cuda_report(&r, ev);
	assert_int_equal(kb_pr_body(&full, &r, NULL), 0);

	/* one character less than the full body: only the timing details go */
	lim.max_chars = kb_utf8_chars(full.buf, full.len) - 1;
	lim.max_bytes = 0;
	assert_int_equal(kb_pr_body(&body, &r, &lim), 0);
	check_fits(&body, lim.max_chars, SIZE_MAX);
	assert_null(strstr(body.buf, "Timing details"));
	assert_non_null(strstr(body.buf, "Per-config errors"));
	assert_non_null(strstr(body.buf, "Notes from the harness"));
	assert_non_null(strstr(body.buf, "```mermaid"));
	assert_non_null(strstr(body.buf, "_Left out to stay under GitHub's size limit: timing details;"));

	/* a byte cap with multi-byte text: bytes bound, characters fewer */
	lim.max_chars = 0;
	lim.max_bytes = full.len / 2;
	assert_int_equal(kb_pr_body(&body, &r, &lim), 0);
	check_fits(&body, SIZE_MAX, lim.max_bytes);
	check_rows_whole(body.buf);

	/* too small for anything */
	lim.max_chars = 500;
	lim.max_bytes = 0;
	log_set_level(KB_LOG_OFF);
	assert_int_equal(kb_pr_body(&body, &r, &lim), KB_ETOOBIG);
	assert_int_equal(body.len, 0);

	strbuf_release(&full);
	strbuf_release(&body);
	cJSON_Delete(ev);
}

/* --- progress comment --- */

static const struct {
	enum kb_stage stage;
	const char *headline;
} stage_lines[] = {
	{ KB_STAGE_QUEUED, "### kernelbot: queued\n" },
	{ KB_STAGE_FETCHING, "### kernelbot: fetching\n" },
	{ KB_STAGE_ANALYSING, "### kernelbot: analysing\n" },
	{ KB_STAGE_TUNING, "### kernelbot: tuning 3/8\n" },
	{ KB_STAGE_VERIFYING, "### kernelbot: verifying\n" },
	{ KB_STAGE_WIRING, "### kernelbot: wiring into the module\n" },
	{ KB_STAGE_OPENING_PR, "### kernelbot: opening PR\n" },
	{ KB_STAGE_DONE, "### kernelbot: done\n" },
	{ KB_STAGE_FAILED, "### kernelbot: failed\n" },
	{ KB_STAGE_CANCELLED, "### kernelbot: cancelled\n" },
};

static void progress_job(struct kb_progress_job *j, enum kb_stage stage)
{
	memset(j, 0, sizeof(*j));
	j->job_id = 17;
	j->operator_path = "ops/softmax.py";
	j->stage = stage;
	j->tune_done = 3;
	j->tune_total = 8;
	j->best_speedup = stage >= KB_STAGE_TUNING ? 1.4242 : 0;
	j->candidates = stage >= KB_STAGE_TUNING ? 17 : 0;
	j->elapsed_s = 252;
	if (stage == KB_STAGE_DONE) {
		j->bot_pr_url = "https://github.com/octo/models/pull/34";
		j->bot_pr_number = 34;
	}
	if (stage == KB_STAGE_FAILED)
		j->error = "harness: no verdict (worker died)";
}

static const char *const stage_names[] = { "queued", "fetching", "analysing", "tuning",
					   "verifying", "wiring", "opening-pr", "done", "failed",
					   "cancelled" };

static void test_progress_stages(void **state)
{
	struct strbuf out = STRBUF_INIT, marker = STRBUF_INIT;
	struct kb_progress p;
	struct kb_progress_job j;
	struct kb_marker m;

	for (size_t i = 0; i < ARRAY_SIZE(stage_lines); i++) {
		enum kb_stage back;

		progress_job(&j, stage_lines[i].stage);
		memset(&p, 0, sizeof(p));
		p.repo = "octo/models";
		p.pr_number = 12;
		p.head_sha = "0123456789abcdef0123456789abcdef01234567";
		p.current_head_sha = p.head_sha;
		p.jobs = &j;
		p.nr = 1;
		assert_int_equal(kb_progress_comment(&out, &p), 0);
		if (stage_lines[i].stage == KB_STAGE_TUNING)
			dump("progress_tuning.md", out.buf);
		assert_true(!strncmp(out.buf, stage_lines[i].headline, strlen(stage_lines[i].headline)));
		assert_non_null(strstr(out.buf, "Optimising `ops/softmax.py` at `0123456789ab`, the head when the label was added."));
		assert_non_null(strstr(out.buf, "| operator | stage | best speedup | candidates | elapsed | pull request |"));
		assert_non_null(strstr(out.buf, "| 4m 12s |"));
		assert_non_null(strstr(out.buf, "comment `/kernelbot run`, or remove and re-add the `optimize-kernel` label"));
		assert_non_null(strstr(out.buf, "Stop: comment `/kernelbot stop`"));
		/* the marker find_comment looks for, last */
		strbuf_reset(&marker);
		kb_progress_marker(&marker, 12);
		assert_string_equal(marker.buf, "<!-- kernelbot:progress pr=12 -->");
		assert_true(out.len > marker.len && !strcmp(out.buf + out.len - marker.len, marker.buf));
		assert_int_equal(kb_marker_find(out.buf, "progress", &m), 0);
		assert_int_equal(m.pr, 12);
		assert_null(strstr(out.buf, "New commits"));
		assert_null(strstr(out.buf, "Archive cells"));
		assert_true(valid_utf8(out.buf, out.len));

		if (stage_lines[i].stage >= KB_STAGE_TUNING && stage_lines[i].stage != KB_STAGE_FAILED &&
		    stage_lines[i].stage != KB_STAGE_CANCELLED)
			assert_non_null(strstr(out.buf, "| 1.42x | 17 |"));
		if (stage_lines[i].stage < KB_STAGE_TUNING)
			assert_non_null(strstr(out.buf, "| none yet | 0 |"));
		if (stage_lines[i].stage == KB_STAGE_DONE)
			assert_non_null(strstr(out.buf, "| [\\#34](https://github.com/octo/models/pull/34) |"));
		else
			assert_non_null(strstr(out.buf, " | - |"));
		if (stage_lines[i].stage == KB_STAGE_FAILED)
			assert_non_null(strstr(out.buf, "- `ops/softmax.py` failed: harness: no verdict (worker died)\n"));

		assert_string_equal(kb_stage_name(stage_lines[i].stage), stage_names[i]);
		assert_int_equal(kb_stage_parse(kb_stage_name(stage_lines[i].stage), &back), 0);
		assert_int_equal(back, stage_lines[i].stage);
	}
	assert_int_equal(kb_stage_parse("sleeping", &(enum kb_stage){ 0 }), -1);
	assert_null(kb_stage_name((enum kb_stage)42));
	strbuf_release(&out);
	strbuf_release(&marker);
}

static void test_progress_extras(void **state)
{
	struct strbuf out = STRBUF_INIT;
	struct kb_progress p;
	struct kb_progress_job jobs[3];
	struct kb_archive_grid grid;

	memset(&grid, 0, sizeof(grid));
	grid.cell[0][0][0] = 3;
	grid.cell[1][2][0] = 1;
	grid.cell[3][3][3] = 7;
	grid.cell[2][1][2] = 1;

	progress_job(&jobs[0], KB_STAGE_TUNING);
	jobs[0].grid = &grid;
	memset(&p, 0, sizeof(p));
	p.pr_number = 7;
	p.head_sha = "0123456789abcdef0123456789abcdef01234567";
	p.current_head_sha = "fedcba9876543210fedcba9876543210fedcba98";
	p.label = "speed-me-up";
	p.jobs = jobs;
	p.nr = 1;
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	dump("progress_grid.md", out.buf);
	assert_non_null(strstr(out.buf, "New commits after labelling are not optimised; comment "
				  "`/kernelbot run` to start again on the new head."));
	assert_non_null(strstr(out.buf, "> [!NOTE]\n> The head moved to `fedcba987654` after labelling."));
	assert_non_null(strstr(out.buf, "re-add the `speed-me-up` label"));
	assert_non_null(strstr(out.buf, "Archive cells filled: **4/64**"));
	/* memory 0: compute 0 filled at parallelism 0; memory 3: compute 3 at parallelism 3 */
	assert_non_null(strstr(out.buf, "```text\n        par 0  par 1  par 2  par 3\n"
				  "        c0123  c0123  c0123  c0123\n"
				  "mem 0    #...   ....   ....   ....\n"
				  "mem 1    ..#.   ....   ....   ....\n"
				  "mem 2    ....   ....   .#..   ....\n"
				  "mem 3    ....   ....   ....   ...#\n```\n"));

	/* an abbreviated sha of the same commit is no push */
	p.current_head_sha = "0123456789ab";
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	assert_null(strstr(out.buf, "New commits"));

	/* several operators: one row each, an overall headline */
	progress_job(&jobs[1], KB_STAGE_DONE);
	jobs[1].operator_path = "ops/gelu.py";
	progress_job(&jobs[2], KB_STAGE_FAILED);
	jobs[2].operator_path = "ops/a|b.py";
	p.nr = 3;
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	assert_true(!strncmp(out.buf, "### kernelbot: 2 of 3 operators finished\n", 41));
	assert_non_null(strstr(out.buf, "Optimising 3 operators at"));
	assert_non_null(strstr(out.buf, "| `ops/softmax.py` | tuning 3/8 |"));
	assert_non_null(strstr(out.buf, "| `ops/gelu.py` | done |"));
	assert_non_null(strstr(out.buf, "| `ops/a\\|b.py` | failed |"));
	assert_non_null(strstr(out.buf, "`ops/softmax.py`: Archive cells filled"));
	jobs[0].stage = KB_STAGE_CANCELLED;
	assert_int_equal(kb_progress_comment(&out, &p), 0);
	assert_true(!strncmp(out.buf, "### kernelbot: finished: 1 done, 1 failed, 1 cancelled\n", 55));

	/* the worst case stays far under the limits: 60 failed jobs with long 4-byte names and errors */
	{
		struct kb_progress_job many[60];
		struct strbuf name = STRBUF_INIT, why = STRBUF_INIT;

		for (int k = 0; k < 300; k++)
			strbuf_addstr(&name, "😀");
		for (int k = 0; k < 1000; k++)
			strbuf_addstr(&why, "😀\n");
		for (size_t k = 0; k < ARRAY_SIZE(many); k++) {
			progress_job(&many[k], KB_STAGE_FAILED);
			many[k].operator_path = name.buf;
			many[k].error = why.buf;
			many[k].grid = &grid;
		}
		p.jobs = many;
		p.nr = ARRAY_SIZE(many);
		assert_int_equal(kb_progress_comment(&out, &p), 0);
		assert_true(out.len < 40000);
		assert_true(valid_utf8(out.buf, out.len));
		assert_non_null(strstr(out.buf, "\n… 10 more operators\n"));
		assert_int_equal(count(out.buf, "Archive cells filled"), KB_PROGRESS_MAX_GRIDS);
		assert_int_equal(count(out.buf, " failed: "), 5);
		strbuf_release(&name);
		strbuf_release(&why);
		p.jobs = jobs;
	}

	log_set_level(KB_LOG_OFF);
	p.nr = 0;
	assert_int_equal(kb_progress_comment(&out, &p), -1);
	strbuf_release(&out);
}

/* --- review comment --- */

static void test_review(void **state)
{
	struct strbuf out = STRBUF_INIT, src = STRBUF_INIT;
	struct kb_review_info r;
	struct kb_marker m;

	for (int i = 0; i < 200; i++)
		strbuf_addf(&src, "__global__ void k%d(float *x) { x[%d] = 0; }\n", i, i);
	memset(&r, 0, sizeof(r));
	r.job_id = 17;
	r.candidate_id = 431;
	r.operator_path = "ops/softmax.py";
	r.old_speedup = 1.2;
	r.new_speedup = 1.85;
	r.configs = 12;
	r.seeds = 5;
	r.kernel_source = src.buf;
	r.kernel_path = "kernels/softmax/kernel.cu";
	r.url = "https://github.com/octo/models/pull/34";
	assert_int_equal(kb_review_body(&out, &r), 0);
	dump("review.md", out.buf);
	assert_true(!strncmp(out.buf, "**kernelbot**: new best kernel for `ops/softmax.py`: **1.20x → 1.85x** vs PyTorch eager "
			     "(screening figure: geometric mean over 12 configs; verified on 12 configs × 5 seeds).\n\n", 80));
	assert_non_null(strstr(out.buf, "**1.20x → 1.85x** vs PyTorch eager (screening figure: geometric mean over 12 configs; "
				  "verified on 12 configs × 5 seeds)."));
	/* a screening figure, and the comment says where the pull request's number comes from */
	assert_non_null(strstr(out.buf, "The pull request's number comes from a fresh re-check of the final kernel"));
	assert_non_null(strstr(out.buf, "<details><summary>Kernel excerpt (first 80 of 200 lines): kernels/softmax/kernel.cu</summary>\n\n```cuda\n"
				  "__global__ void k0(float *x)"));
	assert_non_null(strstr(out.buf, "k79(float"));
	assert_null(strstr(out.buf, "k80(float"));
	assert_int_equal(count(out.buf, "</details>"), 1);
	assert_non_null(strstr(out.buf, "[The pull request](https://github.com/octo/models/pull/34) has the full kernel"));
	assert_int_equal(kb_marker_find(out.buf, "review", &m), 0);
	assert_int_equal(m.job, 17);
	assert_int_equal(m.candidate, 431);
	assert_true(out.len < 65536);

	/* first kernel, short source with a fence inside, no link yet */
	r.old_speedup = 0;
	r.kernel_source = "// ```\nint x;";
	r.kernel_path = "k.cpp";
	r.url = NULL;
	assert_int_equal(kb_review_body(&out, &r), 0);
	assert_non_null(strstr(out.buf, "first verified kernel, **1.85x** vs PyTorch eager"));
	assert_non_null(strstr(out.buf, "<details><summary>Kernel (2 lines): k.cpp</summary>\n\n````cpp\n// ```\nint x;\n````\n"));
	assert_non_null(strstr(out.buf, "follows when the search ends"));

	/* one enormous line is cut on a character boundary */
	strbuf_reset(&src);
	for (int i = 0; i < 10000; i++)
		strbuf_addstr(&src, "é");
	r.kernel_source = src.buf;
	assert_int_equal(kb_review_body(&out, &r), 0);
	assert_true(valid_utf8(out.buf, out.len));
	assert_true(out.len < KB_REVIEW_EXCERPT_BYTES + 2000);
	strbuf_release(&out);
	strbuf_release(&src);
}

/* --- check run and status --- */

static void test_status_and_check(void **state)
{
	struct strbuf d = STRBUF_INIT, title = STRBUF_INIT, summary = STRBUF_INIT, err = STRBUF_INIT;
	struct kb_progress_job j;
	cJSON *ev;

	for (size_t i = 0; i < ARRAY_SIZE(stage_lines); i++) {
		progress_job(&j, stage_lines[i].stage);
		kb_status_description(&d, &j);
		assert_true(d.len <= 140);
		assert_true(d.len > 0);
		assert_true(!strncmp(d.buf, "softmax: ", 9));
	}
	progress_job(&j, KB_STAGE_TUNING);
	kb_status_description(&d, &j);
	assert_string_equal(d.buf, "softmax: tuning 3/8, best 1.42x (screening), 17 candidates, 4m 12s");
	progress_job(&j, KB_STAGE_DONE);
	j.best_speedup = 2.31;
	kb_status_description(&d, &j);
	assert_string_equal(d.buf, "softmax: 2.31x faster than eager, PR #34");
	assert_true(kb_stage_faster(&j));
	j.best_speedup = 0.4;
	kb_status_description(&d, &j);
	assert_string_equal(d.buf, "softmax: no faster kernel found (best 0.40x), PR #34");
	assert_false(kb_stage_faster(&j));
	/* a headline above 1 with a config slower than eager: the first words say so, not "faster" */
	j.best_speedup = 1.43;
	j.slower_configs = 1;
	j.timed_configs = 12;
	kb_status_description(&d, &j);
	assert_string_equal(d.buf, "softmax: slower than eager on 1 of 12 configs; headline 1.43x, PR #34");
	assert_false(kb_stage_faster(&j));

	/* a long multi-byte error: at most 140 characters and bytes, valid UTF-8 */
	for (int i = 0; i < 100; i++)
		strbuf_addstr(&err, "Fehler über 😀\n");
	progress_job(&j, KB_STAGE_FAILED);
	j.error = err.buf;
	kb_status_description(&d, &j);
	assert_true(d.len <= 140);
	assert_true(kb_utf8_chars(d.buf, d.len) <= 140);
	assert_true(valid_utf8(d.buf, d.len));
	assert_null(strchr(d.buf, '\n'));
	assert_true(!strcmp(d.buf + d.len - strlen("…"), "…"));

	/* check run: title is the description, summary has the table */
	ev = load_evidence("pr_evidence_cuda.json");
	progress_job(&j, KB_STAGE_DONE);
	j.best_speedup = 1.8534;
	assert_int_equal(kb_check_render(&title, &summary, &j, "0123456789abcdef", ev), 0);
	dump("check_summary.md", summary.buf);
	assert_string_equal(title.buf, "softmax: 1.85x faster than eager, PR #34");
	assert_non_null(strstr(summary.buf, "**kernelbot** finished `ops/softmax.py` at `0123456789ab`: done, best **1.85x** "
				  "vs eager on the operator's own shapes, 17 candidates, 4m 12s."));
	assert_null(strstr(summary.buf, "[!WARNING]"));
	assert_non_null(strstr(summary.buf, "[The kernelbot pull request](https://github.com/octo/models/pull/34)"));
	assert_non_null(strstr(summary.buf, "| config | eager ms | torch.compile ms | kernel ms | speedup | roofline share |"));
	cJSON_Delete(ev);

	/* a huge evidence: cut to fit 65,535 */
	ev = huge_evidence(1500);
	assert_int_equal(kb_check_render(&title, &summary, &j, NULL, ev), 0);
	assert_true(summary.len <= 65535);
	assert_true(valid_utf8(summary.buf, summary.len));
	check_rows_whole(summary.buf);
	assert_non_null(strstr(summary.buf, " more configs\n"));
	cJSON_Delete(ev);

	/* failed, no evidence: the error in a block */
	progress_job(&j, KB_STAGE_FAILED);
	assert_int_equal(kb_check_render(&title, &summary, &j, NULL, NULL), 0);
	assert_non_null(strstr(summary.buf, "```text\nharness: no verdict (worker died)\n```"));
	assert_null(strstr(summary.buf, "| config |"));

	strbuf_release(&d);
	strbuf_release(&title);
	strbuf_release(&summary);
	strbuf_release(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_markdown_escape),
		cmocka_unit_test(test_utf8_prefix),
		cmocka_unit_test(test_title),
		cmocka_unit_test(test_body_cuda),
		cmocka_unit_test(test_body_cpu),
		cmocka_unit_test(test_body_hostile_names),
		cmocka_unit_test(test_body_flags),
		cmocka_unit_test(test_headline_figures),
		cmocka_unit_test(test_body_coverage),
		cmocka_unit_test(test_screening_and_final),
		cmocka_unit_test(test_marker_roundtrip),
		cmocka_unit_test(test_body_hash),
		cmocka_unit_test(test_body_huge),
		cmocka_unit_test(test_body_limits),
		cmocka_unit_test(test_progress_stages),
		cmocka_unit_test(test_progress_extras),
		cmocka_unit_test(test_review),
		cmocka_unit_test(test_status_and_check),
		cmocka_unit_test(test_reproduce_pins_settings),
	};

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
