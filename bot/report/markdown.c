#include "core/common.h"
#include "core/util.h"
#include "report/markdown.h"

#include <math.h>

/* --- evidence --- */

const cJSON *kb_md_ev_obj(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsObject(v) ? v : NULL;
}

const cJSON *kb_md_ev_arr(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsArray(v) ? v : NULL;
}

const char *kb_md_ev_str(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

double kb_md_ev_num(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

void kb_md_ev_config_label(struct strbuf *sb, const cJSON *config, size_t index)
{
	const char *name = kb_md_ev_str(config, "name");

	if (name && *name)
		kb_md_code_n(sb, name, KB_MD_NAME_CHARS, true);
	else
		strbuf_addf(sb, "#%zu", index);
}

void kb_md_dropped_row(struct strbuf *sb, const cJSON *dropped, size_t index, size_t reason_max)
{
	struct strbuf cell[3] = { STRBUF_INIT, STRBUF_INIT, STRBUF_INIT };
	const char *cells[3];

	kb_md_ev_config_label(&cell[0], dropped, index);
	kb_md_escape_n(&cell[1], kb_md_ev_str(dropped, "kind"), 24);
	kb_md_escape_n(&cell[2], kb_md_ev_str(dropped, "reason"), reason_max);
	for (size_t i = 0; i < 3; i++)
		cells[i] = cell[i].buf;
	kb_md_table_row(sb, cells, 3);
	for (size_t i = 0; i < 3; i++)
		strbuf_release(&cell[i]);
}

void kb_md_ev_roofline(char *buf, size_t size, const cJSON *timing)
{
	double bw = kb_md_ev_num(timing, "bw_share"), fl = kb_md_ev_num(timing, "flops_share");

	if (!isfinite(bw) && !isfinite(fl))
		snprintf(buf, size, "n/a");
	else if (!isfinite(fl) || (isfinite(bw) && bw >= fl))
		snprintf(buf, size, "%.0f%% BW", 100 * bw);
	else
		snprintf(buf, size, "%.0f%% FLOPs", 100 * fl);
}

/* "2.31x" or "2.31x / 1.40x" */
static void speedup_cell(char *buf, size_t size, double eager, double compile, bool both)
{
	char e[32], c[32];

	kb_md_fmt_speedup(e, sizeof(e), eager);
	if (!both) {
		snprintf(buf, size, "%s", e);
		return;
	}
	kb_md_fmt_speedup(c, sizeof(c), compile);
	snprintf(buf, size, "%s / %s", e, c);
}

size_t kb_md_ev_speedup_table(struct strbuf *sb, const cJSON *evidence, size_t max_rows,
			      const char *more_where)
{
	static const char *const head[] = { "config", "eager ms", "torch.compile ms",
					     "kernel ms", "speedup", "roofline share" };
	const cJSON *configs = kb_md_ev_arr(evidence, "configs"), *cfg;
	const cJSON *summary = kb_md_ev_obj(evidence, "summary");
	const char *reasons[3] = { NULL };
	size_t nreasons = 0, rows = 0, left;
	bool timed = false, both = false;

	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *t = kb_md_ev_obj(cfg, "timing");
		const char *why = kb_md_ev_str(t, "compile_reason");

		timed |= t != NULL;
		both |= kb_md_ev_obj(t, "compile") != NULL;
		if (why && !kb_md_ev_obj(t, "compile")) {
			size_t i;

			for (i = 0; i < nreasons && strcmp(reasons[i], why); i++)
				;
			if (i == nreasons && nreasons < ARRAY_SIZE(reasons))
				reasons[nreasons++] = why;
		}
	}
	if (!timed) {
		const char *note = kb_md_ev_str(evidence, "timing_note");

		strbuf_addstr(sb, "Not timed");
		if (note) {
			strbuf_addstr(sb, ": ");
			kb_md_escape_n(sb, note, 300);
		}
		strbuf_addstr(sb, ".\n\n");
		return 0;
	}

	kb_md_table_head(sb, head, ARRAY_SIZE(head), "lrrrrr");
	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *t = kb_md_ev_obj(cfg, "timing");
		struct strbuf label = STRBUF_INIT;
		char e[32], co[32], k[32], sp[80], roof[32];
		const char *cells[6];

		if (rows == max_rows)
			break;
		kb_md_ev_config_label(&label, cfg, rows);
		kb_md_fmt_ms(e, sizeof(e), kb_md_ev_num(kb_md_ev_obj(t, "eager"), "median_ms"));
		kb_md_fmt_ms(co, sizeof(co), kb_md_ev_num(kb_md_ev_obj(t, "compile"), "median_ms"));
		kb_md_fmt_ms(k, sizeof(k), kb_md_ev_num(kb_md_ev_obj(t, "kernel"), "median_ms"));
		speedup_cell(sp, sizeof(sp), kb_md_ev_num(t, "speedup_eager"),
			     kb_md_ev_num(t, "speedup_compile"), both);
		kb_md_ev_roofline(roof, sizeof(roof), t);
		cells[0] = label.buf;
		cells[1] = e;
		cells[2] = co;
		cells[3] = k;
		cells[4] = sp;
		cells[5] = roof;
		kb_md_table_row(sb, cells, 6);
		strbuf_release(&label);
		rows++;
	}
	{
		char sp[80], bold[96];
		const char *cells[6] = { "**geomean**", "", "", "", bold, "" };

		speedup_cell(sp, sizeof(sp), kb_md_ev_num(summary, "geomean_speedup_eager"),
			     kb_md_ev_num(summary, "geomean_speedup_compile"), both);
		snprintf(bold, sizeof(bold), "**%s**", sp);
		kb_md_table_row(sb, cells, 6);
	}
	left = (size_t)cJSON_GetArraySize(configs) - rows;
	if (left) {
		/* a blank line first, or the line would be read as one more row */
		strbuf_addf(sb, "\n… %zu more config%s", left, left == 1 ? "" : "s");
		if (more_where) {
			strbuf_addstr(sb, " in ");
			kb_md_code_n(sb, more_where, 200, false);
		}
		strbuf_addch(sb, '\n');
	}
	strbuf_addstr(sb, both ? "\nMedian times; speedup vs eager / vs torch.compile"
			       : "\nMedian times; speedup vs eager");
	strbuf_addstr(sb, "; roofline share: achieved bandwidth (BW) or FLOP rate, whichever "
		      "is higher, as a share of the device's measured peak.");
	for (size_t i = 0; i < nreasons; i++) {
		strbuf_addstr(sb, i ? "; " : " torch.compile n/a: ");
		kb_md_escape_n(sb, reasons[i], 200);
	}
	if (nreasons)
		strbuf_addch(sb, '.');
	strbuf_addstr(sb, "\n\n");
	return left;
}
