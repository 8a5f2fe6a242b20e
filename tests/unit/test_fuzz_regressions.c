/*
 * The fuzz targets' inputs as ordinary tests (tests/fuzz/README.md): every
 * file of tests/fuzz/regressions/<target>/ (inputs that once crashed a
 * target or broke one of its invariants), tests/fuzz/corpus/<target>/ and
 * the folders tests/fuzz/seed_dirs names for it (its seeds) goes through
 * the target in this build, so `make test`
 * (and `make test-asan`, with the sanitizers) keeps every bug the fuzzers
 * found fixed. Fuzzing itself is `make fuzz`. One test per target.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "tests/fuzz/fuzz.h"

#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>

typedef int (*target_fn)(const uint8_t *data, size_t size);

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir through fn, in name order; how many. */
static size_t replay_dir(const char *dir, target_fn fn)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t nr = 0, alloc = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (nr == alloc) {
			alloc = alloc ? 2 * alloc : 64;
			names = xrealloc(names, alloc * sizeof(*names));
		}
		names[nr++] = xstrdup(e->d_name);
	}
	closedir(d);
	if (nr)
		qsort(names, nr, sizeof(*names), cmp_names);
	for (size_t i = 0; i < nr; i++) {
		struct strbuf path = STRBUF_INIT, data = STRBUF_INIT;

		strbuf_addf(&path, "%s/%s", dir, names[i]);
		if (kb_is_file(path.buf)) {
			if (strbuf_read_file(&data, path.buf, 0) < 0)
				fail_msg("could not read '%s'", path.buf);
			kb_fuzz_current = path.buf;
			fn((const uint8_t *)data.buf, data.len);
			kb_fuzz_current = NULL;
		}
		strbuf_release(&path);
		strbuf_release(&data);
		free(names[i]);
	}
	free(names);
	return nr;
}

/* The folders tests/fuzz/seed_dirs names for target name, through fn; how many files. */
static size_t replay_seed_dirs(const char *top, const char *name, target_fn fn)
{
	struct strbuf list = STRBUF_INIT, dir = STRBUF_INIT;
	size_t n = 0, nlen = strlen(name);
	char *line, *nl;

	strbuf_addf(&dir, "%s/tests/fuzz/seed_dirs", top);
	if (strbuf_read_file(&list, dir.buf, 0) < 0)
		fail_msg("could not read '%s'", dir.buf);
	for (line = list.buf; *line; line = nl ? nl + 1 : line + strlen(line)) {
		const char *d = line + nlen;

		if ((nl = strchr(line, '\n')))
			*nl = '\0';
		if (strncmp(line, name, nlen) || (*d != ' ' && *d != '\t'))
			continue;
		d += strspn(d, " \t");
		strbuf_reset(&dir);
		strbuf_addf(&dir, "%s/%s", top, d);
		n += replay_dir(dir.buf, fn);
	}
	strbuf_release(&list);
	strbuf_release(&dir);
	return n;
}

static void replay(const char *name, target_fn fn)
{
	const char *top = getenv("KB_TOP");
	struct strbuf dir = STRBUF_INIT;
	size_t seeds, regressions;

	if (!top || !*top)
		top = ".";
	strbuf_addf(&dir, "%s/tests/fuzz/corpus/%s", top, name);
	seeds = replay_dir(dir.buf, fn) + replay_seed_dirs(top, name, fn);
	strbuf_reset(&dir);
	strbuf_addf(&dir, "%s/tests/fuzz/regressions/%s", top, name);
	regressions = replay_dir(dir.buf, fn);
	print_message("%s: %zu seeds, %zu regression inputs\n", name, seeds, regressions);
	if (!seeds)
		fail_msg("no seed corpus in tests/fuzz/corpus/%s", name);
	strbuf_release(&dir);
}

#define REPLAY_TEST(name) \
	static void test_##name(void **state) \
	{ \
		replay(#name, kb_fuzz_##name); \
	}
KB_FUZZ_TARGETS(REPLAY_TEST)

#define REPLAY_ENTRY(name) cmocka_unit_test(test_##name),

int main(void)
{
	const struct CMUnitTest tests[] = {
		KB_FUZZ_TARGETS(REPLAY_ENTRY)
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
