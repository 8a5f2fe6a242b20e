#include "core/common.h"
#include "core/budget.h"
#include "core/json.h"
#include "templates/tune.h"
#include "templates/template.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/redact.h"
#include "core/rng.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/strvec.h"
#include "core/util.h"
#include "verifier/build.h"
#include "core/hash.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"
#include "verifier/harness_worker.h"
#include "verifier/static_check.h"

#include <math.h>

/* --- the search strategy --- */

static size_t set_slot(const struct kb_search *s, size_t index)
{
	uint64_t h = (uint64_t)index * 0x9e3779b97f4a7c15ull;

	return (size_t)(h >> 17) & (s->set_size - 1);
}

/* Record index (already canonical) as proposed; false when it already was. */
static bool seen_add(struct kb_search *s, size_t index)
{
	size_t i = set_slot(s, index);

	while (s->set[i]) {
		if (s->set[i] == index + 1)
			return false;
		i = (i + 1) & (s->set_size - 1);
	}
	s->set[i] = index + 1;
	if (s->nr_seen == s->alloc_seen) {
		s->alloc_seen = s->alloc_seen ? 2 * s->alloc_seen : 16;
		s->seen = xrealloc(s->seen, s->alloc_seen * sizeof(*s->seen));
	}
	s->seen[s->nr_seen++] = index;
	return true;
}

int kb_search_init(struct kb_search *s, const size_t *radix, size_t nr, size_t max_points,
		   size_t exhaustive_limit, size_t refine_rounds, uint64_t seed)
{
	size_t total = 1;

	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < nr; i++) {
		if (!radix[i])
			return error("parameter %zu of the space has no values", i);
		if (__builtin_mul_overflow(total, radix[i], &total))
			return error("the parameter space is too large to search");
	}
	s->nr = nr;
	s->radix = xcalloc(nr ? nr : 1, sizeof(*s->radix));
	if (nr)
		memcpy(s->radix, radix, nr * sizeof(*radix));
	s->total = total;
	s->max_points = max_points ? max_points : 1;
	s->exhaustive_limit = exhaustive_limit;
	s->refine_rounds = refine_rounds;
	s->rng = seed;
	s->exhaustive = total <= exhaustive_limit && total <= s->max_points;
	/* at most max_points are ever proposed: keep the set under half full */
	s->set_size = 16;
	while (s->set_size < 2 * (s->max_points + 1))
		s->set_size *= 2;
	s->set = xcalloc(s->set_size, sizeof(*s->set));
	return 0;
}

void kb_search_release(struct kb_search *s)
{
	free(s->radix);
	free(s->seen);
	free(s->set);
	memset(s, 0, sizeof(*s));
}

void kb_search_digits(const struct kb_search *s, size_t index, size_t *digits)
{
	for (size_t i = s->nr; i-- > 0;) {
		digits[i] = index % s->radix[i];
		index /= s->radix[i];
	}
}

size_t kb_search_index(const struct kb_search *s, const size_t *digits)
{
	size_t index = 0;

	for (size_t i = 0; i < s->nr; i++)
		index = index * s->radix[i] + digits[i];
	return index;
}

static size_t canonical(const struct kb_search *s, size_t index)
{
	return s->canon ? s->canon(s->canon_ctx, index) : index;
}

/* Propose index's canonical point into batch at *n unless proposed before. */
static void propose(struct kb_search *s, size_t index, size_t *batch, size_t *n)
{
	index = canonical(s, index);
	if (seen_add(s, index))
		batch[(*n)++] = index;
}

static size_t first_batch(struct kb_search *s, size_t *batch)
{
	size_t n = 0, want, attempts = 0;

	if (s->exhaustive) {
		for (size_t i = 0; i < s->total; i++)
			propose(s, i, batch, &n);
		return n;
	}
	/* half the budget samples the space, the rest refines around the best */
	want = s->refine_rounds ? s->max_points / 2 : s->max_points;
	if (!want)
		want = 1;
	if (want > s->total)
		want = s->total;
	propose(s, 0, batch, &n); /* the defaults: every parameter's first value */
	while (n < want && attempts++ < 64 * want + 64) {
		size_t index = 0;

		for (size_t i = 0; i < s->nr; i++)
			index = index * s->radix[i] + (size_t)(kb_rng_u64(&s->rng) % s->radix[i]);
		propose(s, index, batch, &n);
	}
	for (size_t i = 0; n < want && i < s->total; i++)
		propose(s, i, batch, &n);
	return n;
}

size_t kb_search_next(struct kb_search *s, size_t best, size_t *batch)
{
	size_t *digits, n = 0;

	if (!s->round++)
		return first_batch(s, batch);
	if (s->exhaustive || best == SIZE_MAX || best >= s->total || s->round - 1 > s->refine_rounds)
		return 0;
	digits = xcalloc(s->nr ? s->nr : 1, sizeof(*digits));
	kb_search_digits(s, best, digits);
	for (size_t i = 0; i < s->nr && s->nr_seen < s->max_points; i++) {
		size_t d = digits[i];

		for (int step = -1; step <= 1 && s->nr_seen < s->max_points; step += 2) {
			if ((step < 0 && d == 0) || (step > 0 && d + 1 >= s->radix[i]))
				continue;
			digits[i] = step < 0 ? d - 1 : d + 1;
			propose(s, kb_search_index(s, digits), batch, &n);
			digits[i] = d;
		}
	}
	free(digits);
	return n;
}

/* --- cache keys --- */

/* Key fields are joined with '|': keep it out of the fields. */
static void add_field(struct strbuf *out, const char *s)
{
	strbuf_addch(out, '|');
	for (; s && *s; s++)
		strbuf_addch(out, *s == '|' ? '/' : *s);
}

void kb_tune_point_key(struct strbuf *out, const char *device, const char *op_hash,
		       const char *backend, const char *pass, const char *kind, const char *point,
		       const char *src_hash, const char *settings)
{
	strbuf_addstr(out, "tune/1");
	add_field(out, device);
	add_field(out, op_hash);
	add_field(out, backend);
	add_field(out, pass);
	add_field(out, kind);
	add_field(out, point);
	add_field(out, src_hash);
	add_field(out, settings);
}

void kb_tune_checked_key(struct strbuf *out, const char *device, const char *op_hash,
			 const char *backend, const char *pass, const char *kind, const char *point,
			 const char *src_hash, int64_t seeds, const char *settings)
{
	kb_tune_point_key(out, device, op_hash, backend, pass, kind, point, src_hash, settings);
	strbuf_addf(out, "|checked|%lld", (long long)seeds);
}

void kb_tune_final_key(struct strbuf *out, const char *device, const char *op_hash,
		       const char *backend, const char *pass, const char *src_hash, int64_t seeds,
		       const char *settings)
{
	char n[24];

	xsnprintf(n, sizeof(n), "%lld", (long long)seeds);
	strbuf_addstr(out, "tune-final/1");
	add_field(out, device);
	add_field(out, op_hash);
	add_field(out, backend);
	add_field(out, pass);
	add_field(out, src_hash);
	add_field(out, n);
	add_field(out, settings);
}

void kb_tune_describe_key(struct strbuf *out, const char *device, const char *op_hash,
			  const char *backend, const char *pass, const char *torch_version)
{
	strbuf_addstr(out, "describe/1");
	add_field(out, device);
	add_field(out, op_hash);
	add_field(out, backend);
	add_field(out, pass);
	add_field(out, torch_version);
	add_field(out, KB_VERSION);
}

void kb_tune_settings_hash(const struct kb_config *cfg, char out[17])
{
	struct strbuf sb = STRBUF_INIT;
	char hex[65];

	/* every setting a verdict or a figure depends on: a cached one is reused only under them */
	strbuf_addf(&sb, "max_configs=%lld tol=%.9g,%.9g,%.9g,%.9g,%.9g,%.9g suspicious=%.9g "
		    "warmup=%lld min_time_ms=%lld max_reps=%lld l2_flush=%d baselines=%s "
		    "error_factor=%.9g",
		    (long long)cfg->max_configs, cfg->atol_fp32, cfg->rtol_fp32, cfg->atol_fp16,
		    cfg->rtol_fp16, cfg->atol_bf16, cfg->rtol_bf16, cfg->suspicious_speedup,
		    (long long)cfg->warmup, (long long)cfg->min_time_ms, (long long)cfg->max_reps,
		    cfg->l2_flush, cfg->baselines ? cfg->baselines : "", cfg->error_factor);
	kb_sha256_hex(sb.buf, sb.len, hex);
	memcpy(out, hex, 16);
	out[16] = '\0';
	strbuf_release(&sb);
}

void kb_tune_device_name(const struct kb_verifier *vf, enum kb_backend backend, struct strbuf *out)
{
	struct strbuf info = STRBUF_INIT;
	const char *p;

	if (backend == KB_BACKEND_CUDA) {
		if (vf && vf->probe && vf->probe->device_name && *vf->probe->device_name)
			strbuf_addstr(out, vf->probe->device_name);
		else
			strbuf_addstr(out, "cuda");
		return;
	}
	if (strbuf_read_file(&info, "/proc/cpuinfo", 1u << 20) >= 0 &&
	    (p = strstr(info.buf, "model name"))) {
		p = strchr(p, ':');
		if (p) {
			size_t len;

			p++;
			while (*p == ' ' || *p == '\t')
				p++;
			len = strcspn(p, "\n");
			while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
				len--;
			strbuf_add(out, p, len);
		}
	}
	if (!out->len)
		strbuf_addstr(out, "cpu");
	strbuf_release(&info);
}

/* --- tuning --- */

const char *kb_tune_state_name(enum kb_tune_state s)
{
	switch (s) {
	case KB_TP_STATIC: return "static";
	case KB_TP_BUILD: return "build";
	case KB_TP_REJECTED: return "rejected";
	case KB_TP_ERROR: return "error";
	case KB_TP_VERIFIED: return "verified";
	}
	return "?";
}

static int state_parse(const char *name, enum kb_tune_state *out)
{
	static const enum kb_tune_state all[] = { KB_TP_STATIC, KB_TP_BUILD, KB_TP_REJECTED,
						  KB_TP_ERROR, KB_TP_VERIFIED };

	for (size_t i = 0; name && i < ARRAY_SIZE(all); i++)
		if (!strcmp(name, kb_tune_state_name(all[i]))) {
			*out = all[i];
			return 0;
		}
	return -1;
}

void kb_tune_result_init(struct kb_tune_result *r)
{
	memset(r, 0, sizeof(*r));
	r->best = -1;
	strbuf_init(&r->best_source, 0);
}

void kb_tune_result_release(struct kb_tune_result *r)
{
	free(r->why);
	free(r->device);
	cJSON_Delete(r->describe);
	free(r->family);
	free(r->kind);
	free(r->ext);
	cJSON_Delete(r->space);
	for (size_t i = 0; i < r->nr_points; i++) {
		free(r->points[i].name);
		free(r->points[i].reason);
	}
	free(r->points);
	cJSON_Delete(r->best_point);
	strbuf_release(&r->best_source);
	cJSON_Delete(r->evidence);
	cJSON_Delete(r->forward_evidence);
	kb_tune_result_init(r);
}

struct tuner {
	struct kb_verifier *vf;
	const struct kb_config *cfg;
	const struct kb_tune_opts *o;
	struct kb_tune_result *res;
	struct kb_progress *pg;
	struct kb_state *st;
	struct kb_template *t;
	struct kb_search search;
	const char *backend;
	const char *pass;
	char settings[17];
	int64_t final_seeds, tune_seeds;
	struct strbuf work;     /* <state_dir>/tune */
};

static void set_why(struct kb_tune_result *res, enum kb_tune_outcome outcome, const char *fmt, ...)
	KB_PRINTF(3, 4);

static void set_why(struct kb_tune_result *res, enum kb_tune_outcome outcome, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	free(res->why);
	res->why = strbuf_detach(&sb, NULL);
	res->outcome = outcome;
}

/* "check: message" of the evidence's first reason (suspicious_speedup is a flag, skipped). */
static void set_reason(struct kb_tune_point *p, const char *reason)
{
	free(p->reason);
	/* a compiler's line or a harness message: cached, shown in the report */
	p->reason = reason ? kb_redact_str(reason, KB_REDACT_MESSAGE_MAX) : NULL;
}

static cJSON *point_to_json(const struct kb_tune_point *p)
{
	cJSON *v = cJSON_CreateObject();

	cJSON_AddStringToObject(v, "point", p->name);
	cJSON_AddStringToObject(v, "state", kb_tune_state_name(p->state));
	if (p->reason)
		cJSON_AddStringToObject(v, "reason", p->reason);
	cJSON_AddNumberToObject(v, "fitness", p->fitness);
	if (!isnan(p->speedup_compile))
		cJSON_AddNumberToObject(v, "speedup_compile", p->speedup_compile);
	cJSON_AddNumberToObject(v, "build_s", p->build_s);
	cJSON_AddNumberToObject(v, "measured_at", (double)kb_wall_s());
	return v;
}

static int point_from_json(struct kb_tune_point *p, const cJSON *v)
{
	enum kb_tune_state s;

	if (state_parse(kb_json_str(v, "state"), &s))
		return -1;
	p->state = s;
	set_reason(p, kb_json_str(v, "reason"));
	p->fitness = kb_json_num(v, "fitness", 0);
	p->speedup_compile = kb_json_num(v, "speedup_compile", NAN);
	p->build_s = kb_json_num(v, "build_s", 0);
	return 0;
}

static void point_key(const struct tuner *tn, const struct kb_tune_point *p, struct strbuf *key)
{
	kb_tune_point_key(key, tn->res->device, tn->res->op_hash, tn->backend, tn->pass, tn->res->kind,
			  p->name, p->sha, tn->settings);
}

static void cache_point(struct tuner *tn, const struct kb_tune_point *p)
{
	struct strbuf key = STRBUF_INIT;
	cJSON *v;

	point_key(tn, p, &key);
	v = point_to_json(p);
	if (kb_timings_put(tn->st, key.buf, v))
		log_warn("the measurement of point '%s' was not cached", p->name);
	cJSON_Delete(v);
	strbuf_release(&key);
}

static void checked_key(const struct tuner *tn, const struct kb_tune_point *p, struct strbuf *key)
{
	kb_tune_checked_key(key, tn->res->device, tn->res->op_hash, tn->backend, tn->pass,
			    tn->res->kind, p->name, p->sha, tn->tune_seeds, tn->settings);
}

/* The point verified; its timing comes later and is cached by itself. */
static void cache_checked(struct tuner *tn, const struct kb_tune_point *p)
{
	struct strbuf key = STRBUF_INIT;
	cJSON *v = cJSON_CreateObject();

	checked_key(tn, p, &key);
	cJSON_AddBoolToObject(v, "verified", true);
	cJSON_AddNumberToObject(v, "measured_at", (double)kb_wall_s());
	if (kb_timings_put(tn->st, key.buf, v))
		log_warn("the verification of point '%s' was not cached", p->name);
	cJSON_Delete(v);
	strbuf_release(&key);
}

/* True when an earlier run verified the point and was stopped before timing it. */
static bool was_checked(struct tuner *tn, const struct kb_tune_point *p)
{
	struct strbuf key = STRBUF_INIT;
	cJSON *v;
	bool yes;

	checked_key(tn, p, &key);
	v = kb_timings_get(tn->st, key.buf);
	yes = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "verified"));
	cJSON_Delete(v);
	strbuf_release(&key);
	return yes;
}

/* <work>/<sha16>/kernel.<ext> holding the source; path receives its name. */
static int write_source(const struct tuner *tn, const char *sha, const struct strbuf *src,
			struct strbuf *path)
{
	strbuf_reset(path);
	strbuf_addf(path, "%s/%.16s", tn->work.buf, sha);
	if (kb_mkdir_p(path->buf, 0755))
		return error_errno("could not create '%s'", path->buf);
	strbuf_addf(path, "/kernel%s", tn->res->ext);
	return kb_write_file_atomic(path->buf, src->buf, src->len);
}

static void render_point(const struct tuner *tn, size_t index, int64_t *values, struct strbuf *src,
			 struct strbuf *name)
{
	const struct kb_template_space *sp = kb_template_space(tn->t);
	size_t *digits = xcalloc(sp->nr ? sp->nr : 1, sizeof(*digits));

	kb_search_digits(&tn->search, index, digits);
	for (size_t i = 0; i < sp->nr; i++)
		values[i] = sp->params[i].values[digits[i]];
	free(digits);
	strbuf_reset(name);
	kb_template_point_name(tn->t, values, name);
	if (!name->len)
		strbuf_addstr(name, "default");
	strbuf_reset(src);
}

static struct kb_tune_point *new_point(struct kb_tune_result *res)
{
	struct kb_tune_point *p;

	if (res->nr_points == res->alloc_points) {
		res->alloc_points = res->alloc_points ? 2 * res->alloc_points : 16;
		res->points = xrealloc(res->points, res->alloc_points * sizeof(*res->points));
	}
	p = &res->points[res->nr_points++];
	memset(p, 0, sizeof(*p));
	p->speedup_compile = NAN;
	return p;
}

/* What is being evaluated in this batch. */
struct pending {
	size_t pt;              /* index into res->points */
	char *path;
	bool decided;           /* static finding or failed build */
	bool verified;
	bool checked;           /* verified by an earlier run: only timed */
};

/* The first line of compiler output that says "error", else the first line. */
static void error_line(const char *errors, struct strbuf *out)
{
	const char *p = errors, *pick = NULL;

	while (p && *p && !pick) {
		const char *end = strchrnul(p, '\n');

		if (memmem(p, (size_t)(end - p), "error", 5))
			pick = p;
		p = *end ? end + 1 : NULL;
	}
	if (!pick)
		pick = errors ? errors : "";
	strbuf_add(out, pick, strcspn(pick, "\n"));
}

struct eval_ctx {
	struct tuner *tn;
	struct pending *pend;
	const size_t *which;    /* kernel i -> pend index */
	size_t n;
	bool timing;
	size_t done;
};

static void on_eval(size_t i, const char *kernel_path, const cJSON *ev, void *payload)
{
	struct eval_ctx *ec = payload;
	struct pending *pd = &ec->pend[ec->which[i]];
	struct kb_tune_point *p = &ec->tn->res->points[pd->pt];
	const char *verdict = kb_evidence_verdict(ev);
	struct strbuf sb = STRBUF_INIT, detail = STRBUF_INIT;

	if (!strcmp(verdict, "verified")) {
		if (ec->timing) {
			const cJSON *summary = cJSON_GetObjectItemCaseSensitive(ev, "summary");

			p->state = KB_TP_VERIFIED;
			p->fitness = kb_json_num(summary, "geomean_speedup_eager", 0);
			p->speedup_compile = kb_json_num(summary, "geomean_speedup_compile", NAN);
			strbuf_addf(&detail, "%s: %.2fx", p->name, p->fitness);
		} else {
			pd->verified = true;
			/* stored now: a run killed before the timing need not verify it again */
			cache_checked(ec->tn, p);
			strbuf_addf(&detail, "%s: verified", p->name);
		}
	} else {
		pd->verified = false;
		p->state = !strcmp(verdict, "rejected") ? KB_TP_REJECTED : KB_TP_ERROR;
		if (ec->timing)
			strbuf_addstr(&sb, "while timing: ");
		kb_evidence_first_reason(ev, &sb);
		set_reason(p, sb.buf);
		strbuf_addf(&detail, "%s: %s", p->name, sb.buf);
		/* a hang may be a busy machine, an error the harness: measure again next time */
		pd->decided = p->state == KB_TP_ERROR || kb_evidence_has_check(ev, "timeout");
	}
	if (p->state != KB_TP_ERROR && !pd->decided && (ec->timing || !pd->verified))
		cache_point(ec->tn, p);
	ec->done++;
	kb_progress_step(ec->tn->pg, ec->done, detail.buf);
	strbuf_release(&sb);
	strbuf_release(&detail);
	(void)kernel_path;
}

/* Build the pending sources (in parallel, a chunk of build_jobs at a time, for progress). */
static int build_pending(struct tuner *tn, struct pending *pend, size_t n)
{
	struct kb_tune_result *res = tn->res;
	size_t *which = xcalloc(n ? n : 1, sizeof(*which)), m = 0, done = 0;
	const char **srcs = xcalloc(n ? n : 1, sizeof(*srcs));
	struct kb_build_result *br = xcalloc(n ? n : 1, sizeof(*br));
	size_t chunk = tn->vf->build.jobs > 0 ? (size_t)tn->vf->build.jobs : 1;
	struct strbuf sb = STRBUF_INIT;
	int rc = 0;

	for (size_t i = 0; i < n; i++)
		if (!pend[i].decided) {
			which[m] = i;
			srcs[m] = pend[i].path;
			kb_build_result_init(&br[m]);
			m++;
		}
	if (!m)
		goto out;
	kb_progress_stage(tn->pg, "build", m);
	for (size_t k = 0; k < m; k += chunk) {
		size_t c = m - k < chunk ? m - k : chunk;

		if (kb_stop_requested()) {
			rc = KB_ECANCELLED;
			goto out;
		}
		rc = kb_build_many(&tn->vf->build, srcs + k, c, br + k);
		if (rc)
			goto out;
		for (size_t j = k; j < k + c; j++) {
			struct kb_tune_point *p = &res->points[pend[which[j]].pt];

			res->built++;
			p->build_s = br[j].seconds;
			strbuf_reset(&sb);
			if (!br[j].ok) {
				p->state = KB_TP_BUILD;
				strbuf_addstr(&sb, "compile failed: ");
				error_line(br[j].errors, &sb);
				set_reason(p, sb.buf);
				pend[which[j]].decided = true;
				cache_point(tn, p);
				strbuf_reset(&sb);
				strbuf_addf(&sb, "%s: %s", p->name, p->reason);
			} else {
				strbuf_addf(&sb, "%s: ok (%.1f s%s)", p->name, br[j].seconds,
					    br[j].cached ? ", cached" : "");
			}
			done++;
			kb_progress_step(tn->pg, done, sb.buf);
		}
	}
out:
	for (size_t k = 0; k < m; k++)
		kb_build_result_release(&br[k]);
	free(br);
	free(srcs);
	free(which);
	strbuf_release(&sb);
	return rc;
}

/* Verify the built sources, then time the verified ones; all in the worker. */
static int verify_and_time(struct tuner *tn, struct pending *pend, size_t n)
{
	struct kb_eval_opts eo = {
		.operator_path = tn->o->operator_path, .pass = tn->pass, .backend = tn->o->backend,
	};
	const char **kernels = xcalloc(n ? n : 1, sizeof(*kernels));
	size_t *which = xcalloc(n ? n : 1, sizeof(*which)), m = 0;
	cJSON **evs = xcalloc(n ? n : 1, sizeof(*evs));
	struct eval_ctx ec = { .tn = tn, .pend = pend, .which = which };
	struct kb_config tcfg;
	size_t checked = 0;
	int rc = 0;

	for (size_t i = 0; i < n; i++)
		checked += !pend[i].decided && pend[i].checked;
	tn->res->verified += checked;
	if (checked)
		kb_progress_note(tn->pg, "cached: %zu point%s verified earlier, to be timed", checked,
				 checked == 1 ? "" : "s");
	for (int pass = 0; pass < 2; pass++) {
		m = 0;
		for (size_t i = 0; i < n; i++)
			if (!pend[i].decided && (pass == 0 ? !pend[i].checked : pend[i].verified)) {
				which[m] = i;
				kernels[m] = pend[i].path;
				m++;
			}
		if (!m)
			continue; /* pass 0 has none when every point was verified earlier */
		if (kb_stop_requested()) {
			rc = KB_ECANCELLED;
			goto out;
		}
		/* correctness first: a point that fails is never timed */
		eo.mode = pass ? "bench" : "verify";
		eo.timing = pass == 1;
		eo.seeds = pass ? 1 : tn->tune_seeds;
		ec.timing = pass == 1;
		ec.done = 0;
		ec.n = m;
		kb_progress_stage(tn->pg, pass ? "time" : "verify", m);
		/*
		 * fitness is the speedup over eager: torch.compile is measured
		 * by the final check only (compiling it per config costs the
		 * tuning minutes on a GPU)
		 */
		tcfg = *tn->cfg;
		tcfg.baselines = (char *)"eager";
		tn->vf->cfg = &tcfg;
		rc = kb_verifier_evaluate_many(tn->vf, &eo, kernels, m, evs, on_eval, &ec);
		tn->vf->cfg = tn->cfg;
		for (size_t k = 0; k < m; k++) {
			cJSON_Delete(evs[k]);
			evs[k] = NULL;
		}
		if (rc)
			goto out;
		if (pass)
			tn->res->timed += m;
		else
			for (size_t k = 0; k < m; k++)
				if (pend[which[k]].verified)
					tn->res->verified++;
	}
out:
	free(kernels);
	free(which);
	free(evs);
	return rc;
}

/* Evaluate the points of one search batch. 0, -1, KB_ECANCELLED. */
static int evaluate_batch(struct tuner *tn, const size_t *batch, size_t n)
{
	struct kb_tune_result *res = tn->res;
	const struct kb_template_space *sp = kb_template_space(tn->t);
	int64_t *values = xcalloc(sp->nr ? sp->nr : 1, sizeof(*values));
	struct pending *pend = xcalloc(n ? n : 1, sizeof(*pend));
	struct strbuf src = STRBUF_INIT, name = STRBUF_INIT, key = STRBUF_INIT, path = STRBUF_INIT;
	struct strbuf sb = STRBUF_INIT;
	size_t m = 0, hits = 0;
	int rc = 0;

	kb_progress_stage(tn->pg, "generate", n);
	for (size_t b = 0; b < n; b++) {
		struct kb_tune_point *p;
		struct kb_findings f = KB_FINDINGS_INIT;
		cJSON *cached;
		size_t dup = SIZE_MAX;

		render_point(tn, batch[b], values, &src, &name);
		if (kb_template_render(tn->t, values, &src)) {
			rc = error("could not render point '%s' of the '%s' template", name.buf, res->kind);
			goto out;
		}
		p = new_point(res);
		p->index = batch[b];
		p->name = strbuf_detach(&name, NULL);
		kb_sha256_hex(src.buf, src.len, p->sha);
		kb_progress_step(tn->pg, b + 1, p->name);
		for (size_t j = 0; j + 1 < res->nr_points; j++)
			if (!strcmp(res->points[j].sha, p->sha) && !res->points[j].duplicate) {
				dup = j;
				break;
			}
		if (dup != SIZE_MAX) {
			/* clamped to the same layout: one candidate, measured once */
			p->duplicate = true;
			continue;
		}
		strbuf_reset(&key);
		point_key(tn, p, &key);
		cached = kb_timings_get(tn->st, key.buf);
		if (cached && !point_from_json(p, cached)) {
			p->cached = true;
			res->cache_hits++;
			hits++;
			cJSON_Delete(cached);
			continue;
		}
		cJSON_Delete(cached);
		if (write_source(tn, p->sha, &src, &path)) {
			rc = -1;
			goto out;
		}
		pend[m].pt = res->nr_points - 1;
		pend[m].path = xstrdup(path.buf);
		if (kb_static_check(src.buf, src.len, KB_ABI_NATIVE, &f) > 0) {
			strbuf_reset(&sb);
			strbuf_addf(&sb, "static check: line %d: %s: %s", f.v[0].line, f.v[0].rule,
				    f.v[0].message);
			p->state = KB_TP_STATIC;
			set_reason(p, sb.buf);
			pend[m].decided = true;
			cache_point(tn, p);
			kb_progress_note(tn->pg, "point %s: %s", p->name, sb.buf);
		}
		pend[m].checked = pend[m].verified = !pend[m].decided && was_checked(tn, p);
		kb_findings_release(&f);
		m++;
	}
	if (hits)
		kb_progress_note(tn->pg, "cached: %zu of %zu points measured earlier on this machine", hits, n);
	if (!m)
		goto dups;
	/* python and torch load in the worker while the compiler works */
	if (tn->vf->worker) {
		kb_harness_trusted_peaks(&tn->vf->harness, tn->backend);
		kb_harness_worker_see(tn->vf->worker, tn->o->operator_path);
		rc = kb_harness_worker_start(tn->vf->worker, tn->backend);
		if (rc)
			goto out;
	}
	rc = build_pending(tn, pend, m);
	if (!rc)
		rc = verify_and_time(tn, pend, m);
	if (rc)
		goto out;
dups:
	/* duplicates share their source's result */
	for (size_t i = res->nr_points - n; i < res->nr_points; i++) {
		struct kb_tune_point *p = &res->points[i];

		if (!p->duplicate)
			continue;
		for (size_t j = 0; j < i; j++) {
			const struct kb_tune_point *q = &res->points[j];

			if (!q->duplicate && !strcmp(q->sha, p->sha)) {
				p->state = q->state;
				set_reason(p, q->reason);
				p->fitness = q->fitness;
				p->speedup_compile = q->speedup_compile;
				p->build_s = q->build_s;
				p->cached = q->cached;
				break;
			}
		}
	}
out:
	for (size_t i = 0; i < m; i++)
		free(pend[i].path);
	free(pend);
	free(values);
	strbuf_release(&src);
	strbuf_release(&name);
	strbuf_release(&key);
	strbuf_release(&path);
	strbuf_release(&sb);
	return rc;
}

/* Best verified point (highest fitness, the earliest on a tie) not in skip; -1: none. */
static long best_point(const struct kb_tune_result *res, const bool *skip)
{
	long best = -1;

	for (size_t i = 0; i < res->nr_points; i++) {
		const struct kb_tune_point *p = &res->points[i];

		if (p->duplicate || p->state != KB_TP_VERIFIED || (skip && skip[i]))
			continue;
		if (best < 0 || p->fitness > res->points[best].fitness)
			best = (long)i;
	}
	return best;
}

/* The describe result (cached per device and operator content). */
static int describe(struct tuner *tn)
{
	struct kb_tune_result *res = tn->res;
	struct strbuf key = STRBUF_INIT, sb = STRBUF_INIT;
	cJSON *req = NULL, *ev = NULL;
	const char *torch = tn->vf->probe && tn->vf->probe->torch_version ? tn->vf->probe->torch_version : "";
	int rc = -1;

	kb_tune_describe_key(&key, res->device, res->op_hash, tn->backend, tn->pass, torch);
	ev = kb_timings_get(tn->st, key.buf);
	if (ev && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(ev, "analysis"))) {
		kb_progress_step(tn->pg, 1, "cached");
		res->describe = ev;
		ev = NULL;
		rc = 0;
		goto out;
	}
	cJSON_Delete(ev);
	ev = NULL;
	req = kb_harness_request(tn->cfg, "describe", tn->o->operator_path, tn->pass, tn->o->backend, false);
	if (!req)
		goto out;
	kb_verifier_use_worker(tn->vf);
	rc = kb_harness_worker_eval(tn->vf->worker, req, tn->vf->harness.timeout_ms, &ev, NULL);
	if (rc)
		goto out;
	if (strcmp(kb_evidence_verdict(ev), "described")) {
		kb_evidence_first_reason(ev, &sb);
		set_why(res, KB_TUNE_OPERATOR_ERROR, "the harness could not load operator '%s': %s",
			tn->o->operator_path, sb.buf);
		goto out;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(ev, "nonce");
	if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(ev, "analysis")) && kb_timings_put(tn->st, key.buf, ev))
		log_warn("the analysis of '%s' was not cached", tn->o->operator_path);
	res->describe = ev;
	ev = NULL;
out:
	cJSON_Delete(req);
	cJSON_Delete(ev);
	strbuf_release(&key);
	strbuf_release(&sb);
	return rc;
}

/* The template for the analysis; res->outcome NO_TEMPLATE when there is none. */
static int make_template(struct tuner *tn)
{
	struct kb_tune_result *res = tn->res;
	const cJSON *an = cJSON_GetObjectItemCaseSensitive(res->describe, "analysis");
	const struct kb_template_space *sp;
	struct strbuf why = STRBUF_INIT;
	const char *family;
	int rc;

	res->analysis = an;
	if (!cJSON_IsObject(an)) {
		set_why(res, KB_TUNE_NO_TEMPLATE, "the harness returned no analysis of the operator");
		return 0;
	}
	family = kb_json_str(an, "family");
	if (!family || !strcmp(family, "none")) {
		const char *w = kb_json_str(an, "why");

		set_why(res, KB_TUNE_NO_TEMPLATE, "%s", w && *w ? w : "family 'none'");
		return 0;
	}
	/* tuning the backward pass: the kernel must export kb_backward */
	if (!strcmp(tn->pass, "backward") && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(an, "backward"))) {
		cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)an, "backward");
		cJSON_AddBoolToObject((cJSON *)an, "backward", true);
	}
	rc = kb_template_new(&tn->t, an, tn->o->backend, tn->vf->dd.root, &why);
	if (rc == KB_ENOTFOUND) {
		set_why(res, KB_TUNE_NO_TEMPLATE, "%s", why.len ? why.buf : "the templates do not cover it");
		rc = 0;
		goto out;
	}
	if (rc) {
		error("could not prepare the '%s' template: %s", family, why.buf);
		goto out;
	}
	res->family = xstrdup(kb_template_family(tn->t));
	res->kind = xstrdup(kb_template_kind(tn->t));
	res->ext = xstrdup(kb_template_ext(tn->t));
	res->has_backward = kb_template_has_backward(tn->t);
	res->space_size = kb_template_space_size(tn->t);
	sp = kb_template_space(tn->t);
	res->space = cJSON_CreateArray();
	for (size_t i = 0; i < sp->nr; i++) {
		cJSON *o = cJSON_CreateObject(), *vals = cJSON_AddArrayToObject(o, "values");

		cJSON_AddStringToObject(o, "name", sp->params[i].name);
		for (size_t j = 0; j < sp->params[i].nr; j++)
			cJSON_AddItemToArray(vals, cJSON_CreateNumber((double)sp->params[i].values[j]));
		cJSON_AddItemToArray(res->space, o);
	}
out:
	strbuf_release(&why);
	return rc;
}

/* The time budget stops the tuning: say so, and what happens next. */
static void budget_reached(struct tuner *tn, const struct kb_budget *b, long best)
{
	struct kb_tune_result *res = tn->res;

	res->cut_short = true;
	if (best >= 0)
		kb_progress_note(tn->pg, "time budget reached after %zu point%s (another chunk and the final "
				 "check would take about %lld s): the search stops, the best so far (%s) gets "
				 "its final check", res->nr_points, res->nr_points == 1 ? "" : "s",
				 (long long)((kb_budget_estimate_ms(b, tn->vf->build.jobs > 0 ?
								    (size_t)tn->vf->build.jobs : 1) +
					      kb_budget_reserve_ms(b)) / 1000),
				 res->points[best].name);
	else
		kb_progress_note(tn->pg, "time budget reached after %zu point%s, none verified: the "
				 "tuning stops", res->nr_points, res->nr_points == 1 ? "" : "s");
}

static size_t canonical_point(void *t, size_t index)
{
	return kb_template_point_canonical(t, index);
}

static int search(struct tuner *tn)
{
	struct kb_tune_result *res = tn->res;
	const struct kb_template_space *sp = kb_template_space(tn->t);
	size_t *radix = xcalloc(sp->nr ? sp->nr : 1, sizeof(*radix)), *batch = NULL, n;
	const struct kb_config *cfg = tn->cfg;
	struct kb_budget budget;
	long best;
	int rc = -1;

	/* the final check of the best (and its forward pass, for backward) in reserve */
	kb_budget_init(&budget, tn->o->deadline_ms, strcmp(tn->pass, "backward") ? 1 : 2,
		       tn->final_seeds, tn->tune_seeds);
	for (size_t i = 0; i < sp->nr; i++)
		radix[i] = sp->params[i].nr;
	/* the seed depends on the template only: the same operator samples the same points */
	if (kb_search_init(&tn->search, radix, sp->nr, (size_t)cfg->tune_max_points,
			   (size_t)cfg->tune_exhaustive_limit, (size_t)cfg->tune_refine_rounds,
			   0x6b65726e656c626full ^ (uint64_t)res->space_size))
		goto out;
	tn->search.canon = canonical_point;
	tn->search.canon_ctx = (void *)tn->t;
	batch = xcalloc(tn->search.max_points, sizeof(*batch));
	if (tn->search.exhaustive)
		kb_progress_note(tn->pg, "space: %zu parameter%s, %zu point%s: trying all", sp->nr,
				 sp->nr == 1 ? "" : "s", res->space_size, res->space_size == 1 ? "" : "s");
	else
		kb_progress_note(tn->pg, "space: %zu parameters, %zu points: sampling, then refining around the best (at most %zu points)",
				 sp->nr, res->space_size, tn->search.max_points);
	best = -1;
	while ((n = kb_search_next(&tn->search, best < 0 ? SIZE_MAX : res->points[best].index, batch))) {
		/* with a deadline, a batch goes in chunks so that the deadline is seen between them */
		size_t chunk = n;

		if (tn->o->deadline_ms)
			chunk = tn->vf->build.jobs > 0 ? (size_t)tn->vf->build.jobs : 1;

		if (tn->search.round > 1)
			kb_progress_note(tn->pg, "refine round %zu: %zu neighbour%s of %s", tn->search.round - 1,
					 n, n == 1 ? "" : "s", res->points[best].name);
		for (size_t off = 0; off < n; off += chunk) {
			size_t k = n - off < chunk ? n - off : chunk;
			int64_t t0 = kb_now_ms();

			/* the first chunk always runs: without a point there is nothing to publish */
			if (res->nr_points && !kb_budget_may_start(&budget, t0, k)) {
				budget_reached(tn, &budget, best);
				rc = 0;
				goto out;
			}
			rc = evaluate_batch(tn, batch + off, k);
			if (rc)
				goto out;
			kb_budget_spent(&budget, kb_now_ms() - t0, k);
			best = best_point(res, NULL);
		}
	}
	rc = 0;
out:
	free(radix);
	free(batch);
	return rc;
}

int kb_tune_fresh_verdict(struct kb_verifier *vf, struct kb_state *st, const char *key,
			  const char *source, const char *kernel_path, struct kb_eval_opts *eo,
			  cJSON **evidence, bool *cached)
{
	struct kb_harness_worker *w = vf->worker;
	char *dir = xstrdup(kernel_path), *slash = strrchr(dir, '/');
	int rc = -1;

	*cached = false;
	*evidence = kb_timings_get(st, key);
	if (*evidence && *kb_evidence_verdict(*evidence)) {
		*cached = true;
		rc = 0;
		goto out;
	}
	cJSON_Delete(*evidence);
	*evidence = NULL;
	if (slash)
		*slash = '\0';
	if ((slash && kb_mkdir_p(dir, 0755)) ||
	    kb_write_file_atomic(kernel_path, source, strlen(source))) {
		error_errno("could not write '%s'", kernel_path);
		goto out;
	}
	if (w)
		kb_harness_worker_stop(w);
	vf->worker = NULL;
	eo->kernel_path = kernel_path;
	rc = kb_verifier_evaluate(vf, eo, evidence);
	vf->worker = w;
	if (rc)
		goto out;
	if (strcmp(kb_evidence_verdict(*evidence), "error") && !kb_evidence_has_check(*evidence, "timeout") &&
	    kb_timings_put(st, key, *evidence))
		log_warn("the final verdict of '%s' was not cached", kernel_path);
out:
	free(dir);
	return rc;
}

/*
 * Verify a point again in a fresh harness process, full seeds (cached per
 * source): pass (timed when timing) as given.
 */
static int final_check(struct tuner *tn, struct kb_tune_point *p, const char *pass, bool timing,
		       cJSON **evidence, bool *cached)
{
	const struct kb_template_space *sp = kb_template_space(tn->t);
	int64_t *values = xcalloc(sp->nr ? sp->nr : 1, sizeof(*values));
	struct strbuf src = STRBUF_INIT, name = STRBUF_INIT, path = STRBUF_INIT, key = STRBUF_INIT;
	struct kb_eval_opts eo = {
		.operator_path = tn->o->operator_path, .mode = timing ? "bench" : "verify", .pass = pass,
		.backend = tn->o->backend, .seeds = tn->final_seeds, .timing = timing,
	};
	int rc = -1;

	*evidence = NULL;
	*cached = false;
	render_point(tn, p->index, values, &src, &name);
	if (kb_template_render(tn->t, values, &src))
		goto out;
	kb_tune_final_key(&key, tn->res->device, tn->res->op_hash, tn->backend, pass, p->sha,
			  tn->final_seeds, tn->settings);
	strbuf_addf(&path, "%s/%.16s/kernel%s", tn->work.buf, p->sha, tn->res->ext);
	rc = kb_tune_fresh_verdict(tn->vf, tn->st, key.buf, src.buf, path.buf, &eo, evidence, cached);
out:
	free(values);
	strbuf_release(&src);
	strbuf_release(&name);
	strbuf_release(&path);
	strbuf_release(&key);
	return rc;
}

struct tune_final {
	struct tuner *tn;
	struct kb_tune_point *p;
};

static int tune_final_check(void *ctx, const char *pass, bool timing, cJSON **evidence, bool *cached)
{
	struct tune_final *f = ctx;

	return final_check(f->tn, f->p, pass, timing, evidence, cached);
}

#define FINAL_TRIES 3

static int finish(struct tuner *tn)
{
	struct kb_tune_result *res = tn->res;
	bool *skip = xcalloc(res->nr_points ? res->nr_points : 1, sizeof(*skip));
	struct strbuf sb = STRBUF_INIT, failed = STRBUF_INIT;
	size_t counts[KB_TP_VERIFIED + 1] = { 0 };
	int rc = 0;

	for (int tries = 0; tries < FINAL_TRIES; tries++) {
		long b = best_point(res, skip);
		struct kb_tune_point *p;
		cJSON *ev = NULL;
		bool cached, fwd_failed;

		if (b < 0)
			break;
		p = &res->points[b];
		if (kb_stop_requested()) {
			rc = KB_ECANCELLED;
			goto out;
		}
		kb_progress_stage(tn->pg, "final check", 0);
		cJSON_Delete(res->forward_evidence);
		res->forward_evidence = NULL;
		fwd_failed = false;
		rc = kb_final_check_pass(tune_final_check, &(struct tune_final){ tn, p }, tn->pass, &ev,
					 &res->forward_evidence, &cached, &fwd_failed);
		if (rc) {
			cJSON_Delete(ev);
			goto out;
		}
		if (!strcmp(kb_evidence_verdict(ev), "verified")) {
			kb_progress_step(tn->pg, 0, cached ? "verified (cached)" : "verified");
			res->best = b;
			res->evidence = ev;
			res->final_cached = cached;
			break;
		}
		strbuf_reset(&sb);
		if (fwd_failed)
			strbuf_addstr(&sb, "forward pass: ");
		kb_evidence_first_reason(ev, &sb);
		kb_progress_note(tn->pg, "final check of %s failed in a fresh process: %s", p->name, sb.buf);
		if (failed.len)
			strbuf_addstr(&failed, "; ");
		strbuf_addf(&failed, "%s: %s", p->name, sb.buf);
		skip[b] = true;
		cJSON_Delete(ev);
	}
	if (res->best >= 0) {
		const struct kb_tune_point *p = &res->points[res->best];
		const struct kb_template_space *sp = kb_template_space(tn->t);
		int64_t *values = xcalloc(sp->nr ? sp->nr : 1, sizeof(*values));
		struct strbuf name = STRBUF_INIT;

		render_point(tn, p->index, values, &res->best_source, &name);
		rc = kb_template_render(tn->t, values, &res->best_source);
		res->best_point = cJSON_CreateObject();
		for (size_t i = 0; i < sp->nr; i++)
			cJSON_AddNumberToObject(res->best_point, sp->params[i].name, (double)values[i]);
		free(values);
		strbuf_release(&name);
		res->outcome = KB_TUNE_OK;
		goto out;
	}
	for (size_t i = 0; i < res->nr_points; i++)
		if (!res->points[i].duplicate)
			counts[res->points[i].state]++;
	strbuf_reset(&sb);
	strbuf_addf(&sb, "%zu point%s tried: %zu failed the static check, %zu did not compile, %zu rejected, %zu error%s",
		    res->nr_points, res->nr_points == 1 ? "" : "s", counts[KB_TP_STATIC], counts[KB_TP_BUILD],
		    counts[KB_TP_REJECTED], counts[KB_TP_ERROR], counts[KB_TP_ERROR] == 1 ? "" : "s");
	if (failed.len)
		strbuf_addf(&sb, "; failed the final check: %s", failed.buf);
	for (size_t i = 0; i < res->nr_points && !failed.len; i++)
		if (!res->points[i].duplicate && res->points[i].reason) {
			strbuf_addf(&sb, "; first: %s: %s", res->points[i].name, res->points[i].reason);
			break;
		}
	set_why(res, KB_TUNE_NONE_VERIFIED, "%s", sb.buf);
out:
	free(skip);
	strbuf_release(&sb);
	strbuf_release(&failed);
	return rc;
}

int kb_tune(struct kb_verifier *vf, const struct kb_tune_opts *o, struct kb_tune_result *res)
{
	struct tuner tn = { .vf = vf, .cfg = vf->cfg, .o = o, .res = res, .pg = o->progress };
	struct strbuf sb = STRBUF_INIT;
	int64_t t0 = kb_now_ms();
	int rc = -1;

	strbuf_init(&tn.work, 0);
	tn.backend = kb_backend_name(o->backend);
	tn.pass = o->pass ? o->pass : "forward";
	tn.final_seeds = o->seeds > 0 ? o->seeds : vf->cfg->seeds;
	tn.tune_seeds = tn.final_seeds < KB_TUNE_SEEDS ? tn.final_seeds : KB_TUNE_SEEDS;
	kb_tune_settings_hash(vf->cfg, tn.settings);
	if (o->backend != KB_BACKEND_CUDA && o->backend != KB_BACKEND_CPU) {
		error("kb_tune needs a resolved backend");
		goto out;
	}

	kb_progress_stage(tn.pg, "analyse", 0);
	if (kb_operator_hash(o->operator_path, res->op_hash))
		goto out;
	kb_tune_device_name(vf, o->backend, &sb);
	res->device = strbuf_detach(&sb, NULL);
	if (kb_state_open(&tn.st, vf->cfg->state_dir))
		goto out;
	strbuf_addf(&tn.work, "%s/tune", vf->cfg->state_dir);
	rc = describe(&tn);
	if (rc || res->why)
		goto done;
	rc = make_template(&tn);
	if (rc || res->why)
		goto done;
	kb_progress_note(tn.pg, "family %s (%s): %s", res->family, res->kind,
			 kb_json_str(res->analysis, "why") ? kb_json_str(res->analysis, "why") : "");
	kb_verifier_use_worker(vf);
	rc = search(&tn);
	if (!rc)
		rc = finish(&tn);
	res->all_cached = !res->built && !res->timed && (res->best < 0 || res->final_cached);
done:
	if (rc == -1 && kb_stop_requested())
		rc = KB_ECANCELLED;
out:
	res->seconds = (double)(kb_now_ms() - t0) / 1000.0;
	kb_progress_end(tn.pg);
	if (tn.search.radix)
		kb_search_release(&tn.search);
	kb_template_free(tn.t);
	kb_state_close(tn.st);
	strbuf_release(&tn.work);
	strbuf_release(&sb);
	return rc;
}
