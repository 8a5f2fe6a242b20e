#ifndef KB_REPORT_TORCH_OP_H
#define KB_REPORT_TORCH_OP_H
/*
 * ops.py: the verified kernel registered as a PyTorch custom operator, next
 * to binding.py (which loads and calls the kernel) in the operator's folder
 * of the bot's branch, for the module's patched forward to call
 * (report/module_patch.h; issue 17, "Kernels wired back").
 *
 *   torch >= 2.4  torch.library.custom_op("kernelbot::<name>") with
 *                 register_fake (output shapes from the reference run on
 *                 fake tensors: torch.compile traces it without a graph
 *                 break) and register_autograd (a second custom op around
 *                 the backward kernel's kb_backward, else the reference's
 *                 backward by torch.func.vjp);
 *   older torch   torch.library.Library("kernelbot_<name>", "DEF") define
 *                 and impl (a Meta kernel for the shapes) behind a
 *                 torch.autograd.Function; without torch.library, a plain
 *                 torch.autograd.Function.
 * ops.IMPLEMENTATION says which ("custom_op", "library",
 * "autograd.Function"); a registration that fails degrades to the next.
 *
 * ops.supported(*args) is the guard the patched forward asks first: every
 * argument of the kind the evidence verified (device, dtype, rank, the
 * sizes no verified config changed, non-empty), no mode the kernel cannot
 * honour (autocast, deterministic algorithms, TorchScript, jit tracing),
 * and the library loads (a failure warns once; the original code runs).
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

#include <cjson/cJSON.h>

#define KB_TORCH_OP_MAX_RANK 8

enum kb_op_kind { KB_OP_TENSOR, KB_OP_FLOAT, KB_OP_INT };

/* One ABI input as the evidence's verified configs saw it. */
struct kb_op_input {
	char *name;                  /* ABI name: "input0", "param:fc.weight" */
	char *arg;                   /* its Python identifier in ops.py: "param_fc_weight" */
	enum kb_op_kind kind;
	struct strvec dtypes;        /* tensors: every dtype verified ("float32") */
	int ranks[KB_TORCH_OP_MAX_RANK + 1]; /* the ranks verified */
	size_t nr_ranks;
	/* per axis, the size every verified config had (-1: it varied); only when one rank */
	int64_t fixed[KB_TORCH_OP_MAX_RANK];
};

/* Sizes (the tensor arguments' total elements) where the kernel measured fast enough. */
struct kb_op_range {
	int64_t lo, hi;              /* inclusive; hi < 0: no upper bound */
};

/* The speed gate of one dtype (of the first tensor argument). */
struct kb_op_speed {
	char *dtype;
	struct kb_op_range *ranges;
	size_t nr_ranges;
};

struct kb_torch_op {
	char *name;                  /* the operator's identifier: "linear_gelu" */
	struct kb_op_input *inputs;
	size_t nr_inputs;
	int nr_outputs;
	double min_speedup;          /* the speed gate's threshold; 0: no gate (kb_torch_op_speed_gate) */
	struct kb_op_speed *speed;
	size_t nr_speed;
	cJSON *attributes;           /* ATTRIBUTES: the wiring check's record (owned); NULL: None */
};

void kb_torch_op_init(struct kb_torch_op *op);
void kb_torch_op_release(struct kb_torch_op *op);

/* A Python identifier for name: other bytes become '_', "op_" before a digit, "_" after a keyword. */
void kb_torch_op_ident(struct strbuf *out, const char *name);

/*
 * op from a verified forward evidence (its operator's n_outputs and every
 * config's inputs: names, shapes, dtypes, scalars) and the operator's
 * name. 0, or -1 with why (no configs, inputs that differ between
 * configs, a rank above KB_TORCH_OP_MAX_RANK); nothing is logged.
 */
int kb_torch_op_from_evidence(struct kb_torch_op *op, const cJSON *evidence, const char *name,
			      struct strbuf *why);

/*
 * The speed gate (torch_op_speed.c): where the module may call the kernel
 * for speed, from the evidence's timed configs. Per dtype of the first
 * tensor argument, the configs sorted by total elements of the tensor
 * arguments; a size whose every timed config ran at >= min_speedup x eager
 * (the module's own code) is fast; each run of fast sizes is a range,
 * open below when it starts at the smallest timed size and open above
 * when it ends at the largest (between a fast and a slow config the
 * kernel is not used). min_speedup <= 0: no gate, 0. Else 0 with the
 * ranges in op, or KB_ENOTSUPPORTED with why (no config timed, or none
 * fast: the figures named). op must come from kb_torch_op_from_evidence.
 */
int kb_torch_op_speed_gate(struct kb_torch_op *op, const cJSON *evidence, double min_speedup,
			   struct strbuf *why);

/* The gate as JSON for the evidence: {"min_speedup": x, "faster": {"float32": [[lo, hi|null]]}}; NULL: none. */
cJSON *kb_torch_op_speed_json(const struct kb_torch_op *op);

/*
 * The module's settings as the wiring check recorded them (verifier/wiring.h:
 * sanitized, {"path": {"name": value}}), for ops.configured; copied. NULL
 * clears them.
 */
void kb_torch_op_set_attributes(struct kb_torch_op *op, const cJSON *attributes);

/* ops.py's text, appended to out. */
void kb_torch_op_render(struct strbuf *out, const struct kb_torch_op *op);

#endif
