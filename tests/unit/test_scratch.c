/* Scratch directories that name their owner, and the sweep of dead owners' (core/scratch). */
#include "core/common.h"
#include "core/scratch.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char root[64];

static int setup(void **state)
{
	kb_strlcpy(root, "/tmp/kb-test-scratch-XXXXXX", sizeof(root));
	assert_non_null(mkdtemp(root));
	return 0;
}

static int teardown(void **state)
{
	kb_rm_rf(root);
	return 0;
}

/* A pid that ran and is gone (reaped; not reused this soon on a normal machine). */
static pid_t dead_pid(void)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (!pid)
		_exit(0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return pid;
}

static void make_dir(const char *name, bool with_file)
{
	struct strbuf path = STRBUF_INIT;

	strbuf_addf(&path, "%s/%s", root, name);
	assert_int_equal(mkdir(path.buf, 0700), 0);
	if (with_file) {
		strbuf_addstr(&path, "/left.txt");
		assert_int_equal(kb_write_file_atomic(path.buf, "x", 1), 0);
	}
	strbuf_release(&path);
}

static bool exists(const char *name)
{
	struct strbuf path = STRBUF_INIT;
	struct stat st;
	bool yes;

	strbuf_addf(&path, "%s/%s", root, name);
	yes = !lstat(path.buf, &st);
	strbuf_release(&path);
	return yes;
}

static void test_make_names_its_owner(void **state)
{
	struct strbuf dir = STRBUF_INIT, want = STRBUF_INIT, nested = STRBUF_INIT;
	struct stat st;

	strbuf_addf(&nested, "%s/a/b", root);
	assert_int_equal(kb_scratch_make(nested.buf, "kb-worker", &dir), 0);
	strbuf_addf(&want, "%s/kb-worker-%ld-", nested.buf, (long)getpid());
	assert_true(!strncmp(dir.buf, want.buf, want.len));
	assert_int_equal(strlen(dir.buf), want.len + 6);
	assert_int_equal(stat(dir.buf, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	/* ours, and we run: the sweep keeps it */
	assert_int_equal(kb_scratch_sweep(nested.buf, "kb-worker"), 0);
	assert_int_equal(stat(dir.buf, &st), 0);
	strbuf_release(&dir);
	strbuf_release(&want);
	strbuf_release(&nested);
}

static void test_sweep_removes_only_dead_owners(void **state)
{
	pid_t gone = dead_pid();
	char name[128];
	int fd;

	/* a dead owner's, with something left inside: removed */
	xsnprintf(name, sizeof(name), "kb-worker-%ld-AbC123", (long)gone);
	make_dir(name, true);
	/* a live process's (our parent's), another prefix's, names that are not ours */
	xsnprintf(name, sizeof(name), "kb-worker-%ld-live12", (long)getppid());
	make_dir(name, false);
	xsnprintf(name, sizeof(name), "kb-eval-%ld-other1", (long)gone);
	make_dir(name, false);
	make_dir("kb-worker-XyZ789", false);          /* no pid: an older binary's */
	make_dir("kb-worker-12ab-x", false);
	xsnprintf(name, sizeof(name), "kb-worker-%ld-", (long)gone);
	make_dir(name, false);                        /* nothing after the pid */
	/* a file with a dead owner's name is not a directory of ours */
	xsnprintf(name, sizeof(name), "%s/kb-worker-%ld-file00", root, (long)gone);
	fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);

	assert_int_equal(kb_scratch_sweep(root, "kb-worker"), 1);
	xsnprintf(name, sizeof(name), "kb-worker-%ld-AbC123", (long)gone);
	assert_false(exists(name));
	xsnprintf(name, sizeof(name), "kb-worker-%ld-live12", (long)getppid());
	assert_true(exists(name));
	xsnprintf(name, sizeof(name), "kb-eval-%ld-other1", (long)gone);
	assert_true(exists(name));
	assert_true(exists("kb-worker-XyZ789"));
	assert_true(exists("kb-worker-12ab-x"));
	xsnprintf(name, sizeof(name), "kb-worker-%ld-", (long)gone);
	assert_true(exists(name));
	xsnprintf(name, sizeof(name), "kb-worker-%ld-file00", (long)gone);
	assert_true(exists(name));
	/* the other prefix's turn */
	assert_int_equal(kb_scratch_sweep(root, "kb-eval"), 1);
	xsnprintf(name, sizeof(name), "kb-eval-%ld-other1", (long)gone);
	assert_false(exists(name));
	/* nothing left to do; a missing root is fine */
	assert_int_equal(kb_scratch_sweep(root, "kb-worker"), 0);
	xsnprintf(name, sizeof(name), "%s/missing", root);
	assert_int_equal(kb_scratch_sweep(name, "kb-worker"), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_make_names_its_owner),
		T(test_sweep_removes_only_dead_owners),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
