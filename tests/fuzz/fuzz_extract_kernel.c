/*
 * From a model's answer to a kernel (search/extract.c): the fenced code
 * block, the scanner's view of the source, its identity hash and the
 * kb-tune template parameters, rendered at a point the input picks.
 *
 * Invariants: a kernel comes out non-empty with LF line ends (CRLF
 * become LF), or a one-line reason does; the view has the source's length and newlines;
 * a rendered point starts with one #define per parameter.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "search/extract.h"
#include "fuzz.h"

static void check_view(const char *src, size_t len, bool blank_strings)
{
	char *view = kb_source_view(src, len, blank_strings);

	for (size_t i = 0; i < len; i++)
		FUZZ_CHECK((src[i] == '\n') == (view[i] == '\n'));
	FUZZ_CHECK(view[len] == '\0');
	free(view);
}

int kb_fuzz_extract_kernel(const uint8_t *data, size_t size)
{
	char *reply = kb_fuzz_str(data, size);
	struct strbuf out = STRBUF_INIT, why = STRBUF_INIT, point = STRBUF_INIT;
	struct kb_tparams tp;
	size_t digits[KB_TPARAM_MAX];
	char hex[65];

	kb_fuzz_init();
	if (kb_extract_kernel(reply, &out, &why)) {
		FUZZ_CHECK(why.len && !strchr(why.buf, '\n'));
		goto out;
	}
	FUZZ_CHECK(out.len);
	/* CRLF line ends become LF (a stray CR before one stays) */
	FUZZ_CHECK(strstr(reply, "\r\r") || !strstr(out.buf, "\r\n"));
	check_view(out.buf, out.len, false);
	check_view(out.buf, out.len, true);
	kb_source_hash(out.buf, hex);
	FUZZ_CHECK(strlen(hex) == 64);
	if (kb_tparams_parse(out.buf, &tp, &why)) {
		FUZZ_CHECK(tp.nr == 0 && why.len);
		goto out;
	}
	FUZZ_CHECK(tp.nr <= KB_TPARAM_MAX);
	for (size_t i = 0; i < tp.nr; i++) {
		FUZZ_CHECK(tp.p[i].nr_values >= 1 && tp.p[i].nr_values <= KB_TPARAM_MAX_VALUES);
		digits[i] = size ? data[i % size] % (tp.p[i].nr_values + 1) : 0;
	}
	kb_tparams_render(out.buf, &tp, digits, &point);
	for (size_t i = 0; i < tp.nr; i++)
		FUZZ_CHECK(strstr(point.buf, tp.p[i].name));
	if (tp.nr)
		FUZZ_CHECK(!strncmp(point.buf, "#define ", 8));
	strbuf_reset(&point);
	kb_tparams_point_name(&tp, digits, &point);
out:
	strbuf_release(&out);
	strbuf_release(&why);
	strbuf_release(&point);
	free(reply);
	return 0;
}

KB_FUZZ_ENTRY(extract_kernel)
