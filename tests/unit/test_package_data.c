#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "report/module_patch.h"
#include "report/wire.h"

#include <cjson/cJSON.h>

#include <setjmp.h>
#include <cmocka.h>

/*
 * The operator's folder as package data of the repository's build
 * (report/pyproject_patch.c, report/setup_data.c): the lines added where a
 * maintainer would add them, nothing else changed, and a refusal with the
 * reason wherever the build is not literal enough to edit safely.
 */

static const char *const patterns[] = { "*.cpp", "include/*.h", "reference/*.py" };
static const char *const packages[] = { "tinymlp._kernelbot", "tinymlp._kernelbot.gelu" };
static const struct kb_package_data pd = { "tinymlp._kernelbot.gelu", patterns, 3, packages, 2 };

#define ENTRY "\"tinymlp._kernelbot.gelu\" = [\"*.cpp\", \"include/*.h\", \"reference/*.py\"]"
#define DICT "\"tinymlp._kernelbot.gelu\": [\"*.cpp\", \"include/*.h\", \"reference/*.py\"]"

typedef int (*patch_fn)(struct strbuf *, const char *, size_t, const struct kb_package_data *, struct strbuf *);

/* fn on src: want, or KB_ENOTSUPPORTED with a why that holds needle (want NULL). */
static void expect(patch_fn fn, const char *src, const char *want, const char *needle)
{
	struct strbuf out = STRBUF_INIT, why = STRBUF_INIT;

	assert_int_equal(fn(&out, src, strlen(src), &pd, &why), want ? 0 : KB_ENOTSUPPORTED);
	if (want) {
		assert_string_equal(out.buf, want);
		assert_int_equal(why.len, 0);
	} else if (!strstr(why.buf, needle)) {
		fail_msg("'%s' lacks '%s'", why.buf, needle);
	}
	strbuf_release(&out);
	strbuf_release(&why);
}

static void toml_ok(const char *src, const char *want)
{
	expect(kb_pyproject_package_data, src, want, NULL);
}

static void toml_refused(const char *src, const char *needle)
{
	expect(kb_pyproject_package_data, src, NULL, needle);
}

static void setup_ok(const char *src, const char *want)
{
	expect(kb_setup_package_data, src, want, NULL);
}

static void setup_refused(const char *src, const char *needle)
{
	expect(kb_setup_package_data, src, NULL, needle);
}

static void test_pyproject_append(void **state)
{
	const char *tinymlp =
		"[project]\nname = \"tinymlp\"\ndescription = \"\"\"a [tool.setuptools.package-data]\n"
		"[tool.setuptools.package-data]\n\"\"\"\n"
		"# [tool.setuptools.package-data] in a comment\n"
		"classifiers = [\n    \"a = b\",\n    [\"nested\"],\n]\n\n"
		"[build-system]\nrequires = [\"setuptools>=61\"]\n"
		"build-backend = \"setuptools.build_meta\"  # the default\n\n"
		"[tool.setuptools.packages.find]\nwhere = [\"src\"]\n";

	(void)state;
	/* no table: appended, the rest untouched; strings and comments that look like one are no table */
	{
		struct strbuf want = STRBUF_INIT;

		strbuf_addf(&want, "%s\n[tool.setuptools.package-data]\n" ENTRY "\n", tinymlp);
		toml_ok(tinymlp, want.buf);
		strbuf_release(&want);
	}
	/* no final newline, CRLF, no [build-system] at all (pip's default is setuptools) */
	toml_ok("[project]\r\nname = \"x\"", "[project]\r\nname = \"x\"\r\n\r\n[tool.setuptools.package-data]\r\n"
		ENTRY "\r\n");
	assert_true(kb_pyproject_configures_setuptools(tinymlp, strlen(tinymlp)));
	assert_false(kb_pyproject_configures_setuptools("[project]\n# [tool.setuptools]\n", 29));
}

static void test_pyproject_tables(void **state)
{
	(void)state;
	/* the table there: the entry first in it */
	toml_ok("[tool.setuptools.package-data]\n\"other\" = [\"*.txt\"]\n\n[tool.black]\n",
		"[tool.setuptools.package-data]\n" ENTRY "\n\"other\" = [\"*.txt\"]\n\n[tool.black]\n");
	/* listed packages get the missing ones at the head, inline or a line each */
	toml_ok("[tool.setuptools]\npackages = [\"tinymlp\", 'tinymlp._kernelbot']\n",
		"[tool.setuptools]\npackages = [\"tinymlp._kernelbot.gelu\", \"tinymlp\", 'tinymlp._kernelbot']\n\n"
		"[tool.setuptools.package-data]\n" ENTRY "\n");
	toml_ok("[tool.setuptools]\npackages = [  # ours\n  \"tinymlp\",\n]\n",
		"[tool.setuptools]\npackages = [  # ours\n  \"tinymlp._kernelbot\",\n  \"tinymlp._kernelbot.gelu\",\n"
		"  \"tinymlp\",\n]\n\n[tool.setuptools.package-data]\n" ENTRY "\n");
	/* an inline find without filters finds them */
	toml_ok("[tool.setuptools]\npackages = {find = {where = [\"src\"]}}\n",
		"[tool.setuptools]\npackages = {find = {where = [\"src\"]}}\n\n[tool.setuptools.package-data]\n" ENTRY "\n");
	/* a find whose include takes the subpackages, whose exclude does not drop them */
	toml_ok("[tool.setuptools.packages.find]\ninclude = [\"tinymlp*\"]\nexclude = [\"tests*\"]\n",
		"[tool.setuptools.packages.find]\ninclude = [\"tinymlp*\"]\nexclude = [\"tests*\"]\n\n"
		"[tool.setuptools.package-data]\n" ENTRY "\n");
}

static void test_pyproject_refusals(void **state)
{
	(void)state;
	toml_refused("[build-system]\nbuild-backend = \"hatchling.build\"\n", "builds with hatchling.build");
	toml_refused("[tool.setuptools]\npackage-data = {\"x\" = [\"*.txt\"]}\n", "package-data in [tool.setuptools]");
	toml_refused("[tool.setuptools.package-data]\n\"tinymlp._kernelbot.gelu\" = [\"*\"]\n", "names tinymlp._kernelbot.gelu");
	toml_refused("[tool.setuptools]\npackages = \"find:\"\n", "packages is no list");
	toml_refused("[tool.setuptools]\npackages = {find = {include = [\"tinymlp\"]}}\n", "finds with include");
	toml_refused("[tool.setuptools.packages.find]\ninclude = [\"tinymlp\"]\n", "leaves tinymlp._kernelbot out");
	toml_refused("[tool.setuptools.packages.find]\nexclude = [\"*._kernelbot*\"]\n", "leaves tinymlp._kernelbot out");
}

static void test_setup(void **state)
{
	(void)state;
	/* ext_repo's: a packages list gets the subpackages, package_data the line after it */
	setup_ok("from setuptools import setup\n\nsetup(\n    name=\"tinymlp\",\n    packages=[\"tinymlp\"],\n"
		 "    ext_modules=[],\n)\n",
		 "from setuptools import setup\n\nsetup(\n    name=\"tinymlp\",\n"
		 "    packages=[\"tinymlp._kernelbot\", \"tinymlp._kernelbot.gelu\", \"tinymlp\"],\n"
		 "    package_data={" DICT "},\n    ext_modules=[],\n)\n");
	/* find_packages() finds them; one line: after the argument, on it */
	setup_ok("import setuptools\nsetuptools.setup(name='x', packages=setuptools.find_packages('src'), zip_safe=False)\n",
		 "import setuptools\nsetuptools.setup(name='x', packages=setuptools.find_packages('src'), "
		 "package_data={" DICT "}, zip_safe=False)\n");
	/* packages last or none: package_data first in the call; `def setup(` is no call */
	setup_ok("def setup(x):\n    pass\nsetup(name='x')\n",
		 "def setup(x):\n    pass\nsetup(package_data={" DICT "}, name='x')\n");
	setup_ok("setup(\r\n    name='x',\r\n    packages=find_packages()\r\n)\r\n",
		 "setup(\r\n    package_data={" DICT "},\r\n    name='x',\r\n    packages=find_packages()\r\n)\r\n");
	/* a package_data dict: the entry at its head */
	setup_ok("setup(packages=find_packages(), package_data={\n    \"other\": [\"*.txt\"],\n})\n",
		 "setup(packages=find_packages(), package_data={\n    " DICT ",\n    \"other\": [\"*.txt\"],\n})\n");
}

static void test_setup_refusals(void **state)
{
	(void)state;
	setup_refused("print('no build')\n", "calls no setup()");
	setup_refused("setup(name='a')\nsetup(name='b')\n", "more than once");
	setup_refused("setup(**CONFIG)\n", "**dict");
	setup_refused("setup(packages=find_packages(include=['tinymlp']))\n", "takes include=");
	setup_refused("setup(packages=PACKAGES)\n", "computes its packages");
	setup_refused("setup(package_data=DATA)\n", "no dict literal");
	setup_refused("setup(package_data={'tinymlp._kernelbot.gelu': ['*']})\n", "names tinymlp._kernelbot.gelu");
	setup_refused("setup(name='x'\n", "never closed");
}

/* A build file left alone: the body gives the lines to add, fenced, as they are. */
static void test_markdown_build_add(void **state)
{
	cJSON *w = cJSON_Parse(
		"{\"verdict\": \"wired\", \"module\": \"src/p/m.py\", \"class\": \"M\", \"call\": \"x\","
		" \"op_dir\": \"src/p/_kernelbot/m\", \"build\": \"Left alone.\","
		" \"build_add\": \"[tool.setuptools.package-data]\\n\\\"p._kernelbot.m\\\" = [\\\"*.cpp\\\"]\\n\","
		" \"build_add_file\": \"pyproject.toml\"}");
	struct strbuf md = STRBUF_INIT;

	(void)state;
	assert_non_null(w);
	kb_wire_markdown(&md, w);
	if (!strstr(md.buf, "`src/p/_kernelbot/m`/ops.py. Left alone.\n\n```toml\n"
			    "[tool.setuptools.package-data]\n\"p._kernelbot.m\" = [\"*.cpp\"]\n```\n"))
		fail_msg("%s", md.buf);
	/* without build_add: no block */
	cJSON_DeleteItemFromObject(w, "build_add");
	strbuf_reset(&md);
	kb_wire_markdown(&md, w);
	assert_null(strstr(md.buf, "```toml"));
	strbuf_release(&md);
	cJSON_Delete(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pyproject_append),
		cmocka_unit_test(test_pyproject_tables),
		cmocka_unit_test(test_pyproject_refusals),
		cmocka_unit_test(test_setup),
		cmocka_unit_test(test_setup_refusals),
		cmocka_unit_test(test_markdown_build_add),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
