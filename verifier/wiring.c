#include "core/common.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "verifier/harness_log.h"
#include "verifier/wiring.h"

#include <inttypes.h>
#include <math.h>

#define NAME_MAX_BYTES 120
#define COUNT_MAX 1000000000.0

static const char *const implementations[] = { "custom_op", "library", "autograd.Function" };
static const char *const fallback_dtypes[] = { "float32", "float64" };

/* raw[key] as a whole number in [0, COUNT_MAX] into out; false when it is not one. */
static bool count(const cJSON *raw, const char *key, cJSON *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(raw, key);

	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
	    v->valuedouble > COUNT_MAX || v->valuedouble != floor(v->valuedouble))
		return false;
	cJSON_AddNumberToObject(out, key, v->valuedouble);
	return true;
}

/* raw[key] as a finite number >= 0 (an error) into out, null when it is not one. */
static void error_figure(const cJSON *raw, const char *key, cJSON *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(raw, key);

	if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0)
		cJSON_AddNumberToObject(out, key, v->valuedouble);
	else
		cJSON_AddNullToObject(out, key);
}

static bool flag(const cJSON *raw, const char *key, cJSON *out)
{
	bool yes = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(raw, key));

	cJSON_AddBoolToObject(out, key, yes);
	return yes;
}

/* raw[key] redacted and cut to max bytes, into out ("" when not a string). */
static void text(const cJSON *raw, const char *key, size_t max, cJSON *out)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(raw, key));
	char *r = kb_redact_str(s ? s : "", max);

	cJSON_AddStringToObject(out, key, r);
	free(r);
}

/* raw[key] when it is one of words, into out; false otherwise. */
static bool word(const cJSON *raw, const char *key, const char *const *words, size_t n, cJSON *out)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(raw, key));

	for (size_t i = 0; s && i < n; i++)
		if (!strcmp(s, words[i])) {
			cJSON_AddStringToObject(out, key, words[i]);
			return true;
		}
	return false;
}

/* The configs; true when there is at least one and every one is ok with the kernel called. */
static bool configs(const cJSON *raw, cJSON *out)
{
	const cJSON *c;
	cJSON *arr = cJSON_AddArrayToObject(out, "configs");
	bool ok = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(raw, "configs")) > 0;
	int n = 0;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(raw, "configs")) {
		cJSON *o = cJSON_CreateObject();
		bool called;

		if (++n > 256)
			break;
		text(c, "config", NAME_MAX_BYTES, o);
		count(c, "seed", o);
		called = count(c, "kernel_calls", o) && cJSON_GetObjectItemCaseSensitive(c, "kernel_calls")->valuedouble > 0;
		error_figure(c, "outputs_max_abs", o);
		error_figure(c, "grads_max_abs", o);
		count(c, "gradients", o);
		flag(c, "used", o); /* the speed gate's say on this shape, for the table */
		/* the module's state and its eval-mode forward agree too: the kernel stands in for both */
		ok = flag(c, "buffers_ok", o) && ok;
		ok = flag(c, "eval_ok", o) && ok;
		ok = flag(c, "ok", o) && called && ok;
		cJSON_AddItemToArray(arr, o);
	}
	return ok;
}

static bool fallback(const cJSON *raw, cJSON *out)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(raw, "fallback");
	cJSON *o = cJSON_AddObjectToObject(out, "fallback");
	bool typed = word(f, "dtype", fallback_dtypes, ARRAY_SIZE(fallback_dtypes), o);
	bool none = count(f, "kernel_calls", o) &&
		    cJSON_GetObjectItemCaseSensitive(f, "kernel_calls")->valuedouble == 0;

	return flag(f, "ok", o) && typed && none;
}

static void tests(const cJSON *raw, cJSON *out)
{
	static const char *const keys[] = { "passed", "failed", "skipped", "errors", "collected",
					     "kernel_calls", "exit_code" };
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(raw, "tests");
	cJSON *o;

	if (!cJSON_IsObject(t))
		return;
	o = cJSON_AddObjectToObject(out, "tests");
	if (flag(t, "ran", o))
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
			count(t, keys[i], o);
	else
		text(t, "why", KB_REDACT_MESSAGE_MAX, o);
}

cJSON *kb_wiring_sanitize(const cJSON *raw)
{
	cJSON *out = cJSON_CreateObject(), *reasons;
	const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(raw, "verdict"));
	const cJSON *r;
	bool ok, guarded;

	word(raw, "implementation", implementations, ARRAY_SIZE(implementations), out);
	ok = configs(raw, out);
	count(raw, "configs_other_init", out);
	ok = fallback(raw, out) && ok;
	guarded = kb_wiring_attributes(raw, out);
	tests(raw, out);
	reasons = cJSON_AddArrayToObject(out, "reasons");
	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(raw, "reasons")) {
		cJSON *o = cJSON_CreateObject();

		text(r, "message", KB_REDACT_MESSAGE_MAX, o);
		cJSON_AddItemToArray(reasons, o);
		if (cJSON_GetArraySize(reasons) >= 8)
			break;
	}
	if (!raw || (v && !strcmp(v, "error")) || !cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(out, "configs")))
		v = "error";
	else if (!ok)
		v = "mismatch";
	else
		/* agreeing runs, but settings no guard can compare: a module built otherwise would be wrong */
		v = v && !strcmp(v, "wired") && guarded ? "wired" : "unguarded";
	cJSON_AddStringToObject(out, "verdict", v);
	if (!raw)
		cJSON_AddItemToArray(reasons, cJSON_Parse("{\"message\": \"the wiring check left no record\"}"));
	return out;
}

/* An error result of the bot's own words. */
static cJSON *failed(const char *message)
{
	cJSON *out = kb_wiring_sanitize(NULL), *reasons = cJSON_GetObjectItemCaseSensitive(out, "reasons");

	cJSON_DeleteItemFromArray(reasons, 0);
	cJSON_AddItemToArray(reasons, cJSON_CreateObject());
	cJSON_AddStringToObject(cJSON_GetArrayItem(reasons, 0), "message", message);
	return out;
}

static int start(const struct kb_harness *h, const cJSON *request, const char *dir,
		 struct child_process *cp, const char *nonce_line)
{
	struct strbuf script = STRBUF_INIT, req_path = STRBUF_INIT;
	struct strvec paths = STRVEC_INIT;
	const char *tree = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(request, "tree"));
	const char *slash = strrchr(h->script, '/');
	const cJSON *ov;
	int rc = -1;

	if (!tree || *tree != '/') {
		error("wiring check: the request names no absolute tree");
		goto out;
	}
	if (kb_harness_write_request(request, dir, &req_path))
		goto out;
	strbuf_addf(&script, "%.*s/kb_wiring.py", slash ? (int)(slash - h->script) : 1,
		    slash ? h->script : ".");
	strvec_pushl(&cp->args, h->python, "-I", "-B", "-u", script.buf, "--request", req_path.buf, NULL);
	strvec_pushf(&cp->env, "TMPDIR=%s", dir);
	cp->in = nonce_line;
	cp->in_len = strlen(nonce_line);
	cp->dir = dir;
	cp->timeout_ms = h->timeout_ms;
	cp->out_cap = cp->err_cap = h->log_cap ? h->log_cap : (1u << 20);
	cp->result_fd_child = 3;
	if (!strcmp(kb_harness_request_backend(request), "cpu"))
		cp->rlimit_as_bytes = h->rlimit_as_bytes;
	strvec_push(&paths, tree);
	/* the overlays' sources (the run's folder, the patched files) are read only too */
	cJSON_ArrayForEach(ov, cJSON_GetObjectItemCaseSensitive(request, "overlays")) {
		const char *src = cJSON_GetStringValue(cJSON_GetArrayItem(ov, 0));

		if (src && *src == '/')
			strvec_push(&paths, src);
	}
	if (kb_harness_sandbox(h, &paths, dir, kb_harness_request_backend(request), cp))
		goto out;
	rc = run_command(cp);
out:
	strbuf_release(&script);
	strbuf_release(&req_path);
	strvec_clear(&paths);
	return rc;
}

int kb_wiring_tmpdir(const struct kb_harness *h, const char *prefix, struct strbuf *dir)
{
	strbuf_reset(dir);
	if (kb_mkdir_p(h->tmp_root, 0700))
		return error_errno("could not create '%s'", h->tmp_root);
	strbuf_addf(dir, "%s/%s-XXXXXX", h->tmp_root, prefix);
	if (!mkdtemp(dir->buf)) {
		error_errno("could not create a directory in '%s'", h->tmp_root);
		strbuf_reset(dir);
		return -1;
	}
	return 0;
}

int kb_wiring_check(const struct kb_harness *h, const cJSON *request, cJSON **wiring)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf dir = STRBUF_INIT, msg = STRBUF_INIT, logpath = STRBUF_INIT;
	char nonce[33], line[40];
	cJSON *raw = NULL;
	int rc = -1;

	*wiring = NULL;
	if (kb_wiring_tmpdir(h, "kb-wiring", &dir) || kb_harness_nonce(nonce))
		goto out;
	xsnprintf(line, sizeof(line), "%s\n", nonce);
	if ((rc = start(h, request, dir.buf, &cp, line)))
		goto out;
	raw = kb_harness_channel_result(&cp.result, nonce, NULL);
	if (cp.timed_out) {
		strbuf_addf(&msg, "the wiring check outlived %" PRId64 " s", h->timeout_ms / 1000);
		*wiring = failed(msg.buf);
	} else if (cp.exit_code) {
		kb_harness_exit_message(cp.exit_code, "wiring", &msg);
		*wiring = failed(msg.buf);
	} else {
		*wiring = kb_wiring_sanitize(raw);
	}
	kb_harness_log_keep(h->log_dir, request, NULL, &cp, &logpath);
	if (logpath.len)
		log_info("wiring check: its output is in '%s'", logpath.buf);
out:
	if (dir.len && kb_rm_rf(dir.buf))
		log_warn("could not remove '%s'", dir.buf);
	cJSON_Delete(raw);
	child_process_release(&cp);
	strbuf_release(&dir);
	strbuf_release(&msg);
	strbuf_release(&logpath);
	return rc;
}
