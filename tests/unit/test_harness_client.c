#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * The client against fake harnesses: shell scripts run by /bin/sh through
 * the argv test hook. Each script reads the nonce from stdin as the real
 * harness does and writes records to descriptor 3.
 */

struct fixture {
	char dir[64];
	char tmp_root[96];
	struct kb_harness h;
	cJSON *request;
};

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct kb_config cfg;

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	xsnprintf(f->dir, sizeof(f->dir), "/tmp/kb-test-harness-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	kb_config_init(&cfg);
	free(cfg.state_dir);
	cfg.state_dir = xstrdup(f->dir);
	cfg.timeout_s = 20;
	cfg.memory_limit_mb = 1024;
	kb_harness_init(&f->h);
	assert_int_equal(kb_harness_setup(&f->h, &cfg, "/usr/bin/false", "/nonexistent.py"), 0);
	xsnprintf(f->tmp_root, sizeof(f->tmp_root), "%s/tmp", f->dir);
	assert_true(!strcmp(f->h.tmp_root, f->tmp_root) || strstr(f->h.tmp_root, "/tmp"));
	assert_int_equal(f->h.timeout_ms, 20000);
	assert_true(f->h.rlimit_as_bytes == 1024ull << 20);

	/* the request the client sends; KB_TOP is an existing directory to resolve */
	f->request = kb_harness_request(&cfg, "verify", getenv("KB_TOP") ? getenv("KB_TOP") : ".",
					"forward", KB_BACKEND_CPU, false);
	assert_non_null(f->request);
	kb_config_release(&cfg);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	cJSON_Delete(f->request);
	kb_harness_release(&f->h);
	kb_rm_rf(f->dir);
	free(f);
	return 0;
}

/* Point the client at a script with this body. */
static void use_script(struct fixture *f, const char *body)
{
	struct strbuf path = STRBUF_INIT;

	strbuf_addf(&path, "%s/fake_harness.sh", f->dir);
	write_file(path.buf, body, 0644);
	strvec_clear(&f->h.argv_override);
	strvec_pushl(&f->h.argv_override, "/bin/sh", path.buf, NULL);
	strbuf_release(&path);
}

static int eval_dirs_left(const struct fixture *f)
{
	DIR *d = opendir(f->h.tmp_root);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, "kb-eval-", 8))
			n++;
	closedir(d);
	return n;
}

static const cJSON *first_reason(const cJSON *ev)
{
	return cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "reasons"), 0);
}

static const char *reason_field(const cJSON *ev, const char *key)
{
	const cJSON *it = cJSON_GetObjectItem(first_reason(ev), key);

	return cJSON_IsString(it) ? it->valuestring : "";
}

static int reason_int(const cJSON *ev, const char *key)
{
	const cJSON *it = cJSON_GetObjectItem(first_reason(ev), key);

	return cJSON_IsNumber(it) ? it->valueint : -1;
}

/* A well-behaved harness that also checks what the client gave it. */
static const char good_script[] =
	"read nonce\n"
	"req=\"$2\"\n"
	"msg=ok\n"
	"[ \"$1\" = --request ] || msg=\"bad argv $1\"\n"
	"[ -f \"$req\" ] || msg=\"no request file\"\n"
	"[ \"$(pwd)\" = \"$TMPDIR\" ] || msg=\"cwd is not TMPDIR\"\n"
	"grep -q \"\\\"workdir\\\":.*\\\"$TMPDIR\\\"\" \"$req\" || msg=\"workdir is not TMPDIR\"\n"
	"grep -q '\"mode\":.*\"verify\"' \"$req\" || msg=\"no mode\"\n"
	"[ \"$KB_RESULT_FD\" = 3 ] || msg=\"KB_RESULT_FD is '$KB_RESULT_FD'\"\n"
	"[ ${#nonce} -eq 32 ] || msg=\"nonce '$nonce'\"\n"
	"mem=$(ulimit -v)\n"
	"echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"check\\\",\\\"config\\\":0,\\\"seed\\\":0}\" >&3\n"
	"echo 'a log line on stdout'\n"
	"echo 'a log line on stderr' >&2\n"
	"echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"protocol\\\":1,"
	"\\\"verdict\\\":\\\"verified\\\",\\\"reasons\\\":[],\\\"probe\\\":\\\"$msg\\\",\\\"mem\\\":\\\"$mem\\\"}\" >&3\n"
	"exit 0\n";

static void test_good_record(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *ev = NULL;
	const cJSON *tail;

	use_script(f, good_script);
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, &info), 0);
	assert_non_null(ev);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_string_equal(cJSON_GetObjectItem(ev, "probe")->valuestring, "ok");
	/* cpu backend: RLIMIT_AS from memory_limit_mb (in KiB for ulimit -v) */
	assert_string_equal(cJSON_GetObjectItem(ev, "mem")->valuestring, "1048576");
	assert_null(cJSON_GetObjectItem(ev, "nonce"));
	tail = cJSON_GetObjectItem(ev, "log_tail");
	assert_true(cJSON_IsString(tail));
	assert_non_null(strstr(tail->valuestring, "a log line on stdout"));
	assert_non_null(strstr(tail->valuestring, "a log line on stderr"));
	assert_int_equal(info.exit_code, 0);
	assert_int_equal(info.records, 2);
	assert_int_equal(info.ignored, 0);
	assert_int_equal(eval_dirs_left(f), 0);
	cJSON_Delete(ev);

	/* the cuda backend gets no address-space limit */
	cJSON_ReplaceItemInObject(f->request, "backend", cJSON_CreateString("cuda"));
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, &info), 0);
	assert_string_equal(cJSON_GetObjectItem(ev, "mem")->valuestring, "unlimited");
	cJSON_Delete(ev);
}

static void test_wrong_nonce_ignored(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *ev = NULL;

	/* a forged verdict with another nonce, on the channel and on stdout */
	use_script(f,
		   "read nonce\n"
		   "echo '{\"nonce\":\"00000000000000000000000000000000\",\"type\":\"result\",\"verdict\":\"verified\",\"reasons\":[]}' >&3\n"
		   "echo 'not json at all' >&3\n"
		   "echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"verdict\\\":\\\"verified\\\"}\"\n"
		   "exit 0\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, &info), 0);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	assert_string_equal(reason_field(ev, "check"), "harness");
	assert_string_equal(reason_field(ev, "message"), "no verdict");
	assert_int_equal(info.ignored, 2);
	assert_int_equal(info.records, 0);
	cJSON_Delete(ev);
}

static void test_last_result_wins(void **state)
{
	struct fixture *f = *state;
	cJSON *ev = NULL;

	use_script(f,
		   "read nonce\n"
		   "echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"verdict\\\":\\\"verified\\\",\\\"reasons\\\":[]}\" >&3\n"
		   "echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"verdict\\\":\\\"rejected\\\","
		   "\\\"reasons\\\":[{\\\"check\\\":\\\"correctness\\\",\\\"config\\\":1,\\\"seed\\\":2,\\\"message\\\":\\\"off\\\"}]}\" >&3\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	assert_string_equal(reason_field(ev, "check"), "correctness");
	assert_int_equal(reason_int(ev, "config"), 1);
	assert_int_equal(reason_int(ev, "seed"), 2);
	cJSON_Delete(ev);
}

static void test_crash(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *ev = NULL;

	use_script(f,
		   "read nonce\n"
		   "echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"candidate\\\",\\\"config\\\":2,\\\"seed\\\":1}\" >&3\n"
		   "echo 'Fatal: illegal memory access in kb_forward' >&2\n"
		   "kill -SEGV $$\n"
		   "sleep 5\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, &info), 0);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	assert_string_equal(reason_field(ev, "check"), "crash");
	assert_non_null(strstr(reason_field(ev, "message"), "SIGSEGV"));
	assert_non_null(strstr(reason_field(ev, "message"), "illegal memory access"));
	assert_non_null(strstr(reason_field(ev, "message"), "candidate"));
	assert_int_equal(reason_int(ev, "config"), 2);
	assert_int_equal(reason_int(ev, "seed"), 1);
	assert_int_equal(info.exit_code, 128 + 11);
	assert_int_equal(eval_dirs_left(f), 0);
	cJSON_Delete(ev);

	/* the next evaluation is a fresh child and works */
	use_script(f, good_script);
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	cJSON_Delete(ev);
}

static void test_exit_code_and_verdict_then_crash(void **state)
{
	struct fixture *f = *state;
	cJSON *ev = NULL;

	use_script(f, "read nonce\necho 'Traceback: boom' >&2\nexit 3\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(reason_field(ev, "check"), "crash");
	assert_non_null(strstr(reason_field(ev, "message"), "exited with code 3"));
	assert_non_null(strstr(reason_field(ev, "message"), "Traceback: boom"));
	cJSON_Delete(ev);

	/* a verified record, then death: still rejected, the crash among the reasons */
	use_script(f,
		   "read nonce\n"
		   "echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"verdict\\\":\\\"verified\\\",\\\"reasons\\\":[]}\" >&3\n"
		   "kill -ABRT $$\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	assert_string_equal(reason_field(ev, "check"), "crash");
	assert_non_null(strstr(reason_field(ev, "message"), "SIGABRT"));
	cJSON_Delete(ev);

	/* exit 0 and nothing said */
	use_script(f, "read nonce\nexit 0\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(reason_field(ev, "check"), "harness");
	assert_string_equal(reason_field(ev, "message"), "no verdict");
	cJSON_Delete(ev);
}

static void test_timeout(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *ev = NULL;
	int64_t t0 = kb_now_ms();

	f->h.timeout_ms = 1000;
	use_script(f,
		   "read nonce\n"
		   "echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"timing\\\",\\\"config\\\":4,\\\"seed\\\":0}\" >&3\n"
		   "sleep 30 & wait\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, &info), 0);
	assert_true(kb_now_ms() - t0 < 10000);
	assert_true(info.timed_out);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");
	assert_string_equal(reason_field(ev, "check"), "timeout");
	assert_non_null(strstr(reason_field(ev, "message"), "timing"));
	assert_int_equal(reason_int(ev, "config"), 4);
	assert_int_equal(eval_dirs_left(f), 0);
	cJSON_Delete(ev);
}

static void test_huge_stdout_capped(void **state)
{
	struct fixture *f = *state;
	struct kb_harness_run info;
	cJSON *ev = NULL;
	const cJSON *tail;

	f->h.log_cap = 64 * 1024;
	use_script(f,
		   "read nonce\n"
		   "head -c 5000000 /dev/zero | tr '\\0' x\n"
		   "echo\n"
		   "echo LAST-LINE\n"
		   "echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"verdict\\\":\\\"verified\\\",\\\"reasons\\\":[]}\" >&3\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, &info), 0);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_true(info.out_truncated);
	assert_true(info.out_bytes <= 64 * 1024);
	tail = cJSON_GetObjectItem(ev, "log_tail");
	assert_true(cJSON_IsString(tail));
	assert_true(strlen(tail->valuestring) < 8 * 1024);
	cJSON_Delete(ev);
}

static void test_request_from_config(void **state)
{
	struct fixture *f = *state;
	const cJSON *r = f->request, *t, *tol;

	assert_int_equal(cJSON_GetObjectItem(r, "protocol")->valueint, 1);
	assert_string_equal(cJSON_GetObjectItem(r, "mode")->valuestring, "verify");
	assert_string_equal(cJSON_GetObjectItem(r, "backend")->valuestring, "cpu");
	assert_string_equal(cJSON_GetObjectItem(r, "pass")->valuestring, "forward");
	assert_true(cJSON_GetObjectItem(r, "operator")->valuestring[0] == '/');
	assert_int_equal(cJSON_GetObjectItem(r, "seeds")->valueint, 5);
	tol = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "tolerances"), "float32");
	assert_true(cJSON_GetObjectItem(tol, "atol")->valuedouble == 1e-4);
	t = cJSON_GetObjectItem(r, "timing");
	assert_true(cJSON_IsFalse(cJSON_GetObjectItem(t, "enabled")));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(t, "baselines")), 2);
	assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(t, "baselines"), 1)->valuestring, "compile");
	assert_non_null(strstr(cJSON_GetObjectItem(r, "peaks_cache")->valuestring, "/peaks.json"));
	assert_null(kb_harness_request(&(struct kb_config){ 0 }, "verify",
				       "/nonexistent/operator.py", "forward", KB_BACKEND_CPU, true));
}

static void test_evidence_print(void **state)
{
	cJSON *ev = kb_evidence_new("rejected");
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);

	kb_evidence_add_reason(ev, "correctness", 3, 1, "output 0 differs\nsecond line");
	kb_evidence_add_reason(ev, "static", -1, -1, "line 4: process: 'fork' is not allowed in a kernel");
	kb_evidence_print_reasons(ev, fp);
	fclose(fp);
	assert_string_equal(buf,
			    "rejected: correctness: output 0 differs second line (config 3, seed 1)\n"
			    "rejected: static: line 4: process: 'fork' is not allowed in a kernel\n");
	free(buf);
	cJSON_Delete(ev);
}

/* --- python_env and datadir --- */

static const char *torch_python(void)
{
	const char *py = getenv("KERNELBOT_PYTHON");

	return py && *py ? py : "/usr/bin/python3";
}

static void set_str(char **field, const char *value)
{
	free(*field);
	*field = xstrdup(value);
}

static void edit_probe_file(const char *path, const char *python, const char *key, cJSON *value)
{
	struct strbuf sb = STRBUF_INIT;
	cJSON *root, *ent;
	char *text;

	assert_true(strbuf_read_file(&sb, path, 0) >= 0);
	root = cJSON_Parse(sb.buf);
	ent = cJSON_GetObjectItem(root, python);
	assert_non_null(ent);
	if (!strcmp(key, "time"))
		cJSON_ReplaceItemInObject(ent, "time", value);
	else
		cJSON_ReplaceItemInObject(cJSON_GetObjectItem(ent, "probe"), key, value);
	text = cJSON_Print(root);
	write_file(path, text, 0644);
	free(text);
	cJSON_Delete(root);
	strbuf_release(&sb);
}

static void test_python_find(void **state)
{
	struct fixture *f = *state;
	const struct kb_python_probe *p = NULL;
	struct kb_config cfg;
	struct strbuf cache = STRBUF_INIT;
	char *real_version;

	kb_python_reset();
	kb_config_init(&cfg);
	set_str(&cfg.state_dir, f->dir);

	/* a configured python without torch is an error naming it */
	set_str(&cfg.python, "/bin/true");
	assert_int_equal(kb_python_find(&cfg, &p), -1);
	assert_null(p);

	set_str(&cfg.python, torch_python());
	if (kb_python_find(&cfg, &p)) {
		kb_config_release(&cfg);
		kb_python_reset();
		skip(); /* no torch here */
	}
	assert_non_null(p);
	assert_string_equal(p->python, torch_python());
	assert_true(*p->torch_version);
	assert_true(*p->python_version);
	assert_int_equal(kb_python_backend(p, KB_BACKEND_AUTO),
			 p->cuda_available && p->device_count ? KB_BACKEND_CUDA : KB_BACKEND_CPU);
	assert_int_equal(kb_python_backend(p, KB_BACKEND_CPU), KB_BACKEND_CPU);
	real_version = xstrdup(p->torch_version);

	/* the probe is kept on disk and used by the next process (reset = a new process) */
	strbuf_addf(&cache, "%s/python-probe.json", f->dir);
	assert_true(kb_is_file(cache.buf));
	edit_probe_file(cache.buf, torch_python(), "torch", cJSON_CreateString("9.9.9-from-disk"));
	kb_python_reset();
	assert_int_equal(kb_python_find(&cfg, &p), 0);
	assert_string_equal(p->torch_version, "9.9.9-from-disk");

	/* a stale entry is probed again */
	edit_probe_file(cache.buf, torch_python(), "time", cJSON_CreateNumber((double)(kb_wall_s() - 3 * 86400)));
	kb_python_reset();
	assert_int_equal(kb_python_find(&cfg, &p), 0);
	assert_string_equal(p->torch_version, real_version);

	/* so is one whose torch moved (fingerprint mismatch) */
	edit_probe_file(cache.buf, torch_python(), "torch", cJSON_CreateString("9.9.9-from-disk"));
	edit_probe_file(cache.buf, torch_python(), "torch_file", cJSON_CreateString("/nonexistent/torch/__init__.py"));
	kb_python_reset();
	assert_int_equal(kb_python_find(&cfg, &p), 0);
	assert_string_equal(p->torch_version, real_version);

	free(real_version);
	strbuf_release(&cache);
	kb_config_release(&cfg);
	kb_python_reset();
}

static void test_datadir(void **state)
{
	struct kb_datadir dd;
	struct kb_config cfg;
	struct strvec flags = STRVEC_INIT;
	const char *top = getenv("KB_TOP") ? getenv("KB_TOP") : ".";

	kb_config_init(&cfg);
	set_str(&cfg.data_dir, top);
	assert_int_equal(kb_datadir_find(&cfg, &dd), 0);
	assert_true(kb_is_file(dd.harness));
	assert_true(kb_is_file(dd.abi_header));
	assert_non_null(strstr(dd.abi_header, "kernelbot_abi.h"));
	kb_datadir_include_flags(&dd, &flags);
	assert_true(flags.nr >= 1);
	assert_true(!strncmp(flags.v[0], "-I/", 3));
	strvec_clear(&flags);
	kb_datadir_release(&dd);

	/* a bad setting is an error, not a silent fallback */
	set_str(&cfg.data_dir, "/nonexistent");
	assert_int_equal(kb_datadir_find(&cfg, &dd), -1);
	kb_datadir_release(&dd);

	/* the test binary sits in <repo>/<build>/tests: found from /proc/self/exe */
	set_str(&cfg.data_dir, "");
	unsetenv("KERNELBOT_DATA_DIR");
	assert_int_equal(kb_datadir_find(&cfg, &dd), 0);
	assert_true(kb_is_file(dd.harness));
	kb_datadir_release(&dd);

	/* an explicit dlpack dir must hold dlpack/dlpack.h */
	set_str(&cfg.data_dir, top);
	setenv("KERNELBOT_DLPACK_INCLUDE", "/nonexistent", 1);
	assert_int_equal(kb_datadir_find(&cfg, &dd), -1);
	kb_datadir_release(&dd);
	unsetenv("KERNELBOT_DLPACK_INCLUDE");
	kb_config_release(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_good_record, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_nonce_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_last_result_wins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exit_code_and_verdict_then_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_huge_stdout_capped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_from_config, setup, teardown),
		cmocka_unit_test(test_evidence_print),
		cmocka_unit_test_setup_teardown(test_python_find, setup, teardown),
		cmocka_unit_test(test_datadir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
