#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"
#include "report/wire.h"

#include <stdlib.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * Where a module's kernel folder goes (report/wire_layout.c): inside the
 * module's top-level package when every folder down to the module's has an
 * __init__.py under an import root, at the root's kernelbot/ otherwise; its
 * package name under the longest root; the packages and __init__.py files
 * it needs; the package-data patterns of a run's folder.
 */

static char tmpl[] = "/tmp/kb-wire-layout-XXXXXX";
static const char *top;

static void put(const char *rel, const char *text)
{
	struct strbuf path = STRBUF_INIT;
	char *slash;

	strbuf_addf(&path, "%s/%s", top, rel);
	slash = strrchr(path.buf, '/');
	*slash = '\0';
	assert_int_equal(kb_mkdir_p(path.buf, 0755), 0);
	*slash = '/';
	assert_int_equal(kb_write_file_atomic(path.buf, text, strlen(text)), 0);
	strbuf_release(&path);
}

static int setup(void **state)
{
	(void)state;
	top = mkdtemp(tmpl);
	if (!top)
		return -1;
	put("repo/src/tinymlp/__init__.py", "");
	put("repo/src/tinymlp/act.py", "");
	put("repo/src/tinymlp/layers/__init__.py", "");
	put("repo/src/tinymlp/layers/mlp.py", "");
	put("repo/src/tinymlp/nopkg/m.py", "");
	put("repo/extpkg/__init__.py", "");
	put("repo/extpkg/layers.py", "");
	put("repo/my-pkg/__init__.py", "");
	put("repo/my-pkg/m.py", "");
	put("repo/model.py", "");
	put("repo/nsp/m.py", "");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return kb_rm_rf(top);
}

static const char *const src_dot[] = { "src", "." };
static const char *const dot[] = { "." };
static const char *const odd[] = { "./src/", "./" };
static const char *const nested[] = { "src", "src/lib/" };

struct layout_case {
	const char *path;               /* the module's file (kb_wire_op_dir) or op_dir (kb_wire_package) */
	const char *const *roots;
	size_t nr_roots;
	const char *want;               /* NULL: refused */
};

static void test_op_dir(void **state)
{
	static const struct layout_case cases[] = {
		/* a src/ package: inside its top level, whatever the depth of the module */
		{ "src/tinymlp/act.py", src_dot, 2, "src/tinymlp/_kernelbot/gelu" },
		{ "src/tinymlp/layers/mlp.py", src_dot, 2, "src/tinymlp/_kernelbot/gelu" },
		{ "src/tinymlp/act.py", odd, 2, "src/tinymlp/_kernelbot/gelu" },
		/* without src as a root, src/ is no package: the root's kernelbot/ */
		{ "src/tinymlp/act.py", dot, 1, "kernelbot/gelu" },
		/* a folder without __init__.py on the way down, a namespace package, a name no import takes */
		{ "src/tinymlp/nopkg/m.py", src_dot, 2, "kernelbot/gelu" },
		{ "nsp/m.py", dot, 1, "kernelbot/gelu" },
		{ "my-pkg/m.py", dot, 1, "kernelbot/gelu" },
		/* a package at the root (no roots given: "."), a flat module */
		{ "extpkg/layers.py", NULL, 0, "extpkg/_kernelbot/gelu" },
		{ "model.py", src_dot, 2, "kernelbot/gelu" },
	};
	struct strbuf repo = STRBUF_INIT, out = STRBUF_INIT;

	(void)state;
	strbuf_addf(&repo, "%s/repo", top);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		kb_wire_op_dir(&out, repo.buf, cases[i].path, cases[i].roots, cases[i].nr_roots, "gelu");
		assert_string_equal(out.buf, cases[i].want);
	}
	strbuf_release(&repo);
	strbuf_release(&out);
}

static void test_package(void **state)
{
	static const struct layout_case cases[] = {
		{ "src/tinymlp/_kernelbot/gelu", src_dot, 2, "tinymlp._kernelbot.gelu" },
		{ "src/tinymlp/_kernelbot/gelu", dot, 1, "src.tinymlp._kernelbot.gelu" },
		{ "src/lib/pkg/_kernelbot/g", nested, 2, "pkg._kernelbot.g" },
		{ "kernelbot/gelu", src_dot, 2, "kernelbot.gelu" },
		{ "kernelbot/gelu/", NULL, 0, "kernelbot.gelu" },
		{ "srcx/a", src_dot, 2, "srcx.a" },
		{ "bad-dir/x", dot, 1, NULL },
		{ "kernelbot/9x", dot, 1, NULL },
	};
	struct strbuf out = STRBUF_INIT;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		strbuf_reset(&out);
		assert_int_equal(kb_wire_package(&out, cases[i].path, cases[i].roots, cases[i].nr_roots),
				 cases[i].want ? 0 : -1);
		if (cases[i].want)
			assert_string_equal(out.buf, cases[i].want);
	}
	strbuf_release(&out);
}

static void test_in_package(void **state)
{
	struct strbuf repo = STRBUF_INIT;
	struct strvec pkgs = STRVEC_INIT, inits = STRVEC_INIT;
	struct kb_wire_spec s = { 0 };

	(void)state;
	strbuf_addf(&repo, "%s/repo", top);
	s.repo_dir = repo.buf;
	s.sys_path = src_dot;
	s.nr_sys_path = 2;
	s.op_dir = "src/tinymlp/_kernelbot/gelu";
	assert_true(kb_wire_in_package(&s, &pkgs, &inits));
	assert_int_equal(pkgs.nr, 2);
	assert_string_equal(pkgs.v[0], "tinymlp._kernelbot");
	assert_string_equal(pkgs.v[1], "tinymlp._kernelbot.gelu");
	assert_int_equal(inits.nr, 1);
	assert_string_equal(inits.v[0], "src/tinymlp/_kernelbot/__init__.py");
	strvec_clear(&pkgs);
	strvec_clear(&inits);
	/* a second operator of the package: _kernelbot is one already */
	put("repo/src/tinymlp/_kernelbot/__init__.py", "");
	assert_true(kb_wire_in_package(&s, &pkgs, &inits));
	assert_int_equal(pkgs.nr, 2);
	assert_int_equal(inits.nr, 0);
	strvec_clear(&pkgs);
	/* the root's kernelbot/ is in no package; nor is a folder of a root that is none */
	s.op_dir = "kernelbot/gelu";
	assert_false(kb_wire_in_package(&s, &pkgs, &inits));
	s.op_dir = "nsp/_kernelbot/gelu";
	assert_false(kb_wire_in_package(&s, &pkgs, &inits));
	assert_int_equal(pkgs.nr + inits.nr, 0);
	strbuf_release(&repo);
}

static void test_data_patterns(void **state)
{
	static const char *const want[] = {
		"*.cpp", "*.json", "*.md", "LICENSE", "backward/*.cpp", "backward/*.json",
		"include/*.h", "include/dlpack/*.h", "odd?dir/*.t?t", "reference/*.py",
	};
	static const char *const files[] = {
		"run/kernel.cpp", "run/ops.py", "run/binding.py", "run/__init__.py", "run/evidence.json",
		"run/kernel.json", "run/report.md", "run/LICENSE", "run/include/kernelbot_abi.h",
		"run/include/dlpack/dlpack.h", "run/reference/kernelbot_op_gelu.py",
		"run/backward/kernel.cpp", "run/backward/evidence.json", "run/.kb_build/0123/kernel.so",
		"run/odd dir/a.t\"t",
	};
	struct strvec pats = STRVEC_INIT;
	struct strbuf dir = STRBUF_INIT;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		put(files[i], "x");
	strbuf_addf(&dir, "%s/run", top);
	assert_int_equal(kb_wire_data_patterns(&pats, dir.buf), 0);
	assert_int_equal(pats.nr, ARRAY_SIZE(want));
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		assert_string_equal(pats.v[i], want[i]);
	strvec_clear(&pats);
	strbuf_addstr(&dir, "/missing");
	assert_int_equal(kb_wire_data_patterns(&pats, dir.buf), -1);
	strvec_clear(&pats);
	strbuf_release(&dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_op_dir),
		cmocka_unit_test(test_package),
		cmocka_unit_test(test_in_package),
		cmocka_unit_test(test_data_patterns),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
