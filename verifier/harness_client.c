#include "core/common.h"
#include "core/progress.h"
#include "verifier/harness_client.h"
#include "core/hash.h"
#include "verifier/evidence.h"
#include "verifier/harness_log.h"
#include "verifier/harness_runner.h"
#include "verifier/harness_pool.h"
#include "verifier/harness_worker.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/strbuf.h"
#include "core/state.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "verifier/baseline_cache.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <openssl/rand.h>
#include <signal.h>

#define LOG_CAP_DEFAULT (1u << 20)

void kb_harness_init(struct kb_harness *h)
{
	memset(h, 0, sizeof(*h));
	strvec_init(&h->argv_override);
	kb_sandbox_init(&h->sandbox);
	strvec_init(&h->view_ro);
}

void kb_harness_release(struct kb_harness *h)
{
	FREE_AND_NULL(h->python);
	FREE_AND_NULL(h->script);
	FREE_AND_NULL(h->tmp_root);
	FREE_AND_NULL(h->log_dir);
	FREE_AND_NULL(h->peaks_path);
	strvec_clear(&h->argv_override);
	kb_sandbox_release(&h->sandbox);
	strvec_clear(&h->view_ro);
}

/* path's folder (a file) or path itself (a folder), absolute. */
static void push_view_dir(struct strvec *paths, const char *path)
{
	char *real = path && *path ? realpath(path, NULL) : NULL;

	if (!real)
		return;
	if (!kb_is_dir(real)) {
		char *slash = strrchr(real, '/');

		if (slash && slash != real)
			*slash = '\0';
	}
	strvec_push(paths, real);
	free(real);
}

/* The harness's own files and the caches it reads: see kb_harness_setup. */
static void harness_view(struct kb_harness *h, const struct kb_config *cfg, const char *script)
{
	struct strbuf sb = STRBUF_INIT;

	strvec_clear(&h->view_ro);
	push_view_dir(&h->view_ro, script);
	if (h->view_ro.nr) {
		/* the ABI headers: verifier/include beside verifier/harness */
		strbuf_addf(&sb, "%s/../include", h->view_ro.v[0]);
		push_view_dir(&h->view_ro, sb.buf);
	}
	if (cfg->state_dir && *cfg->state_dir) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/build-cache", cfg->state_dir);
		if (!kb_mkdir_p(sb.buf, 0700))
			push_view_dir(&h->view_ro, sb.buf);
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/peaks.json", cfg->state_dir);
		free(h->peaks_path);
		h->peaks_path = xstrdup(sb.buf);
		if (kb_is_file(sb.buf)) {
			char *real = realpath(sb.buf, NULL);

			if (real)
				strvec_push(&h->view_ro, real);
			free(real);
		}
	}
	strbuf_release(&sb);
}

static bool json_ok(const char *text)
{
	cJSON *j = cJSON_Parse(text);
	bool ok = cJSON_IsObject(j);

	cJSON_Delete(j);
	return ok;
}

/* peaks.json holds an entry for backend ("cuda|...": roofline.py's keys). */
static bool peaks_known(const char *path, const char *backend)
{
	struct strbuf text = STRBUF_INIT, key = STRBUF_INIT;
	bool known;

	strbuf_addf(&key, "\"%s|", backend);
	known = kb_is_file(path) && !strbuf_read_file(&text, path, 1 << 20) &&
		strstr(text.buf, key.buf);
	strbuf_release(&text);
	strbuf_release(&key);
	return known;
}

void kb_harness_trusted_peaks(struct kb_harness *h, const char *backend)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf dir = STRBUF_INIT, script = STRBUF_INIT, cache = STRBUF_INIT;
	struct strbuf text = STRBUF_INIT;
	bool *done = !strcmp(backend, "cuda") ? &h->peaks_done_cuda : &h->peaks_done_cpu;
	bool had = h->peaks_path && kb_is_file(h->peaks_path);

	if (*done || !h->sandbox.enabled || !h->peaks_path || h->argv_override.nr || !h->view_ro.nr)
		return;
	*done = true;
	if (peaks_known(h->peaks_path, backend))
		return;
	strbuf_addf(&dir, "%s/kb-peaks-XXXXXX", h->tmp_root);
	if (kb_mkdir_p(h->tmp_root, 0700) || !mkdtemp(dir.buf)) {
		log_warn("could not create a directory to measure the device's peaks in");
		goto out;
	}
	strbuf_addf(&cache, "%s/peaks.json", dir.buf);
	/* other devices' entries are kept: the measurement adds its own */
	if (had && !strbuf_read_file(&text, h->peaks_path, 1 << 20))
		kb_write_file_atomic(cache.buf, text.buf, text.len);
	strbuf_addf(&script, "%s/kb_peaks.py", h->view_ro.v[0]);
	strvec_pushl(&cp.args, h->python, "-I", "-B", script.buf, "--measure", backend,
		     "--cache", cache.buf, NULL);
	cp.dir = dir.buf;
	cp.timeout_ms = 180000;
	cp.out_cap = cp.err_cap = 16384;
	if (kb_harness_sandbox(h, NULL, dir.buf, backend, &cp) || run_command(&cp) || cp.exit_code) {
		log_warn("could not measure the %s peaks in a process of their own (exit %d); "
			 "each harness measures them itself", backend, cp.exit_code);
		goto out;
	}
	strbuf_reset(&text);
	if (strbuf_read_file(&text, cache.buf, 1 << 20) || !json_ok(text.buf) ||
	    kb_write_file_atomic(h->peaks_path, text.buf, text.len)) {
		log_warn("could not keep the measured %s peaks in '%s'", backend, h->peaks_path);
		goto out;
	}
	if (!had) {
		char *real = realpath(h->peaks_path, NULL);

		if (real)
			strvec_push(&h->view_ro, real);
		free(real);
	}
	log_debug("measured the %s peaks into '%s'", backend, h->peaks_path);
out:
	if (dir.len && kb_is_dir(dir.buf))
		kb_rm_rf(dir.buf);
	child_process_release(&cp);
	strbuf_release(&dir);
	strbuf_release(&script);
	strbuf_release(&cache);
	strbuf_release(&text);
}

void kb_harness_request_paths(const cJSON *request, struct strvec *paths)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(request, "kernel");
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(request, "operator");
	const cJSON *abi = cJSON_GetObjectItemCaseSensitive(k, "abi");
	const cJSON *lib = cJSON_GetObjectItemCaseSensitive(k, "library");
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(k, "source");

	if (cJSON_IsString(op))
		push_view_dir(paths, op->valuestring);
	if (cJSON_IsString(lib))
		push_view_dir(paths, lib->valuestring);
	/* a native kernel's source only names it; an extension or a ModelNew is built from it */
	if (cJSON_IsString(src) && cJSON_IsString(abi) && (!strcmp(abi->valuestring, "torch-ext") ||
							    !strcmp(abi->valuestring, "modelnew")))
		push_view_dir(paths, src->valuestring);
}

int kb_harness_sandbox(const struct kb_harness *h, const struct strvec *paths,
		       const char *scratch, const char *backend, struct child_process *cp)
{
	struct kb_sandbox_view view = KB_SANDBOX_VIEW_INIT;
	int rc;

	if (!h->sandbox.enabled)
		return 0;
	for (size_t i = 0; i < h->view_ro.nr; i++)
		strvec_push(&view.ro, h->view_ro.v[i]);
	for (size_t i = 0; paths && i < paths->nr; i++)
		strvec_push(&view.ro, paths->v[i]);
	/* a test's stand-in harness: its script must be visible */
	for (size_t i = 0; i < h->argv_override.nr; i++)
		if (h->argv_override.v[i][0] == '/')
			push_view_dir(&view.ro, h->argv_override.v[i]);
	view.scratch = scratch;
	view.gpu = !strcmp(backend, "cuda");
	rc = kb_sandbox_wrap(&h->sandbox, &view, cp);
	kb_sandbox_view_release(&view);
	return rc;
}

/* <state_dir>/logs/harness, absolute when the state dir exists; NULL without a state dir. */
static char *log_dir_of(const struct kb_config *cfg)
{
	struct strbuf sb = STRBUF_INIT;
	char *abs;

	if (!cfg->state_dir || !*cfg->state_dir)
		return NULL;
	abs = realpath(cfg->state_dir, NULL);
	strbuf_addf(&sb, "%s/logs/harness", abs ? abs : cfg->state_dir);
	free(abs);
	return strbuf_detach(&sb, NULL);
}

int kb_harness_setup(struct kb_harness *h, const struct kb_config *cfg,
		     const char *python, const char *script)
{
	struct strbuf sb = STRBUF_INIT;
	const char *tmp = getenv("TMPDIR");
	char *abs;

	free(h->python);
	free(h->script);
	free(h->tmp_root);
	free(h->log_dir);
	h->python = xstrdup(python);
	h->script = xstrdup(script);
	h->tmp_root = NULL;
	h->timeout_ms = cfg->timeout_s > 0 ? cfg->timeout_s * 1000 : 0;
	h->baseline_timeout_ms = cfg->baseline_timeout_s > 0 ? cfg->baseline_timeout_s * 1000 : 0;
	h->rlimit_as_bytes = cfg->memory_limit_mb > 0 ? (uint64_t)cfg->memory_limit_mb << 20 : 0;
	h->log_cap = LOG_CAP_DEFAULT;
	if (cfg->state_dir && *cfg->state_dir) {
		strbuf_addf(&sb, "%s/tmp", cfg->state_dir);
		if (!kb_mkdir_p(sb.buf, 0700)) {
			abs = realpath(sb.buf, NULL);
			h->tmp_root = abs ? abs : strbuf_detach(&sb, NULL);
		}
	}
	if (!h->tmp_root)
		h->tmp_root = xstrdup(tmp && *tmp ? tmp : "/tmp");
	/* after <state_dir>/tmp: the state dir exists now, the path is absolute */
	h->log_dir = log_dir_of(cfg);
	strbuf_release(&sb);
	harness_view(h, cfg, script);
	return kb_sandbox_setup(&h->sandbox, cfg);
}

int kb_harness_nonce(char hex[33])
{
	unsigned char bytes[16];

	if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
		int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, bytes, sizeof(bytes)) : -1;

		if (fd >= 0)
			close(fd);
		if (n != (ssize_t)sizeof(bytes))
			return error("could not read random bytes for the nonce");
	}
	for (size_t i = 0; i < sizeof(bytes); i++)
		xsnprintf(hex + 2 * i, 3, "%02x", bytes[i]);
	hex[32] = '\0';
	return 0;
}

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS: return "SIGBUS";
	case SIGABRT: return "SIGABRT";
	case SIGFPE: return "SIGFPE";
	case SIGILL: return "SIGILL";
	case SIGKILL: return "SIGKILL";
	case SIGTERM: return "SIGTERM";
	case SIGINT: return "SIGINT";
	case SIGXCPU: return "SIGXCPU";
	case SIGXFSZ: return "SIGXFSZ";
	case SIGTRAP: return "SIGTRAP";
	case SIGPIPE: return "SIGPIPE";
	case SIGSYS: return "SIGSYS";
	default: return "signal";
	}
}

void kb_harness_exit_message(int exit_code, const char *stage, struct strbuf *msg)
{
	if (exit_code > 128)
		strbuf_addf(msg, "harness died by signal %d (%s)", exit_code - 128,
			    signal_name(exit_code - 128));
	else
		strbuf_addf(msg, "harness exited with code %d", exit_code);
	if (stage)
		strbuf_addf(msg, " during %s", stage);
}

void kb_harness_timeout_message(int64_t timeout_ms, const char *stage, struct strbuf *msg)
{
	strbuf_addf(msg, "evaluation exceeded %lld s", (long long)(timeout_ms / 1000));
	if (!stage)
		return;
	strbuf_addf(msg, " (last stage: %s)", stage);
	/* what to change, for the stage that ran out */
	if (!strcmp(stage, "timing"))
		strbuf_addstr(msg, "; timing ran out of time: lower [bench] min_time_ms or max_reps, "
			      "set [bench] l2_flush = off, skip timing (--no-timing), or raise "
			      "[harness] timeout_s (--timeout)");
	else if (!strcmp(stage, "config") || !strcmp(stage, "trial"))
		strbuf_addstr(msg, "; the correctness run ran out of time: the kernel may hang, or lower "
			      "[harness] seeds or max_configs (--seeds), or raise [harness] timeout_s "
			      "(--timeout)");
	else if (!strcmp(stage, "load"))
		strbuf_addstr(msg, "; loading ran out of time (a torch extension build, or the "
			      "operator's import): raise [harness] timeout_s (--timeout)");
	else if (!strcmp(stage, "baselines"))
		strbuf_addstr(msg, "; measuring the operator's baselines (torch.compile's compile, "
			      "eager and compile timing) ran out of time: raise [harness] "
			      "baseline_timeout_s, or set [bench] baselines = eager");
}

void kb_harness_host_pid(cJSON *evidence, pid_t pid)
{
	cJSON *env = cJSON_GetObjectItemCaseSensitive(evidence, "environment");

	if (cJSON_IsObject(env) && cJSON_HasObjectItem(env, "worker_pid") && pid > 0)
		cJSON_ReplaceItemInObjectCaseSensitive(env, "worker_pid", cJSON_CreateNumber(pid));
}

cJSON *kb_harness_settle(cJSON *result, const char *why_check, const char *msg, int config, int seed)
{
	cJSON *ev;

	if (result) {
		ev = result;
		cJSON_DeleteItemFromObjectCaseSensitive(ev, "nonce");
		if (why_check) {
			/* a verdict followed by a crash or a hang still fails */
			cJSON_ReplaceItemInObjectCaseSensitive(ev, "verdict", cJSON_CreateString("rejected"));
			kb_evidence_add_reason(ev, why_check, config, seed, msg);
		}
	} else if (why_check) {
		ev = kb_evidence_new("rejected");
		kb_evidence_add_reason(ev, why_check, config, seed, msg);
	} else {
		ev = kb_evidence_new("rejected");
		kb_evidence_add_reason(ev, "harness", config, seed, "no verdict");
	}
	if (!cJSON_GetObjectItemCaseSensitive(ev, "verdict"))
		cJSON_AddStringToObject(ev, "verdict", "rejected");
	/* only the bot sets a log pointer, and no raw output is evidence */
	cJSON_DeleteItemFromObjectCaseSensitive(ev, "log_tail");
	cJSON_DeleteItemFromObjectCaseSensitive(ev, "operator_log");
	/* exception text from operator or kernel code reaches messages, notes, reasons */
	kb_redact_json(cJSON_GetObjectItemCaseSensitive(ev, "reasons"), KB_REDACT_MESSAGE_MAX);
	kb_redact_json(ev, KB_REDACT_FIELD_MAX);
	return ev;
}

struct channel {
	cJSON *result;        /* the last result record */
	int config, seed;     /* of the last progress record, -1: none */
	char *stage;
	int records, ignored;
};

static void read_channel(const struct strbuf *data, const char *nonce, struct channel *ch)
{
	const char *p = data->buf;

	ch->config = ch->seed = -1;
	while (p && *p) {
		const char *end = strchrnul(p, '\n');
		char *line = xstrndup(p, (size_t)(end - p));
		cJSON *rec = cJSON_Parse(line);
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(rec, "nonce");
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(rec, "type");

		if (!*line) {
			/* blank line: nothing */
		} else if (!cJSON_IsObject(rec) || !cJSON_IsString(n) || strcmp(n->valuestring, nonce) ||
			   !cJSON_IsString(type)) {
			ch->ignored++;
		} else if (!strcmp(type->valuestring, "result")) {
			cJSON_Delete(ch->result);
			ch->result = rec;
			rec = NULL;
			ch->records++;
		} else {
			const cJSON *c = cJSON_GetObjectItemCaseSensitive(rec, "config");
			const cJSON *s = cJSON_GetObjectItemCaseSensitive(rec, "seed");
			const cJSON *st = cJSON_GetObjectItemCaseSensitive(rec, "stage");

			if (!strcmp(type->valuestring, "progress")) {
				ch->config = cJSON_IsNumber(c) ? c->valueint : -1;
				ch->seed = cJSON_IsNumber(s) ? s->valueint : -1;
				free(ch->stage);
				ch->stage = cJSON_IsString(st) ? xstrdup(st->valuestring) : NULL;
			}
			ch->records++;
		}
		cJSON_Delete(rec);
		free(line);
		p = *end ? end + 1 : NULL;
	}
}

cJSON *kb_harness_channel_result(const struct strbuf *data, const char *nonce, int *ignored)
{
	struct channel ch = { 0 };

	read_channel(data, nonce, &ch);
	free(ch.stage);
	if (ignored)
		*ignored = ch.ignored;
	return ch.result;
}

const char *kb_harness_request_backend(const cJSON *request)
{
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(request, "backend");

	return cJSON_IsString(b) ? b->valuestring : "";
}

int kb_harness_write_request(const cJSON *request, const char *workdir, struct strbuf *path)
{
	cJSON *req = cJSON_Duplicate(request, true);
	char *text;
	int rc;

	if (!req)
		die("out of memory copying the request");
	if (cJSON_GetObjectItemCaseSensitive(req, "workdir"))
		cJSON_ReplaceItemInObjectCaseSensitive(req, "workdir", cJSON_CreateString(workdir));
	else
		cJSON_AddStringToObject(req, "workdir", workdir);
	text = cJSON_Print(req);
	if (!text)
		die("out of memory printing the request");
	strbuf_reset(path);
	strbuf_addf(path, "%s/request.json", workdir);
	rc = kb_write_file_atomic(path->buf, text, strlen(text));
	free(text);
	cJSON_Delete(req);
	return rc;
}

int kb_harness_call(const struct kb_harness *h, const cJSON *request, cJSON **evidence,
		    struct kb_harness_run *info)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct kb_harness_runner runner;
	struct strbuf dir = STRBUF_INIT, req_path = STRBUF_INIT, in = STRBUF_INIT;
	struct strbuf msg = STRBUF_INIT;
	struct strvec paths = STRVEC_INIT;
	struct channel ch = { 0 };
	cJSON *ev = NULL;
	char nonce[33];
	const char *why_check = NULL;
	int rc = -1;

	*evidence = NULL;
	kb_harness_runner_init(&runner);
	if (info)
		memset(info, 0, sizeof(*info));
	if (kb_mkdir_p(h->tmp_root, 0700))
		goto out;
	strbuf_addf(&dir, "%s/kb-eval-XXXXXX", h->tmp_root);
	if (!mkdtemp(dir.buf)) {
		error_errno("could not create an evaluation directory in '%s'", h->tmp_root);
		strbuf_reset(&dir);
		goto out;
	}
	if (kb_harness_write_request(request, dir.buf, &req_path))
		goto out;
	if (kb_harness_nonce(nonce))
		goto out;

	if (h->argv_override.nr)
		for (size_t i = 0; i < h->argv_override.nr; i++)
			strvec_push(&cp.args, h->argv_override.v[i]);
	else
		strvec_pushl(&cp.args, h->python, "-I", "-B", "-u", h->script, NULL);
	strvec_pushl(&cp.args, "--request", req_path.buf, NULL);
	strvec_pushf(&cp.env, "TMPDIR=%s", dir.buf);
	strbuf_addf(&in, "%s\n", nonce);
	cp.in = in.buf;
	cp.in_len = in.len;
	cp.dir = dir.buf;
	cp.timeout_ms = h->timeout_ms;
	cp.out_cap = cp.err_cap = h->log_cap ? h->log_cap : LOG_CAP_DEFAULT;
	cp.result_fd_child = 3;
	if (!strcmp(kb_harness_request_backend(request), "cpu"))
		cp.rlimit_as_bytes = h->rlimit_as_bytes;
	kb_harness_request_paths(request, &paths);
	/* the kernel's side first: the judge gets its socket (harness_runner.h) */
	rc = kb_harness_runner_start(&runner, h, &paths, kb_harness_request_backend(request), &cp);
	if (!rc)
		rc = kb_harness_sandbox(h, &paths, dir.buf, kb_harness_request_backend(request), &cp);
	if (!rc)
		rc = run_command(&cp);
	kb_harness_runner_stop(&runner);
	if (rc)
		goto out;

	read_channel(&cp.result, nonce, &ch);
	if (ch.ignored)
		log_warn("harness: ignored %d record(s) without the evaluation's nonce", ch.ignored);
	if (info) {
		info->exit_code = cp.exit_code;
		info->timed_out = cp.timed_out;
		info->elapsed_ms = cp.elapsed_ms;
		info->out_bytes = cp.out.len;
		info->err_bytes = cp.err.len;
		info->out_truncated = cp.out_truncated;
		info->err_truncated = cp.err_truncated;
		info->records = ch.records;
		info->ignored = ch.ignored;
	}

	/* what went wrong with the child, if anything */
	if (cp.timed_out) {
		why_check = "timeout";
		kb_harness_timeout_message(h->timeout_ms, ch.stage, &msg);
	} else if (cp.exit_code) {
		why_check = "crash";
		kb_harness_exit_message(cp.exit_code, ch.stage, &msg);
	}
	ev = kb_harness_settle(ch.result, why_check, msg.buf, ch.config, ch.seed);
	kb_harness_host_pid(ev, cp.started_pid);
	ch.result = NULL;
	kb_harness_log_keep(h->log_dir, request, ev, &cp, NULL);
	*evidence = ev;
	ev = NULL;
	rc = 0;
out:
	if (dir.len && kb_rm_rf(dir.buf))
		log_warn("could not remove the evaluation directory '%s'", dir.buf);
	cJSON_Delete(ch.result);
	free(ch.stage);
	cJSON_Delete(ev);
	child_process_release(&cp);
	strvec_clear(&paths);
	strbuf_release(&dir);
	strbuf_release(&req_path);
	strbuf_release(&in);
	strbuf_release(&msg);
	return rc;
}

/* --- the request --- */

static void add_tol(cJSON *tol, const char *dtype, double atol, double rtol)
{
	cJSON *o = cJSON_AddObjectToObject(tol, dtype);

	cJSON_AddNumberToObject(o, "atol", atol);
	cJSON_AddNumberToObject(o, "rtol", rtol);
}

static char *absolute(const char *path)
{
	char *r = realpath(path, NULL);

	if (!r)
		error_errno("could not resolve '%s'", path);
	return r;
}

cJSON *kb_harness_request(const struct kb_config *cfg, const char *mode, const char *operator_path,
			  const char *pass, enum kb_backend backend, bool timing)
{
	cJSON *req, *tol, *t, *bl;
	struct strbuf sb = STRBUF_INIT;
	char *op = absolute(operator_path);
	const char *p;

	if (!op)
		return NULL;
	req = cJSON_CreateObject();
	cJSON_AddNumberToObject(req, "protocol", 1);
	cJSON_AddStringToObject(req, "mode", mode);
	cJSON_AddStringToObject(req, "operator", op);
	cJSON_AddStringToObject(req, "pass", pass ? pass : "forward");
	cJSON_AddStringToObject(req, "backend", kb_backend_name(backend));
	cJSON_AddNumberToObject(req, "seeds", (double)cfg->seeds);
	cJSON_AddNumberToObject(req, "max_configs", (double)cfg->max_configs);
	tol = cJSON_AddObjectToObject(req, "tolerances");
	add_tol(tol, "float32", cfg->atol_fp32, cfg->rtol_fp32);
	add_tol(tol, "float16", cfg->atol_fp16, cfg->rtol_fp16);
	add_tol(tol, "bfloat16", cfg->atol_bf16, cfg->rtol_bf16);
	add_tol(tol, "float64", 1e-7, 1e-7);
	cJSON_AddNumberToObject(req, "error_factor", cfg->error_factor);
	t = cJSON_AddObjectToObject(req, "timing");
	cJSON_AddBoolToObject(t, "enabled", timing);
	cJSON_AddNumberToObject(t, "warmup", (double)cfg->warmup);
	cJSON_AddNumberToObject(t, "min_time_ms", (double)cfg->min_time_ms);
	cJSON_AddNumberToObject(t, "max_reps", (double)cfg->max_reps);
	cJSON_AddBoolToObject(t, "l2_flush", cfg->l2_flush);
	bl = cJSON_AddArrayToObject(t, "baselines");
	for (p = cfg->baselines ? cfg->baselines : ""; *p; ) {
		size_t n = strcspn(p, ", ");

		if (n) {
			char *name = xstrndup(p, n);

			cJSON_AddItemToArray(bl, cJSON_CreateString(name));
			free(name);
		}
		p += n;
		while (*p == ',' || *p == ' ')
			p++;
	}
	cJSON_AddNumberToObject(req, "suspicious_speedup", cfg->suspicious_speedup);
	cJSON_AddNumberToObject(req, "baseline_drift", cfg->baseline_drift);
	strbuf_addf(&sb, "%s/peaks.json", cfg->state_dir && *cfg->state_dir ? cfg->state_dir : ".kernelbot");
	{
		char *dirpart = xstrdup(sb.buf), *slash = strrchr(dirpart, '/');
		char *absdir;

		*slash = '\0';
		absdir = realpath(dirpart, NULL);
		if (absdir) {
			strbuf_reset(&sb);
			strbuf_addf(&sb, "%s/peaks.json", absdir);
		}
		free(absdir);
		free(dirpart);
	}
	cJSON_AddStringToObject(req, "peaks_cache", sb.buf);
	strbuf_release(&sb);
	free(op);
	return req;
}

/* --- one candidate, start to finish --- */

int kb_verifier_init(struct kb_verifier *vf, const struct kb_config *cfg)
{
	memset(vf, 0, sizeof(*vf));
	vf->cfg = cfg;
	kb_harness_init(&vf->harness);
	strvec_init(&vf->build.include_flags);
	if (kb_datadir_find(cfg, &vf->dd))
		return -1;
	if (kb_python_find(cfg, &vf->probe))
		return -1;
	if (kb_build_env_init(&vf->build, cfg, &vf->dd, vf->probe))
		return -1;
	if (kb_harness_setup(&vf->harness, cfg, vf->probe->python, vf->dd.harness))
		return -1;
	/* compilers see untrusted source: the same sandbox as the harness */
	vf->build.sandbox = &vf->harness.sandbox;
	return 0;
}

void kb_verifier_release(struct kb_verifier *vf)
{
	if (vf->pool) {
		kb_harness_pool_release(vf->pool);
		FREE_AND_NULL(vf->pool);
	}
	vf->worker = NULL;
	kb_datadir_release(&vf->dd);
	kb_build_env_release(&vf->build);
	kb_harness_release(&vf->harness);
	kb_state_close(vf->st);
	vf->st = NULL;
	vf->probe = NULL;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* A ModelNew file builds CUDA when it hands load_inline cuda_sources or defines a __global__. */
static bool py_builds_cuda(const char *kernel_path)
{
	struct strbuf text = STRBUF_INIT;
	bool yes = false;

	if (strbuf_read_file(&text, kernel_path, 4u << 20) >= 0)
		yes = strstr(text.buf, "cuda_sources") || strstr(text.buf, "__global__") ||
			strstr(text.buf, ".cu\"") || strstr(text.buf, ".cu'");
	strbuf_release(&text);
	return yes;
}

#define KERNEL_FORMATS \
	"a kernel is a .cu/.cpp file (native abi with kb_forward, or a torch extension with " \
	"PYBIND11_MODULE) or a KernelBench .py file with class ModelNew"

int kb_verifier_backend(const struct kb_verifier *vf, const char *kernel_path,
			enum kb_backend requested, enum kb_backend *out, struct strbuf *why)
{
	bool py_src = ends_with(kernel_path, ".py");
	bool cuda_src = ends_with(kernel_path, ".cu") || (py_src && py_builds_cuda(kernel_path));
	bool cxx_src = ends_with(kernel_path, ".cpp") || ends_with(kernel_path, ".cc") ||
		ends_with(kernel_path, ".cxx") || (py_src && !cuda_src);
	bool gpu = vf->probe && vf->probe->cuda_available && vf->probe->device_count > 0;
	const char *py = vf->probe ? vf->probe->python : "python";

	if (!cuda_src && !cxx_src) {
		strbuf_addf(why, "kernel '%s' is neither a .cu, .cpp nor .py file: " KERNEL_FORMATS,
			    kernel_path);
		return -1;
	}
	/* a ModelNew of C++ only may run on either (its C++ may take cuda tensors) */
	if (py_src && !cuda_src && requested == KB_BACKEND_CUDA && gpu) {
		*out = KB_BACKEND_CUDA;
		return 0;
	}
	/* the source decides: .cu runs on cuda, .cpp on cpu */
	if (requested == KB_BACKEND_CPU && cuda_src) {
		strbuf_addf(why, "kernel '%s' is cuda source and cannot run on backend 'cpu' (a cpu kernel is a .cpp file)",
			    kernel_path);
		return -1;
	}
	if (requested == KB_BACKEND_CUDA && cxx_src) {
		strbuf_addf(why, "kernel '%s' is c++ for backend 'cpu'; backend 'cuda' needs a .cu kernel (or pass --backend cpu)",
			    kernel_path);
		return -1;
	}
	if (cuda_src && !gpu) {
		strbuf_addf(why, "kernel '%s' needs backend 'cuda', but torch in '%s' sees no gpu",
			    kernel_path, py);
		return -1;
	}
	*out = cuda_src ? KB_BACKEND_CUDA : KB_BACKEND_CPU;
	return 0;
}

#define OPERATOR_FORMATS \
	"an operator is one KernelBench .py file (class Model, get_inputs(), get_init_inputs())" \
	" or a robust-kbench folder (func_forward.py, config_forward.json)"

int kb_operator_check_path(const char *op, struct strbuf *why)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	int rc = -1;

	if (access(op, F_OK)) {
		strbuf_addf(why, "operator '%s' does not exist", op);
		goto out;
	}
	if (kb_is_dir(op)) {
		strbuf_addf(&path, "%s/func_forward.py", op);
		if (!kb_is_file(path.buf)) {
			strbuf_addf(why, "operator '%s' is a folder without func_forward.py: " OPERATOR_FORMATS, op);
			goto out;
		}
	} else if (!kb_is_file(op) || !ends_with(op, ".py")) {
		strbuf_addf(why, "operator '%s' is neither a .py file nor a folder: " OPERATOR_FORMATS, op);
		goto out;
	} else if (strbuf_read_file(&text, op, 16u << 20) < 0) {
		strbuf_addf(why, "could not read operator '%s'", op);
		goto out;
	} else if (!strstr(text.buf, "Model") || !strstr(text.buf, "get_inputs")) {
		/* a file that never names them cannot define them: no need to start python */
		strbuf_addf(why, "operator '%s' defines no %s: " OPERATOR_FORMATS, op,
			    strstr(text.buf, "Model") ? "get_inputs()" : "class Model");
		goto out;
	}
	rc = 0;
out:
	strbuf_release(&path);
	strbuf_release(&text);
	return rc;
}

int kb_verifier_check_paths(const char *op, const char *kernel, struct strbuf *why)
{
	struct strbuf src = STRBUF_INIT;
	enum kb_kernel_abi abi;

	if (kb_operator_check_path(op, why))
		return -1;
	if (!kb_is_file(kernel)) {
		strbuf_addf(why, "kernel '%s' does not exist", kernel);
		return -1;
	}
	if (!ends_with(kernel, ".cu") && !ends_with(kernel, ".cpp") && !ends_with(kernel, ".cc") &&
	    !ends_with(kernel, ".cxx") && !ends_with(kernel, ".py")) {
		strbuf_addf(why, "kernel '%s' is neither a .cu, .cpp nor .py file: " KERNEL_FORMATS,
			    kernel);
		return -1;
	}
	if (strbuf_read_file(&src, kernel, 4u << 20) < 0) {
		strbuf_release(&src);
		strbuf_addf(why, "could not read kernel '%s'", kernel);
		return -1;
	}
	abi = kb_source_abi(src.buf, src.len);
	strbuf_release(&src);
	if (ends_with(kernel, ".py") != (abi == KB_ABI_MODELNEW)) {
		if (abi == KB_ABI_MODELNEW)
			strbuf_addf(why, "kernel '%s' defines class ModelNew but is not a .py file", kernel);
		else
			strbuf_addf(why, "kernel '%s' defines no class ModelNew (a KernelBench candidate "
				    "is a .py file with class ModelNew(nn.Module) that builds its kernels "
				    "with load_inline)", kernel);
		return -1;
	}
	if (abi == KB_ABI_MODELNEW && kb_is_dir(op)) {
		strbuf_addf(why, "kernel '%s' is a KernelBench ModelNew, but operator '%s' is a "
			    "robust-kbench folder: ModelNew needs a KernelBench .py operator "
			    "(class Model, get_init_inputs())", kernel, op);
		return -1;
	}
	if (abi == KB_ABI_UNKNOWN) {
		strbuf_addf(why, "kernel '%s' defines neither kb_forward (native abi) nor PYBIND11_MODULE (torch extension)",
			    kernel);
		return -1;
	}
	return 0;
}

/* The first line of the compiler's messages that says "error", for the one-line reason. */
static void first_error_line(const char *errors, struct strbuf *out)
{
	const char *p = errors, *pick = NULL;

	while (p && *p) {
		const char *end = strchrnul(p, '\n');
		char *line = xstrndup(p, (size_t)(end - p));

		if (!pick && strcasestr(line, "error"))
			pick = p;
		free(line);
		p = *end ? end + 1 : NULL;
	}
	if (!pick)
		pick = errors;
	strbuf_add(out, pick, strcspn(pick, "\n"));
}

/* One candidate on its way through kb_verifier_evaluate_many. */
struct cand {
	const char *path;
	char *abs;
	struct strbuf src;
	char sha[65];
	enum kb_kernel_abi abi;
	enum kb_backend backend;
	struct kb_findings findings;
	struct kb_build_result build;
	bool has_build;         /* the build result goes into the evidence */
	cJSON *ev;              /* decided before the harness (static, build) */
	cJSON *placement;       /* where a worker of the pool ran it (harness_pool.h) */
	double static_s, build_s, harness_s;
	double harness_t0;      /* its request was made */
	char op_hash[65];       /* the operator's in the baseline cache, "": none */
	int64_t wall0;
};

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void cand_release(struct cand *c)
{
	free(c->abs);
	strbuf_release(&c->src);
	kb_findings_release(&c->findings);
	kb_build_result_release(&c->build);
	cJSON_Delete(c->ev);
	cJSON_Delete(c->placement);
}

/* Read, resolve the backend, static checks. 0, or -1 (usage error, logged). */
static int cand_prepare(const struct kb_verifier *vf, const struct kb_eval_opts *o, struct cand *c)
{
	struct strbuf why = STRBUF_INIT, sb = STRBUF_INIT;
	double t;
	int rc = -1;

	c->wall0 = kb_wall_s();
	if (strbuf_read_file(&c->src, c->path, 4u << 20) < 0) {
		error("could not read kernel '%s'", c->path);
		goto out;
	}
	c->abs = realpath(c->path, NULL);
	if (!c->abs)
		c->abs = xstrdup(c->path);
	if (kb_verifier_backend(vf, c->path, o->backend, &c->backend, &why)) {
		error("%s", why.buf);
		goto out;
	}
	kb_sha256_hex(c->src.buf, c->src.len, c->sha);
	c->abi = kb_source_abi(c->src.buf, c->src.len);

	/* static checks, every format; on cuda torch calls are allowed beside
	 * custom kernels (mixed), which the harness proves do work */
	t = mono_s();
	if (kb_static_check_flags(c->src.buf, c->src.len, c->abi,
				  c->backend == KB_BACKEND_CUDA ? KB_STATIC_MIXED : 0, &c->findings) > 0) {
		c->ev = kb_evidence_new("rejected");
		for (size_t i = 0; i < c->findings.nr; i++) {
			strbuf_reset(&sb);
			strbuf_addf(&sb, "line %d: %s: %s", c->findings.v[i].line, c->findings.v[i].rule,
				    c->findings.v[i].message);
			kb_evidence_add_reason(c->ev, "static", -1, -1, sb.buf);
		}
	}
	c->static_s = mono_s() - t;
	rc = 0;
out:
	strbuf_release(&why);
	strbuf_release(&sb);
	return rc;
}

/* Build every native candidate still in the running, in parallel. 0, -1, KB_ECANCELLED. */
static int build_all(struct kb_verifier *vf, struct cand *cs, size_t n)
{
	const char **sources = xcalloc(n ? n : 1, sizeof(*sources));
	struct kb_build_result *results = xcalloc(n ? n : 1, sizeof(*results));
	size_t *which = xcalloc(n ? n : 1, sizeof(*which));
	struct strbuf sb = STRBUF_INIT;
	size_t m = 0;
	double t, share;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		if (cs[i].ev || cs[i].abi != KB_ABI_NATIVE)
			continue;
		sources[m] = cs[i].path;
		which[m] = i;
		kb_build_result_init(&results[m]);
		m++;
	}
	if (!m)
		goto out;
	t = mono_s();
	if (m == 1)
		rc = kb_build_native(&vf->build, sources[0], &results[0]);
	else
		rc = kb_build_many(&vf->build, sources, m, results);
	share = (mono_s() - t) / (double)m;
	for (size_t k = 0; k < m; k++) {
		struct cand *c = &cs[which[k]];

		kb_build_result_release(&c->build);
		c->build = results[k];
		kb_build_result_init(&results[k]);
		c->has_build = true;
		c->build_s = share;
		if (rc || c->build.ok)
			continue;
		c->ev = kb_evidence_new("rejected");
		if (c->build.compiled && c->build.findings.nr) {
			/* it built, but the expanded source or its imports are refused */
			for (size_t f = 0; f < c->build.findings.nr; f++) {
				const struct kb_finding *fd = &c->build.findings.v[f];

				strbuf_reset(&sb);
				if (fd->line > 0)
					strbuf_addf(&sb, "line %d: %s: ", fd->line, fd->rule);
				strbuf_addstr(&sb, fd->message);
				kb_evidence_add_reason(c->ev, "static", -1, -1, sb.buf);
			}
			continue;
		}
		strbuf_reset(&sb);
		strbuf_addstr(&sb, "compile failed: ");
		first_error_line(c->build.errors ? c->build.errors : "", &sb);
		kb_evidence_add_reason(c->ev, "build", -1, -1, sb.buf);
	}
out:
	for (size_t k = 0; k < m; k++)
		kb_build_result_release(&results[k]);
	free(results);
	free(sources);
	free(which);
	strbuf_release(&sb);
	return rc;
}

/* What the bot's kill allows a judge beyond the candidate's budget: its start and a late answer. */
#define JUDGE_GRACE_MS 30000

/*
 * The candidate's budget into a request (the judge enforces it and
 * rejects `timeout`), and the bot's own kill, a backstop for a judge that
 * stops answering (PROTOCOL.md "Timeouts"): the budget, JUDGE_GRACE_MS
 * and, when timed, [harness] baseline_timeout_s for the baselines the
 * judge may have to measure. A worker adds that allowance itself, only
 * once its judge says it measures baselines (harness_worker.h); a fresh
 * process cannot be told later. 0: no limit.
 */
static int64_t judge_timeout_ms(const struct kb_verifier *vf, cJSON *req, int64_t budget_ms,
				bool timed)
{
	if (budget_ms <= 0)
		return 0;
	cJSON_AddNumberToObject(req, "candidate_timeout_s", (double)budget_ms / 1000.0);
	return budget_ms + JUDGE_GRACE_MS +
	       (timed && !vf->worker ? vf->harness.baseline_timeout_ms : 0);
}

/* limit_ms (0: none), cut to the time left before o->deadline_ms. */
static int64_t eval_limit_ms(const struct kb_eval_opts *o, int64_t limit_ms)
{
	int64_t left;

	if (o->deadline_ms <= 0)
		return limit_ms;
	left = o->deadline_ms - kb_now_ms();
	if (left < KB_EVAL_MIN_MS)
		left = KB_EVAL_MIN_MS;
	return limit_ms > 0 && limit_ms < left ? limit_ms : left;
}

/* The request for one built candidate and the bot's kill for it. 0, or -1 (logged). */
static int harness_request(struct kb_verifier *vf, const struct kb_eval_opts *o, struct cand *c,
			   cJSON **request, int64_t *kill_ms)
{
	cJSON *req, *kernel;
	int64_t timeout_ms = eval_limit_ms(o, o->timeout_s > 0 ? o->timeout_s * 1000
							  : vf->harness.timeout_ms);
	bool timed = o->timing || (o->mode && !strcmp(o->mode, "bench"));

	c->harness_t0 = mono_s();
	c->op_hash[0] = '\0';
	req = kb_harness_request(vf->cfg, o->mode, o->operator_path, o->pass, c->backend, o->timing);
	if (!req)
		return -1;
	if (o->seeds > 0)
		cJSON_ReplaceItemInObjectCaseSensitive(req, "seeds", cJSON_CreateNumber((double)o->seeds));
	if (o->max_configs > 0)
		cJSON_ReplaceItemInObjectCaseSensitive(req, "max_configs",
						       cJSON_CreateNumber((double)o->max_configs));
	if (o->stream_mode)
		cJSON_AddStringToObject(req, "stream_mode", o->stream_mode);
	kernel = cJSON_AddObjectToObject(req, "kernel");
	cJSON_AddStringToObject(kernel, "abi", kb_abi_name(c->abi));
	if (c->abi == KB_ABI_NATIVE) {
		cJSON_AddStringToObject(kernel, "library", c->build.library);
		cJSON_AddStringToObject(kernel, "source", c->abs);
	} else {
		char name[32];

		xsnprintf(name, sizeof(name), "kb_ext_%.16s", c->sha);
		cJSON_AddStringToObject(kernel, "source", c->abs);
		cJSON_AddStringToObject(kernel, "name", name);
	}
	/* the operator's cached baselines, measured once per device (baseline_cache.h) */
	if (timed)
		kb_baseline_cache_request(vf, o->operator_path, req, c->op_hash);
	*kill_ms = judge_timeout_ms(vf, req, timeout_ms, timed);
	*request = req;
	return 0;
}

/* The judge's verdict arrived: the bot's share of it. */
static void harness_answered(struct kb_verifier *vf, struct cand *c)
{
	c->harness_s = mono_s() - c->harness_t0;
	if (c->ev)
		kb_baseline_cache_keep(vf, c->op_hash, c->ev);
}

/* The harness's verdict on one built candidate, in a fresh process. 0, -1, KB_ECANCELLED. */
static int run_fresh(struct kb_verifier *vf, const struct kb_eval_opts *o, struct cand *c)
{
	struct kb_harness harness;
	cJSON *req;
	int64_t timeout_ms;
	int rc;

	if (harness_request(vf, o, c, &req, &timeout_ms))
		return -1;
	/* a per-call view of the harness settings (borrowed, never
	 * released): --timeout applies to this call only */
	harness = vf->harness;
	harness.timeout_ms = timeout_ms;
	rc = kb_harness_call(&harness, req, &c->ev, NULL);
	if (!rc) {
		harness_answered(vf, c);
		/* a job's evidence says which devices it had to itself */
		c->placement = kb_harness_fresh_placement(kb_backend_name(c->backend),
							  getenv("CUDA_VISIBLE_DEVICES"),
							  getenv(KB_DEVICE_LEASE_ENV));
	}
	cJSON_Delete(req);
	return rc;
}

static void set_number(cJSON *obj, const char *key, double v)
{
	if (cJSON_GetObjectItemCaseSensitive(obj, key))
		cJSON_ReplaceItemInObjectCaseSensitive(obj, key, cJSON_CreateNumber(v));
	else
		cJSON_AddNumberToObject(obj, key, v);
}

static double rounded(double s)
{
	return round(s * 1e4) / 1e4;
}

/* The bot's stages and the "kernelbot" object. */
static void cand_finish(struct cand *c)
{
	struct kb_evidence_meta meta = { 0 };
	cJSON *stages = cJSON_GetObjectItemCaseSensitive(c->ev, "stages");

	if (!cJSON_IsObject(stages)) {
		cJSON_DeleteItemFromObjectCaseSensitive(c->ev, "stages");
		stages = cJSON_AddObjectToObject(c->ev, "stages");
	}
	set_number(stages, "static_s", rounded(c->static_s));
	set_number(stages, "build_s", rounded(c->build_s));
	set_number(stages, "harness_s", rounded(c->harness_s));

	meta.kernel_path = c->abs;
	meta.kernel_sha256 = c->sha;
	meta.abi = kb_abi_name(c->abi);
	meta.findings = &c->findings;
	meta.build = c->has_build ? &c->build : NULL;
	meta.started_at = c->wall0;
	meta.finished_at = kb_wall_s();
	meta.seconds = c->static_s + c->build_s + c->harness_s;
	kb_evidence_annotate(c->ev, &meta);
	if (c->placement) {
		cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(c->ev, "kernelbot"), "placement",
				      c->placement);
		c->placement = NULL;
	}
}

/* The harness's stage, config and seed on kernel as the progress activity; stage NULL: a tick. */
static void show_activity(struct kb_verifier *vf, const char *kernel, const char *stage, int config,
			  int seed)
{
	const char *k = kernel ? kernel : "kernel";
	const char *slash = strrchr(k, '/');

	if (slash)
		k = slash + 1;
	if (!stage)
		kb_progress_tick(vf->progress);
	else if (config >= 0 && seed >= 0)
		kb_progress_activity(vf->progress, "%s: %s, config %d, seed %d", k, stage, config, seed);
	else if (config >= 0)
		kb_progress_activity(vf->progress, "%s: %s, config %d", k, stage, config);
	else
		kb_progress_activity(vf->progress, "%s: %s", k, stage);
}

/* A worker's wait hook outside a pool run (tune.c's describe and points). */
static void show_harness_wait(const char *stage, int config, int seed, void *payload)
{
	struct kb_verifier *vf = payload;

	show_activity(vf, vf->current, stage, config, seed);
}

void kb_verifier_use_worker(struct kb_verifier *vf)
{
	struct strvec devices = STRVEC_INIT;
	int gpus = vf->probe && vf->probe->cuda_available ? vf->probe->device_count : 0;

	if (vf->pool) {
		if (!vf->worker)
			vf->worker = &vf->pool->w[0];
		return;
	}
	kb_harness_pool_devices(vf->cfg->devices, getenv("CUDA_VISIBLE_DEVICES"), gpus, &devices);
	vf->pool = xmalloc(sizeof(*vf->pool));
	kb_harness_pool_init(vf->pool, &vf->harness, &devices,
			     vf->cfg->workers_per_device > 0 ? (size_t)vf->cfg->workers_per_device : 1);
	for (size_t k = 0; k < vf->pool->nr; k++) {
		vf->pool->w[k].on_wait = show_harness_wait;
		vf->pool->w[k].on_wait_payload = vf;
	}
	vf->worker = &vf->pool->w[0];
	log_debug("harness workers: %zu (%zu per device; devices: %zu, 0: not pinned)", vf->pool->nr,
		  vf->pool->per_device, devices.nr);
	strvec_clear(&devices);
}

/* One kb_verifier_evaluate_many call's candidates and where their evidence goes. */
struct batch {
	struct kb_verifier *vf;
	const struct kb_eval_opts *o;
	struct cand *cs;
	const char *const *kernels;
	cJSON **evidence;
	kb_eval_done_fn done;
	void *payload;
	size_t *which;          /* a pool job's candidate */
};

/* Candidate i's evidence is complete: hand it over. */
static void report(struct batch *b, size_t i)
{
	cand_finish(&b->cs[i]);
	b->evidence[i] = b->cs[i].ev;
	b->cs[i].ev = NULL;
	if (b->done)
		b->done(i, b->kernels[i], b->evidence[i], b->payload);
}

static int pool_request(size_t j, cJSON **request, int64_t *timeout_ms, void *payload)
{
	struct batch *b = payload;
	size_t i = b->which[j];

	show_activity(b->vf, b->kernels[i], "waiting for the harness", -1, -1);
	return harness_request(b->vf, b->o, &b->cs[i], request, timeout_ms);
}

static void pool_done(size_t j, cJSON *evidence, cJSON *placement, void *payload)
{
	struct batch *b = payload;
	struct cand *c = &b->cs[b->which[j]];

	c->ev = evidence;
	c->placement = placement;
	kb_harness_placement_lease(placement, getenv(KB_DEVICE_LEASE_ENV));
	harness_answered(b->vf, c);
	report(b, b->which[j]);
}

static void pool_wait(size_t j, const char *stage, int config, int seed, void *payload)
{
	struct batch *b = payload;

	show_activity(b->vf, j == SIZE_MAX ? NULL : b->kernels[b->which[j]], stage, config, seed);
}

/* The candidates still undecided, spread over the pool's workers. 0, -1, KB_ECANCELLED. */
static int judge_in_pool(struct batch *b, size_t n)
{
	struct kb_pool_job *jobs = xcalloc(n ? n : 1, sizeof(*jobs));
	struct kb_pool_ops ops = { pool_request, pool_done, pool_wait, b, b->o->idle, b->o->idle_arg };
	size_t m = 0;
	int rc;

	b->which = xcalloc(n ? n : 1, sizeof(*b->which));
	for (size_t i = 0; i < n; i++) {
		if (b->evidence[i])
			continue;
		jobs[m].backend = kb_backend_name(b->cs[i].backend);
		jobs[m].tag = b->cs[i].sha;
		b->which[m++] = i;
	}
	rc = kb_harness_pool_run(b->vf->pool, jobs, m, &ops);
	free(jobs);
	FREE_AND_NULL(b->which);
	return rc;
}

/* Trusted peaks, then the workers start (python and torch load while the compiler works). */
static int prepare_workers(struct kb_verifier *vf, const struct kb_eval_opts *o, struct cand *cs,
			   size_t n)
{
	size_t pending = 0;
	const char *backend = NULL;

	for (size_t i = 0; i < n; i++)
		if (!cs[i].ev) {
			backend = kb_backend_name(cs[i].backend);
			pending++;
		}
	/* trusted peaks first: a worker or harness started later sees them */
	if (o->timing && backend) {
		kb_progress_activity(vf->progress, "the machine's copy and matrix peaks (once per state dir)");
		for (size_t i = 0; i < n; i++)
			if (!cs[i].ev)
				kb_harness_trusted_peaks(&vf->harness, kb_backend_name(cs[i].backend));
	}
	if (!vf->worker || !vf->pool || !backend)
		return 0;
	/* the operator already in the sandbox's view */
	kb_harness_pool_see(vf->pool, o->operator_path);
	return kb_harness_pool_start(vf->pool, backend, pending);
}

int kb_verifier_evaluate_many(struct kb_verifier *vf, const struct kb_eval_opts *o,
			      const char *const *kernels, size_t n, cJSON **evidence,
			      kb_eval_done_fn done, void *payload)
{
	struct cand *cs = xcalloc(n ? n : 1, sizeof(*cs));
	struct batch b = { vf, o, cs, kernels, evidence, done, payload, NULL };
	size_t nr_native = 0;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		evidence[i] = NULL;
		cs[i].path = kernels[i];
		strbuf_init(&cs[i].src, 0);
		cs[i].findings = (struct kb_findings)KB_FINDINGS_INIT;
		kb_build_result_init(&cs[i].build);
	}
	for (size_t i = 0; i < n && !rc; i++)
		rc = cand_prepare(vf, o, &cs[i]);
	if (rc)
		goto out;
	rc = prepare_workers(vf, o, cs, n);
	if (rc)
		goto out;
	for (size_t i = 0; i < n; i++)
		nr_native += !cs[i].ev && cs[i].abi == KB_ABI_NATIVE;
	if (nr_native)
		kb_progress_activity(vf->progress, "building %zu kernel%s", nr_native, nr_native == 1 ? "" : "s");
	{
		int64_t build_ms = vf->build.timeout_ms;

		vf->build.timeout_ms = eval_limit_ms(o, build_ms);
		rc = build_all(vf, cs, n);
		vf->build.timeout_ms = build_ms;
	}
	if (rc)
		goto out;

	/* what the static checks and the builds decided is complete first;
	 * the harness's verdicts follow in the order they come */
	for (size_t i = 0; i < n; i++)
		if (cs[i].ev)
			report(&b, i);
	if (vf->worker && vf->pool) {
		rc = judge_in_pool(&b, n);
		goto out;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		if (evidence[i])
			continue;
		vf->current = kernels[i];
		show_activity(vf, kernels[i], "in a fresh harness process", -1, -1);
		rc = run_fresh(vf, o, &cs[i]);
		vf->current = NULL;
		if (!rc)
			report(&b, i);
	}
out:
	for (size_t i = 0; i < n; i++)
		cand_release(&cs[i]);
	free(cs);
	return rc;
}

int kb_verifier_evaluate(struct kb_verifier *vf, const struct kb_eval_opts *o, cJSON **evidence)
{
	const char *kernels[1] = { o->kernel_path };

	return kb_verifier_evaluate_many(vf, o, kernels, 1, evidence, NULL, NULL);
}
