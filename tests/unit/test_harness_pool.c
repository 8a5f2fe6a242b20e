#include "core/common.h"
#include "core/config.h"
#include "core/json.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"
#include "verifier/harness_pool.h"

#include <fcntl.h>
#include <stdarg.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * The pool (harness_pool.h) against stand-in serve-mode workers: /bin/sh
 * scripts (the argv test hook) that answer each request as its "fake"
 * field says: "ok" at once, "die" (SIGKILL after its first record),
 * "gate" (only once the file $GATE exists: the test opens it when every
 * other job is done, so the gated job is in flight during all of them).
 * Each result names the worker's pid and its CUDA_VISIBLE_DEVICES.
 */
static const char fake_worker[] =
	"read nonce\n"
	"while read -r req; do\n"
	"  fake=$(sed -n 's/.*\"fake\":[[:space:]]*\"\\([a-z]*\\)\".*/\\1/p' \"$req\")\n"
	"  echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"trial\\\","
	"\\\"config\\\":0,\\\"seed\\\":0,\\\"request\\\":\\\"$req\\\"}\" >&3\n"
	"  [ \"$fake\" = die ] && kill -KILL $$\n"
	"  if [ \"$fake\" = gate ]; then while [ ! -f \"$GATE\" ]; do sleep 0.02; done; fi\n"
	"  echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"protocol\\\":1,"
	"\\\"verdict\\\":\\\"verified\\\",\\\"reasons\\\":[],\\\"pid\\\":$$,"
	"\\\"cvd\\\":\\\"${CUDA_VISIBLE_DEVICES-unset}\\\",\\\"request\\\":\\\"$req\\\"}\" >&3\n"
	"done\n";

#define MAX_JOBS 8

struct fixture {
	char dir[64];
	char gate[96];
	struct kb_harness h;
	struct kb_harness_pool pool;
	/* one run */
	const char *fake[MAX_JOBS];
	struct kb_pool_job jobs[MAX_JOBS];
	size_t n, done_count;
	cJSON *ev[MAX_JOBS], *pl[MAX_JOBS];
	size_t order[MAX_JOBS];      /* jobs in the order they ended */
	size_t fail_at;              /* the request callback fails for this job; SIZE_MAX: never */
	size_t idle_calls;           /* ops->idle's */
	bool n_gated_skip;           /* job_done does not open the gate */
};

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct kb_config cfg;
	struct strbuf path = STRBUF_INIT;
	int fd;

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	xsnprintf(f->dir, sizeof(f->dir), "/tmp/kb-test-pool-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	xsnprintf(f->gate, sizeof(f->gate), "%s/gate", f->dir);
	setenv("GATE", f->gate, 1);
	kb_config_init(&cfg);
	free(cfg.state_dir);
	cfg.state_dir = xstrdup(f->dir);
	cfg.timeout_s = 60;
	/* protocol mechanics against a stand-in harness: the sandbox is
	 * tested in test_sandbox.c and tests/python/test_sandbox_hostile.py */
	cfg.sandbox_enabled = false;
	kb_harness_init(&f->h);
	assert_int_equal(kb_harness_setup(&f->h, &cfg, "/usr/bin/false", "/nonexistent.py"), 0);
	kb_config_release(&cfg);
	strbuf_addf(&path, "%s/fake_worker.sh", f->dir);
	fd = open(path.buf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(kb_write_all(fd, fake_worker, strlen(fake_worker)), 0);
	close(fd);
	strvec_pushl(&f->h.argv_override, "/bin/sh", path.buf, NULL);
	f->fail_at = SIZE_MAX;
	strbuf_release(&path);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kb_harness_pool_release(&f->pool);
	kb_harness_release(&f->h);
	for (size_t i = 0; i < MAX_JOBS; i++) {
		cJSON_Delete(f->ev[i]);
		cJSON_Delete(f->pl[i]);
	}
	kb_rm_rf(f->dir);
	unsetenv("GATE");
	free(f);
	return 0;
}

static void pool_of(struct fixture *f, const char *devices, size_t per_device)
{
	struct strvec ids = STRVEC_INIT;
	struct strbuf why = STRBUF_INIT;

	if (devices)
		assert_int_equal(kb_config_devices(devices, &ids, &why), 0);
	kb_harness_pool_init(&f->pool, &f->h, &ids, per_device);
	strvec_clear(&ids);
	strbuf_release(&why);
}

/* Jobs with these fake behaviours (NULL-terminated) for backend, tagged "sha-0", "sha-1", ... */
static void add_jobs(struct fixture *f, const char *backend, ...)
{
	static const char *const tags[MAX_JOBS] = { "sha-0", "sha-1", "sha-2", "sha-3",
						   "sha-4", "sha-5", "sha-6", "sha-7" };
	const char *fake;
	va_list ap;

	va_start(ap, backend);
	while ((fake = va_arg(ap, const char *))) {
		assert_true(f->n < MAX_JOBS);
		f->fake[f->n] = fake;
		f->jobs[f->n].backend = backend;
		f->jobs[f->n].tag = tags[f->n];
		f->n++;
	}
	va_end(ap);
}

static int make_request(size_t i, cJSON **request, int64_t *timeout_ms, void *payload)
{
	struct fixture *f = payload;
	cJSON *r;

	if (i == f->fail_at)
		return error("no request for job %zu", i);
	r = cJSON_CreateObject();
	cJSON_AddNumberToObject(r, "protocol", 1);
	cJSON_AddStringToObject(r, "backend", f->jobs[i].backend);
	cJSON_AddStringToObject(r, "fake", f->fake[i]);
	*request = r;
	*timeout_ms = 60000;
	return 0;
}

static void job_done(size_t i, cJSON *evidence, cJSON *placement, void *payload)
{
	struct fixture *f = payload;
	size_t gated = 0;

	assert_null(f->ev[i]);
	f->ev[i] = evidence;
	f->pl[i] = placement;
	f->order[f->done_count++] = i;
	for (size_t j = 0; j < f->n; j++)
		gated += !strcmp(f->fake[j], "gate");
	/* every job but the gated ones ended: let those answer */
	if (!f->n_gated_skip && f->done_count == f->n - gated) {
		int fd = open(f->gate, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

		assert_true(fd >= 0);
		close(fd);
	}
}

static int run(struct fixture *f)
{
	struct kb_pool_ops ops = { make_request, job_done, NULL, f, NULL, NULL };

	return kb_harness_pool_run(&f->pool, f->jobs, f->n, &ops);
}

/* A string member, "" when missing: assert_string_equal wants a string. */
static const char *str(const cJSON *obj, const char *key)
{
	const char *s = kb_json_str(obj, key);

	return s ? s : "";
}

static int num(const cJSON *obj, const char *key)
{
	return (int)kb_json_i64(obj, key, -1);
}

/* How often worker (1-based) appears in placement's shared_with. */
static int shared_with(const cJSON *placement, int worker)
{
	const cJSON *it;
	int n = 0;

	cJSON_ArrayForEach(it, cJSON_GetObjectItem(placement, "shared_with"))
		n += num(it, "worker") == worker;
	return n;
}

static void test_devices_from_config_env_or_torch(void **state)
{
	struct strvec d = STRVEC_INIT;

	(void)state;
	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	kb_harness_pool_devices("1, GPU-ab12", "0", 8, &d);
	assert_int_equal(d.nr, 2);
	assert_string_equal(d.v[0], "1");
	assert_string_equal(d.v[1], "GPU-ab12");
	strvec_clear(&d);
	kb_harness_pool_devices("auto", "2,3", 8, &d);      /* the bot's CUDA_VISIBLE_DEVICES */
	assert_int_equal(d.nr, 2);
	assert_string_equal(d.v[1], "3");
	strvec_clear(&d);
	kb_harness_pool_devices("auto", NULL, 3, &d);       /* every GPU torch sees */
	assert_int_equal(d.nr, 3);
	assert_string_equal(d.v[2], "2");
	strvec_clear(&d);
	kb_harness_pool_devices("auto", "", 3, &d);         /* the bot sees none */
	assert_int_equal(d.nr, 0);
	kb_harness_pool_devices("auto", "0,x", 3, &d);      /* not ids: not pinned */
	assert_int_equal(d.nr, 0);
	kb_harness_pool_devices("auto", NULL, 0, &d);       /* no GPU */
	assert_int_equal(d.nr, 0);
}

static void test_bad_device_lists(void **state)
{
	struct strvec d = STRVEC_INIT;
	struct strbuf why = STRBUF_INIT;

	(void)state;
	assert_int_equal(kb_config_devices("0,1,0", &d, &why), -1);
	assert_non_null(strstr(why.buf, "device '0' is listed twice"));
	strvec_clear(&d);
	strbuf_reset(&why);
	assert_int_equal(kb_config_devices("0,,1", &d, &why), -1);
	assert_non_null(strstr(why.buf, "'' is not a device"));
	strvec_clear(&d);
	strbuf_reset(&why);
	assert_int_equal(kb_config_devices("cuda:1", &d, &why), -1);
	assert_non_null(strstr(why.buf, "'cuda:1' is not a device"));
	strvec_clear(&d);
	strbuf_release(&why);
}

/* Two workers on one device: both take jobs at once, and each evidence says so. */
static void test_two_workers_share_one_device(void **state)
{
	struct fixture *f = *state;
	bool used[3] = { false, false, false };

	pool_of(f, NULL, 2);
	assert_int_equal(f->pool.nr, 2);
	add_jobs(f, "cpu", "gate", "ok", "ok", "ok", NULL);
	assert_int_equal(run(f), 0);
	assert_int_equal(f->done_count, 4);
	/* the gated job ends last: the others ran while it was in flight */
	assert_int_equal(f->order[3], 0);
	for (size_t i = 0; i < 4; i++) {
		int w = num(f->pl[i], "worker");

		assert_string_equal(kb_evidence_verdict(f->ev[i]), "verified");
		assert_string_equal(str(f->pl[i], "device"), "cpu");
		assert_int_equal(num(f->pl[i], "workers_on_device"), 2);
		assert_true(w == 1 || w == 2);
		used[w] = true;
	}
	assert_true(used[1] && used[2]);
	/* the gated job's worker served only it; the three others shared the device with it */
	assert_int_equal(num(f->pl[0], "worker"), 1);
	assert_int_equal(shared_with(f->pl[0], 2), 3);
	for (size_t i = 1; i < 4; i++) {
		const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(f->pl[i], "shared_with"), 0);

		assert_int_equal(num(f->pl[i], "worker"), 2);
		assert_int_equal(shared_with(f->pl[i], 1), 1);
		assert_string_equal(str(first, "kernel_sha256"), "sha-0");
	}
}

/* The idle callback: the gate opened on its first call. */
static void open_gate(void *arg)
{
	struct fixture *f = arg;

	if (!f->idle_calls++) {
		int fd = open(f->gate, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

		assert_true(fd >= 0);
		close(fd);
	}
}

/*
 * ops->idle runs while a worker is busy (the search takes its model
 * replies there): the only job answers once the gate exists, and only the
 * idle callback opens it, so the run ends only if it was called meanwhile.
 */
static void test_idle_called_while_a_worker_is_busy(void **state)
{
	struct fixture *f = *state;
	struct kb_pool_ops ops = { make_request, job_done, NULL, f, open_gate, f };

	pool_of(f, NULL, 1);
	add_jobs(f, "cpu", "gate", NULL);
	f->n_gated_skip = true;
	assert_int_equal(kb_harness_pool_run(&f->pool, f->jobs, f->n, &ops), 0);
	assert_int_equal(f->done_count, 1);
	assert_string_equal(kb_evidence_verdict(f->ev[0]), "verified");
	assert_true(f->idle_calls >= 1);
}

/* A worker killed mid-request: that job is a crash, only that worker starts again. */
static void test_dead_worker_restarted_alone(void **state)
{
	struct fixture *f = *state;
	const cJSON *r;

	pool_of(f, NULL, 2);
	add_jobs(f, "cpu", "die", "gate", "ok", "ok", NULL);
	assert_int_equal(run(f), 0);
	r = cJSON_GetArrayItem(cJSON_GetObjectItem(f->ev[0], "reasons"), 0);
	assert_string_equal(kb_evidence_verdict(f->ev[0]), "rejected");
	assert_string_equal(str(r, "check"), "crash");
	assert_non_null(strstr(str(r, "message"), "SIGKILL"));
	for (size_t i = 1; i < 4; i++)
		assert_string_equal(kb_evidence_verdict(f->ev[i]), "verified");
	/* worker 1 died and was started again for the two jobs after it;
	 * worker 2 held the gated job throughout, in one process */
	assert_int_equal(num(f->pl[0], "worker"), 1);
	assert_int_equal(num(f->pl[1], "worker"), 2);
	assert_int_equal(num(f->pl[2], "worker"), 1);
	assert_int_equal(num(f->pl[3], "worker"), 1);
	assert_int_equal(f->pool.w[0].starts, 2);
	assert_int_equal(f->pool.w[1].starts, 1);
	assert_int_equal(num(f->ev[2], "pid"), num(f->ev[3], "pid"));
	assert_int_not_equal(num(f->ev[2], "pid"), num(f->ev[1], "pid"));
	/* the device was shared with the dead one and its successors */
	assert_int_equal(shared_with(f->pl[1], 1), 3);
}

/* One worker per device, each seeing only its own; cpu work only on the first device's. */
static void test_pinned_devices(void **state)
{
	struct fixture *f = *state;

	pool_of(f, "3,5", 1);
	assert_int_equal(f->pool.nr, 2);
	/* the first two are sent together, before either answers */
	add_jobs(f, "cuda", "ok", "ok", NULL);
	add_jobs(f, "cpu", "ok", NULL);
	assert_int_equal(run(f), 0);
	assert_int_equal(num(f->pl[0], "worker"), 1);
	assert_string_equal(str(f->pl[0], "device"), "3");
	assert_string_equal(str(f->ev[0], "cvd"), "3");
	assert_int_equal(num(f->pl[1], "worker"), 2);
	assert_string_equal(str(f->pl[1], "device"), "5");
	assert_string_equal(str(f->ev[1], "cvd"), "5");
	/* in flight together, but on two devices: neither shared */
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(f->pl[0], "shared_with")), 0);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(f->pl[1], "shared_with")), 0);
	/* the cpu job waited for the first device's worker, which is not pinned for it */
	assert_int_equal(num(f->pl[2], "worker"), 1);
	assert_string_equal(str(f->pl[2], "device"), "cpu");
	assert_string_equal(str(f->ev[2], "cvd"), "unset");
}

/* A request that cannot be made stops the run and kills what is in flight. */
static void test_failed_request_stops_run(void **state)
{
	struct fixture *f = *state;

	pool_of(f, NULL, 2);
	add_jobs(f, "cpu", "gate", "ok", NULL);
	f->fail_at = 1;
	assert_int_equal(run(f), -1);
	assert_int_equal(f->done_count, 0);
	assert_int_equal(kb_harness_worker_pid(&f->pool.w[0]), 0);
	assert_null(f->pool.w[0].flight);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_devices_from_config_env_or_torch),
		cmocka_unit_test(test_bad_device_lists),
		cmocka_unit_test_setup_teardown(test_two_workers_share_one_device, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_worker_restarted_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_devices, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_request_stops_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_called_while_a_worker_is_busy, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
