#include "core/common.h"
#include "cli/cli.h"
#include "core/json.h"
#include "report/headline.h"

#include <math.h>

/*
 * The headline policy on the terminal (bot/report/HEADLINE.md): what a
 * pull request would lead with and the warnings it would carry, so that
 * `verify`, `bench` and `run` say what the reviewer will read.
 */

#define NAMES_SHOWN 8

/* A config's name on one line of plain text: control characters as '?'. */
static void put_name(const cJSON *config, FILE *fp)
{
	const char *name = kb_json_str(config, "name");

	if (!name || !*name) {
		fprintf(fp, "#%lld", (long long)kb_json_i64(config, "index", 0));
		return;
	}
	for (size_t i = 0; name[i] && i < 120; i++)
		fputc((unsigned char)name[i] < 0x20 || name[i] == 0x7F ? '?' : name[i], fp);
}

static void put_reason(const char *s, FILE *fp)
{
	for (size_t i = 0; s && s[i] && i < 300; i++)
		fputc((unsigned char)s[i] < 0x20 || s[i] == 0x7F ? ' ' : s[i], fp);
}

static const cJSON *first_own(const struct kb_headline *h)
{
	const cJSON *cfg;

	cJSON_ArrayForEach(cfg, cJSON_GetObjectItemCaseSensitive(h->evidence, "configs"))
		if (kb_headline_own_kind(kb_json_str(cfg, "kind")) &&
		    isfinite(kb_json_num(cJSON_GetObjectItemCaseSensitive(cfg, "timing"), "speedup_eager", NAN)))
			return cfg;
	return NULL;
}

static void print_speedups(const struct kb_headline *h, const char *prefix, FILE *fp)
{
	char band[32];

	fprintf(fp, "%sheadline: %.2fx vs eager ", prefix, h->speedup);
	if (!h->timed) {
		fprintf(fp, "(geometric mean over the configs)");
	} else if (h->own_configs == 1) {
		fprintf(fp, "on the operator's own shapes (");
		put_name(first_own(h), fp);
		fprintf(fp, ")");
	} else if (h->own_configs) {
		fprintf(fp, "on the task's own %zu configs", h->own_configs);
	} else {
		fprintf(fp, "over all %zu timed configs (none of the operator's own shapes was timed)", h->timed);
	}
	if (isfinite(h->speedup_compile))
		fprintf(fp, ", %.2fx vs torch.compile", h->speedup_compile);
	fprintf(fp, "\n");
	if (h->timed > 1 && h->worst) {
		fprintf(fp, "%sworst config: ", prefix);
		put_name(h->worst, fp);
		fprintf(fp, " %.2fx (geomean over all %zu: %.2fx)\n", h->worst_speedup, h->timed, h->geomean);
	}
	kb_headline_fmt_band(band, sizeof(band), h->band);
	if (h->slower) {
		const cJSON *cfg;
		size_t n = 0;

		fprintf(fp, "%swarning: slower than eager beyond the noise band (+-%s) on %zu of %zu configs:",
			prefix, band, h->slower, h->timed);
		cJSON_ArrayForEach(cfg, cJSON_GetObjectItemCaseSensitive(h->evidence, "configs")) {
			if (!kb_headline_config_slower(h, cfg))
				continue;
			if (n == NAMES_SHOWN) {
				fprintf(fp, ", ... %zu more", h->slower - n);
				break;
			}
			fprintf(fp, "%s", n++ ? ", " : " ");
			put_name(cfg, fp);
			fprintf(fp, " %.2fx", kb_json_num(cJSON_GetObjectItemCaseSensitive(cfg, "timing"),
							  "speedup_eager", NAN));
		}
		fprintf(fp, "\n");
	}
}

void cli_print_headline(const cJSON *evidence, double noise_floor, const char *prefix, FILE *fp)
{
	struct kb_headline h;
	const cJSON *d;
	size_t n = 0;

	kb_headline_of(&h, evidence, noise_floor);
	if (isfinite(h.speedup))
		print_speedups(&h, prefix, fp);
	if (h.weak)
		fprintf(fp, "%swarning: weak evidence: verified on a single config\n", prefix);
	if (!h.dropped)
		return;
	fprintf(fp, "%sleft out: %zu config%s the verifier generated:\n", prefix, h.dropped,
		h.dropped == 1 ? "" : "s");
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(evidence, "dropped_configs")) {
		if (n++ == 2 * NAMES_SHOWN) {
			fprintf(fp, "%s  ... %zu more in the evidence\n", prefix, h.dropped - 2 * NAMES_SHOWN);
			break;
		}
		fprintf(fp, "%s  ", prefix);
		put_name(d, fp);
		fprintf(fp, ": ");
		put_reason(kb_json_str(d, "reason"), fp);
		fprintf(fp, "\n");
	}
}
