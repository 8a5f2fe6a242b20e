#include "core/common.h"
#include "verifier/harness_worker.h"
#include "core/log.h"
#include "core/scratch.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/evidence.h"
#include "verifier/harness_log.h"

#define LOG_CAP_DEFAULT (1u << 20)
#define STOP_GRACE_MS 2000      /* EOF on stdin: a worker exits at once */
#define EXIT_GRACE_MS 5000      /* a worker that said it will exit */
#define DEATH_GRACE_MS 1000     /* closed its pipe: let it finish dying for the real exit code */

void kb_harness_worker_init(struct kb_harness_worker *w, const struct kb_harness *h)
{
	memset(w, 0, sizeof(*w));
	w->h = h;
	child_process_init(&w->cp);
	kb_harness_runner_init(&w->runner);
	strvec_init(&w->seen);
}

/* Adds the paths not yet seen; true when one was new. */
static bool see_paths(struct kb_harness_worker *w, const struct strvec *paths)
{
	bool grew = false;

	for (size_t i = 0; i < paths->nr; i++) {
		bool covered = false;

		/* the build cache and the harness's own files are always shown */
		for (size_t j = 0; j < w->h->view_ro.nr && !covered; j++)
			covered = kb_path_under(paths->v[i], w->h->view_ro.v[j]);
		for (size_t j = 0; j < w->seen.nr && !covered; j++)
			covered = kb_path_under(paths->v[i], w->seen.v[j]);
		if (!covered) {
			strvec_push(&w->seen, paths->v[i]);
			grew = true;
		}
	}
	return grew;
}

/* A running sandboxed worker that does not show the request's files must go. */
static void see_request(struct kb_harness_worker *w, const cJSON *request)
{
	struct strvec paths = STRVEC_INIT;

	kb_harness_request_paths(request, &paths);
	if (see_paths(w, &paths) && w->running && w->h->sandbox.enabled)
		w->view_stale = true;
	strvec_clear(&paths);
}

void kb_harness_worker_see(struct kb_harness_worker *w, const char *path)
{
	cJSON *req = cJSON_CreateObject();

	cJSON_AddStringToObject(req, "operator", path);
	see_request(w, req);
	cJSON_Delete(req);
}

pid_t kb_harness_worker_pid(const struct kb_harness_worker *w)
{
	return w->running ? w->cp.pid : 0;
}

/* The worker is gone (reaped or never started): forget it and its dir. */
static void forget(struct kb_harness_worker *w)
{
	child_process_release(&w->cp);
	child_process_init(&w->cp);
	kb_harness_runner_stop(&w->runner);
	if (w->dir && kb_rm_rf(w->dir))
		log_warn("could not remove the worker directory '%s'", w->dir);
	FREE_AND_NULL(w->dir);
	w->running = false;
	w->requests = 0;
	w->backend[0] = '\0';
}

void kb_harness_worker_stop(struct kb_harness_worker *w)
{
	if (w->running) {
		finish_command(&w->cp, STOP_GRACE_MS);
		log_debug("harness worker stopped (exit code %d)", w->cp.exit_code);
	}
	forget(w);
}

void kb_harness_worker_release(struct kb_harness_worker *w)
{
	kb_harness_worker_stop(w);
	child_process_release(&w->cp);
	strvec_clear(&w->seen);
}

int kb_harness_worker_start(struct kb_harness_worker *w, const char *backend)
{
	const struct kb_harness *h = w->h;
	struct child_process *cp = &w->cp;
	struct strbuf dir = STRBUF_INIT, in = STRBUF_INIT;
	int rc = -1;

	if (w->running && child_alive(cp) && !strcmp(w->backend, backend) && !w->view_stale)
		return 0;
	kb_harness_worker_stop(w);
	/* first the dirs of workers whose bot was killed (kill -9 cleans nothing) */
	if (!w->starts)
		kb_scratch_sweep(h->tmp_root, "kb-worker");
	if (kb_scratch_make(h->tmp_root, "kb-worker", &dir))
		goto out;
	w->dir = strbuf_detach(&dir, NULL);
	if (kb_harness_nonce(w->nonce))
		goto out;

	if (h->argv_override.nr)
		for (size_t i = 0; i < h->argv_override.nr; i++)
			strvec_push(&cp->args, h->argv_override.v[i]);
	else
		strvec_pushl(&cp->args, h->python, "-I", "-B", "-u", h->script, NULL);
	/* the dir only names the worker in ps (which state dir it serves) */
	strvec_pushl(&cp->args, "--serve", w->dir, NULL);
	strvec_pushf(&cp->env, "TMPDIR=%s", w->dir);
	strbuf_addf(&in, "%s\n", w->nonce);
	cp->in = in.buf;
	cp->in_len = in.len;
	cp->dir = w->dir;
	cp->keep_stdin_open = true;
	cp->keep_tail = true;
	cp->out_cap = cp->err_cap = h->log_cap ? h->log_cap : LOG_CAP_DEFAULT;
	cp->result_fd_child = 3;
	if (!strcmp(backend, "cpu"))
		cp->rlimit_as_bytes = h->rlimit_as_bytes;
	rc = kb_harness_runner_start(&w->runner, h, &w->seen, backend, cp);
	if (!rc)
		rc = kb_harness_sandbox(h, &w->seen, w->dir, backend, cp);
	if (!rc)
		rc = start_command(cp);
	w->view_stale = false;
	if (rc)
		goto out;
	w->running = true;
	w->starts++;
	kb_strlcpy(w->backend, backend, sizeof(w->backend));
	log_debug("harness worker %d started for backend '%s'", (int)cp->pid, backend);
out:
	if (rc)
		forget(w);
	strbuf_release(&dir);
	strbuf_release(&in);
	return rc;
}

/* What came back for one request. */
struct reply {
	cJSON *result;
	bool worker_exit;
	int config, seed;     /* of the last progress record, -1: none */
	char *stage;
	int records, ignored;
	bool baselines_allowed; /* the deadline grew by the baselines' allowance */
};

static void reply_release(struct reply *r)
{
	cJSON_Delete(r->result);
	free(r->stage);
	memset(r, 0, sizeof(*r));
	r->config = r->seed = -1;
}

/* One line from the channel; true when it was this request's result. */
static bool take_line(const char *line, const char *nonce, const char *request, struct reply *r)
{
	cJSON *rec;
	const cJSON *n, *type, *req;

	if (!*line)
		return false;
	rec = cJSON_Parse(line);
	n = cJSON_GetObjectItemCaseSensitive(rec, "nonce");
	type = cJSON_GetObjectItemCaseSensitive(rec, "type");
	req = cJSON_GetObjectItemCaseSensitive(rec, "request");
	if (!cJSON_IsObject(rec) || !cJSON_IsString(n) || strcmp(n->valuestring, nonce) ||
	    !cJSON_IsString(type) || !cJSON_IsString(req) || strcmp(req->valuestring, request)) {
		r->ignored++;
		cJSON_Delete(rec);
		return false;
	}
	r->records++;
	if (!strcmp(type->valuestring, "result")) {
		r->worker_exit = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "worker_exit"));
		cJSON_DeleteItemFromObjectCaseSensitive(rec, "worker_exit");
		cJSON_DeleteItemFromObjectCaseSensitive(rec, "request");
		cJSON_Delete(r->result);
		r->result = rec;
		return true;
	}
	if (!strcmp(type->valuestring, "progress")) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(rec, "config");
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(rec, "seed");
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(rec, "stage");

		r->config = cJSON_IsNumber(c) ? c->valueint : -1;
		r->seed = cJSON_IsNumber(s) ? s->valueint : -1;
		free(r->stage);
		r->stage = cJSON_IsString(st) ? xstrdup(st->valuestring) : NULL;
	}
	cJSON_Delete(rec);
	return false;
}

/* Milliseconds left before deadline (0: none) for calls where 0 means "no limit". */
static int64_t left_ms(int64_t deadline)
{
	int64_t left;

	if (!deadline)
		return 0;
	left = deadline - kb_now_ms();
	return left > 0 ? left : 1;
}

enum outcome { GOT_RESULT, DIED, TIMED_OUT, CANCELLED };

/* How often on_wait hears that a request still runs. */
#define WAIT_TICK_MS 1000

/*
 * child_read_line until the deadline; with an on_wait hook the wait is cut
 * in slices so that the hook hears about once a second that it goes on.
 */
static int read_reply_line(struct kb_harness_worker *w, struct strbuf *line, int64_t deadline)
{
	for (;;) {
		int64_t slice = left_ms(deadline);
		int rc;

		if (w->on_wait && (!slice || slice > WAIT_TICK_MS))
			slice = WAIT_TICK_MS;
		rc = child_read_line(&w->cp, line, slice);
		if (rc != KB_ETIMEOUT || !w->on_wait || (deadline && kb_now_ms() >= deadline))
			return rc;
		w->on_wait(NULL, -1, -1, w->on_wait_payload);
	}
}

/*
 * A judge that says it measures baselines (progress stage "baselines":
 * none cached, or a stale entry) gets [harness] baseline_timeout_s more,
 * once per request: the candidate's budget, which it enforces itself,
 * does not count them (PROTOCOL.md "Timeouts").
 */
static void allow_baselines(const struct kb_harness_worker *w, struct reply *r, int64_t *deadline)
{
	if (*deadline && !r->baselines_allowed && r->stage && !strcmp(r->stage, "baselines")) {
		r->baselines_allowed = true;
		*deadline += w->h->baseline_timeout_ms;
	}
}

/* Send the request path and read until its result, a death or the deadline. */
static enum outcome exchange(struct kb_harness_worker *w, const char *path, int64_t *deadline,
			     struct reply *r)
{
	struct strbuf line = STRBUF_INIT;
	enum outcome res;
	int rc;

	strbuf_addf(&line, "%s\n", path);
	rc = child_write(&w->cp, line.buf, line.len, left_ms(*deadline));
	w->requests++;
	if (!rc)
		rc = read_reply_line(w, &line, *deadline);
	for (;;) {
		if (rc == KB_ECANCELLED) {
			res = CANCELLED;
			break;
		}
		if (rc == KB_ETIMEOUT) {
			res = TIMED_OUT;
			break;
		}
		if (rc == KB_ETOOBIG) {
			r->ignored++;
		} else if (rc) {
			res = DIED;
			break;
		} else if (take_line(line.buf, w->nonce, path, r)) {
			res = GOT_RESULT;
			break;
		} else {
			allow_baselines(w, r, deadline);
			if (w->on_wait && r->stage)
				w->on_wait(r->stage, r->config, r->seed, w->on_wait_payload);
		}
		if (*deadline && kb_now_ms() >= *deadline) {
			res = TIMED_OUT;
			break;
		}
		rc = read_reply_line(w, &line, *deadline);
	}
	strbuf_release(&line);
	return res;
}

int kb_harness_worker_eval(struct kb_harness_worker *w, const cJSON *request, int64_t timeout_ms,
			   cJSON **evidence, struct kb_harness_run *info)
{
	const char *backend = kb_harness_request_backend(request);
	struct strbuf dir = STRBUF_INIT, path = STRBUF_INIT, msg = STRBUF_INIT, kept = STRBUF_INIT;
	struct reply r = { .config = -1, .seed = -1 };
	int64_t t0 = kb_now_ms(), deadline = timeout_ms > 0 ? t0 + timeout_ms : 0;
	const char *why_check = NULL;
	enum outcome res = DIED;
	bool started = false;
	int rc = -1, exit_code = 0;

	*evidence = NULL;
	if (info)
		memset(info, 0, sizeof(*info));
	if (!*backend)
		backend = "cpu";
	see_request(w, request);
	for (int attempt = 0; attempt < 2; attempt++) {
		if (w->running && !child_alive(&w->cp)) {
			finish_command(&w->cp, 0);
			log_warn("harness worker %s between evaluations (exit code %d); starting another",
				 w->cp.exit_code > 128 ? "died" : "exited", w->cp.exit_code);
			forget(w);
		}
		if (!w->running || strcmp(w->backend, backend) || w->view_stale) {
			rc = kb_harness_worker_start(w, backend);
			if (rc)
				goto out;
			started = true;
		}
		strbuf_reset(&dir);
		strbuf_addf(&dir, "%s/eval-XXXXXX", w->dir);
		if (!mkdtemp(dir.buf)) {
			rc = error_errno("could not create an evaluation directory in '%s'", w->dir);
			strbuf_reset(&dir);
			goto out;
		}
		rc = kb_harness_write_request(request, dir.buf, &path);
		if (rc)
			goto out;
		/* the log tail is this request's */
		strbuf_reset(&w->cp.out);
		strbuf_reset(&w->cp.err);
		w->cp.out_truncated = w->cp.err_truncated = false;
		reply_release(&r);

		res = exchange(w, path.buf, &deadline, &r);
		if (res == DIED) {
			finish_command(&w->cp, DEATH_GRACE_MS);
			exit_code = w->cp.exit_code;
		}
		if (res != DIED || r.records || attempt)
			break;
		/* it died before saying anything about this request: not this candidate's doing */
		kb_harness_log_keep(w->h->log_dir, request, NULL, &w->cp, &kept);
		log_warn("harness worker died before answering (exit code %d%s%s); trying a fresh one",
			 exit_code, kept.len ? ", its output is in " : "", kept.buf);
		forget(w);
		strbuf_reset(&dir);
	}

	if (res == CANCELLED) {
		kill_command(&w->cp);
		rc = KB_ECANCELLED;
		goto out;
	}
	if (res == TIMED_OUT) {
		kill_command(&w->cp);
		why_check = "timeout";
		kb_harness_timeout_message(deadline - t0, r.stage, &msg);
	} else if (res == DIED) {
		if (exit_code) {
			why_check = "crash";
			kb_harness_exit_message(exit_code, r.stage, &msg);
		}
	} else if (r.worker_exit) {
		/* the harness reported the crash itself and leaves: reap it */
		finish_command(&w->cp, EXIT_GRACE_MS);
		exit_code = w->cp.exit_code;
	}
	if (r.ignored)
		log_warn("harness worker: ignored %d record(s) without the worker's nonce or of another request",
			 r.ignored);
	if (info) {
		info->exit_code = exit_code;
		info->timed_out = res == TIMED_OUT;
		info->elapsed_ms = kb_now_ms() - t0;
		info->out_bytes = w->cp.out.len;
		info->err_bytes = w->cp.err.len;
		info->out_truncated = w->cp.out_truncated;
		info->err_truncated = w->cp.err_truncated;
		info->records = r.records;
		info->ignored = r.ignored;
		info->worker_started = started;
	}
	*evidence = kb_harness_settle(r.result, why_check, msg.buf, r.config, r.seed);
	kb_harness_host_pid(*evidence, w->cp.started_pid);
	r.result = NULL;
	kb_harness_log_keep(w->h->log_dir, request, *evidence, &w->cp, NULL);
	rc = 0;
out:
	/* reaped above (death, timeout, stop request, announced exit), or died
	 * right after answering: the next evaluation starts another */
	if (w->running && !child_alive(&w->cp))
		forget(w);
	if (dir.len && kb_rm_rf(dir.buf))
		log_warn("could not remove the evaluation directory '%s'", dir.buf);
	reply_release(&r);
	strbuf_release(&dir);
	strbuf_release(&path);
	strbuf_release(&msg);
	strbuf_release(&kept);
	return rc;
}
