/*
 * config.ini (core/config.c): any file either loads or fails with a
 * message; one that loads prints, for a `kernelbot run` child, a file that
 * loads again (the job loop hands exactly that to its children) and prints
 * the same way a second time.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "fuzz.h"

/* The child's config as text, without its first line (which names the file). */
static char *child_text(const struct kb_config *cfg, size_t *len)
{
	char *buf = NULL, *nl;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);

	if (!fp)
		die("out of memory");
	kb_config_print_for_child(cfg, fp);
	fclose(fp);
	nl = strchr(buf, '\n');
	FUZZ_CHECK(nl);
	memmove(buf, nl + 1, n - (size_t)(nl + 1 - buf) + 1);
	*len = strlen(buf);
	return buf;
}

int kb_fuzz_config(const uint8_t *data, size_t size)
{
	struct strbuf path = STRBUF_INIT;
	struct kb_config cfg, again;
	char *first = NULL, *second = NULL;
	size_t n1 = 0, n2 = 0;

	kb_fuzz_init();
	kb_fuzz_write(&path, kb_fuzz_dir(), "config.ini", (const char *)data, size);
	if (kb_config_load(&cfg, path.buf))
		goto out;
	kb_config_print(&cfg, kb_fuzz_null());
	first = child_text(&cfg, &n1);
	/* the child reads each model's key from KERNELBOT_LLM_KEY_<i> */
	for (size_t i = 0; i < cfg.nr_llm_models; i++) {
		char name[64], value[64];

		xsnprintf(name, sizeof(name), "%s%zu", KB_CHILD_LLM_KEY_ENV, i);
		xsnprintf(value, sizeof(value), "fuzz-key-%zu", i);
		setenv(name, value, 1);
	}
	kb_fuzz_write(&path, kb_fuzz_dir(), "child.ini", first, n1);
	FUZZ_CHECK(!kb_config_load(&again, path.buf));
	second = child_text(&again, &n2);
	FUZZ_CHECK(n1 == n2 && !memcmp(first, second, n1));
	kb_config_release(&again);
out:
	kb_config_release(&cfg);
	free(first);
	free(second);
	strbuf_release(&path);
	return 0;
}

KB_FUZZ_ENTRY(config)
