#include "core/common.h"
#include "report/headline.h"
#include "report/markdown.h"

#include <math.h>

bool kb_headline_own_kind(const char *kind)
{
	return kind && (!strcmp(kind, "own") || !strcmp(kind, "rk"));
}

/*
 * The relative uncertainty of one median: its ci_rel; with too few samples
 * for a distribution-free interval (ci_rel null), the normal
 * approximation of the median's 95% half-width from the inter-quartile
 * range of n samples, 1.96 x 1.2533 / 1.349 x IQR / sqrt(n) (n: "samples",
 * else "reps"); 0 when neither is known.
 */
static double median_uncertainty(const cJSON *m)
{
	double ci = kb_md_ev_num(m, "ci_rel");
	double iqr = kb_md_ev_num(m, "iqr_ms"), med = kb_md_ev_num(m, "median_ms");
	double n = kb_md_ev_num(m, "samples");

	if (isfinite(ci) && ci > 0)
		return ci;
	if (!(isfinite(n) && n >= 1))
		n = kb_md_ev_num(m, "reps");
	if (!(isfinite(n) && n >= 1))
		n = 1;
	if (isfinite(iqr) && iqr > 0 && isfinite(med) && med > 0)
		return 1.82 * iqr / med / sqrt(n);
	return 0;
}

double kb_headline_config_band(const cJSON *timing, double min_band)
{
	/* a speedup is a ratio of two medians: their uncertainties add up */
	double b = median_uncertainty(kb_md_ev_obj(timing, "kernel")) +
		   median_uncertainty(kb_md_ev_obj(timing, "eager"));

	if (!(min_band > 0))
		min_band = KB_NOISE_BAND_DEFAULT;
	return b > min_band ? b : min_band;
}

/* Running sums of logs for a geometric mean. */
struct geo {
	double log_e, log_c;
	size_t n_e, n_c;
};

static void geo_add(struct geo *g, const cJSON *timing)
{
	double e = kb_md_ev_num(timing, "speedup_eager"), c = kb_md_ev_num(timing, "speedup_compile");

	if (isfinite(e) && e > 0) {
		g->log_e += log(e);
		g->n_e++;
	}
	if (isfinite(c) && c > 0) {
		g->log_c += log(c);
		g->n_c++;
	}
}

static double geo_mean(double sum, size_t n)
{
	return n ? exp(sum / (double)n) : NAN;
}

void kb_headline_of(struct kb_headline *h, const cJSON *evidence, double min_band)
{
	const cJSON *configs = kb_md_ev_arr(evidence, "configs"), *cfg;
	const char *verdict = kb_md_ev_str(evidence, "verdict");
	struct geo own = { 0 }, all = { 0 };

	memset(h, 0, sizeof(*h));
	h->speedup = h->speedup_compile = h->geomean = h->worst_speedup = NAN;
	h->band = h->min_band = min_band > 0 ? min_band : KB_NOISE_BAND_DEFAULT;
	h->evidence = evidence;
	h->verified = verdict && !strcmp(verdict, "verified");
	h->configs = (size_t)cJSON_GetArraySize(configs);
	h->dropped = (size_t)cJSON_GetArraySize(kb_md_ev_arr(evidence, "dropped_configs"));
	h->weak = h->verified && h->configs == 1;
	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *t = kb_md_ev_obj(cfg, "timing");
		double s = kb_md_ev_num(t, "speedup_eager"), band;

		if (!t || !isfinite(s) || !(s > 0))
			continue;
		h->timed++;
		geo_add(&all, t);
		if (kb_headline_own_kind(kb_md_ev_str(cfg, "kind"))) {
			geo_add(&own, t);
			h->own_configs++;
		}
		if (!h->worst || s < h->worst_speedup) {
			h->worst = cfg;
			h->worst_speedup = s;
		}
		band = kb_headline_config_band(t, min_band);
		if (band > h->band)
			h->band = band;
		if (s * (1.0 + band) < 1.0)
			h->slower++;
	}
	if (own.n_e) {
		h->speedup = geo_mean(own.log_e, own.n_e);
		h->speedup_compile = geo_mean(own.log_c, own.n_c);
	} else {
		h->own_configs = 0;
		h->speedup = geo_mean(all.log_e, all.n_e);
		h->speedup_compile = geo_mean(all.log_c, all.n_c);
	}
	h->geomean = kb_md_ev_num(kb_md_ev_obj(evidence, "summary"), "geomean_speedup_eager");
	if (!isfinite(h->geomean))
		h->geomean = geo_mean(all.log_e, all.n_e);
	/* a summary without per-config timings (older evidence): its geomean is all there is */
	if (!h->timed && isfinite(h->geomean)) {
		h->speedup = h->geomean;
		h->speedup_compile = kb_md_ev_num(kb_md_ev_obj(evidence, "summary"),
						  "geomean_speedup_compile");
	}
}

bool kb_headline_propose(const struct kb_headline *h, double min_speedup,
			 enum kb_slower_policy policy, struct strbuf *why)
{
	double s = isfinite(h->speedup) && h->speedup > 0 ? h->speedup : 0;
	char band[32];

	if (!(s > 0) || s < min_speedup) {
		strbuf_addf(why, "No pull request: the best verified kernel (%.2fx) is below the bot's "
			    "threshold (%.2fx).\n", s, min_speedup);
		return false;
	}
	if (h->slower && policy == KB_SLOWER_REFUSE) {
		kb_headline_fmt_band(band, sizeof(band), h->band);
		strbuf_addf(why, "No pull request: the best verified kernel is slower than eager beyond "
			    "the noise band (±%s) on %zu of %zu configs, and [report] slower_configs "
			    "is refuse.\n", band, h->slower, h->timed);
		return false;
	}
	return true;
}

bool kb_headline_config_slower(const struct kb_headline *h, const cJSON *config)
{
	const cJSON *t = kb_md_ev_obj(config, "timing");
	double s = kb_md_ev_num(t, "speedup_eager");

	return t && isfinite(s) && s > 0 && s * (1.0 + kb_headline_config_band(t, h->min_band)) < 1.0;
}

void kb_headline_fmt_band(char *buf, size_t size, double band)
{
	snprintf(buf, size, "%.3g%%", 100 * band);
}

/* The first timed config of the operator's own shapes. */
static const cJSON *first_own(const struct kb_headline *h)
{
	const cJSON *cfg;

	cJSON_ArrayForEach(cfg, kb_md_ev_arr(h->evidence, "configs"))
		if (kb_headline_own_kind(kb_md_ev_str(cfg, "kind")) &&
		    isfinite(kb_md_ev_num(kb_md_ev_obj(cfg, "timing"), "speedup_eager")))
			return cfg;
	return NULL;
}

void kb_headline_md_scope(struct strbuf *sb, const struct kb_headline *h)
{
	if (!h->timed) {
		strbuf_addstr(sb, "(geometric mean over the configs)");
	} else if (!h->own_configs) {
		strbuf_addf(sb, "over all %zu timed config%s (none of the operator's own shapes was timed)",
			    h->timed, h->timed == 1 ? "" : "s");
	} else if (h->own_configs == 1) {
		strbuf_addstr(sb, "on the operator's own shapes (");
		kb_md_ev_config_label(sb, first_own(h), 0);
		strbuf_addch(sb, ')');
	} else {
		strbuf_addf(sb, "on the task's own %zu configs", h->own_configs);
	}
}

void kb_headline_md_spread(struct strbuf *sb, const struct kb_headline *h)
{
	char g[32], w[32];

	if (h->timed < 2 || !h->worst)
		return;
	kb_md_fmt_speedup(g, sizeof(g), h->geomean);
	kb_md_fmt_speedup(w, sizeof(w), h->worst_speedup);
	strbuf_addf(sb, "Over all %zu timed configs: **%s** geometric mean; the worst config, ", h->timed, g);
	kb_md_ev_config_label(sb, h->worst, 0);
	strbuf_addf(sb, ", runs at **%s**.", w);
}

void kb_headline_md_slower(struct strbuf *sb, const struct kb_headline *h, size_t max)
{
	const cJSON *cfg;
	size_t n = 0;

	cJSON_ArrayForEach(cfg, kb_md_ev_arr(h->evidence, "configs")) {
		char v[32];

		if (!kb_headline_config_slower(h, cfg))
			continue;
		if (n == max) {
			strbuf_addf(sb, ", … %zu more", h->slower - n);
			break;
		}
		if (n++)
			strbuf_addstr(sb, ", ");
		kb_md_ev_config_label(sb, cfg, 0);
		kb_md_fmt_speedup(v, sizeof(v), kb_md_ev_num(kb_md_ev_obj(cfg, "timing"), "speedup_eager"));
		strbuf_addf(sb, " at %s", v);
	}
}

void kb_headline_md_alerts(struct strbuf *sb, const struct kb_headline *h)
{
	char band[32];

	kb_headline_fmt_band(band, sizeof(band), h->band);
	if (h->slower) {
		strbuf_addf(sb, "> [!WARNING]\n> **Slower than PyTorch eager on %zu of %zu configs**, "
			    "beyond the noise band (±%s): ", h->slower, h->timed, band);
		kb_headline_md_slower(sb, h, 5);
		strbuf_addstr(sb, ". Merging it makes the operator slower on those shapes.\n\n");
	}
	if (h->weak)
		strbuf_addstr(sb, "> [!WARNING]\n> **Weak evidence**: the kernel was verified on a single "
			      "config, so a kernel that only works for these shapes would pass. Give the "
			      "operator more configs (a robust-kbench task: `config_forward.json` with "
			      "`multi_input_configs`).\n\n");
}

void kb_headline_md_screening(struct strbuf *sb, const struct kb_headline *h, double screening)
{
	char s[32], f[32];

	if (!isfinite(screening) || !(screening > 0) || !isfinite(h->geomean) || !(h->geomean > 0) ||
	    fabs(screening / h->geomean - 1.0) <= h->band)
		return;
	kb_md_fmt_speedup(s, sizeof(s), screening);
	kb_md_fmt_speedup(f, sizeof(f), h->geomean);
	strbuf_addf(sb, "**Screening and final figures differ.** While the search ran, this kernel "
		    "measured **%s** (geometric mean over its configs: the figure the comments on the "
		    "labelled pull request showed); the final re-check in a fresh process measures **%s** on the same "
		    "measure, and this pull request reports the final re-check. Screening timings are "
		    "taken with one seed and fewer repetitions in the search's long-lived harness "
		    "worker, %s.\n\n", s, f,
		    screening > h->geomean
			    ? "and the search keeps the best of many noisy figures, which favours the "
			      "ones that came out high"
			    : "while the search's builds and other evaluations share the machine");
}
