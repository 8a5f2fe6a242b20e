#include "core/common.h"
#include "core/json.h"
#include "verifier/evidence.h"
#include "verifier/build.h"
#include "core/redact.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <math.h>
#include <time.h>

#ifndef KB_VERSION
#define KB_VERSION "unknown"
#endif

cJSON *kb_evidence_new(const char *verdict)
{
	cJSON *ev = cJSON_CreateObject();

	cJSON_AddStringToObject(ev, "type", "result");
	cJSON_AddNumberToObject(ev, "protocol", 1);
	cJSON_AddStringToObject(ev, "verdict", verdict);
	cJSON_AddArrayToObject(ev, "reasons");
	return ev;
}

void kb_evidence_add_reason(cJSON *ev, const char *check, int config, int seed, const char *message)
{
	cJSON *reasons = cJSON_GetObjectItemCaseSensitive(ev, "reasons");
	cJSON *r = cJSON_CreateObject();
	/* messages quote compilers, exceptions and source lines: untrusted */
	char *text = kb_redact_str(message, KB_REDACT_MESSAGE_MAX);

	if (!cJSON_IsArray(reasons)) {
		cJSON_DeleteItemFromObjectCaseSensitive(ev, "reasons");
		reasons = cJSON_AddArrayToObject(ev, "reasons");
	}
	cJSON_AddStringToObject(r, "check", check);
	if (config >= 0)
		cJSON_AddNumberToObject(r, "config", config);
	else
		cJSON_AddNullToObject(r, "config");
	if (seed >= 0)
		cJSON_AddNumberToObject(r, "seed", seed);
	else
		cJSON_AddNullToObject(r, "seed");
	cJSON_AddStringToObject(r, "message", text);
	cJSON_AddItemToArray(reasons, r);
	free(text);
}

const char *kb_evidence_verdict(const cJSON *ev)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(ev, "verdict");

	return cJSON_IsString(v) ? v->valuestring : "";
}

bool kb_evidence_has_check(const cJSON *ev, const char *check)
{
	const cJSON *r;

	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(ev, "reasons")) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "check");

		if (cJSON_IsString(c) && !strcmp(c->valuestring, check))
			return true;
	}
	return false;
}

bool kb_reasons_first(const cJSON *reasons, struct strbuf *out)
{
	const cJSON *r;

	cJSON_ArrayForEach(r, reasons) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "check");
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "message");

		if (cJSON_IsString(c) && !strcmp(c->valuestring, "suspicious_speedup"))
			continue;
		strbuf_addf(out, "%s: %s", cJSON_IsString(c) ? c->valuestring : "?",
			    cJSON_IsString(m) ? m->valuestring : "");
		return true;
	}
	return false;
}

void kb_evidence_first_reason(const cJSON *ev, struct strbuf *out)
{
	if (!kb_reasons_first(cJSON_GetObjectItemCaseSensitive(ev, "reasons"), out))
		strbuf_addf(out, "verdict '%s'", kb_evidence_verdict(ev));
}

static void iso_time(int64_t t, char buf[32])
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void set_item(cJSON *obj, const char *key, cJSON *item)
{
	if (cJSON_GetObjectItemCaseSensitive(obj, key))
		cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item);
	else
		cJSON_AddItemToObject(obj, key, item);
}

void kb_evidence_annotate(cJSON *ev, const struct kb_evidence_meta *m)
{
	cJSON *kb = cJSON_CreateObject(), *kernel, *env;
	char t[32];

	cJSON_AddStringToObject(kb, "version", KB_VERSION);
	kernel = cJSON_AddObjectToObject(kb, "kernel");
	cJSON_AddStringToObject(kernel, "path", m->kernel_path ? m->kernel_path : "");
	if (m->kernel_sha256)
		cJSON_AddStringToObject(kernel, "sha256", m->kernel_sha256);
	else
		cJSON_AddNullToObject(kernel, "sha256");
	cJSON_AddStringToObject(kernel, "abi", m->abi ? m->abi : "unknown");
	if (m->build) {
		cJSON *b = kb_build_result_to_json(m->build);

		if (m->build->library)
			cJSON_AddStringToObject(b, "library", m->build->library);
		cJSON_AddItemToObject(kb, "build", b);
	} else {
		cJSON_AddNullToObject(kb, "build");
	}
	if (m->findings)
		cJSON_AddItemToObject(kb, "static", kb_findings_to_json(m->findings));
	else
		cJSON_AddArrayToObject(kb, "static");
	iso_time(m->started_at, t);
	cJSON_AddStringToObject(kb, "started_at", t);
	iso_time(m->finished_at, t);
	cJSON_AddStringToObject(kb, "finished_at", t);
	cJSON_AddNumberToObject(kb, "seconds", m->seconds);
	/* the compiler's messages and the static findings quote untrusted source */
	kb_redact_json(kb, KB_REDACT_FIELD_MAX);
	set_item(ev, "kernelbot", kb);

	env = cJSON_GetObjectItemCaseSensitive(ev, "environment");
	if (!cJSON_IsObject(env)) {
		cJSON_DeleteItemFromObjectCaseSensitive(ev, "environment");
		env = cJSON_AddObjectToObject(ev, "environment");
	}
	set_item(env, "kernelbot", cJSON_CreateString(KB_VERSION));
}

/* Every member named key: JSON may repeat a key, and cJSON deletes the first one only. */
static void delete_all(cJSON *o, const char *key)
{
	cJSON *it;

	while ((it = cJSON_DetachItemFromObjectCaseSensitive(o, key)))
		cJSON_Delete(it);
}

void kb_evidence_scrub(cJSON *ev)
{
	cJSON *kb, *build;

	if (!ev)
		return;
	/* redaction first: it cleans keys, and "operator\vlog" would become one to remove */
	kb_redact_json(ev, KB_REDACT_FIELD_MAX);
	delete_all(ev, "log_tail");
	delete_all(ev, "operator_log");
	cJSON_ArrayForEach(kb, ev) {
		if (!kb->string || strcmp(kb->string, "kernelbot"))
			continue;
		cJSON_ArrayForEach(build, kb)
			if (build->string && !strcmp(build->string, "build") && cJSON_IsObject(build))
				delete_all(build, "errors");
	}
}

int kb_evidence_write(const cJSON *ev, const char *path)
{
	char *text = cJSON_Print(ev);
	struct strbuf sb = STRBUF_INIT;
	int rc;

	if (!text)
		die("out of memory printing the evidence");
	strbuf_addstr(&sb, text);
	strbuf_addch(&sb, '\n');
	rc = kb_write_file_atomic(path, sb.buf, sb.len);
	if (rc)
		error("could not write the evidence to '%s'", path);
	free(text);
	strbuf_release(&sb);
	return rc;
}

/* A number of the evidence; counts from it go through kb_int_from_double (it comes from outside). */
static const cJSON *obj(const cJSON *o, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsObject(it) ? it : NULL;
}

void kb_evidence_print_reasons(const cJSON *ev, FILE *fp)
{
	const char *verdict = kb_evidence_verdict(ev);
	const char *prefix = !strcmp(verdict, "verified") ? "note" :
		!strcmp(verdict, "error") ? "error" : "rejected";
	const cJSON *r;

	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(ev, "reasons")) {
		const cJSON *check = cJSON_GetObjectItemCaseSensitive(r, "check");
		const cJSON *msg = cJSON_GetObjectItemCaseSensitive(r, "message");
		const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(r, "config");
		const cJSON *seed = cJSON_GetObjectItemCaseSensitive(r, "seed");
		struct strbuf line = STRBUF_INIT;

		strbuf_addf(&line, "%s: %s: %s", prefix,
			    cJSON_IsString(check) ? check->valuestring : "?",
			    cJSON_IsString(msg) ? msg->valuestring : "");
		/* one reason per line, whatever the message holds */
		for (char *p = line.buf; *p; p++)
			if (*p == '\n' || *p == '\r')
				*p = ' ';
		if (cJSON_IsNumber(cfg) && cJSON_IsNumber(seed))
			strbuf_addf(&line, " (config %d, seed %d)", cfg->valueint, seed->valueint);
		else if (cJSON_IsNumber(cfg))
			strbuf_addf(&line, " (config %d)", cfg->valueint);
		else if (cJSON_IsNumber(seed))
			strbuf_addf(&line, " (seed %d)", seed->valueint);
		fprintf(fp, "%s\n", line.buf);
		strbuf_release(&line);
	}
	/* what the process printed is no longer in the reasons: say where it went */
	if (strcmp(verdict, "verified") && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ev, "operator_log")))
		fprintf(fp, "log: the harness's output is in %s\n",
			cJSON_GetObjectItemCaseSensitive(ev, "operator_log")->valuestring);
}

/* KernelBench's stream mode said, and a mixed kernel's proof of custom work. */
static void print_mode_and_custom_work(const cJSON *ev, FILE *fp)
{
	const cJSON *set = cJSON_GetObjectItemCaseSensitive(ev, "settings");
	const cJSON *mode = cJSON_GetObjectItemCaseSensitive(set, "stream_mode");
	const cJSON *cw = cJSON_GetObjectItemCaseSensitive(ev, "custom_work");
	const cJSON *method = cJSON_GetObjectItemCaseSensitive(cw, "method");

	if (cJSON_IsString(mode) && !strcmp(mode->valuestring, "kernelbench"))
		fprintf(fp, "mode: kernelbench (legacy default stream, a device-wide sync after "
			"every call, stream checks off; the bot's strict mode may reject this kernel)\n");
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cw, "does_work")) && cJSON_IsString(method))
		fprintf(fp, "custom work: proven (%s)\n", !strcmp(method->valuestring, "noop")
			? "with its CUDA kernels switched off the result is wrong"
			: "with its extension calls' outputs poisoned the result is wrong");
}

void kb_evidence_print_summary(const cJSON *ev, FILE *fp)
{
	const cJSON *summary = obj(ev, "summary"), *c;
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(ev, "configs");
	double max_abs = -1, max_rel = -1;
	int nconf = cJSON_GetArraySize(configs);

	fprintf(fp, "verdict: %s\n", kb_evidence_verdict(ev));
	cJSON_ArrayForEach(c, configs) {
		double a = kb_json_num(c, "max_abs_err", -1), r = kb_json_num(c, "max_rel_err", -1);

		if (a > max_abs)
			max_abs = a;
		if (r > max_rel)
			max_rel = r;
	}
	if (summary || nconf) {
		int n = summary ? kb_int_from_double(kb_json_num(summary, "configs", nconf)) : nconf;
		int seeds = summary ? kb_int_from_double(kb_json_num(summary, "seeds", 0)) : 0;
		int trials = summary ? kb_int_from_double(kb_json_num(summary, "trials", 0)) : 0;

		fprintf(fp, "checked: %d config%s x %d seed%s", n, n == 1 ? "" : "s",
			seeds, seeds == 1 ? "" : "s");
		if (trials)
			fprintf(fp, " (%d trials)", trials);
		if (max_abs >= 0)
			fprintf(fp, ", max abs err %.3g, max rel err %.3g", max_abs, max_rel < 0 ? 0 : max_rel);
		fprintf(fp, "\n");
	}
	if (summary) {
		double ge = kb_json_num(summary, "geomean_speedup_eager", NAN);
		double gc = kb_json_num(summary, "geomean_speedup_compile", NAN);

		if (!isnan(ge)) {
			fprintf(fp, "speedup: %.2fx geomean vs eager", ge);
			if (!isnan(gc))
				fprintf(fp, ", %.2fx vs torch.compile", gc);
			fprintf(fp, "\n");
		}
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(summary, "suspicious")))
			fprintf(fp, "note: speedup above the suspicious threshold; checked again\n");
	}
	print_mode_and_custom_work(ev, fp);
}

static void fmt_ms(const cJSON *t, char *buf, size_t size)
{
	double ms = t ? kb_json_num(t, "median_ms", NAN) : NAN;

	if (isnan(ms))
		xsnprintf(buf, size, "-");
	else
		snprintf(buf, size, "%.4f", ms);
}

void kb_evidence_print_table(const cJSON *ev, FILE *fp)
{
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(ev, "configs"), *c;
	const cJSON *summary = obj(ev, "summary");
	int rows = 0, w = 7; /* the config column fits the longest name, up to 48 */

	cJSON_ArrayForEach(c, configs) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
		int n = cJSON_IsString(name) ? (int)strlen(name->valuestring) : 4;

		if (n > w)
			w = n > 48 ? 48 : n;
	}
	fprintf(fp, "%-*s %11s %11s %11s %17s %12s\n", w, "config", "eager ms", "compile ms",
		"kernel ms", "speedup", "roofline");
	cJSON_ArrayForEach(c, configs) {
		const cJSON *t = obj(c, "timing");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
		char label[49], e[24], co[24], k[24], sp[40], roof[24];
		double se, sc, bw, fl;

		if (!t)
			continue;
		if (cJSON_IsString(name) && *name->valuestring)
			snprintf(label, sizeof(label), "%s", name->valuestring);
		else
			snprintf(label, sizeof(label), "#%d", kb_int_from_double(kb_json_num(c, "index", rows)));
		fmt_ms(obj(t, "eager"), e, sizeof(e));
		fmt_ms(obj(t, "compile"), co, sizeof(co));
		fmt_ms(obj(t, "kernel"), k, sizeof(k));
		se = kb_json_num(t, "speedup_eager", NAN);
		sc = kb_json_num(t, "speedup_compile", NAN);
		if (isnan(se))
			xsnprintf(sp, sizeof(sp), "-");
		else if (isnan(sc))
			snprintf(sp, sizeof(sp), "%.2fx", se);
		else
			snprintf(sp, sizeof(sp), "%.2fx / %.2fx", se, sc);
		bw = kb_json_num(t, "bw_share", NAN);
		fl = kb_json_num(t, "flops_share", NAN);
		if (isnan(bw) && isnan(fl))
			xsnprintf(roof, sizeof(roof), "-");
		else if (isnan(fl) || (!isnan(bw) && bw >= fl))
			snprintf(roof, sizeof(roof), "%.0f%% bw", 100 * bw);
		else
			snprintf(roof, sizeof(roof), "%.0f%% flops", 100 * fl);
		fprintf(fp, "%-*s %11s %11s %11s %17s %12s\n", w, label, e, co, k, sp, roof);
		rows++;
	}
	if (summary) {
		double ge = kb_json_num(summary, "geomean_speedup_eager", NAN);
		double gc = kb_json_num(summary, "geomean_speedup_compile", NAN);
		char sp[40];

		if (isnan(ge))
			xsnprintf(sp, sizeof(sp), "-");
		else if (isnan(gc))
			snprintf(sp, sizeof(sp), "%.2fx", ge);
		else
			snprintf(sp, sizeof(sp), "%.2fx / %.2fx", ge, gc);
		fprintf(fp, "%-*s %11s %11s %11s %17s %12s\n", w, "geomean", "", "", "", sp, "");
	}
	if (!rows)
		fprintf(fp, "(no timings)\n");
	else
		fprintf(fp, "speedup: vs eager / vs torch.compile; roofline: share of the measured peak\n");
}
