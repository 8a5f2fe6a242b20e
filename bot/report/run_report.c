#include "core/common.h"
#include "core/json.h"
#include "report/headline.h"
#include "report/run_report.h"
#include "report/markdown.h"
#include "core/util.h"

#include <math.h>

static const cJSON *obj(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsObject(v) ? v : NULL;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) && *v->valuestring ? v->valuestring : NULL;
}

static void cell_ms(const cJSON *measure, char *buf, size_t size)
{
	double ms = kb_json_num(measure, "median_ms", NAN);

	if (isnan(ms)) {
		xsnprintf(buf, size, "n/a");
		return;
	}
	kb_md_fmt_ms(buf, size, ms);
	kb_strlcpy(buf + strlen(buf), " ms", size - strlen(buf));
}

static void cell_speedup(double eager, double compile, char *buf, size_t size)
{
	char a[32], b[32];

	kb_md_fmt_speedup(a, sizeof(a), eager);
	if (isnan(compile)) {
		kb_strlcpy(buf, a, size);
		return;
	}
	kb_md_fmt_speedup(b, sizeof(b), compile);
	snprintf(buf, size, "%s / %s", a, b);
}

static void cell_roofline(const cJSON *t, char *buf, size_t size)
{
	double bw = kb_json_num(t, "bw_share", NAN), fl = kb_json_num(t, "flops_share", NAN);

	if (isnan(bw) && isnan(fl))
		xsnprintf(buf, size, "n/a");
	else if (isnan(fl) || (!isnan(bw) && bw >= fl))
		snprintf(buf, size, "%.0f%% bw", 100 * bw);
	else
		snprintf(buf, size, "%.0f%% flops", 100 * fl);
}

/* A word for a shell command line: quoted unless plainly safe. */
static void shell_word(struct strbuf *sb, const char *s)
{
	bool plain = *s;

	for (const char *p = s; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./+=:,@%", *p))
			plain = false;
	if (plain) {
		strbuf_addstr(sb, s);
		return;
	}
	strbuf_addch(sb, '\'');
	for (const char *p = s; *p; p++) {
		if (*p == '\'')
			strbuf_addstr(sb, "'\\''");
		else
			strbuf_addch(sb, *p);
	}
	strbuf_addch(sb, '\'');
}

static bool backward(const struct kb_run_report *r)
{
	return r->pass && !strcmp(r->pass, "backward");
}

static void summary_line(struct strbuf *sb, const struct kb_run_report *r)
{
	const cJSON *ev = r->evidence, *summary = obj(ev, "summary"), *env = obj(ev, "environment");
	const char *verdict = str(ev, "verdict");
	struct kb_headline h;
	double ge, gc;
	double configs = kb_json_num(summary, "configs", NAN), seeds = kb_json_num(summary, "seeds", NAN);
	int nc = kb_int_from_double(configs), ns = kb_int_from_double(seeds); /* from outside */
	char a[32];

	/* the headline policy (bot/report/HEADLINE.md): the operator's own shapes first */
	kb_headline_of(&h, ev, r->noise_band);
	ge = h.speedup;
	gc = h.speedup_compile;

	strbuf_addstr(sb, verdict && !strcmp(verdict, "verified") ? "**Verified**: " : "**Not verified**: ");
	kb_md_code(sb, r->kernel_file, false);
	strbuf_addstr(sb, " for ");
	kb_md_code(sb, r->operator_path, false);
	if (str(env, "device")) {
		strbuf_addstr(sb, " on ");
		kb_md_escape(sb, str(env, "device"));
	}
	strbuf_addf(sb, " (%s backend)", r->backend ? r->backend : "?");
	if (backward(r))
		strbuf_addstr(sb, ", backward pass (kb_backward, timed against eager autograd; the "
			      "forward pass was verified too)");
	if (!isnan(ge)) {
		kb_md_fmt_speedup(a, sizeof(a), ge);
		strbuf_addf(sb, ": **%s** %s torch eager ", a, ge >= 1.0 ? "faster than" : "the speed of");
		kb_headline_md_scope(sb, &h);
		if (!isnan(gc)) {
			kb_md_fmt_speedup(a, sizeof(a), gc);
			strbuf_addf(sb, ", %s against torch.compile", a);
		} else {
			strbuf_addstr(sb, ", torch.compile not measured");
		}
	} else {
		strbuf_addstr(sb, ": not timed");
	}
	if (r->found_by_md) {
		strbuf_addstr(sb, ". ");
		strbuf_addstr(sb, r->found_by_md);
	} else {
		strbuf_addstr(sb, ". Built-in ");
		kb_md_escape(sb, r->tuning.family);
		strbuf_addstr(sb, " template (");
		kb_md_escape(sb, r->tuning.kind);
		strbuf_addstr(sb, "), point ");
		kb_md_code(sb, r->tuning.point, false);
	}
	if (!isnan(configs) && !isnan(seeds))
		strbuf_addf(sb, "; %d config%s x %d seed%s passed every check in a fresh process",
			    nc, nc == 1 ? "" : "s", ns, ns == 1 ? "" : "s");
	if (h.dropped)
		strbuf_addf(sb, "; %zu more config%s %s left out by the verifier (see \"Configs left out\")",
			    h.dropped, h.dropped == 1 ? "" : "s", h.dropped == 1 ? "was" : "were");
	strbuf_addstr(sb, ".\n");
	if (h.timed > 1) {
		strbuf_addch(sb, '\n');
		kb_headline_md_spread(sb, &h);
		strbuf_addch(sb, '\n');
	}
	if (summary && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(summary, "suspicious")))
		strbuf_addstr(sb, "\n**Suspicious speedup**: above the configured threshold; check the evidence before trusting it.\n");
	if (h.slower || h.weak) {
		strbuf_addch(sb, '\n');
		kb_headline_md_alerts(sb, &h);
		strbuf_setlen(sb, sb->len - 1); /* one newline, as the sections start with one */
	}
}

/* Every config the verifier generated and left out, with the reason. */
static void dropped_table(struct strbuf *sb, const cJSON *ev)
{
	static const char *const head[] = { "config", "kind", "why it was left out" };
	const cJSON *d;

	if (!cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ev, "dropped_configs")))
		return;
	strbuf_addstr(sb, "\n## Configs left out\n\n");
	kb_md_table_head(sb, head, ARRAY_SIZE(head), NULL);
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(ev, "dropped_configs")) {
		kb_md_dropped_row(sb, d, 0, 300);
	}
}

static void speedup_table(struct strbuf *sb, const cJSON *ev)
{
	static const char *const head[] = { "config", "eager", "torch.compile", "kernel", "speedup",
					     "roofline share" };
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(ev, "configs"), *c;
	const cJSON *summary = obj(ev, "summary");
	const char *compile_reason = NULL;
	struct strbuf name = STRBUF_INIT;
	int rows = 0;

	strbuf_addstr(sb, "\n## Speedup per config\n\n");
	kb_md_table_head(sb, head, ARRAY_SIZE(head), "lrrrrr");
	cJSON_ArrayForEach(c, configs) {
		const cJSON *t = obj(c, "timing");
		char e[40], co[40], k[40], sp[80], roof[40];
		const char *cells[6];

		if (!t)
			continue;
		strbuf_reset(&name);
		if (str(c, "name"))
			kb_md_code_n(&name, str(c, "name"), 60, true);
		else
			strbuf_addf(&name, "#%d", rows);
		cell_ms(obj(t, "eager"), e, sizeof(e));
		cell_ms(obj(t, "compile"), co, sizeof(co));
		cell_ms(obj(t, "kernel"), k, sizeof(k));
		cell_speedup(kb_json_num(t, "speedup_eager", NAN), kb_json_num(t, "speedup_compile", NAN), sp, sizeof(sp));
		cell_roofline(t, roof, sizeof(roof));
		if (!compile_reason)
			compile_reason = str(t, "compile_reason");
		cells[0] = name.buf;
		cells[1] = e;
		cells[2] = co;
		cells[3] = k;
		cells[4] = sp;
		cells[5] = roof;
		kb_md_table_row(sb, cells, ARRAY_SIZE(cells));
		rows++;
	}
	if (rows) {
		char sp[80], bold[96];
		const char *cells[6] = { "**geomean**", "", "", "", bold, "" };

		cell_speedup(kb_json_num(summary, "geomean_speedup_eager", NAN), kb_json_num(summary, "geomean_speedup_compile", NAN),
			     sp, sizeof(sp));
		snprintf(bold, sizeof(bold), "**%s**", sp);
		kb_md_table_row(sb, cells, ARRAY_SIZE(cells));
		strbuf_addstr(sb, "\nMedian times. Speedup: over torch eager, then over torch.compile after "
			      "the slash. Roofline share: achieved bandwidth (bw) or FLOP rate (flops) as a "
			      "share of the measured peak, whichever is higher.\n");
		if (compile_reason) {
			strbuf_addstr(sb, "torch.compile: ");
			kb_md_escape(sb, compile_reason);
			strbuf_addstr(sb, "\n");
		}
	} else {
		strbuf_addstr(sb, "\n(no timings");
		if (str(ev, "timing_note")) {
			strbuf_addstr(sb, ": ");
			kb_md_escape(sb, str(ev, "timing_note"));
		}
		strbuf_addstr(sb, ")\n");
	}
	strbuf_release(&name);
}

static void tuning_table(struct strbuf *sb, const struct kb_run_report *r)
{
	static const char *const head[] = { "points tried", "verified", "best point", "time spent" };
	const struct kb_run_tuning *t = &r->tuning;
	struct strbuf tried = STRBUF_INIT, verified = STRBUF_INIT, point = STRBUF_INIT;
	char dur[32];
	const char *cells[4];

	strbuf_addstr(sb, "\n## Tuning\n\n");
	kb_md_table_head(sb, head, ARRAY_SIZE(head), "rrlr");
	strbuf_addf(&tried, "%zu of %zu", t->tried, t->space_size);
	strbuf_addf(&verified, "%zu", t->verified);
	kb_md_code(&point, t->point, true);
	kb_md_fmt_duration(dur, sizeof(dur), t->seconds);
	if (t->all_cached)
		kb_strlcpy(dur + strlen(dur), " (cached)", sizeof(dur) - strlen(dur));
	cells[0] = tried.buf;
	cells[1] = verified.buf;
	cells[2] = point.buf;
	cells[3] = dur;
	kb_md_table_row(sb, cells, ARRAY_SIZE(cells));
	strbuf_addstr(sb, "\n");
	if (t->all_cached)
		strbuf_addstr(sb, "Every measurement came from the cache of an earlier run on this machine "
			      "(nothing was built or timed this time).");
	else
		strbuf_addf(sb, "This run built %zu point%s and timed %zu; %zu came from the cache of an "
			    "earlier run.", t->built, t->built == 1 ? "" : "s", t->timed, t->cache_hits);
	strbuf_addstr(sb, " Each point was verified before it was timed; the best one was then verified "
		      "again with every seed in a fresh harness process");
	if (t->final_cached) {
		const char *when = str(obj(r->evidence, "kernelbot"), "finished_at");

		strbuf_addstr(sb, " (that verdict is cached");
		if (when) {
			strbuf_addstr(sb, " from ");
			kb_md_escape(sb, when);
		}
		strbuf_addstr(sb, ")");
	}
	strbuf_addstr(sb, ".\n");
	if (t->cut_short)
		strbuf_addf(sb, "\n**The time budget cut the search short** after %zu of %zu points: "
			    "this is the best kernel found by then, not the best the search could find.\n",
			    t->tried, t->space_size);
	strbuf_release(&tried);
	strbuf_release(&verified);
	strbuf_release(&point);
}

static void env_row(struct strbuf *sb, const char *label, const char *value)
{
	struct strbuf v = STRBUF_INIT;
	const char *cells[2] = { label, NULL };

	if (!value)
		return;
	kb_md_escape(&v, value);
	cells[1] = v.buf;
	kb_md_table_row(sb, cells, 2);
	strbuf_release(&v);
}

static void environment(struct strbuf *sb, const struct kb_run_report *r)
{
	static const char *const head[] = { "", "" };
	const cJSON *env = obj(r->evidence, "environment");
	const cJSON *kb = cJSON_GetObjectItemCaseSensitive(env, "kernelbot");
	char n[32];

	strbuf_addstr(sb, "\n## Environment\n\n");
	kb_md_table_head(sb, head, 2, "ll");
	env_row(sb, "device", str(env, "device"));
	env_row(sb, "backend", r->backend);
	env_row(sb, "torch", str(env, "torch"));
	env_row(sb, "python", str(env, "python"));
	env_row(sb, "CUDA", str(env, "cuda"));
	env_row(sb, "driver", str(env, "driver"));
	env_row(sb, "kernelbot", cJSON_IsString(kb) ? kb->valuestring : KB_VERSION);
	xsnprintf(n, sizeof(n), "%lld", (long long)r->seeds);
	env_row(sb, "seeds", r->seeds > 0 ? n : NULL);
}

/* A Python string literal (JSON's escapes are Python's). */
static void add_py_string(struct strbuf *sb, const char *s)
{
	cJSON *j = cJSON_CreateString(s);
	char *text = cJSON_PrintUnformatted(j);

	if (!text)
		die("out of memory");
	strbuf_addstr(sb, text);
	free(text);
	cJSON_Delete(j);
}

static void reproduce(struct strbuf *sb, const struct kb_run_report *r)
{
	struct strbuf cmd = STRBUF_INIT, path = STRBUF_INIT;
	const char *dir = r->out_dir && *r->out_dir ? r->out_dir : ".";

	strbuf_addf(&path, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", r->kernel_file);
	strbuf_addstr(sb, "\n## Reproduce\n\nVerify the kernel again, print the same speedup table "
		      "(`bench`: same seeds, same configs), or tune it again:\n\n");
	strbuf_addstr(&cmd, "kernelbot verify ");
	shell_word(&cmd, r->operator_path);
	strbuf_addch(&cmd, ' ');
	shell_word(&cmd, path.buf);
	if (backward(r))
		strbuf_addstr(&cmd, " --pass backward");
	strbuf_addstr(&cmd, "\nkernelbot bench ");
	shell_word(&cmd, r->operator_path);
	strbuf_addch(&cmd, ' ');
	shell_word(&cmd, path.buf);
	strbuf_addf(&cmd, " --backend %s", r->backend ? r->backend : "cpu");
	if (backward(r))
		strbuf_addstr(&cmd, " --pass backward");
	/* the same seeds and number of configs: the same table */
	if (r->seeds > 0)
		strbuf_addf(&cmd, " --seeds %lld", (long long)r->seeds);
	if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r->evidence, "configs")) > 0)
		strbuf_addf(&cmd, " --max-configs %d",
			    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r->evidence, "configs")));
	strbuf_addf(&cmd, "\nkernelbot run ");
	shell_word(&cmd, r->operator_path);
	strbuf_addf(&cmd, " --backend %s", r->backend ? r->backend : "cpu");
	if (backward(r))
		strbuf_addstr(&cmd, " --pass backward");
	strbuf_addstr(&cmd, " --out ");
	shell_word(&cmd, dir);
	strbuf_addch(&cmd, '\n');
	kb_md_fence(sb, "sh", cmd.buf, cmd.len);
	strbuf_addstr(sb, "\nCall it from PyTorch with the generated binding (it compiles the kernel on "
		      "first use):\n\n");
	strbuf_reset(&cmd);
	strbuf_addstr(&cmd, "import importlib.util\n");
	strbuf_addstr(&cmd, "spec = importlib.util.spec_from_file_location(\"binding\", ");
	strbuf_reset(&path);
	strbuf_addf(&path, "%s%sbinding.py", dir, dir[strlen(dir) - 1] == '/' ? "" : "/");
	add_py_string(&cmd, path.buf);
	strbuf_addstr(&cmd, ")\nop = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(op)\n"
		      "y = op.forward(*inputs)   # inputs in the kernel ABI's order\n"
		      "y = op.apply(*inputs)     # the same, recorded for autograd (its backward: binding.py)\n");
	kb_md_fence(sb, "python", cmd.buf, cmd.len);
	strbuf_release(&cmd);
	strbuf_release(&path);
}

void kb_run_report_markdown(struct strbuf *out, const struct kb_run_report *r)
{
	strbuf_addstr(out, "# kernelbot: ");
	kb_md_escape(out, r->operator_name);
	strbuf_addstr(out, "\n\n");
	summary_line(out, r);
	speedup_table(out, r->evidence);
	dropped_table(out, r->evidence);
	if (!r->found_by_md)
		tuning_table(out, r); /* the templates' table says nothing about a search's kernel */
	if (r->extra_md)
		strbuf_addstr(out, r->extra_md);
	environment(out, r);
	reproduce(out, r);
}
