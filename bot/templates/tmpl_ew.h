#ifndef KB_TMPL_EW_H
#define KB_TMPL_EW_H
/*
 * The elementwise generator (tmpl_pointwise.c): kernel argument struct,
 * per-element hooks and host set-up for <backend>/ew.<ext>.in. Used by the
 * pointwise family (forward and backward) and the matmul epilogue.
 */
#include "templates/tmpl_priv.h"

#define EW_MAX_SLOTS 24
#define EW_MAX_OUTS 8

struct ew {
	const struct kb_template *t;
	bool *want;             /* per node: computed per element */
	char **node_expr;       /* per node: value given (the product), or NULL */
	int nslot;
	int slot_input[EW_MAX_SLOTS];   /* input index; -1: the product */
	enum tdtype slot_dt[EW_MAX_SLOTS];
	bool slot_full[EW_MAX_SLOTS];
	int *slot_of;           /* per input: its slot or -1 */
	int nout;
	struct targ out_val[EW_MAX_OUTS];
	enum tdtype out_dt[EW_MAX_OUTS];
	int V;                  /* elements per vector access */
	int product_slot;       /* -2 before ew_setup: add one (matmul) */
	int product_node;       /* the node the product slot stands for, -1: none */
	int skip_input;         /* an input never read per element (matmul's bias), -1 */
};

void ew_init(struct ew *e, const struct kb_template *t);
void ew_release(struct ew *e);
/* after out_val/out_dt/nout (and product_*) are set: slots, wanted nodes, V */
int ew_setup(struct ew *e, struct strbuf *why);
void ew_emit_struct(const struct ew *e, struct strbuf *out, const char *extra_fields);
int ew_emit_hooks(const struct ew *e, struct strbuf *out);
/* host set-up of kb_args a (outputs too unless !with_outputs); out0: the element space */
void ew_emit_setup(const struct ew *e, struct strbuf *out, const char *product, const char *indent,
		   bool with_outputs);
/* the element hooks' input expressions (in[j] for slots, a.s<i> for scalars) */
char **ew_input_exprs(const struct ew *e, const char *arr);
void ew_free_exprs(const struct ew *e, char **v);
void ew_emit_params(const struct kb_template *t, const int64_t *point, struct strbuf *out);

/* tmpl_pointwise_bwd.c: the gradient fields kb_args carries */
void pw_bwd_fields(const struct kb_template *t, const struct ew *e, struct strbuf *out);
int tmpl_pointwise_render_bwd(const struct kb_template *t, const struct ew *fwd,
			      const int64_t *point, struct strbuf *out);

#endif
