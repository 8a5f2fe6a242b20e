#include "core/common.h"
#include "report/markdown.h"
#include "report/passes.h"

#include <math.h>

/* Config names the text lists, at most. */
#define MAX_NAMES 4

static double median(const cJSON *config, const char *fn)
{
	return kb_md_ev_num(kb_md_ev_obj(kb_md_ev_obj(config, "timing"), fn), "median_ms");
}

static bool timed(const cJSON *config)
{
	return isfinite(median(config, "kernel")) && isfinite(median(config, "eager"));
}

/*
 * bwd's config that fwd_cfg (timed) was also timed as: the same name and
 * parameters, so the same shapes; NULL when there is none.
 */
static const cJSON *twin(const cJSON *fwd_cfg, const cJSON *bwd)
{
	const char *name = kb_md_ev_str(fwd_cfg, "name");
	const cJSON *c;

	if (!name)
		return NULL;
	cJSON_ArrayForEach(c, kb_md_ev_arr(bwd, "configs")) {
		const char *other = kb_md_ev_str(c, "name");

		if (other && !strcmp(name, other) && timed(c) &&
		    cJSON_Compare(cJSON_GetObjectItemCaseSensitive(fwd_cfg, "params"),
				  cJSON_GetObjectItemCaseSensitive(c, "params"), true))
			return c;
	}
	return NULL;
}

static void add_times(struct kb_pass_times *t, const cJSON *config)
{
	t->kernel_ms = (t->configs ? t->kernel_ms : 0) + median(config, "kernel");
	t->eager_ms = (t->configs ? t->eager_ms : 0) + median(config, "eager");
	t->configs++;
}

/* Every timed config of ev, summed: a pass on its own. */
static void own_times(const cJSON *ev, struct kb_pass_times *t)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, kb_md_ev_arr(ev, "configs"))
		if (timed(c))
			add_times(t, c);
}

size_t kb_passes_times(const cJSON *fwd, const cJSON *bwd, struct kb_pass_times *f,
		       struct kb_pass_times *b)
{
	const cJSON *c;

	memset(f, 0, sizeof(*f));
	memset(b, 0, sizeof(*b));
	f->kernel_ms = f->eager_ms = b->kernel_ms = b->eager_ms = NAN;
	cJSON_ArrayForEach(c, kb_md_ev_arr(fwd, "configs")) {
		const cJSON *other = timed(c) ? twin(c, bwd) : NULL;

		if (other) {
			add_times(f, c);
			add_times(b, other);
		}
	}
	if (f->configs)
		return f->configs;
	own_times(fwd, f);
	own_times(bwd, b);
	return 0;
}

static void row(struct strbuf *sb, const char *label, double kernel_ms, double eager_ms)
{
	char k[32], e[32], sp[32];
	const char *cells[4] = { label, e, k, sp };

	kb_md_fmt_ms(k, sizeof(k), kernel_ms);
	kb_md_fmt_ms(e, sizeof(e), eager_ms);
	kb_md_fmt_speedup(sp, sizeof(sp), isfinite(kernel_ms) && kernel_ms > 0 ? eager_ms / kernel_ms : NAN);
	kb_md_table_row(sb, cells, 4);
}

/* "`a`, `b`, … 2 more": the configs both passes timed. */
static void add_matched_names(struct strbuf *sb, const cJSON *fwd, const cJSON *bwd, size_t n)
{
	const cJSON *c;
	size_t shown = 0;

	cJSON_ArrayForEach(c, kb_md_ev_arr(fwd, "configs")) {
		if (!timed(c) || !twin(c, bwd))
			continue;
		if (shown == MAX_NAMES) {
			strbuf_addf(sb, ", … %zu more", n - shown);
			break;
		}
		if (shown++)
			strbuf_addstr(sb, ", ");
		kb_md_code_n(sb, kb_md_ev_str(c, "name"), KB_MD_NAME_CHARS, false);
	}
}

/* The backward's baseline, and what the backward kernel is given. */
static void add_baseline_words(struct strbuf *sb, const struct kb_passes_report *p)
{
	strbuf_addstr(sb, " The backward's baseline is eager autograd as the harness times it: the "
		      "reference's forward under autograd, then `torch.autograd.grad`; the backward "
		      "kernel's `kb_backward`");
	if (p->backward_kernel) {
		strbuf_addstr(sb, " (");
		kb_md_code_n(sb, p->backward_kernel, 200, false);
		strbuf_addch(sb, ')');
	}
	strbuf_addstr(sb, " gets the inputs and the upstream gradients and recomputes what it needs.");
}

static void no_backward_kernel(struct strbuf *sb, const struct kb_passes_report *p)
{
	strbuf_addstr(sb, "**No backward kernel:** ");
	kb_md_escape_n(sb, p->note && *p->note ? p->note : "the backward search left none", 600);
	strbuf_addstr(sb, ". The binding's `apply()` runs this forward kernel with the reference's "
		      "backward (PyTorch autograd through `reference/`): its gradients are the "
		      "reference's, and only the forward is faster.\n\n");
}

void kb_passes_section(struct strbuf *sb, const cJSON *forward, const struct kb_passes_report *p)
{
	static const char *const head[] = { "pass", "eager ms", "kernel ms", "speedup" };
	struct kb_pass_times f, b;
	size_t n;

	strbuf_addstr(sb, "### Forward and backward\n\nThis job searched the backward pass too: the "
		      "operator is used with autograd.\n\n");
	if (!p->backward) {
		no_backward_kernel(sb, p);
		return;
	}
	n = kb_passes_times(forward, p->backward, &f, &b);
	kb_md_table_head(sb, head, 4, "lrrr");
	row(sb, "forward", f.kernel_ms, f.eager_ms);
	row(sb, "backward", b.kernel_ms, b.eager_ms);
	if (n)
		row(sb, "**forward+backward**", f.kernel_ms + b.kernel_ms, f.eager_ms + b.eager_ms);
	else
		row(sb, "**forward+backward**", NAN, NAN);
	if (n) {
		strbuf_addf(sb, "\nMedian times summed over the %zu config%s both passes timed (", n,
			    n == 1 ? "" : "s");
		add_matched_names(sb, forward, p->backward, n);
		strbuf_addstr(sb, "); each speedup is eager over kernel of those sums. "
			      "**forward+backward** is the sum of the two kernel times against the sum "
			      "of the two baselines (eager forward plus eager autograd backward).");
	} else {
		strbuf_addstr(sb, "\nThe two passes were timed on different configs (none of the same "
			      "name and parameters), and times of different shapes do not add up: each "
			      "row sums its own pass's timed configs, and forward+backward is n/a.");
	}
	add_baseline_words(sb, p);
	strbuf_addstr(sb, "\n\n");
}

void kb_passes_summary(struct strbuf *sb, const cJSON *forward, const struct kb_passes_report *p)
{
	struct kb_pass_times f, b;
	char sp[32];

	if (!p->backward) {
		strbuf_addstr(sb, "No backward kernel passed: the binding pairs this kernel with the "
			      "reference's backward (see Forward and backward).\n\n");
		return;
	}
	if (!kb_passes_times(forward, p->backward, &f, &b))
		return;
	kb_md_fmt_speedup(sp, sizeof(sp), (f.eager_ms + b.eager_ms) / (f.kernel_ms + b.kernel_ms));
	strbuf_addf(sb, "Forward and backward together: **%s** against eager forward plus eager "
		    "autograd backward (the sum of the two kernels' times against the sum of the two "
		    "baselines, on %zu config%s both passes timed; see Forward and backward).\n\n",
		    sp, f.configs, f.configs == 1 ? "" : "s");
}
