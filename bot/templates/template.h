#ifndef KB_TEMPLATE_H
#define KB_TEMPLATE_H
/*
 * Built-in kernel templates (issue 4): from an operator's analysis (the
 * harness's describe mode, schema in bot/templates/README.md) to whole
 * native-ABI sources (kernelbot_abi.h), one per point of a small parameter
 * space. Families: pointwise chains, row-wise reductions with a pointwise
 * prologue and epilogue, matrix products with a pointwise epilogue; a
 * kb_backward is added for pointwise and normalisation operators when the
 * analysis asks for one ("backward": true).
 *
 * Every point renders a kernel that is correct for every shape (shapes are
 * read from the DLTensors at run time); parameters change only speed.
 * Points whose values are clamped to the same effective layout render the
 * same source: a tuner dedups by the source's hash.
 */
#include "core/common.h"
#include "core/config.h"

#include <cjson/cJSON.h>

struct strbuf;
struct kb_template;

struct kb_tparam {
	const char *name;       /* e.g. "threads" */
	size_t nr;
	const int64_t *values;  /* nr values, the first is the default */
};

struct kb_template_space {
	size_t nr;                     /* number of parameters */
	const struct kb_tparam *params;
};

/*
 * Parse analysis (the describe mode's "analysis" object) and prepare the
 * templates of its family for backend (KB_BACKEND_CUDA or KB_BACKEND_CPU).
 * data_dir is the kernelbot data dir (kb_datadir's root, holding
 * bot/templates/{cuda,cpu}); NULL: located like kb_datadir_find(NULL, ...).
 *
 * Returns 0 with *out set; KB_ENOTFOUND when the operator cannot be
 * generated (family "none", an op, dtype, attribute or layout the templates
 * do not cover), with the reason in why (may be NULL) and nothing logged:
 * a plain sentence that names the op or family in quotes; -1 on a real
 * error (malformed analysis, template files missing), logged, reason in why
 * too.
 */
int kb_template_new(struct kb_template **out, const cJSON *analysis, enum kb_backend backend,
		    const char *data_dir, struct strbuf *why);
void kb_template_free(struct kb_template *t);

const struct kb_template_space *kb_template_space(const struct kb_template *t);
/* Number of points in the space (the product of the parameter counts). */
size_t kb_template_space_size(const struct kb_template *t);
/* Point number k (0 <= k < size, mixed radix, first parameter slowest). */
void kb_template_point_at(const struct kb_template *t, size_t k, int64_t *point);
/*
 * The number of the point that renders the same source as point number k
 * (values the render clamps, e.g. threads_per_row above threads, set to
 * what they are clamped to): a search proposes only these, so a budget of
 * points is not spent on duplicates. k itself where nothing is clamped.
 */
size_t kb_template_point_canonical(const struct kb_template *t, size_t k);

/*
 * Render a whole source for point (one value per parameter, in the space's
 * order; each must be one of that parameter's values) into source_out
 * (appended). Returns 0 or -1 (a value outside the space; logged).
 */
int kb_template_render(const struct kb_template *t, const int64_t *point, struct strbuf *source_out);

/* "pointwise", "rowwise" or "matmul". */
const char *kb_template_family(const struct kb_template *t);
/* The kind inside the family, e.g. "softmax", "linear"; the family for pointwise. */
const char *kb_template_kind(const struct kb_template *t);
enum kb_backend kb_template_backend(const struct kb_template *t);
/* ".cu" or ".cpp": the source file's extension. */
const char *kb_template_ext(const struct kb_template *t);
/* True when rendered sources export kb_backward too. */
bool kb_template_has_backward(const struct kb_template *t);
/* "threads=256 ept=4 vec=4": a point for logs and reports (appended). */
void kb_template_point_name(const struct kb_template *t, const int64_t *point, struct strbuf *out);

#endif
