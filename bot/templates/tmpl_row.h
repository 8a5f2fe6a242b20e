#ifndef KB_TMPL_ROW_H
#define KB_TMPL_ROW_H
/* The row-wise generator's pieces shared with its backward (tmpl_rowwise*.c). */
#include "templates/tmpl_priv.h"

const char *row_kind_name(enum rkind k);
/* inputs kb_x reads / the epilogue reads (flags per input, or-ed into used) */
void row_x_inputs(const struct kb_template *t, bool *used);
void row_y_inputs(const struct kb_template *t, bool *used);
/* loads "x<i>" of the inputs in used: per element (vec: V of them) or per row */
void row_emit_loads(const struct kb_template *t, const bool *used, bool vec, bool per_row,
		    struct strbuf *out);
char **row_input_exprs(const struct kb_template *t, const bool *used, bool vec, bool per_row);
void row_free_exprs(const struct kb_template *t, char **v);
int row_space_input(const struct kb_template *t);
/* host set-up of kb_args (backward: outputs are gradients, set elsewhere) */
int row_emit_setup(const struct kb_template *t, struct strbuf *out, bool backward);
void row_emit_params(const struct kb_template *t, const int64_t *point, struct strbuf *out);
/* kb_args, kb_x, kb_xv, kb_yv/kb_yr/kb_yi, kb_wbv */
int row_emit_hooks(const struct kb_template *t, struct strbuf *out);

/* tmpl_rowwise_bwd.c */
int tmpl_rowwise_render_bwd(const struct kb_template *t, const int64_t *point, struct strbuf *out);
/* kb_args fields the backward adds (upstream gradient, gradients) */
void row_bwd_fields(const struct kb_template *t, struct strbuf *out);
/* KB_ENOTFOUND (why set) when the backward cannot be generated; pro/epi per node */
int row_bwd_check(const struct kb_template *t, const bool *pro, const bool *epi, struct strbuf *why);

#endif
