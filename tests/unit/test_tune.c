#include "core/common.h"
#include "core/config.h"
#include "core/progress.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "report/run_report.h"
#include "templates/template.h"
#include "templates/tune.h"
#include "core/hash.h"
#include "verifier/evidence.h"

#include <math.h>

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

/*
 * The pure parts of the autotuner and of `kernelbot run`'s output: the
 * search strategy (exhaustive, sampled then refined, deterministic, never
 * beyond max_points), cache keys and operator hashes, the timings table
 * on a real SQLite store, report.md rendered from a canned evidence, the
 * generated binding, the progress output and the output directory writer.
 * The whole pipeline runs in tests/python/test_run_cli.py.
 */

static char *tmp_dir(void)
{
	const char *base = getenv("TMPDIR");
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s/kb-tune-XXXXXX", base && *base ? base : "/tmp");
	assert_non_null(mkdtemp(sb.buf));
	return strbuf_detach(&sb, NULL);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s/%s", dir, name);
	assert_int_equal(kb_write_file_atomic(sb.buf, text, strlen(text)), 0);
	strbuf_release(&sb);
}

/* --- search --- */

static bool all_distinct(const size_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (v[i] == v[j])
				return false;
	return true;
}

static void test_search_exhaustive(void **state)
{
	size_t radix[] = { 2, 3, 2 }, batch[64], n;
	struct kb_search s;

	(void)state;
	assert_int_equal(kb_search_init(&s, radix, 3, 64, 32, 2, 1), 0);
	assert_true(s.exhaustive);
	assert_int_equal(s.total, 12);
	n = kb_search_next(&s, SIZE_MAX, batch);
	assert_int_equal(n, 12);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(batch[i], i);
	/* nothing left to refine in a space searched whole */
	assert_int_equal(kb_search_next(&s, 5, batch), 0);
	kb_search_release(&s);

	/* a space larger than max_points is never searched whole */
	assert_int_equal(kb_search_init(&s, radix, 3, 8, 32, 2, 1), 0);
	assert_false(s.exhaustive);
	kb_search_release(&s);
	/* nor one larger than exhaustive_limit */
	assert_int_equal(kb_search_init(&s, radix, 3, 64, 11, 2, 1), 0);
	assert_false(s.exhaustive);
	kb_search_release(&s);
}

static void test_search_digits(void **state)
{
	size_t radix[] = { 2, 3, 4 }, d[3];
	struct kb_search s;

	(void)state;
	assert_int_equal(kb_search_init(&s, radix, 3, 64, 32, 2, 1), 0);
	/* mixed radix, the first parameter slowest (as kb_template_point_at) */
	kb_search_digits(&s, 1, d);
	assert_int_equal(d[0], 0);
	assert_int_equal(d[1], 0);
	assert_int_equal(d[2], 1);
	kb_search_digits(&s, 12, d);
	assert_int_equal(d[0], 1);
	assert_int_equal(d[1], 0);
	assert_int_equal(d[2], 0);
	for (size_t i = 0; i < s.total; i++) {
		kb_search_digits(&s, i, d);
		assert_int_equal(kb_search_index(&s, d), i);
	}
	kb_search_release(&s);

	radix[1] = 0;
	assert_int_equal(kb_search_init(&s, radix, 3, 64, 32, 2, 1), -1);
}

/* How many digits differ between two points, and by how much at most. */
static void digit_distance(const struct kb_search *s, size_t a, size_t b, size_t *ndiff, size_t *maxstep)
{
	size_t da[16], db[16];

	kb_search_digits(s, a, da);
	kb_search_digits(s, b, db);
	*ndiff = 0;
	*maxstep = 0;
	for (size_t i = 0; i < s->nr; i++) {
		size_t step = da[i] > db[i] ? da[i] - db[i] : db[i] - da[i];

		if (step)
			(*ndiff)++;
		if (step > *maxstep)
			*maxstep = step;
	}
}

static void test_search_sampled_refined(void **state)
{
	size_t radix[] = { 4, 4, 4, 4 }, batch[20], all[64], nall = 0, n, best, rounds = 0;
	struct kb_search s;

	(void)state;
	assert_int_equal(kb_search_init(&s, radix, 4, 20, 32, 2, 7), 0);
	assert_false(s.exhaustive);
	n = kb_search_next(&s, SIZE_MAX, batch);
	/* half the budget samples, the defaults first */
	assert_int_equal(n, 10);
	assert_int_equal(batch[0], 0);
	for (size_t i = 0; i < n; i++) {
		assert_true(batch[i] < 256);
		all[nall++] = batch[i];
	}
	best = batch[3];
	while ((n = kb_search_next(&s, best, batch))) {
		rounds++;
		for (size_t i = 0; i < n; i++) {
			size_t nd, ms;

			/* coordinate search: one parameter, one value away */
			digit_distance(&s, best, batch[i], &nd, &ms);
			assert_int_equal(nd, 1);
			assert_int_equal(ms, 1);
			all[nall++] = batch[i];
		}
		best = batch[n - 1];
	}
	assert_true(rounds >= 1 && rounds <= 2);
	assert_true(nall <= 20);
	assert_true(all_distinct(all, nall));
	assert_int_equal(nall, s.nr_seen);
	kb_search_release(&s);

	/* no verified point: nothing to refine around */
	assert_int_equal(kb_search_init(&s, radix, 4, 20, 32, 2, 7), 0);
	assert_int_equal(kb_search_next(&s, SIZE_MAX, batch), 10);
	assert_int_equal(kb_search_next(&s, SIZE_MAX, batch), 0);
	kb_search_release(&s);

	/* no refinement: the whole budget samples */
	assert_int_equal(kb_search_init(&s, radix, 4, 20, 32, 0, 7), 0);
	assert_int_equal(kb_search_next(&s, SIZE_MAX, batch), 20);
	assert_int_equal(kb_search_next(&s, batch[0], batch), 0);
	kb_search_release(&s);
}

static void test_search_max_points_bound(void **state)
{
	size_t radix[] = { 3, 3, 3, 3, 3 }, batch[6], total = 0, n, best = SIZE_MAX;
	struct kb_search s;

	(void)state;
	/* many refine rounds, a tiny budget: the budget wins */
	assert_int_equal(kb_search_init(&s, radix, 5, 6, 1, 50, 3), 0);
	while ((n = kb_search_next(&s, best, batch))) {
		total += n;
		assert_true(total <= 6);
		best = batch[0];
	}
	assert_int_equal(total, 6);
	kb_search_release(&s);

	/* one point in the budget: the defaults */
	assert_int_equal(kb_search_init(&s, radix, 5, 1, 1, 2, 3), 0);
	assert_int_equal(kb_search_next(&s, SIZE_MAX, batch), 1);
	assert_int_equal(batch[0], 0);
	assert_int_equal(kb_search_next(&s, 0, batch), 0);
	kb_search_release(&s);
}

static void test_search_deterministic(void **state)
{
	size_t radix[] = { 5, 4, 6, 3 }, a[32], b[32], c[32], na, nb, nc;
	struct kb_search s1, s2, s3;

	(void)state;
	assert_int_equal(kb_search_init(&s1, radix, 4, 32, 8, 2, 42), 0);
	assert_int_equal(kb_search_init(&s2, radix, 4, 32, 8, 2, 42), 0);
	assert_int_equal(kb_search_init(&s3, radix, 4, 32, 8, 2, 43), 0);
	na = kb_search_next(&s1, SIZE_MAX, a);
	nb = kb_search_next(&s2, SIZE_MAX, b);
	nc = kb_search_next(&s3, SIZE_MAX, c);
	assert_int_equal(na, nb);
	assert_int_equal(na, 16);
	assert_int_equal(nc, 16);
	assert_memory_equal(a, b, na * sizeof(*a));
	assert_true(memcmp(a, c, na * sizeof(*a)) != 0); /* the seed matters */
	/* refinement is deterministic too */
	na = kb_search_next(&s1, a[5], a);
	nb = kb_search_next(&s2, b[5], b);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na * sizeof(*a));
	kb_search_release(&s1);
	kb_search_release(&s2);
	kb_search_release(&s3);
}

/* parameter 0 clamped to parameter 1's digit (as threads_per_row to threads) */
static size_t clamp_canon(void *ctx, size_t index)
{
	const struct kb_search *s = ctx;
	size_t d[2];

	kb_search_digits(s, index, d);
	if (d[0] > d[1])
		d[0] = d[1];
	return kb_search_index(s, d);
}

static void test_search_canonical(void **state)
{
	size_t radix[] = { 6, 6 }, batch[40], n, best = SIZE_MAX, total = 0, all[40], d[2];
	struct kb_search s;

	(void)state;
	/* 36 points, 21 distinct: exhaustive proposes each distinct one once */
	assert_int_equal(kb_search_init(&s, radix, 2, 40, 40, 0, 5), 0);
	s.canon = clamp_canon;
	s.canon_ctx = &s;
	n = kb_search_next(&s, SIZE_MAX, batch);
	assert_int_equal(n, 21);
	assert_true(all_distinct(batch, n));
	for (size_t i = 0; i < n; i++) {
		kb_search_digits(&s, batch[i], d);
		assert_true(d[0] <= d[1]);
	}
	kb_search_release(&s);

	/* sampled and refined: every proposal canonical, none twice */
	assert_int_equal(kb_search_init(&s, radix, 2, 12, 4, 3, 9), 0);
	s.canon = clamp_canon;
	s.canon_ctx = &s;
	while ((n = kb_search_next(&s, best, batch))) {
		for (size_t i = 0; i < n; i++) {
			kb_search_digits(&s, batch[i], d);
			assert_true(d[0] <= d[1]);
			assert_int_equal(clamp_canon(&s, batch[i]), batch[i]);
			all[total++] = batch[i];
		}
		best = batch[n - 1];
	}
	assert_true(total <= 12);
	assert_true(all_distinct(all, total));
	kb_search_release(&s);
}

/* the row-wise template: a point and its canonical one render the same source */
static void test_template_canonical(void **state)
{
	const char *top = getenv("KB_TOP");
	struct strbuf sb = STRBUF_INIT, a = STRBUF_INIT, b = STRBUF_INIT, why = STRBUF_INIT;
	struct kb_template *t = NULL;
	size_t size, moved = 0, distinct = 0;
	int64_t *pa, *pb;
	cJSON *an;

	(void)state;
	top = top && *top ? top : ".";
	strbuf_addf(&sb, "%s/tests/templates/row_ce_mean.json", top);
	assert_true(strbuf_read_file(&a, sb.buf, 0) >= 0);
	an = cJSON_Parse(a.buf);
	assert_non_null(an);
	assert_int_equal(kb_template_new(&t, an, KB_BACKEND_CUDA, top, &why), 0);
	size = kb_template_space_size(t);
	pa = xcalloc(kb_template_space(t)->nr + 1, sizeof(*pa));
	pb = xcalloc(kb_template_space(t)->nr + 1, sizeof(*pb));
	for (size_t k = 0; k < size; k++) {
		size_t c = kb_template_point_canonical(t, k);

		assert_true(c < size);
		assert_int_equal(kb_template_point_canonical(t, c), c);
		distinct += c == k;
		if (c == k)
			continue;
		moved++;
		if (moved % 16) /* rendering every one is slow under sanitizers */
			continue;
		kb_template_point_at(t, k, pa);
		kb_template_point_at(t, c, pb);
		strbuf_reset(&a);
		strbuf_reset(&b);
		assert_int_equal(kb_template_render(t, pa, &a), 0);
		assert_int_equal(kb_template_render(t, pb, &b), 0);
		/* the header comment names the point; the code after it is the same */
		assert_non_null(strstr(a.buf, "*/"));
		assert_string_equal(strstr(a.buf, "*/"), strstr(b.buf, "*/"));
	}
	/* threads_per_row at most threads: 26 of the 8 x 4 pairs */
	assert_int_equal(distinct * 32, size * 26);
	assert_true(moved > 0);
	free(pa);
	free(pb);
	kb_template_free(t);
	cJSON_Delete(an);
	strbuf_release(&sb);
	strbuf_release(&a);
	strbuf_release(&b);
	strbuf_release(&why);
}

/* --- keys, hashes, the timings table --- */

static void test_cache_keys(void **state)
{
	struct strbuf a = STRBUF_INIT, b = STRBUF_INIT;
	struct kb_config cfg;
	char h1[17], h2[17];

	(void)state;
	kb_tune_point_key(&a, "NVIDIA H200", "abc", "cuda", "forward", "softmax", "threads=256 vec=4", "f00d", "1234");
	assert_string_equal(a.buf, "tune/1|NVIDIA H200|abc|cuda|forward|softmax|threads=256 vec=4|f00d|1234");
	/* a '|' in a field cannot forge another field */
	kb_tune_point_key(&b, "GPU|abc", "x", "cuda", "forward", "softmax", "p", "f00d", "1234");
	assert_string_equal(b.buf, "tune/1|GPU/abc|x|cuda|forward|softmax|p|f00d|1234");
	/* every field is part of the key */
	strbuf_reset(&b);
	kb_tune_point_key(&b, "NVIDIA H200", "abc", "cpu", "forward", "softmax", "threads=256 vec=4", "f00d", "1234");
	assert_string_not_equal(a.buf, b.buf);
	strbuf_reset(&b);
	kb_tune_point_key(&b, "NVIDIA H100", "abc", "cuda", "forward", "softmax", "threads=256 vec=4", "f00d", "1234");
	assert_string_not_equal(a.buf, b.buf);
	strbuf_reset(&b);
	kb_tune_point_key(&b, "NVIDIA H200", "abc", "cuda", "forward", "softmax", "threads=128 vec=4", "f00d", "1234");
	assert_string_not_equal(a.buf, b.buf);

	strbuf_reset(&b);
	kb_tune_point_key(&b, "NVIDIA H200", "abc", "cuda", "backward", "softmax", "threads=256 vec=4", "f00d", "1234");
	assert_string_not_equal(a.buf, b.buf);

	strbuf_reset(&a);
	kb_tune_final_key(&a, "AMD EPYC", "abc", "cpu", "forward", "f00d", 5, "1234");
	assert_string_equal(a.buf, "tune-final/1|AMD EPYC|abc|cpu|forward|f00d|5|1234");
	strbuf_reset(&a);
	kb_tune_describe_key(&a, "AMD EPYC", "abc", "cpu", "forward", "2.11.0");
	assert_string_equal(a.buf, "describe/1|AMD EPYC|abc|cpu|forward|2.11.0|" KB_VERSION);

	/* the settings that change a verdict change the key */
	kb_config_init(&cfg);
	kb_tune_settings_hash(&cfg, h1);
	assert_int_equal(strlen(h1), 16);
	kb_tune_settings_hash(&cfg, h2);
	assert_string_equal(h1, h2);
	cfg.atol_fp32 = 1e-3;
	kb_tune_settings_hash(&cfg, h2);
	assert_string_not_equal(h1, h2);
	cfg.atol_fp32 = 1e-4;
	cfg.max_configs = 3;
	kb_tune_settings_hash(&cfg, h2);
	assert_string_not_equal(h1, h2);
	cfg.max_configs = 16;
	kb_tune_settings_hash(&cfg, h2);
	assert_string_equal(h1, h2);
	cfg.error_factor = 0;   /* the error bound decides verdicts too */
	kb_tune_settings_hash(&cfg, h2);
	assert_string_not_equal(h1, h2);
	kb_config_release(&cfg);
	strbuf_release(&a);
	strbuf_release(&b);
}

static void test_operator_hash(void **state)
{
	char *dir = tmp_dir();
	struct strbuf path = STRBUF_INIT, sub = STRBUF_INIT;
	char h1[65], h2[65], h3[65], expect[65];

	(void)state;
	/* a file: the SHA-256 of its bytes */
	write_file(dir, "op.py", "x = 1\n");
	strbuf_addf(&path, "%s/op.py", dir);
	assert_int_equal(kb_operator_hash(path.buf, h1), 0);
	kb_sha256_hex("x = 1\n", 6, expect);
	assert_string_equal(h1, expect);

	/* a folder: its files, names and bytes; caches and dot files left out */
	strbuf_reset(&sub);
	strbuf_addf(&sub, "%s/task", dir);
	assert_int_equal(kb_mkdir_p(sub.buf, 0755), 0);
	write_file(sub.buf, "func_forward.py", "def forward_fn(x): return x\n");
	write_file(sub.buf, "config_forward.json", "{}\n");
	assert_int_equal(kb_operator_hash(sub.buf, h1), 0);
	assert_int_equal(kb_operator_hash(sub.buf, h2), 0);
	assert_string_equal(h1, h2);
	write_file(sub.buf, ".hidden", "x");
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/__pycache__", sub.buf);
	assert_int_equal(kb_mkdir_p(path.buf, 0755), 0);
	write_file(path.buf, "func_forward.cpython-311.pyc", "junk");
	assert_int_equal(kb_operator_hash(sub.buf, h2), 0);
	assert_string_equal(h1, h2);
	write_file(sub.buf, "config_forward.json", "{\"a\": 1}\n");
	assert_int_equal(kb_operator_hash(sub.buf, h3), 0);
	assert_string_not_equal(h1, h3);

	strbuf_reset(&path);
	strbuf_addf(&path, "%s/missing", dir);
	assert_int_equal(kb_operator_hash(path.buf, h1), -1);

	kb_rm_rf(dir);
	free(dir);
	strbuf_release(&path);
	strbuf_release(&sub);
}

static void test_timings_table(void **state)
{
	char *dir = tmp_dir();
	struct kb_state *st = NULL;
	cJSON *v, *got;

	(void)state;
	assert_int_equal(kb_state_open(&st, dir), 0);
	assert_null(kb_timings_get(st, "tune/1|x"));
	v = cJSON_Parse("{\"state\": \"verified\", \"fitness\": 1.5}");
	assert_int_equal(kb_timings_put(st, "tune/1|x", v), 0);
	got = kb_timings_get(st, "tune/1|x");
	assert_non_null(got);
	assert_true(cJSON_Compare(v, got, true));
	cJSON_Delete(got);
	/* a second put replaces */
	cJSON_ReplaceItemInObjectCaseSensitive(v, "fitness", cJSON_CreateNumber(2.5));
	assert_int_equal(kb_timings_put(st, "tune/1|x", v), 0);
	got = kb_timings_get(st, "tune/1|x");
	assert_true(cJSON_Compare(v, got, true));
	cJSON_Delete(got);
	cJSON_Delete(v);
	kb_state_close(st);

	/* it survives a reopen: the cache of a second run */
	assert_int_equal(kb_state_open(&st, dir), 0);
	got = kb_timings_get(st, "tune/1|x");
	assert_non_null(got);
	assert_true(cJSON_GetObjectItem(got, "fitness")->valuedouble == 2.5);
	cJSON_Delete(got);
	kb_state_close(st);
	kb_rm_rf(dir);
	free(dir);
}

/* --- report.md --- */

static const char canned_evidence[] =
	"{\"protocol\": 1, \"mode\": \"bench\", \"verdict\": \"verified\", \"reasons\": [],"
	" \"environment\": {\"backend\": \"cpu\", \"device\": \"AMD EPYC\", \"driver\": null,"
	"   \"cuda\": null, \"torch\": \"1.13.0\", \"python\": \"3.11.2\", \"harness\": 1,"
	"   \"kernelbot\": \"0.1.0\"},"
	" \"configs\": ["
	"  {\"index\": 0, \"name\": \"own(batch_size=128,dim=128)\", \"kind\": \"own\","
	"   \"timing\": {\"kernel\": {\"median_ms\": 0.0125}, \"eager\": {\"median_ms\": 0.05},"
	"    \"compile\": null, \"compile_reason\": \"torch 1.13 has no torch.compile\","
	"    \"speedup_eager\": 4.0, \"speedup_compile\": null, \"bw_share\": 0.25, \"flops_share\": 0.01}},"
	"  {\"index\": 1, \"name\": \"odd|pipe\", \"kind\": \"odd\","
	"   \"timing\": {\"kernel\": {\"median_ms\": 0.02}, \"eager\": {\"median_ms\": 0.02},"
	"    \"compile\": {\"median_ms\": 0.04}, \"speedup_eager\": 1.0, \"speedup_compile\": 2.0,"
	"    \"bw_share\": 0.01, \"flops_share\": 0.5}}"
	" ],"
	" \"summary\": {\"configs\": 2, \"seeds\": 5, \"trials\": 10, \"geomean_speedup_eager\": 2.0,"
	"   \"geomean_speedup_compile\": null, \"suspicious\": false},"
	" \"kernelbot\": {\"version\": \"0.1.0\", \"kernel\": {\"path\": \"/state/tune/ab/kernel.cpp\","
	"   \"sha256\": \"ab\", \"abi\": \"native\"}, \"finished_at\": \"2026-12-02T10:04:11Z\"}}";

static void canned_report(struct kb_run_report *r, const cJSON *ev)
{
	memset(r, 0, sizeof(*r));
	r->operator_path = "examples/kernelbench/softmax.py";
	r->operator_name = "softmax";
	r->out_dir = "out/softmax";
	r->kernel_file = "kernel.cpp";
	r->backend = "cpu";
	r->seeds = 5;
	r->evidence = ev;
	r->tuning.family = "rowwise";
	r->tuning.kind = "softmax";
	r->tuning.point = "threads=256 rows=4";
	r->tuning.space_size = 96;
	r->tuning.tried = 8;
	r->tuning.verified = 7;
	r->tuning.built = 8;
	r->tuning.timed = 7;
	r->tuning.seconds = 12.3;
}

static void test_report_markdown(void **state)
{
	cJSON *ev = cJSON_Parse(canned_evidence);
	struct kb_run_report r;
	struct strbuf md = STRBUF_INIT;

	(void)state;
	assert_non_null(ev);
	canned_report(&r, ev);
	kb_run_report_markdown(&md, &r);
	assert_non_null(strstr(md.buf, "# kernelbot: softmax\n"));
	assert_non_null(strstr(md.buf, "**Verified**"));
	/* the headline: the operator's own shapes; then the geomean and the worst config */
	assert_non_null(strstr(md.buf, "**4.00x** faster than torch eager on the operator's own shapes "
				  "(`own(batch_size=128,dim=128)`)"));
	assert_non_null(strstr(md.buf, "2 configs x 5 seeds passed every check in a fresh process.\n"));
	assert_non_null(strstr(md.buf, "Over all 2 timed configs: **2.00x** geometric mean; the worst config, "
				  "`odd\\|pipe`, runs at **1.00x**."));
	assert_null(strstr(md.buf, "[!WARNING]"));
	assert_null(strstr(md.buf, "Configs left out"));
	/* the speedup table, one row per config and the geomean */
	assert_non_null(strstr(md.buf, "| config | eager | torch.compile | kernel | speedup | roofline share |"));
	assert_non_null(strstr(md.buf, "| `own(batch_size=128,dim=128)` | 0.05 ms | n/a | 0.0125 ms | 4.00x | 25% bw |"));
	/* a '|' in a config name stays inside its cell; compile speedup after the slash */
	assert_non_null(strstr(md.buf, "| `odd\\|pipe` | 0.02 ms | 0.04 ms | 0.02 ms | 1.00x / 2.00x | 50% flops |"));
	assert_non_null(strstr(md.buf, "| **geomean** |  |  |  | **2.00x** |  |"));
	assert_non_null(strstr(md.buf, "torch.compile: torch 1.13 has no torch.compile"));
	/* the tuning table */
	assert_non_null(strstr(md.buf, "| points tried | verified | best point | time spent |"));
	assert_non_null(strstr(md.buf, "| 8 of 96 | 7 | `threads=256 rows=4` | 12s |"));
	assert_non_null(strstr(md.buf, "This run built 8 points and timed 7"));
	/* environment and how to reproduce */
	assert_non_null(strstr(md.buf, "| device | AMD EPYC |"));
	assert_non_null(strstr(md.buf, "| torch | 1.13.0 |"));
	assert_non_null(strstr(md.buf, "kernelbot verify examples/kernelbench/softmax.py out/softmax/kernel.cpp\n"));
	assert_non_null(strstr(md.buf, "kernelbot run examples/kernelbench/softmax.py --backend cpu --out out/softmax\n"));
	/* the command that prints the same table: same seeds, same configs */
	assert_non_null(strstr(md.buf, "kernelbot bench examples/kernelbench/softmax.py out/softmax/kernel.cpp "
				  "--backend cpu --seeds 5 --max-configs 2\n"));
	assert_null(strstr(md.buf, "(no timings"));

	/* cached: says so, and where the verdict came from */
	strbuf_reset(&md);
	r.tuning.all_cached = true;
	r.tuning.final_cached = true;
	r.out_dir = "my dir";
	kb_run_report_markdown(&md, &r);
	assert_non_null(strstr(md.buf, "Every measurement came from the cache of an earlier run"));
	assert_non_null(strstr(md.buf, "| 8 of 96 | 7 | `threads=256 rows=4` | 12s (cached) |"));
	assert_non_null(strstr(md.buf, "(that verdict is cached from 2026-12-02T10:04:11Z)"));
	assert_non_null(strstr(md.buf, "kernelbot verify examples/kernelbench/softmax.py 'my dir/kernel.cpp'\n"));

	/* no timings: the table says why */
	strbuf_reset(&md);
	cJSON_DeleteItemFromObject(ev, "configs");
	cJSON_AddItemToObject(ev, "configs", cJSON_CreateArray());
	cJSON_AddStringToObject(ev, "timing_note", "bench/harness missing");
	kb_run_report_markdown(&md, &r);
	assert_non_null(strstr(md.buf, "(no timings: bench/harness missing)"));

	cJSON_Delete(ev);
	strbuf_release(&md);
}

/* --- binding.py --- */

static int python_parses(const char *path)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	int rc;

	strvec_pushl(&cp.args, "python3", "-c",
		     "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])", path, NULL);
	cp.err_to_out = true;
	cp.timeout_ms = 30000;
	rc = run_command(&cp);
	if (!rc)
		rc = cp.exit_code;
	if (rc)
		fprintf(stderr, "%s\n", cp.out.buf);
	child_process_release(&cp);
	return rc;
}

static void test_binding_render(void **state)
{
	static const char *const names[] = { "x", "bias", "scale" };
	static const char *const link[] = { "-lcublasLt" };
	struct kb_binding_spec b = {
		.operator_name = "fused\"\"\"pointwise", .kernel_file = "kernel.cu", .backend = "cuda",
		.format = "robust-kbench", .reference = "reference/fused_pointwise",
		.input_names = names, .nr_inputs = 3, .has_backward = true,
		.link_flags = link, .nr_link_flags = 1,
	};
	struct strbuf py = STRBUF_INIT;
	char *dir = tmp_dir();
	struct strbuf path = STRBUF_INIT;

	(void)state;
	kb_binding_render(&py, &b);
	assert_non_null(strstr(py.buf, "INPUT_NAMES = [\"x\",\"bias\",\"scale\"]\n"));
	assert_non_null(strstr(py.buf, "HAS_BACKWARD = True\n"));
	assert_non_null(strstr(py.buf, "BACKWARD_KERNEL = \"kernel.cu\"\n"));
	assert_non_null(strstr(py.buf, "BACKEND = \"cuda\"\n"));
	assert_non_null(strstr(py.buf, "FORMAT = \"robust-kbench\"\n"));
	assert_non_null(strstr(py.buf, "LINK_FLAGS = [\"-lcublasLt\"]\n"));
	assert_non_null(strstr(py.buf, "OPERATOR = \"fused\\\"\\\"\\\"pointwise\"\n"));
	assert_non_null(strstr(py.buf, "class DLTensor(ctypes.Structure):"));
	assert_non_null(strstr(py.buf, "class KernelFunction(torch.autograd.Function):"));
	assert_non_null(strstr(py.buf, "y = op.forward(x, bias, scale)"));
	assert_non_null(strstr(py.buf, "    @staticmethod\n"));
	/* the name cannot end the docstring: only its sanitised form is there */
	assert_non_null(strstr(py.buf, "kernelbot binding for fused___pointwise:"));
	assert_null(strstr(py.buf, "@DOC_"));
	assert_null(strstr(py.buf, "@IDENT@"));
	assert_null(strstr(py.buf, "@INPUT_NAMES@"));
	strbuf_addf(&path, "%s/binding.py", dir);
	assert_int_equal(kb_write_file_atomic(path.buf, py.buf, py.len), 0);
	assert_int_equal(python_parses(path.buf), 0);

	/* cpu, KernelBench, no backward */
	strbuf_reset(&py);
	b.backend = "cpu";
	b.format = "kernelbench";
	b.has_backward = false;
	b.nr_link_flags = 0;
	b.operator_name = "softmax";
	kb_binding_render(&py, &b);
	assert_non_null(strstr(py.buf, "HAS_BACKWARD = False\n"));
	assert_non_null(strstr(py.buf, "LINK_FLAGS = []\n"));
	assert_non_null(strstr(py.buf, "m = op.Module()"));
	/* apply() all the same: the reference's backward */
	assert_non_null(strstr(py.buf, "BACKWARD_KERNEL = None\n"));
	assert_non_null(strstr(py.buf, "y = op.apply(x, bias, scale)"));
	assert_non_null(strstr(py.buf, "its backward is the\nreference's"));
	assert_int_equal(kb_write_file_atomic(path.buf, py.buf, py.len), 0);
	assert_int_equal(python_parses(path.buf), 0);

	/* beside a backward pass's kernel (a job of both passes): its kb_backward */
	strbuf_reset(&py);
	b.backward_kernel = "backward/kernel.cpp";
	kb_binding_render(&py, &b);
	assert_non_null(strstr(py.buf, "HAS_BACKWARD = False\n"));
	assert_non_null(strstr(py.buf, "BACKWARD_KERNEL = \"backward/kernel.cpp\"\n"));
	assert_non_null(strstr(py.buf, "kb_backward of backward/kernel.cpp."));
	assert_int_equal(kb_write_file_atomic(path.buf, py.buf, py.len), 0);
	assert_int_equal(python_parses(path.buf), 0);

	kb_rm_rf(dir);
	free(dir);
	strbuf_release(&path);
	strbuf_release(&py);
}

/* --- progress --- */

static char *read_back(FILE *fp)
{
	struct strbuf sb = STRBUF_INIT;
	char buf[4096];
	size_t n;

	fflush(fp);
	rewind(fp);
	while ((n = fread(buf, 1, sizeof(buf), fp)) > 0)
		strbuf_add(&sb, buf, n);
	return strbuf_detach(&sb, NULL);
}

static void test_progress(void **state)
{
	struct kb_progress p;
	FILE *fp = tmpfile();
	char *text, line[256];

	(void)state;
	assert_non_null(fp);
	kb_progress_init(&p, fp, 0);
	kb_progress_stage(&p, "analyse", 0);
	kb_progress_stage(&p, "build", 3);
	kb_progress_step(&p, 1, "threads=256: ok");
	kb_progress_note(&p, "cached: %d of %d points", 2, 3);
	kb_progress_end(&p);
	kb_progress_stage(NULL, "ignored", 1); /* NULL is fine */
	text = read_back(fp);
	assert_string_equal(text, "[analyse]\n[build 0/3]\n[build 1/3] threads=256: ok\ncached: 2 of 3 points\n");
	assert_null(strchr(text, '\r'));
	free(text);
	fclose(fp);

	/* a terminal: one line redrawn, notes above it */
	fp = tmpfile();
	kb_progress_init(&p, fp, 1);
	p.width = 60;
	kb_progress_stage(&p, "verify", 4);
	kb_progress_step(&p, 2, "threads=256");
	kb_progress_note(&p, "a note");
	kb_progress_end(&p);
	text = read_back(fp);
	assert_non_null(strstr(text, "\r\033[K[##########..........] verify 2/4  threads=256"));
	assert_non_null(strstr(text, "\r\033[Ka note\n\r\033[K[##########"));
	assert_int_equal(text[strlen(text) - 1], 'K'); /* ends cleared */
	free(text);
	fclose(fp);

	/* never wider than the terminal */
	p.width = 30;
	p.total = 8;
	p.done = 8;
	kb_strlcpy(p.stage, "build", sizeof(p.stage));
	kb_strlcpy(p.detail, "a very long detail that does not fit on the line", sizeof(p.detail));
	kb_progress_format_bar(&p, p.start_ms, line, sizeof(line));
	assert_int_equal(strlen(line), 29);
	assert_true(!strncmp(line, "[####################] build 8", 30 - 1));
}

/* --- the output directory --- */

static void test_write_dir(void **state)
{
	static const char *const names[] = { "input0" };
	char *dir = tmp_dir();
	struct strbuf out = STRBUF_INIT, opfile = STRBUF_INIT, sb = STRBUF_INIT, hdr = STRBUF_INIT;
	cJSON *ev = cJSON_Parse(canned_evidence), *got;
	struct kb_run_output o = { 0 };
	const char *top = getenv("KB_TOP");

	(void)state;
	strbuf_addf(&opfile, "%s/softmax.py", dir);
	write_file(dir, "softmax.py", "# the operator\n");
	strbuf_addf(&out, "%s/out/softmax", dir);
	strbuf_addf(&hdr, "%s/verifier/include/kernelbot_abi.h", top && *top ? top : ".");
	canned_report(&o.report, ev);
	o.report.operator_path = opfile.buf;
	o.report.out_dir = out.buf;
	o.dir = out.buf;
	o.source = "// kernel\n";
	o.source_len = strlen(o.source);
	o.abi_header = hdr.buf;
	o.binding.operator_name = "softmax";
	o.binding.kernel_file = "kernel.cpp";
	o.binding.backend = "cpu";
	o.binding.format = "kernelbench";
	o.binding.reference = "reference/softmax.py";
	o.binding.input_names = names;
	o.binding.nr_inputs = 1;
	if (!kb_is_file("/usr/include/dlpack/dlpack.h") && !kb_is_file("/usr/local/include/dlpack/dlpack.h")) {
		kb_rm_rf(dir);
		free(dir);
		KB_SKIP("no dlpack/dlpack.h (libdlpack-dev)");
	}
	assert_int_equal(kb_run_write_dir(&o), 0);
	/* twice: an earlier run's directory is replaced */
	assert_int_equal(kb_run_write_dir(&o), 0);
	{
		/* kernel.json has its own writer (run/kernel_json.h, test_run_kernel_json.c) */
		static const char *const files[] = { "kernel.cpp", "evidence.json", "report.md",
						     "binding.py", "include/kernelbot_abi.h",
						     "include/dlpack/dlpack.h", "reference/softmax.py" };

		for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
			strbuf_reset(&sb);
			strbuf_addf(&sb, "%s/%s", out.buf, files[i]);
			assert_true(kb_is_file(sb.buf));
		}
	}
	strbuf_reset(&sb);
	strbuf_addf(&sb, "%s/evidence.json", out.buf);
	{
		struct strbuf text = STRBUF_INIT;
		char *abs;

		assert_true(strbuf_read_file(&text, sb.buf, 0) >= 0);
		got = cJSON_Parse(text.buf);
		assert_non_null(got);
		assert_string_equal(kb_evidence_verdict(got), "verified");
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/kernel.cpp", out.buf);
		abs = realpath(sb.buf, NULL);
		/* the evidence names the copy in the output directory */
		assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(got, "kernelbot"), "kernel"), "path")->valuestring, abs);
		free(abs);
		cJSON_Delete(got);
		strbuf_release(&text);
	}
	strbuf_reset(&sb);
	kb_operator_name("a/b/softmax.py", &sb);
	assert_string_equal(sb.buf, "softmax");
	strbuf_reset(&sb);
	kb_operator_name("examples/robust-kbench/layernorm/", &sb);
	assert_string_equal(sb.buf, "layernorm");

	cJSON_Delete(ev);
	kb_rm_rf(dir);
	free(dir);
	strbuf_release(&out);
	strbuf_release(&opfile);
	strbuf_release(&sb);
	strbuf_release(&hdr);
}

/*
 * The binding's CUDA path without a GPU: a rendered CUDA template written
 * out as `kernelbot run` does, then binding.load() compiles it with nvcc
 * (the device's capability faked as 9.0) and finds kb_forward. Skipped
 * without nvcc or a python with torch.
 */
static void test_binding_compiles_cuda(void **state)
{
	static const char *const names[] = { "x", "temperature" };
	const char *top = getenv("KB_TOP");
	struct strbuf sb = STRBUF_INIT, src = STRBUF_INIT, why = STRBUF_INIT, hdr = STRBUF_INIT;
	struct strbuf opfile = STRBUF_INIT, out = STRBUF_INIT;
	struct child_process cp = CHILD_PROCESS_INIT;
	struct kb_template *t = NULL;
	struct kb_run_output o = { 0 };
	cJSON *an, *ev = cJSON_Parse(canned_evidence);
	int64_t *point;
	char *dir;

	(void)state;
	top = top && *top ? top : ".";
	if (access("/usr/local/cuda/bin/nvcc", X_OK) && access("/usr/bin/nvcc", X_OK)) {
		cJSON_Delete(ev);
			KB_SKIP("no nvcc (CUDA toolkit) on this machine");
	}
	strbuf_addf(&sb, "%s/tests/templates/row_softmax.json", top);
	assert_true(strbuf_read_file(&src, sb.buf, 0) >= 0);
	an = cJSON_Parse(src.buf);
	assert_non_null(an);
	assert_int_equal(kb_template_new(&t, an, KB_BACKEND_CUDA, top, &why), 0);
	point = xcalloc(kb_template_space(t)->nr + 1, sizeof(*point));
	kb_template_point_at(t, 0, point);
	strbuf_reset(&src);
	assert_int_equal(kb_template_render(t, point, &src), 0);

	dir = tmp_dir();
	write_file(dir, "op.py", "# operator\n");
	strbuf_addf(&opfile, "%s/op.py", dir);
	strbuf_addf(&out, "%s/out", dir);
	strbuf_addf(&hdr, "%s/verifier/include/kernelbot_abi.h", top);
	canned_report(&o.report, ev);
	o.report.operator_path = opfile.buf;
	o.report.kernel_file = "kernel.cu";
	o.report.backend = "cuda";
	o.dir = out.buf;
	o.source = src.buf;
	o.source_len = src.len;
	o.abi_header = hdr.buf;
	o.binding.operator_name = "row_softmax";
	o.binding.kernel_file = "kernel.cu";
	o.binding.backend = "cuda";
	o.binding.format = "kernelbench";
	o.binding.reference = "reference/op.py";
	o.binding.input_names = names;
	o.binding.nr_inputs = 2;
	assert_int_equal(kb_run_write_dir(&o), 0);

	strvec_pushl(&cp.args, "/usr/bin/python3", "-c",
		     "import importlib.util, os, sys, torch\n"
		     "spec = importlib.util.spec_from_file_location('b', sys.argv[1])\n"
		     "op = importlib.util.module_from_spec(spec)\n"
		     "spec.loader.exec_module(op)\n"
		     "torch.cuda.get_device_capability = lambda *a: (9, 0)\n"
		     "os.environ['PATH'] = '/usr/local/cuda/bin:' + os.environ.get('PATH', '')\n"
		     "lib = op.load()\n"
		     "print('kb_forward' if lib.kb_forward else 'missing')\n", NULL);
	strvec_pushf(&cp.args, "%s/binding.py", out.buf);
	cp.err_to_out = true;
	cp.timeout_ms = 180000;
	assert_int_equal(run_command(&cp), 0);
	if (cp.exit_code && strstr(cp.out.buf, "No module named 'torch'")) {
		fprintf(stderr, "no torch in /usr/bin/python3: skipped\n");
	} else {
		if (cp.exit_code)
			fprintf(stderr, "%s\n", cp.out.buf);
		assert_int_equal(cp.exit_code, 0);
		assert_non_null(strstr(cp.out.buf, "kb_forward"));
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/.kb_build", out.buf);
		assert_true(kb_is_dir(sb.buf));
	}

	child_process_release(&cp);
	kb_template_free(t);
	cJSON_Delete(an);
	cJSON_Delete(ev);
	free(point);
	kb_rm_rf(dir);
	free(dir);
	strbuf_release(&sb);
	strbuf_release(&src);
	strbuf_release(&why);
	strbuf_release(&hdr);
	strbuf_release(&opfile);
	strbuf_release(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_search_exhaustive),
		cmocka_unit_test(test_search_digits),
		cmocka_unit_test(test_search_sampled_refined),
		cmocka_unit_test(test_search_max_points_bound),
		cmocka_unit_test(test_search_deterministic),
		cmocka_unit_test(test_search_canonical),
		cmocka_unit_test(test_template_canonical),
		cmocka_unit_test(test_cache_keys),
		cmocka_unit_test(test_operator_hash),
		cmocka_unit_test(test_timings_table),
		cmocka_unit_test(test_report_markdown),
		cmocka_unit_test(test_binding_render),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_write_dir),
		cmocka_unit_test(test_binding_compiles_cuda),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
