#ifndef KB_HEADLINE_H
#define KB_HEADLINE_H
/*
 * The headline policy (bot/report/HEADLINE.md): which number a pull
 * request, a comment, a step summary or `kernelbot bench` leads with, and
 * what must be said next to it. Computed once from the evidence
 * (verifier/PROTOCOL.md) so that every text says the same thing:
 *
 *   struct kb_headline h;
 *   kb_headline_of(&h, evidence, cfg->report_noise_band);
 *   if (h.slower) ... "slower than eager on h.slower of h.timed configs"
 *
 * - speedup: the geometric mean of the speedup over eager on the
 *   operator's own shapes (configs of kind "own": a KernelBench file's own
 *   sizes; "rk": a robust-kbench task's own configs). When none of those
 *   was timed: over every timed config, and own_configs is 0; when no
 *   config carries its timing: the summary's geometric mean.
 * - worst: the timed config with the lowest speedup over eager.
 * - noise band of a config: the larger of the floor ([report] noise_band,
 *   default KB_NOISE_BAND_DEFAULT) and the sum of the kernel's and eager's
 *   ci_rel (the median's relative 95% confidence half-width; where too
 *   few samples gave none, its normal approximation from the inter-quartile
 *   range). band is the
 *   widest over the timed configs: what a re-measurement is promised to
 *   land within.
 * - slower: timed configs whose speedup over eager, times 1 + their band,
 *   is still below 1 (for a small band: below 1 - band)
 *   (when there are any, worst is one of them).
 * - weak: the kernel was verified on a single config.
 *
 * Pure: no I/O. Pointers into the evidence are borrowed.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"

#include <cjson/cJSON.h>

/* The floor of the noise band when the config does not set one: 3%. */
#define KB_NOISE_BAND_DEFAULT 0.03

struct kb_headline {
	bool verified;          /* verdict "verified" */
	size_t configs;         /* configs in the evidence */
	size_t timed;           /* of those, timed */
	size_t dropped;         /* configs the verifier left out (dropped_configs) */
	size_t own_configs;     /* timed configs the headline is over; 0: it is over all timed ones */
	double speedup;         /* the headline vs eager; NAN: not timed */
	double speedup_compile; /* the same configs vs torch.compile; NAN: none */
	double geomean;         /* over every timed config (summary's geomean_speedup_eager) */
	const cJSON *worst;     /* the timed config with the lowest speedup over eager; NULL: none */
	double worst_speedup;   /* its speedup over eager; NAN: none */
	size_t slower;          /* timed configs slower than eager beyond their noise band */
	double band;            /* the widest noise band of a timed config; the floor when none */
	double min_band;        /* the band's floor it was computed with */
	bool weak;              /* verified on a single config */
	const cJSON *evidence;  /* what it was computed from (borrowed) */
};

/*
 * Fill h from evidence (NULL gives an empty, untimed headline). min_band:
 * the noise band's floor, <= 0 for KB_NOISE_BAND_DEFAULT.
 */
void kb_headline_of(struct kb_headline *h, const cJSON *evidence, double min_band);

/* One config's noise band (see above) from its "timing" object. */
double kb_headline_config_band(const cJSON *timing, double min_band);

/* True for a config of the operator's own shapes ("own", "rk"). */
bool kb_headline_own_kind(const char *kind);

/*
 * Whether the bot proposes a pull request for this kernel: its headline is
 * at least min_speedup (a verified kernel with no timing counts as 0), and
 * under KB_SLOWER_REFUSE no config is slower than eager. false with the
 * reason, one line, appended to why.
 */
bool kb_headline_propose(const struct kb_headline *h, double min_speedup,
			 enum kb_slower_policy policy, struct strbuf *why);

/* True when config (timed) is slower than eager beyond its band. */
bool kb_headline_config_slower(const struct kb_headline *h, const cJSON *config);

/* --- the same words everywhere (markdown; report/markdown.h escaping) --- */

/* "3%", "12.5%": a band as people read it. */
void kb_headline_fmt_band(char *buf, size_t size, double band);

/*
 * What the headline is over: "on the operator's own shapes (`own(...)`)",
 * "on the task's own 4 configs", or "over all 12 timed configs (none of
 * the operator's own shapes was timed)".
 */
void kb_headline_md_scope(struct strbuf *sb, const struct kb_headline *h);

/*
 * "Over all 12 configs: **1.40x** geometric mean; the worst, `double(...)`,
 * runs at **0.56x**." Nothing when fewer than two configs were timed.
 */
void kb_headline_md_spread(struct strbuf *sb, const struct kb_headline *h);

/* "`a` at 0.56x, `b` at 0.80x, … 3 more": the slower configs, at most max named. */
void kb_headline_md_slower(struct strbuf *sb, const struct kb_headline *h, size_t max);

/*
 * GitHub alert blocks a reader must not miss: slower than eager (how many,
 * the band, which) and weak evidence (a single config). Nothing otherwise.
 */
void kb_headline_md_alerts(struct strbuf *sb, const struct kb_headline *h);

/*
 * The screening figure (the search's own timing of this kernel, what the
 * review comments showed) against the final re-check's geometric mean:
 * both and why they differ, when they differ beyond the band; nothing
 * otherwise (or when screening is not a positive number).
 */
void kb_headline_md_screening(struct strbuf *sb, const struct kb_headline *h, double screening);

#endif
