#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "run/kernel_json.h"
#include "run/run.h"

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

/*
 * kernel.json's one writer and one reader (run/kernel_json.h, the format
 * in bot/run/KERNEL_JSON.md): a run's result written and read back, for
 * a templates' kernel and for a search's, the keys in their documented
 * order, compiler text left out and secrets redacted; and the reader's
 * defaults for a missing, broken or mistyped file.
 */

static char *tmp_dir(void)
{
	const char *base = getenv("TMPDIR");
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s/kb-kj-XXXXXX", base && *base ? base : "/tmp");
	assert_non_null(mkdtemp(sb.buf));
	return strbuf_detach(&sb, NULL);
}

static const char evidence[] =
	"{\"verdict\": \"verified\", \"summary\": {\"speedup_eager\": 1.5},"
	" \"kernelbot\": {\"build\": {\"seconds\": 0.5, \"errors\": \"nvcc: warning at line 3\"}}}";

static void add_point(struct kb_tune_result *t, const char *name, enum kb_tune_state state, double fitness)
{
	struct kb_tune_point *p;

	t->points = xrealloc(t->points, (t->nr_points + 1) * sizeof(*t->points));
	p = &t->points[t->nr_points++];
	memset(p, 0, sizeof(*p));
	p->name = xstrdup(name);
	p->state = state;
	p->fitness = fitness;
	memset(p->sha, 'a', 64);
	/* a hostile kernel printed a token into its failure */
	if (state != KB_TP_VERIFIED)
		p->reason = xstrdup("wrong output ghp_abcdefghijklmnopqrstuvwxyz0123456789");
}

/* A templates' run on the cpu backend: two points, the second verified and best. */
static void template_result(struct kb_run_result *r)
{
	struct kb_tune_result *t = &r->tune;

	kb_run_result_init(r);
	r->outcome = KB_RUN_VERIFIED;
	r->operator_path = xstrdup("ops/softmax.py");
	r->backend = KB_BACKEND_CPU;
	r->pass = xstrdup("forward");
	r->seeds = 3;
	t->outcome = KB_TUNE_OK;
	t->device = xstrdup("cpu (test)");
	memset(t->op_hash, 'b', 64);
	t->family = xstrdup("rowwise");
	t->kind = xstrdup("softmax");
	t->ext = xstrdup(".cpp");
	t->space = cJSON_Parse("[{\"name\": \"threads\", \"values\": [64, 128]}]");
	t->space_size = 2;
	add_point(t, "threads=64", KB_TP_REJECTED, 0);
	add_point(t, "threads=128", KB_TP_VERIFIED, 1.23456);
	t->best = 1;
	t->best_point = cJSON_Parse("{\"threads\": 128}");
	t->verified = 1;
	t->built = 2;
	t->timed = 1;
	t->seconds = 4.567;
	t->cut_short = true;
	t->evidence = cJSON_Parse(evidence);
	t->describe = cJSON_Parse("{\"configs\": [{\"inputs\": [{\"name\": \"input0\"}, {\"name\": \"param:weight\"}]}]}");
}

static cJSON *read_back(const char *dir)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	cJSON *j;

	strbuf_addf(&path, "%s/kernel.json", dir);
	assert_true(strbuf_read_file(&text, path.buf, 0) >= 0);
	assert_true(text.len && text.buf[text.len - 1] == '\n');
	j = cJSON_Parse(text.buf);
	assert_non_null(j);
	strbuf_release(&path);
	strbuf_release(&text);
	return j;
}

/* The object's keys, comma-separated, in order. */
static void keys(const cJSON *o, struct strbuf *out)
{
	const cJSON *c;

	strbuf_reset(out);
	cJSON_ArrayForEach(c, o)
		strbuf_addf(out, "%s%s", out->len ? "," : "", c->string);
}

/* A round trip's parts: the result written, the reader's view, a scratch folder. */
struct trip {
	struct kb_run_result r;
	struct kb_kernel_info ki;
	struct strbuf sb;
	char *dir;
};

static void trip_init(struct trip *t)
{
	template_result(&t->r);
	kb_kernel_info_init(&t->ki);
	strbuf_init(&t->sb, 0);
	t->dir = tmp_dir();
}

static void trip_release(struct trip *t)
{
	kb_kernel_info_release(&t->ki);
	kb_run_result_release(&t->r);
	kb_rm_rf(t->dir);
	free(t->dir);
	strbuf_release(&t->sb);
}

static void test_template_round_trip(void **state)
{
	struct trip t;
	cJSON *j;

	(void)state;
	trip_init(&t);
	assert_int_equal(kb_kernel_json_write(t.dir, &t.r), 0);
	j = read_back(t.dir);
	keys(j, &t.sb);
	assert_string_equal(t.sb.buf, "kernelbot,source,sha256,backend,pass,device,verdict,summary,screening,"
			    "operator,template,build,tuning,binding");
	keys(cJSON_GetObjectItem(j, "binding"), &t.sb);
	assert_string_equal(t.sb.buf, "file,operator_name,format,reference,input_names,has_backward");
	keys(cJSON_GetObjectItem(j, "tuning"), &t.sb);
	assert_string_equal(t.sb.buf, "points_tried,built,verified,timed,cache_hits,all_cached,final_cached,"
			    "seconds,points,cut_short");
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "operator"), "name")->valuestring, "softmax");
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "template"), "point_name")->valuestring,
			    "threads=128");
	/* compiler text stays out of what is committed */
	assert_non_null(cJSON_GetObjectItem(j, "build"));
	assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "build"), "errors"));
	/* and every string is redacted */
	{
		const cJSON *pts = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "tuning"), "points");
		const char *why = cJSON_GetObjectItem(cJSON_GetArrayItem(pts, 0), "reason")->valuestring;

		assert_non_null(strstr(why, "wrong output"));
		assert_null(strstr(why, "ghp_abcdef"));
	}
	cJSON_Delete(j);

	assert_int_equal(kb_kernel_json_read(t.dir, &t.ki), 0);
	assert_string_equal(t.ki.source, "kernel.cpp");
	assert_string_equal(t.ki.backend, "cpu");
	assert_string_equal(t.ki.verdict, "verified");
	assert_true(t.ki.screening_speedup > 1.234 && t.ki.screening_speedup < 1.236);
	assert_false(t.ki.searched);
	assert_int_equal(t.ki.tuning.points_tried, 2);
	assert_int_equal(t.ki.tuning.verified, 1);
	assert_true(t.ki.tuning.seconds > 4.56 && t.ki.tuning.seconds < 4.58);
	assert_true(t.ki.tuning.cut_short);
	assert_string_equal(t.ki.pass, "forward");
	/* the binding as the run rendered it: the describe result's input names, the reference's copy */
	assert_string_equal(t.ki.binding.operator_name, "softmax");
	assert_string_equal(t.ki.binding.format, "kernelbench");
	assert_string_equal(t.ki.binding.reference, "reference/softmax.py");
	assert_int_equal(t.ki.binding.input_names.nr, 2);
	assert_string_equal(t.ki.binding.input_names.v[1], "param:weight");
	assert_false(t.ki.binding.has_backward);
	trip_release(&t);
}

static void test_search_round_trip(void **state)
{
	struct trip t;
	cJSON *j;

	(void)state;
	trip_init(&t);
	t.r.backend = KB_BACKEND_CUDA;
	t.r.searched = true;
	t.r.search.outcome = KB_SEARCH_OK;
	free(t.r.pass);
	t.r.pass = xstrdup("backward");
	t.r.search.best_proposer = xstrdup("mutate");
	t.r.search.best_model = xstrdup("model-a");
	memset(t.r.search.best_sha, 'c', 64);
	t.r.search.evidence = cJSON_Parse(evidence);
	t.r.search.summary = cJSON_Parse("{\"candidates\": 12, \"verified\": 5, \"generations\": 3, \"wall_s\": 9.5,"
				       " \"llm\": {\"cost_usd\": 0.25}, \"models\": [\"model-a\", 7, \"model-b\"],"
				       " \"best\": {\"speedup\": 2.5}, \"cut_short\": \"time budget\"}");
	assert_int_equal(kb_kernel_json_write(t.dir, &t.r), 0);
	j = read_back(t.dir);
	keys(j, &t.sb);
	assert_string_equal(t.sb.buf, "kernelbot,source,sha256,backend,pass,device,verdict,summary,proposer,screening,"
			    "operator,build,templates,search,binding");
	assert_string_equal(cJSON_GetObjectItem(j, "proposer")->valuestring, "mutate");
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "templates"), "outcome")->valuestring,
			    "verified");
	cJSON_Delete(j);

	assert_int_equal(kb_kernel_json_read(t.dir, &t.ki), 0);
	assert_string_equal(t.ki.source, "kernel.cu");
	assert_string_equal(t.ki.backend, "cuda");
	assert_true(t.ki.searched);
	assert_true(t.ki.screening_speedup > 2.49 && t.ki.screening_speedup < 2.51);
	assert_int_equal(t.ki.search.candidates, 12);
	assert_int_equal(t.ki.search.verified, 5);
	assert_int_equal(t.ki.search.generations, 3);
	assert_true(t.ki.search.wall_s > 9.4 && t.ki.search.wall_s < 9.6);
	assert_true(t.ki.search.llm_cost_usd > 0.24 && t.ki.search.llm_cost_usd < 0.26);
	/* strings only */
	assert_int_equal(t.ki.search.models.nr, 2);
	assert_string_equal(t.ki.search.models.v[1], "model-b");
	assert_true(t.ki.search.cut_short);
	/* a search's kernel.json has no "tuning" */
	assert_false(t.ki.tuning.cut_short);
	/* a backward search's kernel exports kb_backward */
	assert_string_equal(t.ki.pass, "backward");
	assert_true(t.ki.binding.has_backward);
	trip_release(&t);
}

/* Missing, not JSON, or of the wrong shape: the reader's defaults, never a crash. */
static void test_read_defaults(void **state)
{
	static const char *const texts[] = { "not json", "[1, 2]",
		"{\"source\": 3, \"search\": [], \"tuning\": {\"cut_short\": \"yes\", \"points_tried\": \"2\"}}",
		/* a binding that would open a file outside its folder, or is not whole: none */
		"{\"binding\": {\"operator_name\": \"x\", \"format\": \"kernelbench\", \"reference\": \"reference/..\"}}",
		"{\"binding\": {\"operator_name\": \"x\", \"format\": \"kernelbench\", \"reference\": \"../etc\"}}",
		"{\"binding\": {\"operator_name\": \"x\", \"format\": \"kernelbench\", \"reference\": \"reference/a/b\"}}",
		"{\"binding\": {\"operator_name\": \"x\", \"format\": \"other\", \"reference\": \"reference/x.py\"}}",
		"{\"binding\": {\"operator_name\": \"x\", \"format\": \"kernelbench\", \"reference\": \"reference/x.py\","
		" \"input_names\": [\"a\", 3]}}" };
	struct kb_kernel_info ki;
	struct strbuf path = STRBUF_INIT;
	char *dir = tmp_dir();

	(void)state;
	kb_kernel_info_init(&ki);
	assert_int_equal(kb_kernel_json_read(dir, &ki), -1);
	assert_null(ki.source);
	strbuf_addf(&path, "%s/kernel.json", dir);
	for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
		assert_int_equal(kb_write_file_atomic(path.buf, texts[i], strlen(texts[i])), 0);
		kb_kernel_info_release(&ki);
		assert_int_equal(kb_kernel_json_read(dir, &ki), i == 0 ? -1 : 0);
		assert_null(ki.source);
		assert_null(ki.backend);
		assert_false(ki.searched);
		assert_false(ki.tuning.cut_short);
		assert_int_equal(ki.tuning.points_tried, 0);
		assert_int_equal(ki.search.models.nr, 0);
		assert_null(ki.binding.reference);
		assert_null(ki.binding.operator_name);
		assert_int_equal(ki.binding.input_names.nr, 0);
	}
	kb_kernel_info_release(&ki);
	kb_rm_rf(dir);
	free(dir);
	strbuf_release(&path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_template_round_trip),
		cmocka_unit_test(test_search_round_trip),
		cmocka_unit_test(test_read_defaults),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
