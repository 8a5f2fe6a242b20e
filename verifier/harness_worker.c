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
	kb_harness_worker_abandon(w);
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
	if (w->device && !strcmp(backend, "cuda"))
		strvec_pushf(&cp->env, "CUDA_VISIBLE_DEVICES=%s", w->device);
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

enum outcome { PENDING, GOT_RESULT, DIED, TIMED_OUT, CANCELLED, FAILED };

/* The request in flight, from kb_harness_worker_send to kb_harness_worker_collect. */
struct kb_harness_flight {
	cJSON *request;           /* a copy: a second attempt and the log need it */
	struct strbuf dir, path;  /* its eval-XXXXXX dir (removed at the end) and request.json */
	struct reply r;
	int64_t t0, deadline;     /* deadline 0: none */
	int attempt;
	bool started;             /* a worker was started for it */
	enum outcome res;
	int exit_code;            /* the worker's, when it ended during the request */
	int rc;                   /* FAILED: -1 */
};

/* How often on_wait hears that a request still runs. */
#define WAIT_TICK_MS 1000

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

static void flight_free(struct kb_harness_worker *w)
{
	struct kb_harness_flight *fl = w->flight;

	if (!fl)
		return;
	if (fl->dir.len && kb_is_dir(fl->dir.buf) && kb_rm_rf(fl->dir.buf))
		log_warn("could not remove the evaluation directory '%s'", fl->dir.buf);
	cJSON_Delete(fl->request);
	strbuf_release(&fl->dir);
	strbuf_release(&fl->path);
	reply_release(&fl->r);
	free(fl);
	w->flight = NULL;
}

static void take_rc(struct kb_harness_worker *w, struct kb_harness_flight *fl, int rc,
		    const struct strbuf *line);

/*
 * Start a worker when none fit runs, write the request into a fresh dir
 * of the worker's and send its path; fl->res says FAILED or CANCELLED
 * when that could not be done, and what the write met otherwise.
 */
static void send_attempt(struct kb_harness_worker *w, struct kb_harness_flight *fl)
{
	const char *backend = kb_harness_request_backend(fl->request);
	struct strbuf line = STRBUF_INIT;
	int rc;

	fl->res = PENDING;
	if (!*backend)
		backend = "cpu";
	if (w->running && !child_alive(&w->cp)) {
		finish_command(&w->cp, 0);
		log_warn("harness worker %s between evaluations (exit code %d); starting another",
			 w->cp.exit_code > 128 ? "died" : "exited", w->cp.exit_code);
		forget(w);
	}
	if (!w->running || strcmp(w->backend, backend) || w->view_stale) {
		rc = kb_harness_worker_start(w, backend);
		if (rc)
			goto fail;
		fl->started = true;
	}
	strbuf_reset(&fl->dir);
	strbuf_addf(&fl->dir, "%s/eval-XXXXXX", w->dir);
	if (!mkdtemp(fl->dir.buf)) {
		rc = error_errno("could not create an evaluation directory in '%s'", w->dir);
		strbuf_reset(&fl->dir);
		goto fail;
	}
	rc = kb_harness_write_request(fl->request, fl->dir.buf, &fl->path);
	if (rc)
		goto fail;
	/* the log tail is this request's */
	strbuf_reset(&w->cp.out);
	strbuf_reset(&w->cp.err);
	w->cp.out_truncated = w->cp.err_truncated = false;
	reply_release(&fl->r);
	strbuf_addf(&line, "%s\n", fl->path.buf);
	rc = child_write(&w->cp, line.buf, line.len, left_ms(fl->deadline));
	w->requests++;
	strbuf_release(&line);
	if (rc == KB_ETIMEOUT)
		fl->res = TIMED_OUT;
	else if (rc)
		take_rc(w, fl, rc, NULL);
	return;
fail:
	strbuf_release(&line);
	fl->res = rc == KB_ECANCELLED ? CANCELLED : FAILED;
	fl->rc = rc;
}

/* The worker died during fl: a death before its first record is not the candidate's doing. */
static void died(struct kb_harness_worker *w, struct kb_harness_flight *fl)
{
	struct strbuf kept = STRBUF_INIT;

	finish_command(&w->cp, DEATH_GRACE_MS);
	fl->exit_code = w->cp.exit_code;
	if (fl->r.records || fl->attempt) {
		fl->res = DIED;
		return;
	}
	/* something left over from an earlier candidate, or a broken start:
	 * a fresh worker gets the request once more */
	kb_harness_log_keep(w->h->log_dir, fl->request, NULL, &w->cp, &kept);
	log_warn("harness worker died before answering (exit code %d%s%s); trying a fresh one",
		 fl->exit_code, kept.len ? ", its output is in " : "", kept.buf);
	strbuf_release(&kept);
	forget(w);                /* its dir, and the request's in it, are gone */
	strbuf_reset(&fl->dir);
	fl->attempt++;
	send_attempt(w, fl);
}

/* What child_read_line (or the request's write) returned, applied to fl. */
static void take_rc(struct kb_harness_worker *w, struct kb_harness_flight *fl, int rc,
		    const struct strbuf *line)
{
	if (rc == KB_ECANCELLED) {
		fl->res = CANCELLED;
	} else if (rc == KB_ETOOBIG) {
		fl->r.ignored++;
	} else if (rc) {
		died(w, fl);
	} else if (take_line(line->buf, w->nonce, fl->path.buf, &fl->r)) {
		fl->res = GOT_RESULT;
	} else {
		allow_baselines(w, &fl->r, &fl->deadline);
		if (w->on_wait && fl->r.stage)
			w->on_wait(fl->r.stage, fl->r.config, fl->r.seed, w->on_wait_payload);
	}
}

int kb_harness_worker_send(struct kb_harness_worker *w, const cJSON *request, int64_t timeout_ms)
{
	struct kb_harness_flight *fl;
	cJSON *ev = NULL;
	int rc;

	if (w->flight)
		return error("harness worker: a request is already in flight");
	fl = xcalloc(1, sizeof(*fl));
	strbuf_init(&fl->dir, 0);
	strbuf_init(&fl->path, 0);
	fl->r.config = fl->r.seed = -1;
	fl->request = cJSON_Duplicate(request, true);
	if (!fl->request)
		die("out of memory copying the request");
	fl->t0 = kb_now_ms();
	fl->deadline = timeout_ms > 0 ? fl->t0 + timeout_ms : 0;
	w->flight = fl;
	see_request(w, request);
	send_attempt(w, fl);
	if (fl->res != FAILED && fl->res != CANCELLED)
		return 0;
	rc = kb_harness_worker_collect(w, &ev, NULL);
	cJSON_Delete(ev);
	return rc;
}

int kb_harness_worker_step(struct kb_harness_worker *w, int64_t wait_ms)
{
	struct kb_harness_flight *fl = w->flight;
	struct strbuf line = STRBUF_INIT;
	int64_t until = wait_ms > 0 ? kb_now_ms() + wait_ms : 0;

	if (!fl)
		return error("harness worker: no request in flight");
	while (fl->res == PENDING) {
		int64_t now = kb_now_ms(), limit = until ? (until > now ? until - now : 1) : 0;
		int64_t left = left_ms(fl->deadline);
		int rc;

		if (left && (!limit || left < limit))
			limit = left;
		rc = child_read_line(&w->cp, &line, limit);
		now = kb_now_ms();
		if (rc != KB_ETIMEOUT)
			take_rc(w, fl, rc, &line);
		if (fl->res == PENDING && fl->deadline && now >= fl->deadline)
			fl->res = TIMED_OUT;
		else if (fl->res == PENDING && rc == KB_ETIMEOUT && until && now >= until)
			break;
	}
	strbuf_release(&line);
	return fl->res != PENDING;
}

size_t kb_harness_worker_wait_fds(const struct kb_harness_worker *w, int *fds, size_t max)
{
	return w->running ? child_wait_fds(&w->cp, fds, max) : 0;
}

void kb_harness_worker_abandon(struct kb_harness_worker *w)
{
	if (!w->flight)
		return;
	if (w->running)
		kill_command(&w->cp);
	forget(w);
	flight_free(w);
}

/* The evidence of a request that ended, as kb_harness_call makes it. */
static cJSON *flight_evidence(struct kb_harness_worker *w, struct kb_harness_flight *fl,
			      struct kb_harness_run *info)
{
	struct strbuf msg = STRBUF_INIT;
	const char *why_check = NULL;
	cJSON *ev;

	if (fl->res == TIMED_OUT) {
		kill_command(&w->cp);
		why_check = "timeout";
		kb_harness_timeout_message(fl->deadline - fl->t0, fl->r.stage, &msg);
	} else if (fl->res == DIED) {
		if (fl->exit_code) {
			why_check = "crash";
			kb_harness_exit_message(fl->exit_code, fl->r.stage, &msg);
		}
	} else if (fl->r.worker_exit) {
		/* the harness reported the crash itself and leaves: reap it */
		finish_command(&w->cp, EXIT_GRACE_MS);
		fl->exit_code = w->cp.exit_code;
	}
	if (fl->r.ignored)
		log_warn("harness worker: ignored %d record(s) without the worker's nonce or of another request",
			 fl->r.ignored);
	if (info) {
		info->exit_code = fl->exit_code;
		info->timed_out = fl->res == TIMED_OUT;
		info->elapsed_ms = kb_now_ms() - fl->t0;
		info->out_bytes = w->cp.out.len;
		info->err_bytes = w->cp.err.len;
		info->out_truncated = w->cp.out_truncated;
		info->err_truncated = w->cp.err_truncated;
		info->records = fl->r.records;
		info->ignored = fl->r.ignored;
		info->worker_started = fl->started;
	}
	ev = kb_harness_settle(fl->r.result, why_check, msg.buf, fl->r.config, fl->r.seed);
	fl->r.result = NULL;
	kb_harness_host_pid(ev, w->cp.started_pid);
	kb_harness_log_keep(w->h->log_dir, fl->request, ev, &w->cp, NULL);
	strbuf_release(&msg);
	return ev;
}

int kb_harness_worker_collect(struct kb_harness_worker *w, cJSON **evidence, struct kb_harness_run *info)
{
	struct kb_harness_flight *fl = w->flight;
	int rc = 0;

	*evidence = NULL;
	if (info)
		memset(info, 0, sizeof(*info));
	if (!fl)
		return error("harness worker: no request in flight");
	if (fl->res == PENDING)
		return error("harness worker: the request has no answer yet");
	if (fl->res == FAILED) {
		rc = fl->rc;
	} else if (fl->res == CANCELLED) {
		kill_command(&w->cp);
		rc = KB_ECANCELLED;
	} else {
		*evidence = flight_evidence(w, fl, info);
	}
	/* reaped above (death, timeout, stop request, announced exit), or died
	 * right after answering: the next evaluation starts another */
	if (w->running && !child_alive(&w->cp))
		forget(w);
	flight_free(w);
	return rc;
}

int kb_harness_worker_eval(struct kb_harness_worker *w, const cJSON *request, int64_t timeout_ms,
			   cJSON **evidence, struct kb_harness_run *info)
{
	int rc;

	*evidence = NULL;
	if (info)
		memset(info, 0, sizeof(*info));
	rc = kb_harness_worker_send(w, request, timeout_ms);
	if (rc)
		return rc;
	/* with a hook, about once a second it hears that the request goes on */
	while (!(rc = kb_harness_worker_step(w, w->on_wait ? WAIT_TICK_MS : 0)))
		if (w->on_wait)
			w->on_wait(NULL, -1, -1, w->on_wait_payload);
	if (rc < 0) {
		kb_harness_worker_abandon(w);
		return rc;
	}
	return kb_harness_worker_collect(w, evidence, info);
}
