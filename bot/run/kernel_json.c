#include "core/common.h"
#include "core/json.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "report/run_report.h"
#include "run/kernel_json.h"
#include "run/run.h"
#include "run/run_priv.h"
#include "verifier/evidence.h"
#include "verifier/python_env.h"

#include <math.h>

/*
 * The one writer and the one reader of kernel.json; the format, key by
 * key, is bot/run/KERNEL_JSON.md. Change the three together.
 */

#define MAX_KERNEL_JSON (16 * 1024 * 1024)

static cJSON *dup_or_null(const cJSON *v)
{
	return v ? cJSON_Duplicate(v, true) : cJSON_CreateNull();
}

/* "tuning": what the templates' search tried (a templates' kernel). */
static void add_tuning(cJSON *j, const struct kb_tune_result *res)
{
	cJSON *t = cJSON_AddObjectToObject(j, "tuning"), *pts;

	cJSON_AddNumberToObject(t, "points_tried", (double)res->nr_points);
	cJSON_AddNumberToObject(t, "built", (double)res->built);
	cJSON_AddNumberToObject(t, "verified", (double)res->verified);
	cJSON_AddNumberToObject(t, "timed", (double)res->timed);
	cJSON_AddNumberToObject(t, "cache_hits", (double)res->cache_hits);
	cJSON_AddBoolToObject(t, "all_cached", res->all_cached);
	cJSON_AddBoolToObject(t, "final_cached", res->final_cached);
	cJSON_AddNumberToObject(t, "seconds", round(res->seconds * 100) / 100);
	pts = cJSON_AddArrayToObject(t, "points");
	for (size_t i = 0; i < res->nr_points; i++) {
		const struct kb_tune_point *p = &res->points[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddStringToObject(e, "point", p->name);
		cJSON_AddStringToObject(e, "state", kb_tune_state_name(p->state));
		if (p->state == KB_TP_VERIFIED)
			cJSON_AddNumberToObject(e, "speedup_eager", round(p->fitness * 1000) / 1000);
		if (p->reason)
			cJSON_AddStringToObject(e, "reason", p->reason);
		cJSON_AddBoolToObject(e, "cached", p->cached);
		if (p->duplicate)
			cJSON_AddBoolToObject(e, "same_source_as_earlier", true);
		cJSON_AddItemToArray(pts, e);
	}
	/* whether the time budget stopped the search (the daemon reads it) */
	cJSON_AddBoolToObject(t, "cut_short", res->cut_short);
}

static void add_operator(cJSON *j, const struct kb_run_result *r)
{
	struct strbuf name = STRBUF_INIT;
	cJSON *o = cJSON_AddObjectToObject(j, "operator");

	kb_operator_name(r->operator_path, &name);
	cJSON_AddStringToObject(o, "path", r->operator_path);
	cJSON_AddStringToObject(o, "name", name.buf);
	cJSON_AddStringToObject(o, "sha256", r->tune.op_hash);
	strbuf_release(&name);
}

static void add_build(cJSON *j, const cJSON *evidence)
{
	const cJSON *kb = cJSON_GetObjectItemCaseSensitive(evidence, "kernelbot");
	const cJSON *build = cJSON_GetObjectItemCaseSensitive(kb, "build");

	cJSON_AddItemToObject(j, "build", cJSON_IsObject(build) ? cJSON_Duplicate(build, true) : cJSON_CreateNull());
}

/* The templates' kernel won (no search ran). */
static void template_kernel(cJSON *j, const struct kb_run_result *r)
{
	const struct kb_tune_result *res = &r->tune;
	const struct kb_tune_point *best = &res->points[res->best];
	cJSON *o, *t;

	cJSON_AddStringToObject(j, "sha256", best->sha);
	cJSON_AddStringToObject(j, "backend", kb_backend_name(r->backend));
	cJSON_AddStringToObject(j, "pass", r->pass);
	cJSON_AddStringToObject(j, "device", res->device);
	cJSON_AddStringToObject(j, "verdict", kb_evidence_verdict(res->evidence));
	cJSON_AddItemToObject(j, "summary", dup_or_null(cJSON_GetObjectItemCaseSensitive(res->evidence, "summary")));
	/* the best point's figure while tuning: the pull request sets it beside the final one */
	if (best->fitness > 0) {
		o = cJSON_AddObjectToObject(j, "screening");
		cJSON_AddNumberToObject(o, "speedup_eager", round(best->fitness * 1000) / 1000);
		cJSON_AddStringToObject(o, "measure", "geometric mean over the configs, one seed, in the "
					"tuning's harness worker");
	}
	if (res->forward_evidence) {
		/* a backward run: the forward pass's own fresh check */
		o = cJSON_AddObjectToObject(j, "forward_check");
		cJSON_AddStringToObject(o, "verdict", kb_evidence_verdict(res->forward_evidence));
		cJSON_AddItemToObject(o, "summary",
				      dup_or_null(cJSON_GetObjectItemCaseSensitive(res->forward_evidence, "summary")));
	}
	add_operator(j, r);
	t = cJSON_AddObjectToObject(j, "template");
	cJSON_AddStringToObject(t, "family", res->family);
	cJSON_AddStringToObject(t, "kind", res->kind);
	cJSON_AddStringToObject(t, "point_name", best->name);
	cJSON_AddItemToObject(t, "point", cJSON_Duplicate(res->best_point, true));
	cJSON_AddBoolToObject(t, "has_backward", res->has_backward);
	cJSON_AddNumberToObject(t, "space_size", (double)res->space_size);
	cJSON_AddItemToObject(t, "space", cJSON_Duplicate(res->space, true));
	add_build(j, res->evidence);
	add_tuning(j, res);
}

/* What the templates did before a search, for "templates". */
static cJSON *templates_json(const struct kb_tune_result *t)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "outcome", t->outcome == KB_TUNE_OK ? "verified" :
				t->outcome == KB_TUNE_NO_TEMPLATE ? "no template" : "none verified");
	if (t->why)
		cJSON_AddStringToObject(o, "why", t->why);
	if (t->outcome == KB_TUNE_OK) {
		cJSON_AddStringToObject(o, "family", t->family);
		cJSON_AddStringToObject(o, "kind", t->kind);
		cJSON_AddStringToObject(o, "point_name", t->points[t->best].name);
		cJSON_AddItemToObject(o, "point", dup_or_null(t->best_point));
		cJSON_AddNumberToObject(o, "speedup_eager", round(t->points[t->best].fitness * 1000) / 1000);
	}
	cJSON_AddNumberToObject(o, "points_tried", (double)t->nr_points);
	cJSON_AddNumberToObject(o, "seconds", round(t->seconds * 100) / 100);
	cJSON_AddBoolToObject(o, "cut_short", t->cut_short);
	return o;
}

/*
 * The kernel's figure while the search ran (what the review comments
 * showed), for the pull request to set beside the final re-check's
 * (bot/report/HEADLINE.md); null when the search kept none.
 */
static cJSON *screening_json(const struct kb_tune_result *t, const struct kb_search_result *r)
{
	const cJSON *best = cJSON_GetObjectItemCaseSensitive(r->summary, "best");
	double s = kb_json_num(best, "speedup", NAN);
	cJSON *o;

	if (r->best_proposer && !strcmp(r->best_proposer, "template") && t->outcome == KB_TUNE_OK)
		s = t->points[t->best].fitness;
	if (!isfinite(s) || !(s > 0))
		return cJSON_CreateNull();
	o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "speedup_eager", round(s * 1000) / 1000);
	cJSON_AddStringToObject(o, "measure", "geometric mean over the configs, one seed, in the "
				"search's harness worker");
	return o;
}

/* The LLM search's kernel (which may be the templates' seed). */
static void search_kernel(cJSON *j, const struct kb_run_result *res)
{
	const struct kb_tune_result *t = &res->tune;
	const struct kb_search_result *r = &res->search;

	cJSON_AddStringToObject(j, "sha256", r->best_sha);
	cJSON_AddStringToObject(j, "backend", kb_backend_name(res->backend));
	cJSON_AddStringToObject(j, "pass", res->pass);
	cJSON_AddStringToObject(j, "device", t->device ? t->device : "");
	cJSON_AddStringToObject(j, "verdict", kb_evidence_verdict(r->evidence));
	cJSON_AddItemToObject(j, "summary", dup_or_null(cJSON_GetObjectItemCaseSensitive(r->evidence, "summary")));
	cJSON_AddStringToObject(j, "proposer", r->best_proposer ? r->best_proposer : "?");
	cJSON_AddItemToObject(j, "screening", screening_json(t, r));
	add_operator(j, res);
	add_build(j, r->evidence);
	cJSON_AddItemToObject(j, "templates", templates_json(t));
	cJSON_AddItemToObject(j, "search", dup_or_null(r->summary));
}

/* "binding": what binding.py was rendered from (the job loop renders it again beside a backward kernel). */
static void add_binding(cJSON *j, const struct kb_run_result *res)
{
	struct run_binding b;
	cJSON *o = cJSON_AddObjectToObject(j, "binding"), *names;

	run_binding_init(&b, res);
	cJSON_AddStringToObject(o, "file", "binding.py");
	cJSON_AddStringToObject(o, "operator_name", b.name.buf);
	cJSON_AddStringToObject(o, "format", b.format);
	cJSON_AddStringToObject(o, "reference", b.reference.buf);
	names = cJSON_AddArrayToObject(o, "input_names");
	for (size_t i = 0; i < b.inputs.nr; i++)
		cJSON_AddItemToArray(names, cJSON_CreateString(b.inputs.v[i]));
	cJSON_AddBoolToObject(o, "has_backward", b.has_backward);
	run_binding_release(&b);
}

cJSON *kb_kernel_json_build(const struct kb_run_result *res)
{
	cJSON *j = cJSON_CreateObject();

	cJSON_AddStringToObject(j, "kernelbot", KB_VERSION);
	cJSON_AddStringToObject(j, "source", res->backend == KB_BACKEND_CUDA ? "kernel.cu" : "kernel.cpp");
	if (res->searched)
		search_kernel(j, res);
	else
		template_kernel(j, res);
	add_binding(j, res);
	return j;
}

int kb_kernel_json_write(const char *dir, const struct kb_run_result *res)
{
	cJSON *kj = kb_kernel_json_build(res);
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	char *s;
	int rc;

	/* committed with the kernel: no compiler text, every string redacted */
	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(kj, "build"), "errors");
	kb_redact_json(kj, KB_REDACT_FIELD_MAX);
	s = cJSON_Print(kj);
	if (!s)
		die("out of memory");
	strbuf_addstr(&text, s);
	strbuf_addch(&text, '\n');
	strbuf_addf(&path, "%s/kernel.json", dir);
	rc = kb_write_file_atomic(path.buf, text.buf, text.len);
	if (rc)
		error("could not write '%s'", path.buf);
	free(s);
	cJSON_Delete(kj);
	strbuf_release(&path);
	strbuf_release(&text);
	return rc;
}

void kb_kernel_info_init(struct kb_kernel_info *ki)
{
	memset(ki, 0, sizeof(*ki));
	strvec_init(&ki->search.models);
	strvec_init(&ki->binding.input_names);
}

void kb_kernel_info_release(struct kb_kernel_info *ki)
{
	free(ki->source);
	free(ki->backend);
	free(ki->verdict);
	free(ki->pass);
	strvec_clear(&ki->search.models);
	free(ki->binding.operator_name);
	free(ki->binding.format);
	free(ki->binding.reference);
	strvec_clear(&ki->binding.input_names);
	kb_kernel_info_init(ki);
}

static char *dup_str(const cJSON *o, const char *key)
{
	const char *s = kb_json_str(o, key);

	return s ? xstrdup(s) : NULL;
}

/* "reference/<one name>": a path the binding may open inside its folder, else false. */
static bool reference_ok(const char *s)
{
	const char *name = s && !strncmp(s, "reference/", 10) ? s + 10 : NULL;

	if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return false;
	for (; *name; name++)
		if ((unsigned char)*name < 0x20 || *name == '\\')
			return false;
	return true;
}

/* "binding": what binding.py was rendered from; absent or malformed, it stays empty. */
static void parse_binding(struct kb_kernel_info *ki, const cJSON *b)
{
	const char *format = kb_json_str(b, "format"), *ref = kb_json_str(b, "reference");
	const cJSON *n;

	if (!cJSON_IsObject(b) || !kb_json_str(b, "operator_name") || !reference_ok(ref) || !format ||
	    (strcmp(format, "kernelbench") && strcmp(format, "robust-kbench")))
		return;
	cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(b, "input_names")) {
		if (!cJSON_IsString(n)) {
			strvec_clear(&ki->binding.input_names);
			return;
		}
		strvec_push(&ki->binding.input_names, n->valuestring);
	}
	ki->binding.operator_name = dup_str(b, "operator_name");
	ki->binding.format = xstrdup(format);
	ki->binding.reference = xstrdup(ref);
	ki->binding.has_backward = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "has_backward"));
}

void kb_kernel_info_parse(struct kb_kernel_info *ki, const cJSON *kj)
{
	const cJSON *tuning = cJSON_GetObjectItemCaseSensitive(kj, "tuning");
	const cJSON *search = cJSON_GetObjectItemCaseSensitive(kj, "search");
	const cJSON *m;

	if (!cJSON_IsObject(kj))
		return;
	ki->source = dup_str(kj, "source");
	ki->backend = dup_str(kj, "backend");
	ki->verdict = dup_str(kj, "verdict");
	ki->pass = dup_str(kj, "pass");
	parse_binding(ki, cJSON_GetObjectItemCaseSensitive(kj, "binding"));
	ki->screening_speedup = kb_json_num(cJSON_GetObjectItemCaseSensitive(kj, "screening"), "speedup_eager", 0);
	ki->tuning.points_tried = kb_i64_from_double(kb_json_num(tuning, "points_tried", 0));
	ki->tuning.verified = kb_i64_from_double(kb_json_num(tuning, "verified", 0));
	ki->tuning.seconds = kb_json_num(tuning, "seconds", 0);
	ki->tuning.cut_short = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tuning, "cut_short"));
	ki->searched = cJSON_IsObject(search);
	if (!ki->searched)
		return;
	ki->search.candidates = kb_i64_from_double(kb_json_num(search, "candidates", 0));
	ki->search.verified = kb_i64_from_double(kb_json_num(search, "verified", 0));
	ki->search.generations = kb_i64_from_double(kb_json_num(search, "generations", 0));
	ki->search.wall_s = kb_json_num(search, "wall_s", 0);
	ki->search.llm_cost_usd = kb_json_num(cJSON_GetObjectItemCaseSensitive(search, "llm"), "cost_usd", 0);
	cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(search, "models"))
		if (cJSON_IsString(m))
			strvec_push(&ki->search.models, m->valuestring);
	ki->search.cut_short = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(search, "cut_short"));
}

int kb_kernel_json_read(const char *dir, struct kb_kernel_info *ki)
{
	struct strbuf path = STRBUF_INIT, data = STRBUF_INIT;
	cJSON *kj = NULL;
	int rc;

	strbuf_addf(&path, "%s/kernel.json", dir);
	if (kb_is_file(path.buf) && !strbuf_read_file(&data, path.buf, MAX_KERNEL_JSON))
		kj = cJSON_Parse(data.buf);
	kb_kernel_info_parse(ki, kj);
	rc = kj ? 0 : -1;
	cJSON_Delete(kj);
	strbuf_release(&path);
	strbuf_release(&data);
	return rc;
}
