#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/state.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "search/search_db.h"
#include "templates/tune.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"
#include "verifier/harness_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

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
	/* protocol mechanics against a stand-in harness that reports its own
	 * pid and writes marks outside its dir: the sandbox is tested in
	 * test_sandbox.c and tests/python/test_sandbox_hostile.py */
	cfg.sandbox_enabled = false;
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

/*
 * The operator's log the evidence points to: a private file in the
 * private <state_dir>/logs/harness; its text into text.
 */
static void read_oplog(const struct fixture *f, const cJSON *ev, struct strbuf *text)
{
	const cJSON *p = cJSON_GetObjectItem(ev, "operator_log");
	struct strbuf dir = STRBUF_INIT;
	struct stat st;
	char *real = realpath(f->dir, NULL);

	assert_true(cJSON_IsString(p));
	assert_non_null(real);
	strbuf_addf(&dir, "%s/logs/harness/", real);
	assert_true(!strncmp(p->valuestring, dir.buf, dir.len));
	assert_int_equal(stat(p->valuestring, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	strbuf_setlen(&dir, dir.len - 1);
	assert_int_equal(stat(dir.buf, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	strbuf_reset(text);
	assert_int_equal(strbuf_read_file(text, p->valuestring, 0), 0);
	free(real);
	strbuf_release(&dir);
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
	struct strbuf log = STRBUF_INIT;
	cJSON *ev = NULL;

	use_script(f, good_script);
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, &info), 0);
	assert_non_null(ev);
	assert_string_equal(kb_evidence_verdict(ev), "verified");
	assert_string_equal(cJSON_GetObjectItem(ev, "probe")->valuestring, "ok");
	/* cpu backend: RLIMIT_AS from memory_limit_mb (in KiB for ulimit -v) */
	assert_string_equal(cJSON_GetObjectItem(ev, "mem")->valuestring, "1048576");
	assert_null(cJSON_GetObjectItem(ev, "nonce"));
	/* what it printed is not evidence: it is in the operator's log */
	assert_null(cJSON_GetObjectItem(ev, "log_tail"));
	read_oplog(f, ev, &log);
	assert_non_null(strstr(log.buf, "--- stdout: 21 bytes captured ---\na log line on stdout\n"));
	assert_non_null(strstr(log.buf, "--- stderr: 21 bytes captured ---\na log line on stderr\n"));
	assert_non_null(strstr(log.buf, "verdict: verified\n"));
	assert_non_null(strstr(log.buf, "mode: verify\n"));
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
	strbuf_release(&log);
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
	struct strbuf log = STRBUF_INIT;
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
	assert_non_null(strstr(reason_field(ev, "message"), "candidate"));
	/* its stderr is the operator's to read, not the evidence's */
	assert_null(strstr(reason_field(ev, "message"), "illegal memory access"));
	read_oplog(f, ev, &log);
	assert_non_null(strstr(log.buf, "Fatal: illegal memory access in kb_forward\n"));
	assert_non_null(strstr(log.buf, "verdict: rejected (crash)\n"));
	assert_non_null(strstr(log.buf, "process: exit code 139\n"));
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
	strbuf_release(&log);
}

static void test_exit_code_and_verdict_then_crash(void **state)
{
	struct fixture *f = *state;
	cJSON *ev = NULL;

	use_script(f, "read nonce\necho 'Traceback: boom' >&2\nexit 3\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(reason_field(ev, "check"), "crash");
	assert_non_null(strstr(reason_field(ev, "message"), "exited with code 3"));
	assert_null(strstr(reason_field(ev, "message"), "Traceback: boom"));
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

	/* exit 0 and nothing said (nor printed: no operator log) */
	use_script(f, "read nonce\nexit 0\n");
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(reason_field(ev, "check"), "harness");
	assert_string_equal(reason_field(ev, "message"), "no verdict");
	assert_null(cJSON_GetObjectItem(ev, "operator_log"));
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
	struct strbuf log = STRBUF_INIT;
	cJSON *ev = NULL;

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
	assert_null(cJSON_GetObjectItem(ev, "log_tail"));
	/* the operator's log keeps the last KB_HARNESS_LOG_KEEP bytes of what was captured */
	read_oplog(f, ev, &log);
	assert_true(log.len > KB_HARNESS_LOG_KEEP);
	assert_true(log.len < KB_HARNESS_LOG_KEEP + 1024);
	assert_non_null(strstr(log.buf, "later ones dropped"));
	assert_non_null(strstr(log.buf, "earlier bytes not kept]\nxxxx"));
	cJSON_Delete(ev);
	strbuf_release(&log);
}

/* --- untrusted output: kept from evidence, database and files, redacted for the operator --- */

#define SECRET "kbRegistered-Secret-8c1f2e7d9a"
#define GH_TOKEN "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"

/*
 * A harness that prints a registered secret and a GitHub token on stdout
 * and stderr (after a flood), and puts both into its reasons, a config
 * name, a note and a dropped config's reason.
 */
static const char leaky_script[] =
	"read nonce\n"
	"S=" SECRET "\n"
	"T=" GH_TOKEN "\n"
	"echo \"stdout: $S $T\"\n"
	"printf '\\033[31mred\\033[0m\\n'\n"
	"head -c 200000 /dev/zero | tr '\\0' y >&2\n"
	"echo >&2\n"
	"echo \"stderr: token=$T secret=$S\" >&2\n"
	"echo \"{\\\"nonce\\\":\\\"$nonce\\\",\\\"type\\\":\\\"result\\\",\\\"protocol\\\":1,\\\"verdict\\\":\\\"rejected\\\","
	"\\\"reasons\\\":[{\\\"check\\\":\\\"kernel_error\\\",\\\"config\\\":0,\\\"seed\\\":0,"
	"\\\"message\\\":\\\"RuntimeError: $S and $T\\\",\\\"count\\\":1}],"
	"\\\"configs\\\":[{\\\"index\\\":0,\\\"name\\\":\\\"$T\\\",\\\"notes\\\":[\\\"Authorization: Bearer abcdefghijkl0123\\\"]}],"
	"\\\"dropped_configs\\\":[{\\\"name\\\":\\\"seven\\\",\\\"reason\\\":\\\"ValueError: $S\\\"}],"
	"\\\"log_tail\\\":\\\"$S\\\"}\" >&3\n";

static bool holds(const char *buf, size_t len, const char *needle)
{
	return memmem(buf, len, needle, strlen(needle)) != NULL;
}

/* Every byte of every file under dir (the database, its WAL and shm). */
static void read_tree(const char *dir, struct strbuf *all)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	assert_non_null(d);
	while ((de = readdir(d))) {
		struct strbuf path = STRBUF_INIT;

		if (de->d_name[0] == '.')
			continue;
		strbuf_addf(&path, "%s/%s", dir, de->d_name);
		if (kb_is_dir(path.buf))
			read_tree(path.buf, all);
		else
			assert_true(strbuf_read_file(all, path.buf, 0) >= 0);
		strbuf_release(&path);
	}
	closedir(d);
}

/* What the search and the tuner store of this evidence, in a fresh state database under f->dir. */
static void store_everywhere(const struct fixture *f, const cJSON *ev, struct strbuf *db_bytes)
{
	struct kb_search_row row = { 0 };
	struct kb_search_cand c;
	struct kb_state *st = NULL;
	struct strbuf dir = STRBUF_INIT;
	cJSON *info = cJSON_CreateObject(), *build;

	strbuf_addf(&dir, "%s/state", f->dir);
	assert_int_equal(kb_state_open(&st, dir.buf), 0);
	row.key = xstrdup("untrusted-output");
	row.operator_path = xstrdup("op.py");
	row.backend = xstrdup("cpu");
	row.pass = xstrdup("forward");
	assert_int_equal(kb_search_db_create(st, &row), 0);

	kb_search_cand_init(&c);
	c.proposer = xstrdup("repair");
	c.source = xstrdup("int kb_forward(void);");
	c.backend = xstrdup("cpu");
	kb_strlcpy(c.hash, "0123456789abcdef", sizeof(c.hash));
	kb_strlcpy(c.verdict, "rejected", sizeof(c.verdict));
	c.evidence = cJSON_Duplicate(ev, true);
	c.reasons = cJSON_Duplicate(cJSON_GetObjectItem(ev, "reasons"), true);
	/* the search keeps compiler text in memory for its repair prompts, not in the store */
	build = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c.evidence, "kernelbot"), "build");
	cJSON_AddStringToObject(build, "errors", "kernel.cu:3: error: '" GH_TOKEN "' undeclared");
	c.build_info = cJSON_Duplicate(build, true);
	assert_int_equal(kb_search_db_cand_insert(st, row.id, &c), 0);
	cJSON_AddItemToObject(info, "evidence", cJSON_Duplicate(c.evidence, true));
	assert_int_equal(kb_search_db_set_state(st, row.id, "done", info, 1.0), 0);
	assert_int_equal(kb_timings_put(st, "final|untrusted-output", c.evidence), 0);
	kb_state_close(st);

	read_tree(dir.buf, db_bytes);
	assert_true(db_bytes->len > 0);
	assert_true(holds(db_bytes->buf, db_bytes->len, "RuntimeError: *** and ***"));
	cJSON_Delete(info);
	kb_search_cand_release(&c);
	kb_search_row_release(&row);
	strbuf_release(&dir);
}

static void test_untrusted_output_contained(void **state)
{
	struct fixture *f = *state;
	struct strbuf log = STRBUF_INIT, file = STRBUF_INIT, db = STRBUF_INIT, path = STRBUF_INIT;
	const cJSON *cfg0;
	cJSON *ev = NULL, *scrubbed;
	char *text;

	log_add_secret(SECRET);
	use_script(f, leaky_script);
	assert_int_equal(kb_harness_call(&f->h, f->request, &ev, NULL), 0);
	assert_string_equal(kb_evidence_verdict(ev), "rejected");

	/* the evidence: the judge's findings, redacted; no raw output */
	text = cJSON_PrintUnformatted(ev);
	assert_null(strstr(text, SECRET));
	assert_null(strstr(text, GH_TOKEN));
	assert_null(strstr(text, "stdout:"));
	assert_null(cJSON_GetObjectItem(ev, "log_tail"));
	assert_string_equal(reason_field(ev, "message"), "RuntimeError: *** and ***");
	cfg0 = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "configs"), 0);
	assert_string_equal(cJSON_GetObjectItem(cfg0, "name")->valuestring, "***");
	assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(cfg0, "notes"), 0)->valuestring,
			    "Authorization: Bearer ***");
	free(text);

	/* the evidence file `kernelbot verify --json` writes */
	strbuf_addf(&path, "%s/evidence.json", f->dir);
	assert_int_equal(kb_evidence_write(ev, path.buf), 0);
	assert_int_equal(strbuf_read_file(&file, path.buf, 0), 0);
	assert_false(holds(file.buf, file.len, SECRET));
	assert_false(holds(file.buf, file.len, GH_TOKEN));

	/* what is committed or stored has no local pointer either */
	scrubbed = cJSON_Duplicate(ev, true);
	kb_evidence_scrub(scrubbed);
	assert_null(cJSON_GetObjectItem(scrubbed, "operator_log"));
	cJSON_Delete(scrubbed);

	/* the state database, every file of it */
	store_everywhere(f, ev, &db);
	assert_false(holds(db.buf, db.len, SECRET));
	assert_false(holds(db.buf, db.len, GH_TOKEN));
	assert_false(holds(db.buf, db.len, "logs/harness"));
	assert_false(holds(db.buf, db.len, "undeclared"));

	/* the operator's log: the output, redacted, capped */
	read_oplog(f, ev, &log);
	assert_false(holds(log.buf, log.len, SECRET));
	assert_false(holds(log.buf, log.len, GH_TOKEN));
	assert_non_null(strstr(log.buf, "stdout: *** ***\n"));
	assert_non_null(strstr(log.buf, "\n[31mred[0m\n"));  /* escapes dropped, text kept */
	assert_non_null(strstr(log.buf, "stderr: token=*** secret=***\n"));
	assert_null(strchr(log.buf, '\033'));
	assert_non_null(strstr(log.buf, "--- stderr: 200094 bytes captured ---\n[... "));
	assert_true(log.len < 2 * KB_HARNESS_LOG_KEEP);

	log_clear_secrets();
	cJSON_Delete(ev);
	strbuf_release(&log);
	strbuf_release(&file);
	strbuf_release(&db);
	strbuf_release(&path);
}

/* The log folder stays bounded: oldest files go first. */
static void test_operator_log_pruned(void **state)
{
	struct fixture *f = *state;
	struct strbuf dir = STRBUF_INIT, path = STRBUF_INIT;
	char blob[1000];

	memset(blob, 'z', sizeof(blob) - 1);
	blob[sizeof(blob) - 1] = '\0';
	strbuf_addf(&dir, "%s/logs/harness", f->dir);
	assert_int_equal(kb_mkdir_p(dir.buf, 0700), 0);
	for (int i = 0; i < 10; i++) {
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/20260101T0000%02dZ-abcdef.log", dir.buf, i);
		write_file(path.buf, blob, 0600);
	}
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/keep.txt", dir.buf);
	write_file(path.buf, blob, 0600);
	/* 10 files of 999 bytes: a 5000-byte bound keeps the newest five */
	assert_int_equal(kb_harness_log_prune(dir.buf, 5000, 100), 0);
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/20260101T000004Z-abcdef.log", dir.buf);
	assert_false(kb_is_file(path.buf));
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/20260101T000005Z-abcdef.log", dir.buf);
	assert_true(kb_is_file(path.buf));
	/* and a count bound keeps the newest two; other files are not ours */
	assert_int_equal(kb_harness_log_prune(dir.buf, 1 << 20, 2), 0);
	assert_false(kb_is_file(path.buf));
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/20260101T000009Z-abcdef.log", dir.buf);
	assert_true(kb_is_file(path.buf));
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/keep.txt", dir.buf);
	assert_true(kb_is_file(path.buf));
	strbuf_release(&dir);
	strbuf_release(&path);
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

	/* where the harness's output went, for a kernel that failed */
	cJSON_AddStringToObject(ev, "operator_log", "/state/logs/harness/x.log");
	fp = open_memstream(&buf, &len);
	kb_evidence_print_reasons(ev, fp);
	fclose(fp);
	assert_non_null(strstr(buf, "\nlog: the harness's output is in /state/logs/harness/x.log\n"));
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
		KB_SKIP("no python3 with torch here");
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

/* A timeout says which stage ran out and what to change for it. */
static void test_timeout_message_names_the_fix(void **state)
{
	struct strbuf m = STRBUF_INIT;

	kb_harness_timeout_message(300000, "timing", &m);
	assert_non_null(strstr(m.buf, "evaluation exceeded 300 s (last stage: timing)"));
	assert_non_null(strstr(m.buf, "l2_flush = off"));
	assert_non_null(strstr(m.buf, "--no-timing"));
	assert_non_null(strstr(m.buf, "timeout_s"));
	strbuf_reset(&m);
	kb_harness_timeout_message(60000, "trial", &m);
	assert_non_null(strstr(m.buf, "(last stage: trial)"));
	assert_non_null(strstr(m.buf, "seeds"));
	assert_null(strstr(m.buf, "l2_flush"));
	strbuf_reset(&m);
	kb_harness_timeout_message(660000, "baselines", &m);
	assert_non_null(strstr(m.buf, "(last stage: baselines)"));
	assert_non_null(strstr(m.buf, "baseline_timeout_s"));
	strbuf_reset(&m);
	kb_harness_timeout_message(60000, NULL, &m);
	assert_string_equal(m.buf, "evaluation exceeded 60 s");
	strbuf_release(&m);
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
		cmocka_unit_test_setup_teardown(test_untrusted_output_contained, setup, teardown),
		cmocka_unit_test_setup_teardown(test_operator_log_pruned, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_from_config, setup, teardown),
		cmocka_unit_test(test_evidence_print),
		cmocka_unit_test(test_timeout_message_names_the_fix),
		cmocka_unit_test_setup_teardown(test_python_find, setup, teardown),
		cmocka_unit_test(test_datadir),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
