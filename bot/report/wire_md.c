#include "core/common.h"
#include "core/markdown.h"
#include "core/util.h"
#include "report/wire.h"

/*
 * The pull request's "Wired into the model" section from evidence.json's
 * "wiring" (kb_wire_record): where the patch went, the wiring check's
 * verdict and figures, the repository's tests on the branch. Every string
 * is escaped: module paths come from the repository, config names and
 * reasons from the sandbox (sanitised and redacted by verifier/wiring.c).
 */

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *str(const cJSON *o, const char *key)
{
	const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));

	return s ? s : "";
}

/* "### <title>\n\n`module`: `Class`" */
static void head(struct strbuf *sb, const char *title, const cJSON *w)
{
	strbuf_addf(sb, "### %s\n\n", title);
	kb_md_code_n(sb, str(w, "module"), 200, false);
	strbuf_addstr(sb, ": ");
	kb_md_code_n(sb, str(w, "class"), 100, false);
}

static void where(struct strbuf *sb, const cJSON *w)
{
	head(sb, "Wired into the model", w);
	strbuf_addstr(sb, "'s `forward` calls the kernel when `ops.supported(");
	kb_md_escape_n(sb, str(w, "call"), 300);
	strbuf_addf(sb, ")` says its arguments are of the kind verified (device, dtype, rank, the "
		    "sizes that never varied) and of a size where it measured faster, and runs its "
		    "original code otherwise: one import "
		    "(line %.0f), two lines at the top of `forward` (line %.0f). The operator is ",
		    num(w, "import_line"), num(w, "guard_line"));
	kb_md_code_n(sb, str(w, "op_dir"), 200, false);
	strbuf_addstr(sb, "/ops.py. ");
	kb_md_escape_n(sb, str(w, "build"), 1000);
	strbuf_addstr(sb, "\n\n");
	if (*str(w, "build_add")) {
		/* a build file the bot left alone: the lines its maintainer adds, as they are */
		const char *add = str(w, "build_add");

		kb_md_fence(sb, strstr(str(w, "build_add_file"), ".toml") ? "toml" : "python", add,
			    strnlen(add, 2000));
		strbuf_addstr(sb, "\n");
	}
}

static void range_text(struct strbuf *sb, const cJSON *r)
{
	double lo = cJSON_IsNumber(cJSON_GetArrayItem(r, 0)) ? cJSON_GetArrayItem(r, 0)->valuedouble : 0;
	const cJSON *hi = cJSON_GetArrayItem(r, 1);

	if (lo <= 0 && !cJSON_IsNumber(hi))
		strbuf_addstr(sb, "of every size");
	else if (lo <= 0)
		strbuf_addf(sb, "of up to %.0f elements", hi->valuedouble);
	else if (!cJSON_IsNumber(hi))
		strbuf_addf(sb, "of %.0f elements or more", lo);
	else
		strbuf_addf(sb, "of %.0f to %.0f elements", lo, hi->valuedouble);
}

/* "**Speed gate**: ... float32 arguments of up to 16384 elements ...": where the kernel is called. */
static void speed_gate(struct strbuf *sb, const cJSON *w)
{
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(w, "speed_gate"), *d, *r, *c;
	int runs = 0, used = 0;

	if (!cJSON_IsObject(g))
		return;
	strbuf_addf(sb, "**Speed gate**: the module calls the kernel only where the evidence timed it at "
		    "%.2fx its own code or faster: ", num(g, "min_speedup"));
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(g, "faster")) {
		kb_md_code_n(sb, d->string ? d->string : "?", 20, false);
		strbuf_addstr(sb, " arguments ");
		cJSON_ArrayForEach(r, d) {
			range_text(sb, r);
			strbuf_addstr(sb, r->next ? " or " : "");
		}
		strbuf_addstr(sb, d->next ? "; " : "");
	}
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(w, "configs")) {
		runs++;
		used += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "used"));
	}
	strbuf_addf(sb, " (total elements of the kernel's tensor arguments); the original code runs on "
		    "every other size. The kernel is used on %d of the %d config and seed runs below.\n\n",
		    used, runs);
}

/* "**Settings guard**: ... `scale` = 0.5, `linear.in_features` = 256 ...": what configured() compares. */
static void settings_guard(struct strbuf *sb, const cJSON *w)
{
	const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(w, "attributes"), *sub, *a;
	size_t n = 0;

	if (!cJSON_IsObject(attrs) || !cJSON_GetArraySize(attrs))
		return;
	strbuf_addstr(sb, "**Settings guard**: the kernel computes with the verified module's settings baked "
		      "in, so `ops.configured(self)` lets it run only in a module built alike: ");
	cJSON_ArrayForEach(sub, attrs)
		cJSON_ArrayForEach(a, sub) {
			char *v = cJSON_PrintUnformatted(a);
			struct strbuf name = STRBUF_INIT;

			if (++n <= 8) {
				strbuf_addf(&name, "%s%s%s", sub->string, *sub->string ? "." : "", a->string);
				strbuf_addstr(sb, n > 1 ? ", " : "");
				kb_md_code_n(sb, name.buf, 120, false);
				strbuf_addstr(sb, " = ");
				kb_md_code_n(sb, v ? v : "?", 80, false);
			}
			free(v);
			strbuf_release(&name);
		}
	if (n > 8)
		strbuf_addf(sb, " and %zu more", n - 8);
	strbuf_addstr(sb, ".\n\n");
}

static void configs_table(struct strbuf *sb, const cJSON *w)
{
	static const char *const head[] = { "config", "seed", "kernel calls", "outputs max abs err",
					    "gradients max abs err", "", "used" };
	bool gated = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(w, "speed_gate"));
	const cJSON *c;

	kb_md_details_begin(sb, "wiring check per config and seed");
	kb_md_table_head(sb, head, ARRAY_SIZE(head) - !gated, "lrrrrll");
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(w, "configs")) {
		struct strbuf name = STRBUF_INIT;
		char seed[16], calls[16], out[32], grads[32];
		const char *cells[7];

		kb_md_escape_n(&name, str(c, "config"), 80);
		xsnprintf(seed, sizeof(seed), "%.0f", num(c, "seed"));
		xsnprintf(calls, sizeof(calls), "%.0f", num(c, "kernel_calls"));
		kb_md_fmt_err(out, sizeof(out), num(c, "outputs_max_abs"));
		kb_md_fmt_err(grads, sizeof(grads), num(c, "grads_max_abs"));
		cells[0] = name.buf;
		cells[1] = seed;
		cells[2] = calls;
		cells[3] = out;
		cells[4] = grads;
		cells[5] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "ok")) ? "agree" : "**differ**";
		cells[6] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "used")) ? "yes" : "no: slower here";
		kb_md_table_row(sb, cells, ARRAY_SIZE(cells) - !gated);
		strbuf_release(&name);
	}
	kb_md_details_end(sb);
}

static void tests_line(struct strbuf *sb, const cJSON *w)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(w, "tests"), *sel;

	if (!t)
		return;
	strbuf_addstr(sb, "**The repository's tests** on this branch (");
	cJSON_ArrayForEach(sel, cJSON_GetObjectItemCaseSensitive(w, "tests_selection")) {
		kb_md_code_n(sb, cJSON_GetStringValue(sel) ? cJSON_GetStringValue(sel) : "", 200, false);
		strbuf_addstr(sb, sel->next ? " " : "");
	}
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "ran"))) {
		strbuf_addstr(sb, ", in the sandbox) did not run: ");
		kb_md_escape_n(sb, str(t, "why"), 500);
		strbuf_addstr(sb, "\n\n");
		return;
	}
	strbuf_addf(sb, ", in the sandbox): **%.0f passed, %.0f failed**, %.0f skipped, %.0f errors; "
		    "the kernel ran %.0f times.\n\n", num(t, "passed"), num(t, "failed"), num(t, "skipped"),
		    num(t, "errors"), num(t, "kernel_calls"));
}

void kb_wire_markdown(struct strbuf *sb, const cJSON *w)
{
	const char *verdict = str(w, "verdict");
	const cJSON *c, *fb = cJSON_GetObjectItemCaseSensitive(w, "fallback");
	const cJSON *reason = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(w, "reasons"), 0);
	int runs = 0, agree = 0;

	if (!cJSON_IsObject(w))
		return;
	if (!strcmp(verdict, "not_wired")) {
		head(sb, "Not wired into the model", w);
		strbuf_addstr(sb, " is left unchanged: ");
		kb_md_escape_n(sb, str(reason, "message"), 500);
		strbuf_addstr(sb, ". The kernel and its binding are here for the record.\n\n");
		return;
	}
	where(sb, w);
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(w, "configs")) {
		runs++;
		agree += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "ok"));
	}
	strbuf_addstr(sb, "**Wiring check** (in the sandbox: the module's own forward and backward with "
		      "and without the kernel on the verified shapes, its buffers after them and its "
		      "eval-mode forward; the operator registered as ");
	kb_md_code_n(sb, *str(w, "implementation") ? str(w, "implementation") : "?", 40, false);
	strbuf_addf(sb, "): **%s**: %d of %d config and seed runs agree in outputs and gradients",
		    !strcmp(verdict, "wired") ? "wired" : !strcmp(verdict, "mismatch") ? "MISMATCH"
			: !strcmp(verdict, "unguarded") ? "NOT GUARDED" : "error",
		    agree, runs);
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fb, "ok")))
		strbuf_addf(sb, "; a %s call ran the original code", str(fb, "dtype"));
	else if (fb)
		strbuf_addstr(sb, "; **a call of another dtype did not run the original code**");
	if (num(w, "configs_other_init") > 0)
		strbuf_addf(sb, "; %.0f verified configs were made with other init arguments and left out",
			    num(w, "configs_other_init"));
	strbuf_addstr(sb, ".");
	if (reason) {
		strbuf_addstr(sb, " ");
		kb_md_escape_n(sb, str(reason, "message"), 500);
	}
	strbuf_addstr(sb, "\n\n");
	speed_gate(sb, w);
	settings_guard(sb, w);
	if (runs)
		configs_table(sb, w);
	tests_line(sb, w);
}
