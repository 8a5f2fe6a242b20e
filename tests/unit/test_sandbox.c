/*
 * The sandbox (verifier/sandbox.h) with the real bubblewrap: what a program
 * inside can see, write, reach and leave behind. Skipped with a reason
 * where bwrap is missing (mk/deps.sh installs it).
 */
#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "verifier/sandbox.h"

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

struct fixture {
	char dir[64];           /* outside: a secret, a place not to write */
	char scratch[96];
	char ro[96];
	struct kb_sandbox sb;
	struct kb_config cfg;
};

static bool have_bwrap(void)
{
	return !access("/usr/bin/bwrap", X_OK) || !access("/bin/bwrap", X_OK);
}

static void write_file(const char *path, const char *text)
{
	assert_int_equal(kb_write_file_atomic(path, text, strlen(text)), 0);
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct strbuf p = STRBUF_INIT;

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	kb_strlcpy(f->dir, "/tmp/kb-test-sandbox-XXXXXX", sizeof(f->dir));
	assert_non_null(mkdtemp(f->dir));
	xsnprintf(f->scratch, sizeof(f->scratch), "%s/scratch", f->dir);
	xsnprintf(f->ro, sizeof(f->ro), "%s/ro", f->dir);
	assert_int_equal(kb_mkdir_p(f->scratch, 0700), 0);
	assert_int_equal(kb_mkdir_p(f->ro, 0700), 0);
	strbuf_addf(&p, "%s/secret", f->dir);
	write_file(p.buf, "outside-secret");
	strbuf_reset(&p);
	strbuf_addf(&p, "%s/visible", f->ro);
	write_file(p.buf, "visible-text");
	strbuf_release(&p);
	kb_config_init(&f->cfg);
	kb_sandbox_init(&f->sb);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kb_sandbox_release(&f->sb);
	kb_config_release(&f->cfg);
	kb_rm_rf(f->dir);
	free(f);
	return 0;
}

/* Run `sh -c script` in the sandbox; returns its exit code, stdout in out. */
static int run_in(struct fixture *f, const char *script, struct strbuf *out)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct kb_sandbox_view view = KB_SANDBOX_VIEW_INIT;
	int code;

	strvec_push(&view.ro, f->ro);
	view.scratch = f->scratch;
	strvec_pushl(&cp.args, "sh", "-c", script, NULL);
	cp.timeout_ms = 30000;
	assert_int_equal(kb_sandbox_wrap(&f->sb, &view, &cp), 0);
	assert_int_equal(run_command(&cp), 0);
	if (out) {
		strbuf_reset(out);
		strbuf_add(out, cp.out.buf, cp.out.len);
	}
	if (cp.exit_code && getenv("KB_TEST_VERBOSE"))
		fprintf(stderr, "sandboxed '%s' exited %d: %s\n", script, cp.exit_code, cp.err.buf);
	code = cp.exit_code;
	child_process_release(&cp);
	kb_sandbox_view_release(&view);
	return code;
}

#define NEED_BWRAP() do { if (!have_bwrap()) KB_SKIP("no working bubblewrap (bwrap missing or user namespaces off)"); \
	assert_int_equal(kb_sandbox_setup(&f->sb, &f->cfg), 0); } while (0)

static void test_identity_and_view(void **state)
{
	struct fixture *f = *state;
	struct strbuf out = STRBUF_INIT, cmd = STRBUF_INIT;

	NEED_BWRAP();
	assert_int_equal(run_in(f, "id -u; id -g", &out), 0);
	assert_string_equal(out.buf, "65534\n65534\n");
	/* the view: read-only paths readable, not writable; scratch writable */
	strbuf_addf(&cmd, "cat %s/visible && ! touch %s/new 2>/dev/null && touch %s/new",
		    f->ro, f->ro, f->scratch);
	assert_int_equal(run_in(f, cmd.buf, &out), 0);
	assert_string_equal(out.buf, "visible-text");
	/* what is outside the view does not exist inside */
	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "test ! -e %s/secret && test ! -e /root/.ssh && test ! -e /etc/shadow", f->dir);
	assert_int_equal(run_in(f, cmd.buf, NULL), 0);
	/* nothing written outside scratch: only scratch/new exists */
	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "%s/new", f->scratch);
	assert_true(kb_is_file(cmd.buf));
	strbuf_reset(&cmd);
	strbuf_addf(&cmd, "%s/new", f->ro);
	assert_false(kb_is_file(cmd.buf));
	strbuf_release(&out);
	strbuf_release(&cmd);
}

/* A program run by a virtual environment's path (bin/ holds a symlink
 * into /usr) sees that environment: its packages live there, not in /usr. */
static void test_venv_program_sees_its_prefix(void **state)
{
	struct fixture *f = *state;
	struct child_process cp = CHILD_PROCESS_INIT;
	struct kb_sandbox_view view = KB_SANDBOX_VIEW_INIT;
	struct strbuf venv = STRBUF_INIT, p = STRBUF_INIT, script = STRBUF_INIT;

	NEED_BWRAP();
	strbuf_addf(&venv, "%s/venv", f->dir);
	strbuf_addf(&p, "%s/lib", venv.buf);
	assert_int_equal(kb_mkdir_p(p.buf, 0700), 0);
	strbuf_addstr(&p, "/marker");
	assert_int_equal(kb_write_file_atomic(p.buf, "site-packages", 13), 0);
	strbuf_reset(&p);
	strbuf_addf(&p, "%s/bin", venv.buf);
	assert_int_equal(kb_mkdir_p(p.buf, 0700), 0);
	strbuf_addstr(&p, "/sh");
	assert_int_equal(symlink("/bin/sh", p.buf), 0);
	strbuf_addf(&script, "cat %s/lib/marker", venv.buf);
	strvec_pushl(&cp.args, p.buf, "-c", script.buf, NULL);
	view.scratch = f->scratch;
	cp.timeout_ms = 30000;
	assert_int_equal(kb_sandbox_wrap(&f->sb, &view, &cp), 0);
	assert_int_equal(run_command(&cp), 0);
	assert_int_equal(cp.exit_code, 0);
	assert_string_equal(cp.out.buf, "site-packages");
	child_process_release(&cp);
	kb_sandbox_view_release(&view);
	strbuf_release(&venv);
	strbuf_release(&p);
	strbuf_release(&script);
}

static void test_environment_is_built_from_nothing(void **state)
{
	struct fixture *f = *state;
	struct strbuf out = STRBUF_INIT;

	NEED_BWRAP();
	setenv("KB_TEST_GITHUB_TOKEN", "ghp_sandboxsecret", 1);
	setenv("SOME_HARMLESS_VAR", "bystander", 1);
	setenv("OMP_NUM_THREADS", "3", 1);
	assert_int_equal(run_in(f, "env", &out), 0);
	assert_null(strstr(out.buf, "ghp_sandboxsecret"));
	assert_null(strstr(out.buf, "bystander"));
	assert_non_null(strstr(out.buf, "OMP_NUM_THREADS=3"));
	assert_non_null(strstr(out.buf, "HOME="));
	unsetenv("KB_TEST_GITHUB_TOKEN");
	unsetenv("SOME_HARMLESS_VAR");
	unsetenv("OMP_NUM_THREADS");
	strbuf_release(&out);
}

static void test_own_pid_namespace_and_nothing_left(void **state)
{
	struct fixture *f = *state;
	struct strbuf out = STRBUF_INIT, mark = STRBUF_INIT, script = STRBUF_INIT;
	bool left = false;
	DIR *d;
	struct dirent *de;

	NEED_BWRAP();
	/* only the sandbox's own few processes are visible */
	assert_int_equal(run_in(f, "ls /proc | grep -c '^[0-9]'", &out), 0);
	assert_true(atoi(out.buf) <= 4);
	/* a double-forked setsid sleeper dies with the sandbox */
	strbuf_addf(&mark, "kb-sandbox-left-%d", (int)getpid());
	strbuf_addf(&script, "setsid sh -c 'sleep 60 # %s' </dev/null >/dev/null 2>&1 & exit 0",
		    mark.buf);
	assert_int_equal(run_in(f, script.buf, NULL), 0);
	usleep(300000);
	d = opendir("/proc");
	while (d && (de = readdir(d))) {
		char path[300], buf[512];
		int fd;
		ssize_t n;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		xsnprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		for (ssize_t i = 0; i < n; i++)
			if (!buf[i])
				buf[i] = ' ';
		if (n > 0) {
			buf[n] = '\0';
			if (strstr(buf, mark.buf)) {
				left = true;
				kill(atoi(de->d_name), SIGKILL);
			}
		}
	}
	if (d)
		closedir(d);
	assert_false(left);
	strbuf_release(&out);
	strbuf_release(&mark);
	strbuf_release(&script);
}

static void test_no_network(void **state)
{
	struct fixture *f = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	struct strbuf script = STRBUF_INIT;
	int s, c;

	NEED_BWRAP();
	s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	assert_true(s >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s, 4), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	/* bash's /dev/tcp when present, else python: either must fail */
	strbuf_addf(&script, "if command -v python3 >/dev/null; then python3 -c \""
		    "import socket; s = socket.socket(); s.settimeout(2); "
		    "s.connect(('127.0.0.1', %d))\" 2>/dev/null; else exit 1; fi",
		    ntohs(sa.sin_port));
	assert_int_not_equal(run_in(f, script.buf, NULL), 0);
	c = accept(s, NULL, NULL);
	assert_true(c < 0);
	close(s);
	strbuf_release(&script);
}

static void test_seccomp_and_limits(void **state)
{
	struct fixture *f = *state;
	struct strbuf out = STRBUF_INIT;

	NEED_BWRAP();
	/* no nested namespaces: unshare fails under the filter */
	if (!access("/usr/bin/unshare", X_OK))
		assert_int_not_equal(run_in(f, "unshare -U true 2>/dev/null", NULL), 0);
	assert_int_equal(run_in(f, "ulimit -n; ulimit -t; ulimit -f", &out), 0);
	/* open files 4096; CPU 7200 s; file size 4 GiB in 512-byte (dash) or
	 * 1 KiB (bash) blocks */
	assert_true(!strcmp(out.buf, "4096\n7200\n8388608\n") ||
		    !strcmp(out.buf, "4096\n7200\n4194304\n"));
	strbuf_release(&out);
}

static void test_disabled_leaves_command_alone(void **state)
{
	struct fixture *f = *state;
	struct child_process cp = CHILD_PROCESS_INIT;
	struct kb_sandbox_view view = KB_SANDBOX_VIEW_INIT;
	struct strbuf why = STRBUF_INIT;

	f->cfg.sandbox_enabled = false;
	assert_int_equal(kb_sandbox_setup(&f->sb, &f->cfg), 0);
	view.scratch = f->scratch;
	strvec_pushl(&cp.args, "true", NULL);
	assert_int_equal(kb_sandbox_wrap(&f->sb, &view, &cp), 0);
	assert_int_equal(cp.args.nr, 1);
	assert_string_equal(cp.args.v[0], "true");
	assert_int_equal(kb_sandbox_probe(&f->sb, &why), 0);
	assert_string_equal(why.buf, "disabled");
	child_process_release(&cp);
	strbuf_release(&why);
}

static void test_missing_bwrap_names_the_setting(void **state)
{
	struct fixture *f = *state;

	free(f->cfg.sandbox_bwrap);
	f->cfg.sandbox_bwrap = xstrdup("/nonexistent/bwrap");
	assert_int_equal(kb_sandbox_setup(&f->sb, &f->cfg), -1);
}

static void test_probe_works(void **state)
{
	struct fixture *f = *state;
	struct strbuf why = STRBUF_INIT;

	NEED_BWRAP();
	assert_int_equal(kb_sandbox_probe(&f->sb, &why), 0);
	strbuf_release(&why);
}

static void test_protect_self(void **state)
{
	(void)state;
	assert_int_equal(kb_sandbox_protect_self(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_identity_and_view, setup, teardown),
		cmocka_unit_test_setup_teardown(test_venv_program_sees_its_prefix, setup, teardown),
		cmocka_unit_test_setup_teardown(test_environment_is_built_from_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_own_pid_namespace_and_nothing_left, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_network, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seccomp_and_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disabled_leaves_command_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_bwrap_names_the_setting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_probe_works, setup, teardown),
		cmocka_unit_test(test_protect_self),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
