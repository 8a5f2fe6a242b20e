#include "core/common.h"
#include "core/log.h"
#include "core/util.h"
#include "report/headline.h"
#include "report/passes.h"
#include "report/wire.h"
#include "report/pr_body.h"
#include "core/hash.h"
#include "verifier/evidence.h"

#include <inttypes.h>
#include <math.h>

/*
 * The pull request body is a list of sections rendered in order. When the
 * whole does not fit, sections with a drop rank (the details blocks and the
 * chart) go first, highest rank first; then every table is cut to its first
 * rows. Rendering is cheap, so each attempt renders everything again.
 */

struct body_ctx {
	const struct kb_pr_report *r;
	const cJSON *ev;
	const cJSON *configs;
	size_t nconfigs;
	const char *backend;
	struct kb_headline h;     /* the headline policy's figures (report/headline.h) */
	bool verified, timed, any_compile;
	size_t max_rows;     /* rows per table; SIZE_MAX: all */
	bool cut_rows;       /* set by a table that left rows out */
};

/* "float32 [16, 16384]" for each tensor of list, comma separated, at most max; "`x` float32 [..]" with names. */
static void add_tensors(struct strbuf *sb, const cJSON *list, size_t max, bool names)
{
	const cJSON *t;
	size_t n = 0, total = (size_t)cJSON_GetArraySize(list);

	cJSON_ArrayForEach(t, list) {
		const cJSON *shape = kb_md_ev_arr(t, "shape"), *d;
		bool first = true;

		if (n == max) {
			strbuf_addf(sb, ", … %zu more", total - n);
			break;
		}
		if (n++)
			strbuf_addstr(sb, ", ");
		if (names && kb_md_ev_str(t, "name")) {
			kb_md_code_n(sb, kb_md_ev_str(t, "name"), 40, false);
			strbuf_addch(sb, ' ');
		}
		kb_md_escape_n(sb, kb_md_ev_str(t, "dtype") ? kb_md_ev_str(t, "dtype") : "?", 16);
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "scalar")) || !shape) {
			strbuf_addstr(sb, " scalar");
			continue;
		}
		strbuf_addstr(sb, " [");
		cJSON_ArrayForEach(d, shape) {
			strbuf_addf(sb, "%s%.0f", first ? "" : ", ", cJSON_IsNumber(d) ? d->valuedouble : -1.0);
			first = false;
		}
		strbuf_addch(sb, ']');
	}
}

/* v with fmt (one double conversion), or "n/a" when it is not finite. */
static void fmt_num(char *buf, size_t size, const char *fmt, double v)
{
	if (isfinite(v))
		snprintf(buf, size, fmt, v);
	else
		snprintf(buf, size, "n/a");
}

/* --- operator name and title --- */

void kb_pr_operator_name(struct strbuf *out, const char *operator_path)
{
	const char *p = operator_path ? operator_path : "";
	size_t len = strlen(p), start, end;

	strbuf_reset(out);
	while (len > 1 && p[len - 1] == '/')
		len--;
	end = len;
	start = end;
	while (start > 0 && p[start - 1] != '/')
		start--;
	/* robust-kbench: ".../task/func_forward.py" names the task folder */
	if (end - start > 5 && !strncmp(p + start, "func_", 5) && start > 1) {
		end = start - 1;
		start = end;
		while (start > 0 && p[start - 1] != '/')
			start--;
	}
	if (end - start > 3 && !strncmp(p + end - 3, ".py", 3))
		end -= 3;
	if (end == start) {
		strbuf_addstr(out, "operator");
		return;
	}
	/* a title is plain text: keep it printable, one line, at most 80 code points */
	{
		struct strbuf tmp = STRBUF_INIT;
		size_t cut;

		kb_md_add_utf8(&tmp, p + start, end - start);
		for (size_t i = 0; i < tmp.len; i++)
			if ((unsigned char)tmp.buf[i] < 0x20 || tmp.buf[i] == 0x7F)
				tmp.buf[i] = '_';
		cut = kb_utf8_prefix(tmp.buf, tmp.len, 80, SIZE_MAX);
		strbuf_add(out, tmp.buf, cut);
		if (cut < tmp.len)
			strbuf_addstr(out, "…");
		strbuf_release(&tmp);
	}
}

int kb_pr_title(struct strbuf *out, const struct kb_pr_report *r)
{
	struct strbuf name = STRBUF_INIT;
	struct kb_headline h;
	const char *scope;

	if (!r->evidence)
		return error("no evidence to title the pull request for '%s'",
			     r->job.operator_path ? r->job.operator_path : "?");
	kb_pr_operator_name(&name, r->job.operator_path);
	kb_headline_of(&h, r->evidence, r->noise_band);
	scope = h.own_configs ? "on its own shapes" : "over all configs";
	strbuf_reset(out);
	strbuf_addstr(out, "kernelbot: ");
	if (!h.verified) {
		strbuf_addf(out, "%s, no verified kernel", name.buf);
	} else if (!isfinite(h.speedup)) {
		strbuf_addf(out, "%s verified kernel (not timed)", name.buf);
	} else {
		/* the first words: a reviewer reading only the title must see it */
		if (h.slower)
			strbuf_addf(out, "slower than eager on %zu of %zu configs: ", h.slower, h.timed);
		if (h.speedup >= 1.005)
			strbuf_addf(out, "%s %.2fx faster %s", name.buf, h.speedup, scope);
		else
			strbuf_addf(out, "%s, no faster kernel found (%.2fx %s)", name.buf, h.speedup, scope);
	}
	strbuf_release(&name);
	return 0;
}

/* --- sections --- */

static void sec_summary(struct strbuf *sb, struct body_ctx *c)
{
	const struct kb_pr_report *r = c->r;
	const struct kb_headline *h = &c->h;
	const cJSON *summary = kb_md_ev_obj(c->ev, "summary");
	double seeds = kb_md_ev_num(summary, "seeds");
	const char *kind = c->backend && !strcmp(c->backend, "cpu") ? "CPU" : "CUDA";
	char sp[32], spc[32];

	kb_md_fmt_speedup(sp, sizeof(sp), h->speedup);
	kb_md_fmt_speedup(spc, sizeof(spc), h->speedup_compile);
	strbuf_addstr(sb, "**kernelbot** ");
	if (!c->verified) {
		strbuf_addf(sb, "found no verified %s kernel for ", kind);
		kb_md_code(sb, r->job.operator_path, false);
		strbuf_addstr(sb, "; the evidence below says why.\n\n");
		return;
	}
	if (!c->timed) {
		strbuf_addf(sb, "verified a %s kernel for ", kind);
		kb_md_code(sb, r->job.operator_path, false);
		strbuf_addf(sb, " on %zu configs", c->nconfigs);
		if (isfinite(seeds))
			strbuf_addf(sb, " × %.0f seeds", seeds);
		strbuf_addstr(sb, "; it was not timed.\n\n");
		kb_headline_md_alerts(sb, &c->h);
		return;
	}
	if (h->speedup >= 1.005) {
		strbuf_addf(sb, "found a %s kernel for ", kind);
		kb_md_code(sb, r->job.operator_path, false);
		strbuf_addf(sb, " that runs **%s faster** than PyTorch eager ", sp);
	} else {
		strbuf_addstr(sb, "found no kernel faster than PyTorch eager for ");
		kb_md_code(sb, r->job.operator_path, false);
		strbuf_addf(sb, ": the best verified %s kernel runs at **%s** ", kind, sp);
	}
	kb_headline_md_scope(sb, h);
	strbuf_addstr(sb, ".");
	if (c->any_compile && isfinite(h->speedup_compile))
		strbuf_addf(sb, " Against torch.compile there: **%s**.", spc);
	if (h->timed > 1) {
		strbuf_addch(sb, ' ');
		kb_headline_md_spread(sb, h);
	}
	if (isfinite(seeds))
		strbuf_addf(sb, " Verified on %zu config%s × %.0f seed%s.", c->nconfigs,
			    c->nconfigs == 1 ? "" : "s", seeds, seeds == 1 ? "" : "s");
	if (h->speedup < 1.005 && r->passes && r->passes->backward)
		strbuf_addstr(sb, " Its forward alone would not speed the operator up: with autograd, "
			      "see both passes together below.");
	else if (h->speedup < 1.005)
		strbuf_addstr(sb, " It is here for the record: merging it would not speed the operator up.");
	strbuf_addstr(sb, "\n\n");
	kb_headline_md_alerts(sb, h);
	if (r->passes)
		kb_passes_summary(sb, c->ev, r->passes);
	kb_headline_md_screening(sb, h, r->screening_speedup);
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(summary, "suspicious")))
		strbuf_addstr(sb, "> [!WARNING]\n> The speedup is above the suspicious threshold: "
			      "such numbers have come from harness exploits before. Every check "
			      "below passed, but review the kernel with care.\n\n");
}

/* Cut note after a table that left rows out; a blank line first so it is not a row. */
static void more_rows(struct strbuf *sb, struct body_ctx *c, size_t left, const char *what)
{
	const char *path = c->r->evidence_path;

	if (!left)
		return;
	c->cut_rows = true;
	strbuf_addf(sb, "\n… %zu more %s", left, what);
	if (path) {
		strbuf_addstr(sb, " in ");
		kb_md_code(sb, path, false);
	}
	strbuf_addstr(sb, "\n");
}

static void sec_passes(struct strbuf *sb, struct body_ctx *c)
{
	if (c->r->passes && c->verified)
		kb_passes_section(sb, c->ev, c->r->passes);
}

/* the kernel wired into the repository's module, and the proof (report/wire.h) */
static void sec_wiring(struct strbuf *sb, struct body_ctx *c)
{
	if (c->verified)
		kb_wire_markdown(sb, cJSON_GetObjectItemCaseSensitive(c->ev, "wiring"));
}

static void sec_speedup(struct strbuf *sb, struct body_ctx *c)
{
	char band[32], least[32];

	strbuf_addstr(sb, "### Speedup\n\n");
	if (kb_md_ev_speedup_table(sb, c->ev, c->max_rows, c->r->evidence_path))
		c->cut_rows = true;
	if (!c->h.timed)
		return;
	kb_headline_fmt_band(band, sizeof(band), c->h.band);
	kb_headline_fmt_band(least, sizeof(least), c->h.min_band);
	strbuf_addf(sb, "Noise band: **±%s** (the timings' 95%% confidence, at least %s): speedups "
		    "closer than that are the same speedup, and the Reproduce command below lands "
		    "within it.", band, least);
	if (c->h.slower)
		strbuf_addf(sb, " %zu of %zu configs are slower than eager beyond it (named in the "
			    "warning above).", c->h.slower, c->h.timed);
	strbuf_addstr(sb, "\n\n");
}

static void sec_timing_details(struct strbuf *sb, struct body_ctx *c)
{
	static const char *const head[] = { "config", "kernel ms ± IQR", "eager ms ± IQR",
					     "torch.compile ms ± IQR", "reps", "GB/s", "TFLOP/s" };
	const cJSON *cfg;
	size_t rows = 0;

	if (!c->timed)
		return;
	kb_md_details_begin(sb, "Timing details: median ± inter-quartile range (share of the median), per config");
	kb_md_table_head(sb, head, ARRAY_SIZE(head), "lrrrrrr");
	cJSON_ArrayForEach(cfg, c->configs) {
		const cJSON *t = kb_md_ev_obj(cfg, "timing");
		const char *names[3] = { "kernel", "eager", "compile" };
		struct strbuf cell[4] = { STRBUF_INIT, STRBUF_INIT, STRBUF_INIT, STRBUF_INIT };
		char reps[32], gbps[32], tfl[32];
		const char *cells[7];
		double v;

		if (rows == c->max_rows) {
			rows++;
			continue;
		}
		kb_md_ev_config_label(&cell[0], cfg, rows);
		for (int i = 0; i < 3; i++) {
			const cJSON *m = kb_md_ev_obj(t, names[i]);
			char a[32];
			double med = kb_md_ev_num(m, "median_ms"), iqr = kb_md_ev_num(m, "iqr_ms");

			kb_md_fmt_ms(a, sizeof(a), med);
			if (!m)
				strbuf_addstr(&cell[i + 1], "n/a");
			else if (isfinite(iqr) && med > 0)
				strbuf_addf(&cell[i + 1], "%s ± %.1f%%", a, 100 * iqr / med);
			else
				strbuf_addstr(&cell[i + 1], a);
		}
		v = kb_md_ev_num(kb_md_ev_obj(t, "kernel"), "reps");
		fmt_num(reps, sizeof(reps), "%.0f", v);
		v = kb_md_ev_num(t, "gbps");
		fmt_num(gbps, sizeof(gbps), "%.1f", v);
		v = kb_md_ev_num(t, "tflops");
		fmt_num(tfl, sizeof(tfl), "%.3g", v);
		cells[0] = cell[0].buf;
		cells[1] = cell[1].buf;
		cells[2] = cell[2].buf;
		cells[3] = cell[3].buf;
		cells[4] = reps;
		cells[5] = gbps;
		cells[6] = tfl;
		kb_md_table_row(sb, cells, 7);
		for (int i = 0; i < 4; i++)
			strbuf_release(&cell[i]);
		rows++;
	}
	if (rows > c->max_rows)
		more_rows(sb, c, rows - c->max_rows, "configs");
	kb_md_details_end(sb);
}

/* What each check catches, for the list of checks passed. */
static const struct {
	const char *name, *what;
} check_text[] = {
	{ "load", "the kernel builds and loads" },
	{ "kernel_error", "the kernel returns no error" },
	{ "correctness", "outputs match the reference within tolerance" },
	{ "nan_mismatch", "NaN and Inf positions match the reference" },
	{ "unwritten_output", "every output element is written (outputs are poisoned first)" },
	{ "out_of_bounds", "guard bands around the outputs are untouched" },
	{ "input_mutation", "inputs and parameters are unchanged after the call" },
	{ "cached_result", "no result reused from an earlier call" },
	{ "precision", "no silent fp16/bf16/TF32 downgrade" },
	{ "stream", "all work is done on the given stream before the call returns" },
	{ "nondeterminism", "two calls on the same inputs agree" },
	{ "torch_fallback", "the candidate's own extension is called (not torch alone)" },
	{ "no_custom_work", "with its custom kernels switched off the result is wrong (they do work)" },
	{ "shape", "no failure pattern of sizes baked in for some shapes" },
	{ "memcheck", "compute-sanitizer finds no memory error" },
};

static const char *check_what(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(check_text); i++)
		if (!strcmp(check_text[i].name, name))
			return check_text[i].what;
	return NULL;
}

struct check_count {
	const char *name;
	size_t pass, fail, skip;
};

#define MAX_CHECKS 32

static size_t count_checks(const cJSON *configs, struct check_count *out, size_t max)
{
	const cJSON *cfg, *ck;
	size_t n = 0;

	cJSON_ArrayForEach(cfg, configs) {
		cJSON_ArrayForEach(ck, kb_md_ev_obj(cfg, "checks")) {
			const char *v = cJSON_IsString(ck) ? ck->valuestring : "";
			size_t i;

			if (!ck->string)
				continue;
			for (i = 0; i < n && strcmp(out[i].name, ck->string); i++)
				;
			if (i == n) {
				if (n == max)
					continue;
				out[n].name = ck->string;
				out[n].pass = out[n].fail = out[n].skip = 0;
				n++;
			}
			if (!strcmp(v, "pass"))
				out[i].pass++;
			else if (!strcmp(v, "fail"))
				out[i].fail++;
			else
				out[i].skip++;
		}
	}
	return n;
}

/* Distinct "float32 atol 1e-04 rtol 1e-04" over the configs' first outputs. */
static void add_tolerances(struct strbuf *sb, const cJSON *configs)
{
	char seen[8][96];
	size_t n = 0;
	const cJSON *cfg;

	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *outs = kb_md_ev_arr(cfg, "outputs");
		const char *dtype = kb_md_ev_str(cJSON_GetArrayItem(outs, 0), "dtype");
		double atol = kb_md_ev_num(cfg, "atol"), rtol = kb_md_ev_num(cfg, "rtol");
		char line[96];
		size_t i;

		if (!isfinite(atol) && !isfinite(rtol))
			continue;
		snprintf(line, sizeof(line), "%.24s atol %.0e rtol %.0e", dtype ? dtype : "output",
			 atol, rtol);
		for (i = 0; i < n && strcmp(seen[i], line); i++)
			;
		if (i < n || n == ARRAY_SIZE(seen))
			continue;
		kb_strlcpy(seen[n], line, sizeof(seen[n]));
		if (n++)
			strbuf_addstr(sb, ", ");
		kb_md_escape(sb, line);
	}
	if (!n)
		strbuf_addstr(sb, "n/a");
}

static void sec_correctness(struct strbuf *sb, struct body_ctx *c)
{
	const cJSON *summary = kb_md_ev_obj(c->ev, "summary"), *cfg, *reason;
	const cJSON *kb = kb_md_ev_obj(c->ev, "kernelbot");
	const cJSON *statics = kb_md_ev_arr(kb, "static");
	struct check_count checks[MAX_CHECKS];
	size_t nchecks = count_checks(c->configs, checks, MAX_CHECKS), i, shown = 0;
	double seeds = kb_md_ev_num(summary, "seeds"), trials = kb_md_ev_num(summary, "trials");
	double max_abs = NAN, max_rel = NAN;
	bool all_pass = c->verified;
	char a[32], b[32];

	cJSON_ArrayForEach(cfg, c->configs) {
		double x = kb_md_ev_num(cfg, "max_abs_err"), y = kb_md_ev_num(cfg, "max_rel_err");

		if (isfinite(x) && !(x <= max_abs))
			max_abs = x;
		if (isfinite(y) && !(y <= max_rel))
			max_rel = y;
	}
	for (i = 0; i < nchecks; i++)
		if (checks[i].fail)
			all_pass = false;

	strbuf_addstr(sb, "### Correctness\n\n");
	strbuf_addf(sb, "%s on **%zu config%s", c->verified ? "Verified" : "Checked", c->nconfigs,
		    c->nconfigs == 1 ? "" : "s");
	if (isfinite(seeds))
		strbuf_addf(sb, " × %.0f seeds**", seeds);
	else
		strbuf_addstr(sb, "**");
	if (isfinite(trials))
		strbuf_addf(sb, " (%.0f trials", trials);
	else
		strbuf_addstr(sb, " (");
	strbuf_addf(sb, "%skernel, reference, kernel again on fresh inputs and "
		    "re-initialised parameters, TF32 off in the reference). ", isfinite(trials) ? "; each: " : "each: ");
	kb_md_fmt_err(a, sizeof(a), max_abs);
	kb_md_fmt_err(b, sizeof(b), max_rel);
	strbuf_addf(sb, "Max abs error **%s**, max rel error **%s**; tolerances: ", a, b);
	add_tolerances(sb, c->configs);
	strbuf_addstr(sb, " (atol scaled with the input magnitude).");
	/* coverage stated exactly: what was generated and not checked, and why */
	if (c->h.dropped)
		strbuf_addf(sb, " **%zu more config%s %s left out** by the verifier; each is listed with "
			    "the reason under \"Configs left out\".", c->h.dropped,
			    c->h.dropped == 1 ? "" : "s", c->h.dropped == 1 ? "was" : "were");
	strbuf_addstr(sb, "\n\n");

	strbuf_addstr(sb, all_pass ? "Every check passed on every config:\n\n" : "Checks:\n\n");
	for (i = 0; i < nchecks; i++) {
		const char *what = check_what(checks[i].name);
		size_t total = checks[i].pass + checks[i].fail + checks[i].skip;

		strbuf_addstr(sb, checks[i].fail ? "- ❌ " : checks[i].pass ? "- ✅ " : "- ➖ ");
		kb_md_code_n(sb, checks[i].name, 40, false);
		if (what)
			strbuf_addf(sb, ": %s", what);
		if (checks[i].fail)
			strbuf_addf(sb, " (failed on %zu of %zu configs)", checks[i].fail, total);
		else if (checks[i].skip && checks[i].pass)
			strbuf_addf(sb, " (passed on %zu, skipped on %zu configs)", checks[i].pass,
				    checks[i].skip);
		else if (checks[i].skip)
			strbuf_addstr(sb, " (skipped: does not apply to this kernel)");
		else
			strbuf_addf(sb, " (%zu/%zu configs)", checks[i].pass, total);
		strbuf_addch(sb, '\n');
	}
	if (kb) {
		size_t nstatic = (size_t)cJSON_GetArraySize(statics);

		if (!nstatic)
			strbuf_addstr(sb, "- ✅ `static`: source checks found no torch call, fallback or timer patching\n");
		else
			strbuf_addf(sb, "- ➖ `static`: %zu finding%s, none rejecting\n", nstatic,
				    nstatic == 1 ? "" : "s");
	}
	/* flags and rejections the harness reported */
	cJSON_ArrayForEach(reason, kb_md_ev_arr(c->ev, "reasons")) {
		const char *check = kb_md_ev_str(reason, "check");
		const char *msg = kb_md_ev_str(reason, "message");

		if (shown == 10) {
			strbuf_addf(sb, "- … %d more\n", cJSON_GetArraySize(kb_md_ev_arr(c->ev, "reasons")) - 10);
			break;
		}
		strbuf_addstr(sb, check && !strcmp(check, "suspicious_speedup") ? "- ⚠️ " : "- ❌ ");
		kb_md_code_n(sb, check ? check : "?", 40, false);
		if (msg) {
			strbuf_addstr(sb, ": ");
			kb_md_escape_n(sb, msg, 300);
		}
		strbuf_addch(sb, '\n');
		shown++;
	}
	strbuf_addch(sb, '\n');
}

static void sec_errors_details(struct strbuf *sb, struct body_ctx *c)
{
	static const char *const head[] = { "config", "inputs", "trials", "max abs err",
					     "max rel err", "atol", "rtol" };
	const cJSON *cfg;
	size_t rows = 0;

	if (!c->nconfigs)
		return;
	{
		char summary[96];

		snprintf(summary, sizeof(summary), "Per-config errors (%zu configs)", c->nconfigs);
		kb_md_details_begin(sb, summary);
	}
	kb_md_table_head(sb, head, ARRAY_SIZE(head), "llrrrrr");
	cJSON_ArrayForEach(cfg, c->configs) {
		struct strbuf label = STRBUF_INIT, inputs = STRBUF_INIT;
		char trials[32], ea[32], er[32], at[32], rt[32];
		const char *cells[7];
		double v;

		if (rows == c->max_rows) {
			rows++;
			continue;
		}
		kb_md_ev_config_label(&label, cfg, rows);
		add_tensors(&inputs, kb_md_ev_arr(cfg, "inputs"), 4, false);
		v = kb_md_ev_num(cfg, "trials");
		fmt_num(trials, sizeof(trials), "%.0f", v);
		kb_md_fmt_err(ea, sizeof(ea), kb_md_ev_num(cfg, "max_abs_err"));
		kb_md_fmt_err(er, sizeof(er), kb_md_ev_num(cfg, "max_rel_err"));
		v = kb_md_ev_num(cfg, "atol");
		fmt_num(at, sizeof(at), "%.0e", v);
		v = kb_md_ev_num(cfg, "rtol");
		fmt_num(rt, sizeof(rt), "%.0e", v);
		cells[0] = label.buf;
		cells[1] = inputs.buf;
		cells[2] = trials;
		cells[3] = ea;
		cells[4] = er;
		cells[5] = at;
		cells[6] = rt;
		kb_md_table_row(sb, cells, 7);
		strbuf_release(&label);
		strbuf_release(&inputs);
		rows++;
	}
	if (rows > c->max_rows)
		more_rows(sb, c, rows - c->max_rows, "configs");
	kb_md_details_end(sb);
}

static void sec_dropped_details(struct strbuf *sb, struct body_ctx *c)
{
	static const char *const head[] = { "config", "kind", "why it was left out" };
	const cJSON *dropped = kb_md_ev_arr(c->ev, "dropped_configs"), *d;
	size_t n = (size_t)cJSON_GetArraySize(dropped), rows = 0;
	char summary[96];

	if (!n)
		return;
	snprintf(summary, sizeof(summary), "Configs left out (%zu)", n);
	kb_md_details_begin(sb, summary);
	kb_md_table_head(sb, head, ARRAY_SIZE(head), NULL);
	cJSON_ArrayForEach(d, dropped) {
		if (rows < c->max_rows)
			kb_md_dropped_row(sb, d, rows, 200);
		rows++;
	}
	if (rows > c->max_rows)
		more_rows(sb, c, rows - c->max_rows, "configs");
	kb_md_details_end(sb);
}

static void sec_notes_details(struct strbuf *sb, struct body_ctx *c)
{
	static const char *const head[] = { "config", "note" };
	const cJSON *cfg, *note;
	size_t n = 0, rows = 0, index = 0;

	cJSON_ArrayForEach(cfg, c->configs)
		n += (size_t)cJSON_GetArraySize(kb_md_ev_arr(cfg, "notes"));
	if (!n)
		return;
	{
		char summary[96];

		snprintf(summary, sizeof(summary), "Notes from the harness (%zu)", n);
		kb_md_details_begin(sb, summary);
	}
	kb_md_table_head(sb, head, ARRAY_SIZE(head), NULL);
	cJSON_ArrayForEach(cfg, c->configs) {
		cJSON_ArrayForEach(note, kb_md_ev_arr(cfg, "notes")) {
			struct strbuf label = STRBUF_INIT, text = STRBUF_INIT;
			const char *cells[2];

			if (rows == c->max_rows) {
				rows++;
				continue;
			}
			kb_md_ev_config_label(&label, cfg, index);
			kb_md_escape_n(&text, cJSON_IsString(note) ? note->valuestring : "", 300);
			cells[0] = label.buf;
			cells[1] = text.buf;
			kb_md_table_row(sb, cells, 2);
			strbuf_release(&label);
			strbuf_release(&text);
			rows++;
		}
		index++;
	}
	if (rows > c->max_rows)
		more_rows(sb, c, rows - c->max_rows, "notes");
	kb_md_details_end(sb);
}

static void sec_environment(struct strbuf *sb, struct body_ctx *c)
{
	static const char *const head[] = { "component", "version" };
	const cJSON *env = kb_md_ev_obj(c->ev, "environment");
	const char *kbv = kb_md_ev_str(env, "kernelbot");
	bool cpu = c->backend && !strcmp(c->backend, "cpu");
	const struct {
		const char *label, *key;
	} rows[] = {
		{ cpu ? "CPU" : "GPU", "device" },
		{ "driver", "driver" },
		{ "CUDA", "cuda" },
		{ "torch", "torch" },
		{ "python", "python" },
	};

	if (!kbv)
		kbv = kb_md_ev_str(kb_md_ev_obj(c->ev, "kernelbot"), "version");
	strbuf_addstr(sb, "### Environment\n\n");
	kb_md_table_head(sb, head, 2, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		struct strbuf v = STRBUF_INIT;
		const char *cells[2];
		const char *s = kb_md_ev_str(env, rows[i].key);

		if (s)
			kb_md_escape_n(&v, s, 120);
		else
			strbuf_addstr(&v, "n/a");
		cells[0] = rows[i].label;
		cells[1] = v.buf;
		kb_md_table_row(sb, cells, 2);
		strbuf_release(&v);
	}
	{
		struct strbuf v = STRBUF_INIT;
		const char *cells[2] = { "kernelbot", NULL };

		kb_md_escape_n(&v, kbv ? kbv : "n/a", 40);
		strbuf_addstr(&v, ", backend ");
		kb_md_escape_n(&v, c->backend ? c->backend : "n/a", 16);
		cells[1] = v.buf;
		kb_md_table_row(sb, cells, 2);
		strbuf_release(&v);
	}
	strbuf_addch(sb, '\n');
}

static bool is_identifier(const char *s, size_t len)
{
	static const char *const keywords[] = { "False", "None", "True", "and", "as", "assert",
		"async", "await", "break", "class", "continue", "def", "del", "elif", "else",
		"except", "finally", "for", "from", "global", "if", "import", "in", "is",
		"lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
		"with", "yield" };

	if (!len || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_'))
			return false;
	}
	for (size_t i = 0; i < ARRAY_SIZE(keywords); i++)
		if (strlen(keywords[i]) == len && !strncmp(keywords[i], s, len))
			return false;
	return true;
}

/* A Python double-quoted string literal of s. */
static void add_py_string(struct strbuf *sb, const char *s)
{
	strbuf_addch(sb, '"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			strbuf_addch(sb, '\\');
		if ((unsigned char)*s < 0x20)
			strbuf_addf(sb, "\\x%02x", (unsigned char)*s);
		else
			strbuf_addch(sb, *s);
	}
	strbuf_addch(sb, '"');
}

/* The import line for binding.py in dir: a package path when it is one. */
static void add_import(struct strbuf *sb, const char *dir)
{
	size_t len = strlen(dir);
	bool package = len > 0;

	while (len && dir[len - 1] == '/')
		len--;
	for (size_t i = 0, start = 0; i <= len && package; i++) {
		if (i == len || dir[i] == '/') {
			if (!is_identifier(dir + start, i - start))
				package = false;
			start = i + 1;
		}
	}
	if (!len) {
		strbuf_addstr(sb, "from binding import forward\n");
	} else if (package) {
		strbuf_addstr(sb, "from ");
		for (size_t i = 0; i < len; i++)
			strbuf_addch(sb, dir[i] == '/' ? '.' : dir[i]);
		strbuf_addstr(sb, ".binding import forward\n");
	} else {
		/* not a package path: load the file itself, as binding.py's docstring shows */
		struct strbuf file = STRBUF_INIT;

		strbuf_add(&file, dir, len);
		strbuf_addstr(&file, "/binding.py");
		strbuf_addstr(sb, "import importlib.util\n\n"
			      "spec = importlib.util.spec_from_file_location(\"kb_binding\", ");
		add_py_string(sb, file.buf);
		strbuf_addstr(sb, ")\nbinding = importlib.util.module_from_spec(spec)\n"
			      "spec.loader.exec_module(binding)\nforward = binding.forward\n");
		strbuf_release(&file);
	}
}

/* forward's arguments from the first config's inputs: "x, model.weight". */
static void add_call_args(struct strbuf *sb, const cJSON *inputs)
{
	const cJSON *in;
	size_t n = 0;

	cJSON_ArrayForEach(in, inputs) {
		const char *name = kb_md_ev_str(in, "name");
		const char *colon = name ? strchr(name, ':') : NULL;

		if (n == 12) {
			strbuf_addstr(sb, ", ...");
			break;
		}
		if (n++)
			strbuf_addstr(sb, ", ");
		if (!name || !*name) {
			strbuf_addf(sb, "arg%zu", n - 1);
			continue;
		}
		/* KernelBench parameters and buffers: "param:fc.weight" */
		if (colon) {
			strbuf_addstr(sb, "model.");
			name = colon + 1;
		}
		for (size_t i = 0; name[i] && i < 40; i++) {
			char ch = name[i];
			bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
				  (ch >= '0' && ch <= '9') || ch == '_' || (colon && ch == '.');

			strbuf_addch(sb, ok ? ch : '_');
		}
	}
}

/* What the binding's apply() (forward, recorded for autograd) differentiates with. */
static void add_apply_words(struct strbuf *sb, const struct kb_passes_report *passes)
{
	strbuf_addstr(sb, "\nWith autograd, call `apply` (same arguments): its backward is ");
	if (passes && passes->backward) {
		strbuf_addstr(sb, "the backward kernel's `kb_backward`");
		if (passes->backward_kernel) {
			strbuf_addstr(sb, " (");
			kb_md_code_n(sb, passes->backward_kernel, 200, false);
			strbuf_addch(sb, ')');
		}
		strbuf_addstr(sb, ".\n");
	} else {
		strbuf_addstr(sb, "the reference's (PyTorch autograd through `reference/`): no backward "
			      "kernel came with this one.\n");
	}
}

static void sec_usage(struct strbuf *sb, struct body_ctx *c)
{
	const struct kb_pr_report *r = c->r;
	struct strbuf code = STRBUF_INIT;
	char *dir = NULL;
	const char *bdir = r->binding_dir;
	const cJSON *first = cJSON_GetArrayItem(c->configs, 0);

	if (!bdir && r->kernel_path) {
		const char *slash = strrchr(r->kernel_path, '/');

		dir = xstrndup(r->kernel_path, slash ? (size_t)(slash - r->kernel_path) : 0);
		bdir = dir;
	}
	strbuf_addstr(sb, "### Use the kernel\n\n");
	if (r->branch) {
		strbuf_addstr(sb, "This branch, ");
		kb_md_code_n(sb, r->branch, 120, false);
		strbuf_addstr(sb, ", adds");
	} else {
		strbuf_addstr(sb, "This pull request adds");
	}
	if (r->kernel_path) {
		strbuf_addstr(sb, " the kernel ");
		kb_md_code_n(sb, r->kernel_path, 200, false);
		strbuf_addstr(sb, ",");
	}
	strbuf_addstr(sb, " a generated torch binding");
	if (r->evidence_path) {
		strbuf_addstr(sb, " and the evidence file ");
		kb_md_code_n(sb, r->evidence_path, 200, false);
	}
	strbuf_addstr(sb, ". The binding compiles the kernel on first use with plain `nvcc` or "
		      "`g++`, caches it, and needs only torch; call it in place of the operator:\n\n");
	if (bdir) {
		add_import(&code, bdir);
		strbuf_addstr(&code, "\nout = forward(");
		add_call_args(&code, kb_md_ev_arr(first, "inputs"));
		strbuf_addstr(&code, ")\n");
		kb_md_fence(sb, "python", code.buf, code.len);
	}
	if (first) {
		strbuf_addstr(sb, "\nArguments in this order, with the first config's shapes: ");
		add_tensors(sb, kb_md_ev_arr(first, "inputs"), 12, true);
		strbuf_addstr(sb, "; returns ");
		add_tensors(sb, kb_md_ev_arr(first, "outputs"), 12, false);
		strbuf_addstr(sb, ".\n");
	}
	add_apply_words(sb, r->passes);
	strbuf_addch(sb, '\n');
	strbuf_release(&code);
	free(dir);
}

/* A word the shell reads back unchanged. */
static void add_sh_word(struct strbuf *sb, const char *s)
{
	bool plain = *s != '\0';

	for (const char *p = s; *p && plain; p++)
		plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			(*p >= '0' && *p <= '9') || strchr("._/-+=:,@", *p);
	if (plain) {
		strbuf_addstr(sb, s);
		return;
	}
	strbuf_addch(sb, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			strbuf_addstr(sb, "'\\''");
		else if (*s == '\n')
			strbuf_addch(sb, ' ');
		else
			strbuf_addch(sb, *s);
	}
	strbuf_addch(sb, '\'');
}

/* One " --set KEY=VALUE" for a number (an integer when it is one). */
static void add_set_num(struct strbuf *code, const char *key, const cJSON *v)
{
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return;
	if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15)
		strbuf_addf(code, " \\\n    --set %s=%.0f", key, v->valuedouble);
	else
		strbuf_addf(code, " \\\n    --set %s=%.9g", key, v->valuedouble);
}

/*
 * The evidence's settings (timing, tolerances, the error bound) as --set
 * options: the reviewer's own config must not change what is measured
 * or how it is judged.
 */
static void add_pinned_settings(struct strbuf *code, const cJSON *set)
{
	static const struct { const char *dtype, *atol, *rtol; } tol[] = {
		{ "float32", "harness.atol_fp32", "harness.rtol_fp32" },
		{ "float16", "harness.atol_fp16", "harness.rtol_fp16" },
		{ "bfloat16", "harness.atol_bf16", "harness.rtol_bf16" },
	};
	const cJSON *t = kb_md_ev_obj(set, "timing"), *tols = kb_md_ev_obj(set, "tolerances"), *b;

	if (!set)
		return;
	if (t) {
		add_set_num(code, "bench.warmup", cJSON_GetObjectItemCaseSensitive(t, "warmup"));
		add_set_num(code, "bench.min_time_ms", cJSON_GetObjectItemCaseSensitive(t, "min_time_ms"));
		add_set_num(code, "bench.max_reps", cJSON_GetObjectItemCaseSensitive(t, "max_reps"));
		b = cJSON_GetObjectItemCaseSensitive(t, "l2_flush");
		if (cJSON_IsBool(b))
			strbuf_addf(code, " \\\n    --set bench.l2_flush=%s", cJSON_IsTrue(b) ? "on" : "off");
		b = cJSON_GetObjectItemCaseSensitive(t, "baselines");
		if (cJSON_IsArray(b) && cJSON_GetArraySize(b) > 0) {
			const cJSON *n;
			bool first = true;

			strbuf_addstr(code, " \\\n    --set bench.baselines=");
			cJSON_ArrayForEach(n, b) {
				/* names from a fixed list ([bench] baselines): no quoting needed */
				if (!cJSON_IsString(n) || strspn(n->valuestring, "abcdefghijklmnopqrstuvwxyz_") !=
				    strlen(n->valuestring))
					continue;
				strbuf_addf(code, "%s%s", first ? "" : ",", n->valuestring);
				first = false;
			}
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(tol); i++) {
		const cJSON *d = kb_md_ev_obj(tols, tol[i].dtype);

		add_set_num(code, tol[i].atol, cJSON_GetObjectItemCaseSensitive(d, "atol"));
		add_set_num(code, tol[i].rtol, cJSON_GetObjectItemCaseSensitive(d, "rtol"));
	}
	add_set_num(code, "harness.error_factor", cJSON_GetObjectItemCaseSensitive(set, "error_factor"));
}

/* `kernelbot bench` of kernel against the operator, as evidence ev was taken, into code. */
static void add_bench_command(struct strbuf *code, const struct body_ctx *c, const cJSON *ev,
			      const char *kernel)
{
	double seeds = kb_md_ev_num(kb_md_ev_obj(ev, "summary"), "seeds");
	const char *pass = kb_md_ev_str(kb_md_ev_obj(ev, "operator"), "pass");
	size_t nconfigs = (size_t)cJSON_GetArraySize(kb_md_ev_arr(ev, "configs"));

	/* bench prints the table; the same seeds and number of configs pick the same rows */
	strbuf_addstr(code, "kernelbot bench ");
	add_sh_word(code, c->r->job.operator_path ? c->r->job.operator_path : "OPERATOR");
	strbuf_addch(code, ' ');
	add_sh_word(code, kernel ? kernel : "KERNEL");
	if (c->backend) {
		strbuf_addstr(code, " --backend ");
		add_sh_word(code, c->backend);
	}
	if (pass && !strcmp(pass, "backward"))
		strbuf_addstr(code, " --pass backward");
	if (isfinite(seeds) && seeds >= 1)
		strbuf_addf(code, " --seeds %.0f", seeds);
	if (nconfigs)
		strbuf_addf(code, " --max-configs %zu", nconfigs);
	add_pinned_settings(code, kb_md_ev_obj(ev, "settings"));
	strbuf_addch(code, '\n');
}

static void sec_reproduce(struct strbuf *sb, struct body_ctx *c)
{
	const struct kb_pr_report *r = c->r;
	const struct kb_passes_report *passes = r->passes;
	struct strbuf code = STRBUF_INIT;
	char band[32];

	strbuf_addstr(sb, "### Reproduce\n\n");
	strbuf_addstr(sb, "On a machine with the same backend, from a checkout of this branch:\n\n");
	if (r->branch) {
		strbuf_addstr(&code, "git fetch origin ");
		add_sh_word(&code, r->branch);
		strbuf_addstr(&code, " && git checkout FETCH_HEAD\n");
	}
	add_bench_command(&code, c, c->ev, r->kernel_path);
	if (passes && passes->backward)
		add_bench_command(&code, c, passes->backward, passes->backward_kernel);
	kb_md_fence(sb, "sh", code.buf, code.len);
	strbuf_addstr(sb, "\nIt runs the same checks on the same configs and prints the same table");
	if (c->h.timed) {
		kb_headline_fmt_band(band, sizeof(band), c->h.band);
		strbuf_addf(sb, ": the verdict `%s` and every config's speedup within **±%s** of the "
			    "table above (the noise band; both rounded to two decimals), on an idle "
			    "machine like the one under Environment",
			    kb_md_ev_str(c->ev, "verdict") ? kb_md_ev_str(c->ev, "verdict") : "?", band);
	}
	strbuf_addstr(sb, ".");
	if (passes && passes->backward)
		strbuf_addstr(sb, " The second command checks the backward kernel the same way, against "
			      "eager autograd; its figures are in its own evidence file.");
	strbuf_addstr(sb, "\n\n");
	strbuf_release(&code);
}

static void sec_search(struct strbuf *sb, struct body_ctx *c)
{
	static const char *const head[] = { "search", "" };
	const struct kb_search_figures *s = &c->r->search;
	char v[64];
	const char *cells[2];
	struct strbuf prop = STRBUF_INIT;

	strbuf_addstr(sb, "### Search\n\n");
	kb_md_table_head(sb, head, 2, "lr");
	snprintf(v, sizeof(v), "%" PRId64, s->candidates);
	cells[0] = "candidates tried";
	cells[1] = v;
	kb_md_table_row(sb, cells, 2);
	if (s->candidates > 0)
		snprintf(v, sizeof(v), "%" PRId64 " (%.0f%%)", s->verified,
			 100.0 * (double)s->verified / (double)s->candidates);
	else
		snprintf(v, sizeof(v), "%" PRId64, s->verified);
	cells[0] = "verified";
	kb_md_table_row(sb, cells, 2);
	snprintf(v, sizeof(v), "%" PRId64, s->generations);
	cells[0] = s->generations_label ? s->generations_label : "generations";
	kb_md_table_row(sb, cells, 2);
	kb_md_fmt_duration(v, sizeof(v), s->wall_s);
	cells[0] = "wall time";
	kb_md_table_row(sb, cells, 2);
	if (s->llm_cost_usd > 0)
		snprintf(v, sizeof(v), "$%.2f", s->llm_cost_usd);
	else
		snprintf(v, sizeof(v), "none");
	cells[0] = "LLM cost";
	kb_md_table_row(sb, cells, 2);
	kb_md_escape_n(&prop, s->proposer ? s->proposer : "built-in templates", 200);
	cells[0] = "proposer";
	cells[1] = prop.buf;
	kb_md_table_row(sb, cells, 2);
	strbuf_release(&prop);
	if (s->cut_short_budget_s > 0) {
		kb_md_fmt_duration(v, sizeof(v), (double)s->cut_short_budget_s);
		cells[0] = "stopped by";
		cells[1] = "the time budget";
		kb_md_table_row(sb, cells, 2);
		strbuf_addf(sb, "\n**The time budget (%s) cut the search short:** this is the best "
			    "kernel found by then, verified in full; a longer budget may find a faster "
			    "one.\n", v);
	}
	strbuf_addch(sb, '\n');
}

#define CHART_POINTS 24

static void add_elapsed_label(struct strbuf *sb, double s, double span)
{
	long t = (long)kb_i64_from_double(s + 0.5); /* history.json's times: saturated */

	if (span < 120)
		strbuf_addf(sb, "\"%lds\"", t);
	else if (span < 7200)
		strbuf_addf(sb, "\"%ld:%02ld\"", t / 60, t % 60);
	else
		strbuf_addf(sb, "\"%ld:%02ld h\"", t / 3600, (t % 3600) / 60);
}

/*
 * Mermaid xychart of the best speedup, resampled on an even time grid (a
 * category axis spaces points evenly, so the raw points would bend time),
 * with eager's 1.0x as a second line.
 */
static void sec_chart(struct strbuf *sb, struct body_ctx *c)
{
	const struct kb_speedup_point *h = c->r->history;
	size_t n = c->r->history_nr, k, j = 0;
	double t0, span, ymax = 1.0, last;
	struct strbuf code = STRBUF_INIT;

	if (!h || !n)
		return;
	t0 = (double)h[0].t;
	span = (double)h[n - 1].t - t0;
	if (span < 0)
		span = 0;
	k = span >= 1 ? (span + 1 < CHART_POINTS ? (size_t)span + 1 : CHART_POINTS) : 1;
	for (size_t i = 0; i < n; i++)
		if (isfinite(h[i].speedup) && h[i].speedup > ymax)
			ymax = h[i].speedup;
	ymax = ceil(ymax * 1.15 * 2) / 2;

	strbuf_addstr(&code, "xychart-beta\n    title \"Best speedup over time\"\n");
	strbuf_addstr(&code, "    x-axis \"time since the first timed kernel\" [");
	for (size_t i = 0; i < k; i++) {
		double ts = k > 1 ? span * (double)i / (double)(k - 1) : 0;

		if (i)
			strbuf_addstr(&code, ", ");
		add_elapsed_label(&code, ts, span);
	}
	strbuf_addf(&code, "]\n    y-axis \"speedup vs eager (x)\" 0 --> %.1f\n    line [", ymax);
	last = isfinite(h[0].speedup) ? h[0].speedup : 0;
	for (size_t i = 0; i < k; i++) {
		double ts = t0 + (k > 1 ? span * (double)i / (double)(k - 1) : 0);

		/* the last point at or before ts */
		while (j < n && (double)h[j].t <= ts + 1e-9) {
			if (isfinite(h[j].speedup))
				last = h[j].speedup;
			j++;
		}
		strbuf_addf(&code, "%s%.2f", i ? ", " : "", last);
	}
	strbuf_addstr(&code, "]\n    line [");
	for (size_t i = 0; i < k; i++)
		strbuf_addstr(&code, i ? ", 1" : "1");
	strbuf_addstr(&code, "]\n");

	strbuf_addstr(sb, "Best speedup over time (the flat line is eager, 1.0x):\n\n");
	kb_md_fence(sb, "mermaid", code.buf, code.len);
	strbuf_addch(sb, '\n');
	strbuf_release(&code);
}

/* --- assembly --- */

typedef void (*section_fn)(struct strbuf *, struct body_ctx *);

static const struct {
	section_fn render;
	int drop;  /* 0: always kept; else dropped when too big, highest first */
	const char *what;
} sections[] = {
	{ sec_summary, 0, NULL },
	{ sec_passes, 0, NULL },
	{ sec_speedup, 0, NULL },
	{ sec_timing_details, 6, "timing details" },
	{ sec_correctness, 0, NULL },
	{ sec_wiring, 0, NULL },
	{ sec_errors_details, 3, "per-config errors" },
	{ sec_dropped_details, 1, "configs left out" },
	{ sec_notes_details, 5, "harness notes" },
	{ sec_environment, 0, NULL },
	{ sec_usage, 0, NULL },
	{ sec_reproduce, 0, NULL },
	{ sec_search, 0, NULL },
	{ sec_chart, 2, "speedup chart" },
};

#define MAX_DROP 6

/* Render everything whose drop rank is below drop_from (0: nothing dropped), marker last. */
static int render(struct strbuf *out, struct body_ctx *c, int drop_from)
{
	const char *state = c->r->job.state ? c->r->job.state : "done";
	const char *dropped[ARRAY_SIZE(sections)];
	size_t ndropped = 0;
	char hex[65];

	strbuf_reset(out);
	c->cut_rows = false;
	if (c->r->notice && *c->r->notice)
		strbuf_addf(out, "%s\n\n", c->r->notice);
	for (size_t i = 0; i < ARRAY_SIZE(sections); i++) {
		if (drop_from && sections[i].drop >= drop_from) {
			/* name it only when it had something to show */
			size_t mark = out->len;
			bool cut = c->cut_rows;

			sections[i].render(out, c);
			if (out->len > mark)
				dropped[ndropped++] = sections[i].what;
			strbuf_setlen(out, mark);
			c->cut_rows = cut;
			continue;
		}
		sections[i].render(out, c);
	}
	if (ndropped || c->cut_rows) {
		strbuf_addstr(out, "---\n\n_Left out to stay under GitHub's size limit: ");
		for (size_t i = 0; i < ndropped; i++)
			strbuf_addf(out, "%s%s", i ? ", " : "", dropped[i]);
		if (c->cut_rows)
			strbuf_addf(out, "%stable rows", ndropped ? ", " : "");
		if (c->r->evidence_path) {
			strbuf_addstr(out, "; ");
			kb_md_code_n(out, c->r->evidence_path, 200, false);
			strbuf_addstr(out, " has everything");
		}
		strbuf_addstr(out, "._\n\n");
	}
	kb_body_hash(out->buf, hex);
	return kb_marker_add(out, "pr", c->r->job.id, 0, 0, state, hex);
}

int kb_pr_body(struct strbuf *out, const struct kb_pr_report *r, const struct kb_md_limits *lim)
{
	static const struct kb_md_limits github = { KB_MD_BODY_MAX_CHARS, KB_PR_BODY_MAX_BYTES };
	struct body_ctx c;
	const cJSON *cfg;
	const char *verdict;
	size_t lo, hi;

	if (!lim)
		lim = &github;
	strbuf_reset(out);
	if (!r->evidence)
		return error("no evidence to render the pull request body for '%s'",
			     r->job.operator_path ? r->job.operator_path : "?");
	memset(&c, 0, sizeof(c));
	c.r = r;
	c.ev = r->evidence;
	c.configs = kb_md_ev_arr(c.ev, "configs");
	c.nconfigs = (size_t)cJSON_GetArraySize(c.configs);
	c.backend = r->job.backend ? r->job.backend
				   : kb_md_ev_str(kb_md_ev_obj(c.ev, "environment"), "backend");
	kb_headline_of(&c.h, c.ev, r->noise_band);
	verdict = kb_md_ev_str(c.ev, "verdict");
	c.verified = verdict && !strcmp(verdict, "verified");
	cJSON_ArrayForEach(cfg, c.configs) {
		const cJSON *t = kb_md_ev_obj(cfg, "timing");

		if (t)
			c.timed = true;
		if (kb_md_ev_obj(t, "compile"))
			c.any_compile = true;
	}
	c.max_rows = SIZE_MAX;

	/* everything, then without details blocks, least important first */
	if (render(out, &c, 0))
		return -1;
	if (kb_md_fits(out, lim))
		return 0;
	for (int level = MAX_DROP; level >= 1; level--) {
		if (render(out, &c, level))
			return -1;
		if (kb_md_fits(out, lim))
			return 0;
	}
	/* then the largest number of table rows that fits */
	lo = 0;
	hi = c.nconfigs;
	c.max_rows = 0;
	if (render(out, &c, 1))
		return -1;
	if (!kb_md_fits(out, lim)) {
		strbuf_reset(out);
		log_error("pull request body for '%s' does not fit in %zu characters",
			  r->job.operator_path ? r->job.operator_path : "?", lim->max_chars);
		return KB_ETOOBIG;
	}
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;

		c.max_rows = mid;
		if (render(out, &c, 1))
			return -1;
		if (kb_md_fits(out, lim))
			lo = mid;
		else
			hi = mid - 1;
	}
	c.max_rows = lo;
	return render(out, &c, 1);
}

/* --- markers and hash --- */

#define MARKER_OPEN "<!-- kernelbot:"
#define MARKER_CLOSE "-->"

static bool marker_char(char ch, bool eq_ok)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '_' || ch == '-' || (eq_ok && ch == '=');
}

/* Length of a well-formed marker at p (`<!-- kernelbot:KIND( TOKEN)* -->`), else 0. */
static size_t marker_at(const char *p)
{
	const char *q = p + strlen(MARKER_OPEN);

	if (strncmp(p, MARKER_OPEN, strlen(MARKER_OPEN)) || !marker_char(*q, false))
		return 0;
	while (marker_char(*q, false))
		q++;
	while (*q == ' ') {
		if (!strncmp(q, " " MARKER_CLOSE, 1 + strlen(MARKER_CLOSE)))
			return (size_t)(q + 1 + strlen(MARKER_CLOSE) - p);
		q++;
		if (!marker_char(*q, true))
			return 0;
		while (marker_char(*q, true))
			q++;
	}
	return 0;
}

void kb_body_hash(const char *body, char hex[65])
{
	struct strbuf rest = STRBUF_INIT;
	const char *p = body ? body : "", *last = NULL;
	size_t last_len = 0, w = 0;

	/* the last well-formed marker: quoted or cut look-alikes in the text stay */
	for (const char *m = p; (m = strstr(m, MARKER_OPEN)); m++) {
		size_t n = marker_at(m);

		if (n) {
			last = m;
			last_len = n;
		}
	}
	if (last) {
		strbuf_add(&rest, p, (size_t)(last - p));
		strbuf_addstr(&rest, last + last_len);
	} else {
		strbuf_addstr(&rest, p);
	}
	/* CRLF from the web editor hashes like LF */
	for (size_t i = 0; i < rest.len; i++)
		if (rest.buf[i] != '\r')
			rest.buf[w++] = rest.buf[i];
	strbuf_setlen(&rest, w);
	kb_sha256_hex(rest.buf, rest.len, hex);
	strbuf_release(&rest);
}

static bool token_ok(const char *s, size_t len)
{
	if (!len)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return false;
	}
	return true;
}

int kb_marker_add(struct strbuf *sb, const char *kind, int64_t job, int64_t pr,
		  int64_t candidate, const char *state, const char *body_sha)
{
	if (!kind || !token_ok(kind, strlen(kind)))
		return error("bad marker kind '%s'", kind ? kind : "");
	if (state && !token_ok(state, strlen(state)))
		return error("bad marker state '%s'", state);
	if (body_sha && !token_ok(body_sha, strlen(body_sha)))
		return error("bad marker body-sha '%s'", body_sha);
	strbuf_addf(sb, MARKER_OPEN "%s", kind);
	if (job)
		strbuf_addf(sb, " job=%" PRId64, job);
	if (pr)
		strbuf_addf(sb, " pr=%" PRId64, pr);
	if (candidate)
		strbuf_addf(sb, " candidate=%" PRId64, candidate);
	if (state)
		strbuf_addf(sb, " state=%s", state);
	if (body_sha)
		strbuf_addf(sb, " body-sha=%s", body_sha);
	strbuf_addstr(sb, " " MARKER_CLOSE);
	return 0;
}

static int marker_int(const char *v, size_t len, int64_t *out, const char *key)
{
	char buf[32];

	if (len >= sizeof(buf))
		return error("marker field '%s' is too long", key);
	memcpy(buf, v, len);
	buf[len] = '\0';
	if (kb_parse_i64(buf, out))
		return error("marker field '%s' is not a number: '%s'", key, buf);
	return 0;
}

static int marker_str(const char *v, size_t len, char *out, size_t size, const char *key)
{
	if (len >= size)
		return error("marker field '%s' is too long", key);
	memcpy(out, v, len);
	out[len] = '\0';
	return 0;
}

int kb_marker_find(const char *body, const char *kind, struct kb_marker *out)
{
	struct strbuf open = STRBUF_INIT;
	const char *p, *found = NULL, *end;
	size_t klen;
	bool seen = false;

	memset(out, 0, sizeof(*out));
	if (!body || !kind)
		return KB_ENOTFOUND;
	strbuf_addf(&open, MARKER_OPEN "%s", kind);
	klen = open.len;
	/* the last well-formed one: the bot writes its marker after everything else */
	for (p = body; (p = strstr(p, open.buf)); p += klen) {
		size_t n;

		if (p[klen] != ' ')
			continue;
		seen = true;
		n = marker_at(p);
		if (n) {
			found = p;
			out->len = n;
		}
	}
	strbuf_release(&open);
	if (!found && seen)
		return error("kernelbot:%s marker is malformed", kind);
	if (!found)
		return KB_ENOTFOUND;
	out->offset = (size_t)(found - body);
	end = found + out->len - strlen(MARKER_CLOSE) - 1;

	/* " key=value" pairs up to the end */
	for (p = found + klen; p < end;) {
		const char *k, *eq, *v;
		size_t vlen;

		while (p < end && *p == ' ')
			p++;
		if (p >= end)
			break;
		k = p;
		while (p < end && *p != ' ')
			p++;
		eq = memchr(k, '=', (size_t)(p - k));
		if (!eq)
			continue;  /* a bare word: ignored, like an unknown key */
		v = eq + 1;
		vlen = (size_t)(p - v);
#define KEY(name) ((size_t)(eq - k) == strlen(name) && !strncmp(k, name, strlen(name)))
		if (KEY("job")) {
			if (marker_int(v, vlen, &out->job, "job"))
				return -1;
		} else if (KEY("pr")) {
			if (marker_int(v, vlen, &out->pr, "pr"))
				return -1;
		} else if (KEY("candidate")) {
			if (marker_int(v, vlen, &out->candidate, "candidate"))
				return -1;
		} else if (KEY("state")) {
			if (marker_str(v, vlen, out->state, sizeof(out->state), "state"))
				return -1;
		} else if (KEY("body-sha")) {
			if (vlen != 64 || strspn(v, "0123456789abcdef") < 64)
				return error("marker field 'body-sha' is not a sha-256");
			memcpy(out->body_sha, v, 64);
			out->body_sha[64] = '\0';
		}
#undef KEY
	}
	return 0;
}
