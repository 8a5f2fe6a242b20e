#include "core/common.h"
#include "core/json.h"
#include "search/search_priv.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/signals.h"
#include "core/util.h"
#include "search/behavior.h"
#include "search/extract.h"
#include "core/hash.h"
#include "core/rng.h"
#include "verifier/harness_client.h"
#include "llm/pool.h"
#include "llm/usage.h"

#include <math.h>

/* --- model calls --- */

uint64_t srch_rng_for(const struct srch *s, const char *text)
{
	return s->seed ^ kb_fnv1a64_str(KB_FNV1A64_INIT, text);
}

/*
 * Everything before a call: the key, the prompt's record, the model, a
 * stored answer or failure, the budgets. 0 / 1 / KB_EBUDGET /
 * KB_ECANCELLED / -1 as srch_ask; SRCH_ASKED when the call must be made
 * (*model set).
 */
static int ask_prepare(struct srch *s, int64_t g, int64_t island, int64_t slot, const char *purpose,
		       int64_t attempt, size_t *model, const char *prompt, struct kb_llm_reply *reply,
		       struct strbuf *key)
{
	int rc;

	strbuf_reset(key);
	kb_search_call_key(key, s->call_base, g, island, slot, purpose, attempt);
	/* the record of what was asked (the first text of a key stays: its answer is stored) */
	if (kb_search_db_prompt_text_add(s->st, s->row.id, key->buf, purpose, prompt))
		log_warn("search: the prompt of call %s was not stored", key->buf);
	if (*model == SIZE_MAX) {
		uint64_t r = srch_rng_for(s, key->buf + strlen(s->call_base));

		*model = kb_llm_pick(s->llm, &r);
	}
	/* answered before the kill or by an earlier run of this seed: no request, no budget */
	rc = kb_llm_usage_lookup(s->st, key->buf, reply);
	if (!rc) {
		s->replayed++;
		return 0;
	}
	if (rc != KB_ENOTFOUND)
		return rc;
	/* an empty or malformed answer was the model's answer: the same again, without asking */
	{
		struct strbuf status = STRBUF_INIT;

		rc = kb_search_db_call_failure(s->st, key->buf, &status, &reply->error);
		if (!rc) {
			reply->status = !strcmp(status.buf, "empty") ? KB_LLM_EMPTY : KB_LLM_MALFORMED;
			s->replayed++;
			s->failed_calls++;
			srch_diagnose(s, 0, "the model call for %s failed (%s)", purpose, status.buf);
			rc = 1;
		}
		strbuf_release(&status);
		if (rc != KB_ENOTFOUND)
			return rc;
	}
	if (s->cut_short)
		return KB_EBUDGET;
	if (kb_stop_requested())
		return KB_ECANCELLED;
	/* only the final check's reserve left: no call whose candidate could not be run */
	if (!kb_budget_may_start(&s->clock, kb_now_ms(), 0)) {
		srch_cut_short(s, "the time budget ran out");
		return KB_EBUDGET;
	}
	return SRCH_ASKED;
}

int srch_ask_end(struct srch *s, const char *purpose, const char *key, int rc, struct kb_llm_reply *reply)
{
	if (rc == KB_EBUDGET) {
		srch_cut_short(s, "%s", reply->error.len ? reply->error.buf : "a budget ran out");
		return rc;
	}
	if (rc == KB_ECANCELLED || (rc == -1 && reply->status == KB_LLM_OK))
		return rc; /* a stop request; or the answer came but could not be stored */
	if (rc) {
		s->failed_calls++;
		log_info("search: %s call %s failed: %s: %s", purpose, key,
			 kb_llm_status_name(reply->status), reply->error.buf);
		srch_diagnose(s, 0, "the model call for %s failed (%s)", purpose, kb_llm_status_name(reply->status));
		rc = 1;
	}
	return rc;
}

static struct kb_llm_request ask_request(const struct srch *s, const char *purpose,
					 const struct kb_llm_message *msg)
{
	struct kb_llm_request req = {
		.messages = msg, .nr_messages = 1, .temperature = NAN, .max_tokens = 0, .purpose = purpose,
	};

	/* the call ends by the deadline, less the final checks' reserve */
	req.deadline_ms = srch_work_deadline_ms(s);
	return req;
}

void srch_pool_abort(struct srch *s, void (*free_payload)(void *))
{
	struct kb_llm_pool_done done;

	kb_llm_pool_abort(s->pool);
	while (kb_llm_pool_next(s->pool, 1000, &done) != KB_ENOTFOUND) {
		if (free_payload)
			free_payload(done.payload);
		kb_llm_reply_release(&done.reply);
	}
}

int srch_ask(struct srch *s, int64_t g, int64_t island, int64_t slot, const char *purpose,
	     int64_t attempt, size_t model, const char *prompt, struct kb_llm_reply *reply,
	     struct strbuf *key_out)
{
	struct strbuf key = STRBUF_INIT;
	struct kb_llm_pool_done done;
	int64_t ticket;
	int rc;

	/* through the pool, so that the harness tunes while the model answers */
	rc = srch_ask_begin(s, g, island, slot, purpose, attempt, model, prompt, reply, &key, NULL, &ticket);
	if (rc == SRCH_ASKED) {
		rc = srch_tune_await(s, &done);
		if (rc && rc != KB_ENOTFOUND) {
			/* a step failed, or a stop: the lone call ends too */
			srch_pool_abort(s, NULL);
		} else if (!rc) {
			kb_llm_reply_release(reply);
			*reply = done.reply;
			rc = srch_ask_end(s, purpose, key.buf, done.rc, reply);
		}
	}
	if (key_out) {
		strbuf_reset(key_out);
		strbuf_addstr(key_out, key.buf);
	}
	strbuf_release(&key);
	return rc;
}

int srch_ask_begin(struct srch *s, int64_t g, int64_t island, int64_t slot, const char *purpose,
		   int64_t attempt, size_t model, const char *prompt, struct kb_llm_reply *reply,
		   struct strbuf *key, void *payload, int64_t *ticket)
{
	struct kb_llm_message msg = { .role = "user", .content = prompt };
	struct kb_llm_request req = ask_request(s, purpose, &msg);
	struct kb_llm_call_info info = {
		.search_id = s->row.id, .job_id = s->o->job_id, .purpose = purpose,
	};
	struct kb_llm_estimate est, all;
	struct strbuf why = STRBUF_INIT;
	int rc;

	*ticket = 0;
	rc = ask_prepare(s, g, island, slot, purpose, attempt, &model, prompt, reply, key);
	if (rc != SRCH_ASKED)
		return rc;
	/* the budgets count what is in flight too: each call may cost its estimate */
	kb_llm_estimate(kb_llm_model(s->llm, model), &req, &est);
	all = est;
	{
		int64_t tokens;
		double usd;

		kb_llm_pool_reserved(s->pool, &tokens, &usd);
		all.prompt_tokens += tokens;
		all.cost_usd += usd;
	}
	rc = kb_llm_budget_check(s->st, &s->budget, s->row.id, &all, &why);
	if (rc) {
		if (rc == KB_EBUDGET)
			srch_cut_short(s, "llm '%s': %s", kb_llm_model(s->llm, model)->name, why.buf);
		strbuf_release(&why);
		return rc;
	}
	strbuf_release(&why);
	info.call_key = key->buf;
	s->asked++;
	*ticket = kb_llm_pool_submit(s->pool, model, &req, &info, &est, payload);
	return SRCH_ASKED;
}

int srch_extract(const char *reply, struct strbuf *out, struct strbuf *why)
{
	strbuf_reset(out);
	return kb_extract_kernel(reply, out, why);
}

/* --- prompt text --- */

int srch_render(struct srch *s, enum srch_tmpl t, const struct kb_prompt_vars *v, struct strbuf *out)
{
	struct kb_prompt_vars all = KB_PROMPT_VARS_INIT;
	struct strbuf why = STRBUF_INIT;
	int rc = 0;

	for (size_t i = 0; i < s->base.names.nr; i++)
		kb_prompt_var(&all, s->base.names.v[i], s->base.values.v[i]);
	for (size_t i = 0; v && i < v->names.nr; i++)
		kb_prompt_var(&all, v->names.v[i], v->values.v[i]);
	strbuf_reset(out);
	if (kb_prompt_render(s->tmpl[t].buf, &all, out, &why))
		rc = error("could not render a search prompt: %s", why.buf);
	kb_prompt_vars_release(&all);
	strbuf_release(&why);
	return rc;
}

static const char *const tmpl_files[T_NR] = {
	[T_TRANSLATE] = "translate.md", [T_REPAIR] = "repair.md", [T_MUTATE] = "mutate.md",
	[T_CROSSOVER] = "crossover.md", [T_VERIFY_COMPILE] = "verify_compile.md",
	[T_VERIFY_NUMERICS] = "verify_numerics.md", [T_VERIFY_MEMORY] = "verify_memory.md",
	[T_META] = "meta_rewrite.md", [T_TEMPLATIZE] = "templatize.md",
	[T_INSPIRATION] = "inspiration.md", [T_RULES] = NULL, [T_EXAMPLE] = NULL,
	[T_STRATEGIES] = "strategies.md", [T_PITFALLS] = "pitfalls.md", [T_ANALYSIS] = "analysis.md",
};

static void add_shape(struct strbuf *out, const cJSON *shape)
{
	const cJSON *d;
	bool first = true;

	strbuf_addch(out, '[');
	cJSON_ArrayForEach(d, shape) {
		if (!first)
			strbuf_addstr(out, ", ");
		first = false;
		if (cJSON_IsNumber(d))
			strbuf_addf(out, "%lld", (long long)d->valuedouble);
	}
	strbuf_addch(out, ']');
}

#define MAX_CONFIGS_SHOWN 8

/* One line per config: inputs and outputs with shapes and dtypes. */
static void configs_text(const cJSON *describe, struct strbuf *out)
{
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(describe, "configs"), *c;
	int n = 0, total = cJSON_GetArraySize(configs);

	cJSON_ArrayForEach(c, configs) {
		const cJSON *io, *t;
		bool first = true;

		if (n++ == MAX_CONFIGS_SHOWN) {
			strbuf_addf(out, "- ... and %d more\n", total - MAX_CONFIGS_SHOWN);
			break;
		}
		strbuf_addf(out, "- config %s: inputs ", kb_json_str(c, "name") ? kb_json_str(c, "name") : "?");
		io = cJSON_GetObjectItemCaseSensitive(c, "inputs");
		cJSON_ArrayForEach(t, io) {
			const cJSON *scalar = cJSON_GetObjectItemCaseSensitive(t, "scalar");

			if (!first)
				strbuf_addstr(out, ", ");
			first = false;
			strbuf_addf(out, "%s ", kb_json_str(t, "name") ? kb_json_str(t, "name") : "?");
			if (scalar && !cJSON_IsNull(scalar) && !cJSON_IsFalse(scalar)) {
				char *v = cJSON_PrintUnformatted(scalar);

				strbuf_addf(out, "= %s (scalar)", v ? v : "?");
				free(v);
			} else {
				add_shape(out, cJSON_GetObjectItemCaseSensitive(t, "shape"));
				strbuf_addf(out, " %s", kb_json_str(t, "dtype") ? kb_json_str(t, "dtype") : "");
			}
		}
		strbuf_addstr(out, "; outputs ");
		first = true;
		io = cJSON_GetObjectItemCaseSensitive(c, "outputs");
		cJSON_ArrayForEach(t, io) {
			if (!first)
				strbuf_addstr(out, ", ");
			first = false;
			add_shape(out, cJSON_GetObjectItemCaseSensitive(t, "shape"));
			strbuf_addf(out, " %s", kb_json_str(t, "dtype") ? kb_json_str(t, "dtype") : "");
		}
		strbuf_addch(out, '\n');
	}
	if (!n)
		strbuf_addstr(out, "(no configs were described)\n");
}

/* The operator's source: the file, or a robust-kbench folder's files. */
static int operator_source(const struct srch *s, struct strbuf *out)
{
	static const char *const files[] = { "func_forward.py", "config_forward.json", "func_backward.py",
					     "config_backward.json" };
	const char *path = s->o->operator_path;
	struct strbuf sb = STRBUF_INIT, file = STRBUF_INIT;
	int rc = 0;

	if (!kb_is_dir(path)) {
		if (strbuf_read_file(out, path, 1u << 20) < 0)
			rc = error("could not read operator '%s'", path);
		return rc;
	}
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		if (i >= 2 && strcmp(s->pass, "backward"))
			break;
		strbuf_reset(&file);
		strbuf_addf(&file, "%s/%s", path, files[i]);
		strbuf_reset(&sb);
		if (!kb_is_file(file.buf) || strbuf_read_file(&sb, file.buf, 1u << 20) < 0)
			continue;
		strbuf_addf(out, "%s# ---- %s ----\n%s", out->len ? "\n" : "", files[i], sb.buf);
		if (out->len && out->buf[out->len - 1] != '\n')
			strbuf_addch(out, '\n');
	}
	if (!out->len)
		rc = error("could not read operator folder '%s'", path);
	strbuf_release(&sb);
	strbuf_release(&file);
	return rc;
}

int srch_context_init(struct srch *s)
{
	const bool cuda = !strcmp(s->backend, "cuda");
	const char *root = s->vf->dd.root;
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(s->o->describe, "operator");
	struct kb_prompt_vars rv = KB_PROMPT_VARS_INIT;
	struct strbuf sb = STRBUF_INIT;
	int rc = -1;

	for (int t = 0; t < T_NR; t++) {
		strbuf_init(&s->tmpl[t], 0);
		if (tmpl_files[t] && kb_prompt_load(root, tmpl_files[t], &s->tmpl[t]))
			goto out;
	}
	if (kb_prompt_load(root, cuda ? "rules_cuda.md" : "rules_cpu.md", &s->tmpl[T_RULES]) ||
	    kb_prompt_load(root, cuda ? "example_cuda.cu" : "example_cpu.cpp", &s->tmpl[T_EXAMPLE]))
		goto out;
	for (int t = T_STRATEGIES; t <= T_ANALYSIS; t++)
		strbuf_trim(&s->tmpl[t]);
	strbuf_trim(&s->tmpl[T_EXAMPLE]);

	if (operator_source(s, &sb))
		goto out;
	strbuf_trim(&sb);
	kb_prompt_var(&s->base, "operator_source", sb.buf);
	strbuf_reset(&sb);
	configs_text(s->o->describe, &sb);
	strbuf_trim(&sb);
	kb_prompt_var(&s->base, "configs", sb.buf);
	strbuf_reset(&sb);
	if (!s->vf->dd.abi_header || strbuf_read_file(&sb, s->vf->dd.abi_header, 1u << 20) < 0) {
		error("could not read the abi header '%s'", s->vf->dd.abi_header ? s->vf->dd.abi_header : "");
		goto out;
	}
	strbuf_trim(&sb);
	kb_prompt_var(&s->base, "abi_header", sb.buf);
	kb_prompt_var(&s->base, "example", s->tmpl[T_EXAMPLE].buf);
	kb_prompt_var(&s->base, "language", cuda ? "CUDA C++" : "C++ (OpenMP)");
	kb_prompt_var(&s->base, "lang_tag", cuda ? "cuda" : "cpp");
	kb_prompt_var(&s->base, "file_kind", cuda ? ".cu" : ".cpp");
	kb_prompt_var(&s->base, "compiler", cuda ? "nvcc -O3 -std=c++17 -shared" : "g++ -O3 -std=c++17 -fopenmp -shared");
	kb_prompt_var(&s->base, "backend", s->backend);
	kb_prompt_var(&s->base, "pass", s->pass);
	kb_prompt_var(&s->base, "device", s->device);
	kb_prompt_var(&s->base, "format", kb_json_str(op, "format") ? kb_json_str(op, "format") :
		      kb_is_dir(s->o->operator_path) ? "robust-kbench" : "KernelBench");

	/* the rules know the arch and whether kb_backward is wanted */
	kb_prompt_var(&rv, "arch", s->vf->build.arch ? s->vf->build.arch : "sm_90");
	kb_prompt_var(&rv, "backward", strcmp(s->pass, "backward") ? "" : "yes");
	strbuf_reset(&sb);
	{
		struct strbuf why = STRBUF_INIT;

		if (kb_prompt_render(s->tmpl[T_RULES].buf, &rv, &sb, &why)) {
			error("could not render the rules prompt: %s", why.buf);
			strbuf_release(&why);
			goto out;
		}
		strbuf_release(&why);
	}
	strbuf_trim(&sb);
	kb_prompt_var(&s->base, "rules", sb.buf);
	rc = 0;
out:
	kb_prompt_vars_release(&rv);
	strbuf_release(&sb);
	return rc;
}

void srch_fmt_speedup(double x, struct strbuf *out)
{
	if (isfinite(x) && x > 0)
		strbuf_addf(out, "%.2fx", x);
	else
		strbuf_addstr(out, "not timed");
}

void srch_fmt_behavior(int cell, struct strbuf *out)
{
	struct kb_behavior b;

	if (cell < 0 || cell >= KB_BEHAVIOR_CELLS) {
		strbuf_addstr(out, "unknown");
		return;
	}
	kb_behavior_from_cell(cell, &b);
	strbuf_addf(out, "memory %d, compute %d, parallelism %d", b.memory, b.compute, b.parallel);
}

void srch_evidence_text(const struct kb_search_cand *c, struct strbuf *out)
{
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(c->evidence, "configs"), *cfg;
	int rows = 0;

	strbuf_addstr(out, "geometric-mean speedup over torch eager: ");
	srch_fmt_speedup(c->speedup, out);
	strbuf_addch(out, '\n');
	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "timing");
		const cJSON *k = cJSON_GetObjectItemCaseSensitive(t, "kernel");
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(t, "eager");
		double bw = kb_json_num(t, "bw_share", NAN), fl = kb_json_num(t, "flops_share", NAN);

		if (!cJSON_IsObject(t))
			continue;
		if (!rows++)
			strbuf_addstr(out, "per config: kernel ms / eager ms = speedup; share of the measured bandwidth and FLOP peaks\n");
		strbuf_addf(out, "- %s: %.4g / %.4g ms = %.2fx", kb_json_str(cfg, "name") ? kb_json_str(cfg, "name") : "?",
			    kb_json_num(k, "median_ms", NAN), kb_json_num(e, "median_ms", NAN), kb_json_num(t, "speedup_eager", NAN));
		if (isfinite(bw))
			strbuf_addf(out, "; bandwidth %.0f%%", bw * 100);
		if (isfinite(fl))
			strbuf_addf(out, "; FLOP rate %.0f%%", fl * 100);
		strbuf_addch(out, '\n');
	}
	strbuf_trim(out);
}

void srch_resources_text(const struct srch *s, const struct kb_search_cand *c, struct strbuf *out)
{
	const cJSON *b = c->build_info;
	double regs = kb_json_num(b, "registers", NAN);

	if (strcmp(s->backend, "cuda") || !cJSON_IsObject(b) || !(regs > 0))
		return;
	strbuf_addf(out, "%.0f registers per thread, %.0f B static shared memory, spills %.0f B stored / %.0f B loaded, stack %.0f B",
		    regs, kb_json_num(b, "shared_bytes", NAN), kb_json_num(b, "spill_stores", NAN), kb_json_num(b, "spill_loads", NAN),
		    kb_json_num(b, "stack_bytes", NAN));
}

/* The highest bandwidth and FLOP shares over the configs (NAN when none). */
static void best_shares(const struct kb_search_cand *c, double *bw, double *fl)
{
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(c->evidence, "configs"), *cfg;

	*bw = *fl = NAN;
	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "timing");
		double b = kb_json_num(t, "bw_share", NAN), f = kb_json_num(t, "flops_share", NAN);

		if (isfinite(b) && !(b <= *bw))
			*bw = b;
		if (isfinite(f) && !(f <= *fl))
			*fl = f;
	}
}

void srch_hints_text(const struct srch *s, const struct kb_search_cand *c, struct strbuf *out)
{
	const bool cuda = !strcmp(s->backend, "cuda");
	const cJSON *b = c->build_info;
	double bw, fl, regs = kb_json_num(b, "registers", NAN), spills = kb_json_num(b, "spill_stores", NAN) + kb_json_num(b, "spill_loads", NAN);
	double smem = kb_json_num(b, "shared_bytes", NAN);

	best_shares(c, &bw, &fl);
	if (isfinite(c->speedup) && c->speedup < 1.0)
		strbuf_addstr(out, "- slower than torch eager: rethink the algorithm first (passes over memory, parallelism), then the details\n");
	if (isfinite(bw) && (!isfinite(fl) || bw >= fl) && bw < 0.5)
		strbuf_addf(out, "- memory-bound at only %.0f%% of the copy bandwidth: %s\n", bw * 100,
			    cuda ? "coalesce accesses, vectorise loads and stores (float4), give each thread several independent loads, launch enough blocks to fill every SM"
				 : "make the inner loop contiguous and vectorisable (omp simd), parallelise the outer loop, avoid extra passes");
	if (isfinite(fl) && isfinite(bw) && fl > bw && fl < 0.3)
		strbuf_addf(out, "- compute-bound at only %.0f%% of the peak FLOP rate: %s\n", fl * 100,
			    cuda ? "tile for data reuse in shared memory and registers, use tensor cores (wmma/mma) where the dtype allows"
				 : "block for cache reuse, keep accumulators in registers, use FMA-friendly inner loops");
	if (cuda && regs > 128)
		strbuf_addf(out, "- %.0f registers per thread limit occupancy: fewer live values, smaller register tiles, __launch_bounds__\n", regs);
	if (cuda && spills > 0)
		strbuf_addf(out, "- %.0f B of register spills to local memory: reduce register pressure (smaller unrolls or tiles)\n", spills);
	if (cuda && smem > 48 * 1024)
		strbuf_addf(out, "- %.0f KB of shared memory per block limits how many blocks fit on an SM\n", smem / 1024);
	strbuf_trim(out);
}

static bool reason_is(const cJSON *r, const char *check)
{
	const char *c = kb_json_str(r, "check");

	return c && !strcmp(c, check);
}

void srch_failure_text(const struct kb_search_cand *c, struct strbuf *out, struct strbuf *failure_kind)
{
	const cJSON *kb = cJSON_GetObjectItemCaseSensitive(c->evidence, "kernelbot");
	const cJSON *build = cJSON_GetObjectItemCaseSensitive(kb, "build");
	const char *errors = kb_json_str(build, "errors");
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(c->evidence, "configs");
	const cJSON *r;

	if (!strcmp(c->verdict, "build")) {
		strbuf_addstr(failure_kind, "it did not compile");
		if (errors && *errors) {
			strbuf_addstr(out, errors);
			goto out;
		}
	} else if (!strcmp(c->verdict, "static")) {
		strbuf_addstr(failure_kind, "the static checks refused it before building");
	} else {
		strbuf_addstr(failure_kind, "the harness rejected it");
	}
	cJSON_ArrayForEach(r, c->reasons) {
		const cJSON *ci = cJSON_GetObjectItemCaseSensitive(r, "config");
		const cJSON *si = cJSON_GetObjectItemCaseSensitive(r, "seed");

		if (reason_is(r, "suspicious_speedup"))
			continue;
		strbuf_addf(out, "%s", kb_json_str(r, "check") ? kb_json_str(r, "check") : "?");
		if (cJSON_IsNumber(ci)) {
			const cJSON *cfg = cJSON_GetArrayItem(configs, ci->valueint);

			strbuf_addf(out, " (config %d", ci->valueint);
			if (kb_json_str(cfg, "name"))
				strbuf_addf(out, " '%s'", kb_json_str(cfg, "name"));
			if (cJSON_IsNumber(si))
				strbuf_addf(out, ", seed %d", si->valueint);
			strbuf_addch(out, ')');
		}
		strbuf_addf(out, ": %s\n", kb_json_str(r, "message") ? kb_json_str(r, "message") : "");
		if (out->len > 4096)
			break;
	}
	if (!out->len)
		strbuf_addf(out, "verdict %s\n", c->verdict);
out:
	/* compiler and harness text goes to a model: redacted whatever its path here */
	kb_redact(out, KB_REDACT_FIELD_MAX);
	strbuf_trim(out);
}
