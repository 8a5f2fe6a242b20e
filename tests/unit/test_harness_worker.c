#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"
#include "verifier/harness_worker.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * The worker against fake serve-mode harnesses: /bin/sh scripts (through
 * the argv test hook) that read the nonce, then request paths, and answer
 * each on descriptor 3 as the request's "fake" field says.
 */

struct fixture {
	char dir[64];
	struct kb_harness h;
	struct kb_harness_worker w;
};

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/*
 * Answers every request: a progress record, one for another request (to
 * be ignored), a log line, then the result with what it checked. "fake"
 * in the request: "die" (SIGSEGV after the progress), "hang", "quit"
 * (result with worker_exit, then exit 3), "once" (exit 5 before any
 * record the first time only: a marker file remembers), "slow" (3 s
 * before the result) and "slowbase" (the same after a progress record
 * saying it measures baselines).
 */
static const char fake_worker[] =
	"read nonce\n"
	"n=0\n"
	"while read -r req; do\n"
	"  n=$((n + 1))\n"
	"  fake=$(sed -n 's/.*\"fake\":[[:space:]]*\"\\([a-z]*\\)\".*/\\1/p' \"$req\")\n"
	"  if [ \"$fake\" = once ] && [ ! -f \"$MARK\" ]; then : > \"$MARK\"; exit 5; fi\n"
	"  msg=ok\n"
	"  [ \"$1\" = --serve ] || msg=\"bad argv $1\"\n"
	"  [ \"$(pwd)\" = \"$TMPDIR\" ] || msg=\"cwd is not TMPDIR\"\n"
	"  [ \"$(dirname \"$(dirname \"$req\")\")\" = \"$TMPDIR\" ] || msg=\"request not under TMPDIR\"\n"
	"  grep -q \"\\\"workdir\\\":.*\\\"$(dirname \"$req\")\\\"\" \"$req\" || msg=\"workdir is not the request's dir\"\n"
	"  [ \"$KB_RESULT_FD\" = 3 ] || msg=\"KB_RESULT_FD is '$KB_RESULT_FD'\"\n"
	"  echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"trial\\\",\\\"config\\\":1,\\\"seed\\\":2,\\\"request\\\":\\\"$req\\\"}\" >&3\n"
	"  echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"verdict\\\":\\\"verified\\\",\\\"request\\\":\\\"/elsewhere/request.json\\\"}\" >&3\n"
	"  echo \"log of request $n\"\n"
	"  if [ \"$fake\" = die ]; then echo 'boom: an illegal memory access' >&2; kill -SEGV $$; fi\n"
	"  if [ \"$fake\" = hang ]; then sleep 30 & wait; fi\n"
	"  if [ \"$fake\" = slowbase ]; then\n"
	"    echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"baselines\\\",\\\"config\\\":0,\\\"request\\\":\\\"$req\\\"}\" >&3\n"
	"  fi\n"
	"  case \"$fake\" in slow*) sleep 3;; esac\n"
	"  ex=false; [ \"$fake\" = quit ] && ex=true\n"
	"  echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"protocol\\\":1,\\\"verdict\\\":\\\"verified\\\","
	"\\\"reasons\\\":[],\\\"probe\\\":\\\"$msg\\\",\\\"pid\\\":$$,\\\"seq\\\":$n,\\\"mem\\\":\\\"$(ulimit -v)\\\","
	"\\\"worker_exit\\\":$ex,\\\"request\\\":\\\"$req\\\"}\" >&3\n"
	"  [ \"$fake\" = quit ] && exit 3\n"
	"done\n"
	"exit 0\n";

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct kb_config cfg;
	struct strbuf path = STRBUF_INIT, mark = STRBUF_INIT;

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	xsnprintf(f->dir, sizeof(f->dir), "/tmp/kb-test-worker-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	kb_config_init(&cfg);
	free(cfg.state_dir);
	cfg.state_dir = xstrdup(f->dir);
	cfg.timeout_s = 20;
	cfg.memory_limit_mb = 1024;
	/* protocol mechanics against a stand-in harness that reports its own
	 * pid and writes marks outside its dir: the sandbox is tested in
	 * test_sandbox.c and tests/python/test_sandbox_hostile.py */
	cfg.sandbox_enabled = false;
	kb_harness_init(&f->h);
	assert_int_equal(kb_harness_setup(&f->h, &cfg, "/usr/bin/false", "/nonexistent.py"), 0);
	kb_config_release(&cfg);

	strbuf_addf(&path, "%s/fake_worker.sh", f->dir);
	write_file(path.buf, fake_worker);
	strbuf_addf(&mark, "%s/mark", f->dir);
	setenv("MARK", mark.buf, 1);
	strvec_pushl(&f->h.argv_override, "/bin/sh", path.buf, NULL);
	kb_harness_worker_init(&f->w, &f->h);
	strbuf_release(&path);
	strbuf_release(&mark);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kb_harness_worker_release(&f->w);
	kb_harness_release(&f->h);
	kb_rm_rf(f->dir);
	unsetenv("MARK");
	free(f);
	return 0;
}

static cJSON *request(const char *fake, const char *backend)
{
	cJSON *r = cJSON_CreateObject();

	cJSON_AddNumberToObject(r, "protocol", 1);
	cJSON_AddStringToObject(r, "mode", "verify");
	cJSON_AddStringToObject(r, "backend", backend);
	cJSON_AddStringToObject(r, "fake", fake);
	return r;
}

/* Evaluate a request with this fake behaviour; the caller frees the evidence. */
static cJSON *eval(struct fixture *f, const char *fake, int64_t timeout_ms, struct kb_harness_run *info)
{
	cJSON *req = request(fake, "cpu"), *ev = NULL;

	assert_int_equal(kb_harness_worker_eval(&f->w, req, timeout_ms, &ev, info), 0);
	assert_non_null(ev);
	cJSON_Delete(req);
	return ev;
}

static const char *str(const cJSON *obj, const char *key)
{
	const cJSON *it = cJSON_GetObjectItem(obj, key);

	return cJSON_IsString(it) ? it->valuestring : "";
}

static int num(const cJSON *obj, const char *key)
{
	const cJSON *it = cJSON_GetObjectItem(obj, key);

	return cJSON_IsNumber(it) ? it->valueint : -1;
}

static const cJSON *first_reason(const cJSON *ev)
{
	return cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "reasons"), 0);
}

/* The text of the operator's log the evidence points to ("" when none). */
static void oplog(const cJSON *ev, struct strbuf *text)
{
	const char *path = str(ev, "operator_log");

	strbuf_reset(text);
	if (*path)
		assert_int_equal(strbuf_read_file(text, path, 0), 0);
}

/* Entries of dir whose name starts with prefix. */
static int entries(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			n++;
	closedir(d);
	return n;
}

static bool gone(pid_t pid)
{
	for (int i = 0; i < 200; i++) {
		if (kill(pid, 0) && errno == ESRCH)
			return true;
		usleep(10000);
	}
	return false;
}

static void test_two_requests_one_worker(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	struct strbuf log = STRBUF_INIT;
	cJSON *ev1, *ev2;
	pid_t pid;

	ev1 = eval(f, "ok", 10000, &info);
	assert_string_equal(kb_evidence_verdict(ev1), "verified");
	assert_string_equal(str(ev1, "probe"), "ok");
	assert_true(info.worker_started);
	assert_int_equal(info.records, 2);
	assert_int_equal(info.ignored, 1);     /* the other request's result */
	assert_null(cJSON_GetObjectItem(ev1, "nonce"));
	assert_null(cJSON_GetObjectItem(ev1, "request"));
	assert_null(cJSON_GetObjectItem(ev1, "worker_exit"));
	assert_string_equal(str(ev1, "mem"), "1048576"); /* cpu: RLIMIT_AS */
	/* what it printed is in the operator's log, not in the evidence */
	assert_null(cJSON_GetObjectItem(ev1, "log_tail"));
	oplog(ev1, &log);
	assert_non_null(strstr(log.buf, "log of request 1"));
	assert_non_null(strstr(log.buf, "still running"));
	pid = kb_harness_worker_pid(&f->w);
	assert_true(pid > 0);
	assert_int_equal(num(ev1, "pid"), pid);

	ev2 = eval(f, "ok", 10000, &info);
	assert_string_equal(kb_evidence_verdict(ev2), "verified");
	assert_string_equal(str(ev2, "probe"), "ok");
	assert_false(info.worker_started);
	assert_int_equal(num(ev2, "pid"), pid);  /* the same process */
	assert_int_equal(num(ev2, "seq"), 2);
	/* each request's log holds its own output only */
	oplog(ev2, &log);
	assert_non_null(strstr(log.buf, "log of request 2"));
	assert_null(strstr(log.buf, "log of request 1"));
	assert_string_not_equal(str(ev1, "operator_log"), str(ev2, "operator_log"));
	assert_int_equal(f->w.starts, 1);
	/* request dirs are removed after each answer */
	assert_int_equal(entries(f->w.dir, "eval-"), 0);
	cJSON_Delete(ev1);
	cJSON_Delete(ev2);

	/* stop: EOF, exit 0, its dir removed */
	kb_harness_worker_stop(&f->w);
	assert_true(gone(pid));
	assert_int_equal(kb_harness_worker_pid(&f->w), 0);
	assert_int_equal(entries(f->h.tmp_root, "kb-worker-"), 0);
	strbuf_release(&log);
}

static void test_worker_dies_mid_request(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	struct strbuf log = STRBUF_INIT;
	const cJSON *r;
	cJSON *ev;
	pid_t pid;

	ev = eval(f, "ok", 10000, NULL);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	pid = kb_harness_worker_pid(&f->w);
	cJSON_Delete(ev);

	ev = eval(f, "die", 10000, &info);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	r = first_reason(ev);
	assert_string_equal(str(r, "check"), "crash");
	assert_non_null(strstr(str(r, "message"), "SIGSEGV"));
	assert_non_null(strstr(str(r, "message"), "during trial"));
	/* its stderr went to the operator's log */
	assert_null(strstr(str(r, "message"), "illegal memory access"));
	oplog(ev, &log);
	assert_non_null(strstr(log.buf, "boom: an illegal memory access"));
	assert_non_null(strstr(log.buf, "process: exit code 139"));
	assert_int_equal(num(r, "config"), 1);
	assert_int_equal(num(r, "seed"), 2);
	assert_int_equal(info.exit_code, 128 + SIGSEGV);
	assert_int_equal(kb_harness_worker_pid(&f->w), 0);
	assert_true(gone(pid));
	assert_int_equal(entries(f->h.tmp_root, "kb-worker-"), 0);
	cJSON_Delete(ev);

	/* the next evaluation gets a fresh worker */
	ev = eval(f, "ok", 10000, &info);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_true(info.worker_started);
	assert_int_equal(num(ev, "seq"), 1);
	assert_true(num(ev, "pid") != pid);
	assert_int_equal(f->w.starts, 2);
	cJSON_Delete(ev);
	strbuf_release(&log);
}

static void test_hung_worker_killed(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	int64_t t0;
	cJSON *ev;
	pid_t pid;

	ev = eval(f, "ok", 10000, NULL);
	pid = kb_harness_worker_pid(&f->w);
	cJSON_Delete(ev);

	t0 = kb_now_ms();
	ev = eval(f, "hang", 1000, &info);
	assert_true(kb_now_ms() - t0 < 8000);
	assert_true(info.timed_out);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	assert_string_equal(str(first_reason(ev), "check"), "timeout");
	assert_non_null(strstr(str(first_reason(ev), "message"), "exceeded 1 s"));
	assert_non_null(strstr(str(first_reason(ev), "message"), "trial"));
	assert_int_equal(num(first_reason(ev), "config"), 1);
	/* the whole group is gone, the sleeping grandchild included */
	assert_true(gone(pid));
	assert_true(gone(-pid));
	assert_int_equal(kb_harness_worker_pid(&f->w), 0);
	cJSON_Delete(ev);

	ev = eval(f, "ok", 10000, &info);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_true(info.worker_started);
	assert_int_equal(f->w.starts, 2);
	cJSON_Delete(ev);
}

/*
 * The bot's kill waits [harness] baseline_timeout_s longer for a judge
 * that says it measures baselines (PROTOCOL.md "Timeouts"), and only then.
 */
static void test_baselines_get_their_allowance(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *ev;

	f->h.baseline_timeout_ms = 60000;
	ev = eval(f, "slowbase", 1000, &info);
	assert_false(info.timed_out);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	cJSON_Delete(ev);

	ev = eval(f, "slow", 1000, &info);
	assert_true(info.timed_out);
	assert_string_equal(str(first_reason(ev), "check"), "timeout");
	cJSON_Delete(ev);
}

static void test_worker_exit_announced(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *ev;
	pid_t pid;

	ev = eval(f, "quit", 10000, &info);
	/* the verdict stands: the exit was announced, not a crash */
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(ev, "reasons")), 0);
	assert_int_equal(info.exit_code, 3);
	assert_int_equal(kb_harness_worker_pid(&f->w), 0);
	pid = num(ev, "pid");
	assert_true(gone(pid));
	cJSON_Delete(ev);

	ev = eval(f, "ok", 10000, &info);
	assert_true(info.worker_started);
	assert_true(num(ev, "pid") != pid);
	cJSON_Delete(ev);
}

static void test_death_before_first_record_retried(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	struct strbuf log = STRBUF_INIT;
	cJSON *ev;

	/* dies silently once: the request goes to a fresh worker */
	ev = eval(f, "once", 10000, &info);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_int_equal(f->w.starts, 2);
	cJSON_Delete(ev);

	/* a worker that cannot start at all: the second death is reported */
	strvec_clear(&f->h.argv_override);
	strvec_pushl(&f->h.argv_override, "/bin/sh", "-c", "echo 'no torch here' >&2; exit 4", NULL);
	kb_harness_worker_stop(&f->w);
	ev = eval(f, "ok", 10000, &info);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	assert_string_equal(str(first_reason(ev), "check"), "crash");
	assert_non_null(strstr(str(first_reason(ev), "message"), "exited with code 4"));
	/* why it could not start is the operator's to read */
	assert_null(strstr(str(first_reason(ev), "message"), "no torch here"));
	oplog(ev, &log);
	assert_non_null(strstr(log.buf, "no torch here"));
	assert_int_equal(f->w.starts, 4);
	cJSON_Delete(ev);
	strbuf_release(&log);
}

static void test_backend_change_restarts(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *req = request("ok", "cuda"), *ev = NULL;
	pid_t pid;

	assert_int_equal(kb_harness_worker_start(&f->w, "cpu"), 0);
	pid = kb_harness_worker_pid(&f->w);
	/* started already: nothing to do */
	assert_int_equal(kb_harness_worker_start(&f->w, "cpu"), 0);
	assert_int_equal(kb_harness_worker_pid(&f->w), pid);

	assert_int_equal(kb_harness_worker_eval(&f->w, req, 10000, &ev, &info), 0);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_true(info.worker_started);
	assert_true(num(ev, "pid") != pid);
	assert_string_equal(str(ev, "mem"), "unlimited"); /* cuda: no RLIMIT_AS */
	assert_string_equal(f->w.backend, "cuda");
	assert_true(gone(pid));
	cJSON_Delete(ev);
	cJSON_Delete(req);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_two_requests_one_worker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_worker_dies_mid_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hung_worker_killed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_baselines_get_their_allowance, setup, teardown),
		cmocka_unit_test_setup_teardown(test_worker_exit_announced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_death_before_first_record_retried, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backend_change_restarts, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
