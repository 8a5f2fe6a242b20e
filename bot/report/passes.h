#ifndef KB_REPORT_PASSES_H
#define KB_REPORT_PASSES_H
/*
 * A job of both passes (bot/jobs/README.md, "Forward and backward"): what
 * the pull request says about the forward and the backward kernel.
 *
 * The table has three rows, forward, backward and forward+backward, over
 * the configs both passes timed (the same name and the same parameters,
 * so the same shapes): each row's kernel and eager times are the medians
 * summed over those configs, its speedup eager over kernel of the sums.
 * forward+backward is the sum of the two kernel times against the sum of
 * the two baselines, and the text says so; the backward's baseline is
 * eager autograd as the harness times it (the reference's forward under
 * autograd, then torch.autograd.grad). When no config was timed by both,
 * each row sums its own pass's timed configs and forward+backward is
 * n/a: times of different shapes do not add up.
 *
 * Pure: evidence in, markdown out.
 */
#include "core/common.h"
#include "core/strbuf.h"

#include <cjson/cJSON.h>

struct kb_passes_report {
	const cJSON *backward;          /* the backward kernel's evidence; NULL: no backward kernel */
	const char *backward_kernel;    /* its file in the branch; NULL: not named */
	const char *note;               /* plain text: why there is no backward kernel; NULL: none */
};

/* One row: medians summed over configs. */
struct kb_pass_times {
	double kernel_ms, eager_ms;     /* NAN: no timed config */
	size_t configs;
};

/*
 * The configs fwd and bwd (evidence) both timed, matched by name and
 * parameters: their sums into f and b, their count returned. With none,
 * f and b sum each pass's own timed configs.
 */
size_t kb_passes_times(const cJSON *fwd, const cJSON *bwd, struct kb_pass_times *f,
		       struct kb_pass_times *b);

/* "### Forward and backward": the table and what it is over, or the note on the missing kernel. */
void kb_passes_section(struct strbuf *sb, const cJSON *forward, const struct kb_passes_report *p);

/* The summary's sentence on both passes (forward+backward, or no backward kernel). */
void kb_passes_summary(struct strbuf *sb, const cJSON *forward, const struct kb_passes_report *p);

#endif
