#ifndef KB_JOBS_REPO_OPERATORS_H
#define KB_JOBS_REPO_OPERATORS_H
/*
 * .kernelbot.ini's [operator NAME] sections: an nn.Module class or a
 * function of the repository, and what to call it with (the README's
 * ".kernelbot.ini" section is the user's page; repo_config.c has the
 * annotated example):
 *
 *   [operator mlp]
 *   module = models/mlp.py:FusedMLP   ; or function = pkg/ops.py:fused_gelu
 *   init = H, eps=1e-6                ; the class's arguments: Python literals and sizes
 *   inputs = float32[B,H]             ; forward's arguments: dtype[dims], or a number
 *   inputs.2 = bfloat16[4,H]          ; more shape sets: inputs.2 ... inputs.16
 *   sizes = B=8|32, H=4096            ; symbolic sizes; '|' gives alternatives
 *   dtypes = float32, bfloat16        ; each shape set again in each of these
 *   requires_grad = true              ; used with autograd: the backward is searched too
 *   tests = tests/test_mlp.py::test_forward   ; no inputs: shapes recorded from these
 *
 * Everything is checked when the file is parsed; a mistake is a line in
 * `why` naming the section, the key and what was wrong. An error leaves
 * the section out (bad); a section that gives no shapes at all
 * (needs_inputs) is listed with the lines that would fix it.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

#define KB_OPSEC_NAME 32        /* a size's or dtype's name, with its NUL */
#define KB_OPSEC_MAX_RANK 8
#define KB_OPSEC_MAX_ARGS 16    /* forward arguments of one shape set */
#define KB_OPSEC_MAX_FORMS 16   /* inputs, inputs.2 ... inputs.16 */
#define KB_OPSEC_MAX_SIZES 16
#define KB_OPSEC_MAX_ALTS 8     /* alternatives of one size */
#define KB_OPSEC_MAX_DTYPES 4
#define KB_OPSEC_MAX_SETS 32    /* shape sets after the cross products */
#define KB_OPSEC_MAX_SECTIONS 32
#define KB_OPSEC_MAX_DIM ((int64_t)1 << 31)

struct kb_op_dim {
	int64_t value;              /* a literal size (sym empty) */
	char sym[KB_OPSEC_NAME];    /* a size of `sizes` */
};

/* One argument of forward: a tensor, or a number. */
struct kb_op_arg {
	bool tensor;
	char dtype[KB_OPSEC_NAME];  /* "float32" ... (torch's names) */
	size_t rank;
	struct kb_op_dim dims[KB_OPSEC_MAX_RANK];
	bool requires_grad;
	char value[48];             /* !tensor: a Python int or float literal */
};

/* The arguments of one `inputs` key. */
struct kb_op_form {
	struct kb_op_arg args[KB_OPSEC_MAX_ARGS];
	size_t nr;
};

struct kb_op_size {
	char name[KB_OPSEC_NAME];
	int64_t values[KB_OPSEC_MAX_ALTS];
	size_t nr;
};

struct kb_repo_operator {
	char *name;                 /* NAME of [operator NAME] */
	char *path;                 /* the .py file, relative to the repository root */
	char *target;               /* the class ("Outer.Inner" when nested) or function */
	bool is_function;
	struct strvec init;         /* init's arguments as Python text; keywords "name=text" */
	struct kb_op_form *forms;   /* inputs, then inputs.2 ... in their numbers' order */
	size_t nr_forms;
	struct kb_op_size sizes[KB_OPSEC_MAX_SIZES];
	size_t nr_sizes;
	char dtypes[KB_OPSEC_MAX_DTYPES][KB_OPSEC_NAME];
	size_t nr_dtypes;
	bool requires_grad;         /* some input requires grad: searched forward and backward */
	struct strvec tests;        /* pytest node ids */
	bool bad;                   /* an error: left out (why says so) */
	bool needs_inputs;          /* no inputs and no tests: listed, not run */
	/* private to the parser: the raw values by key */
	struct strvec keys, values;
};

/* The one operator path a job of a section has: "models/mlp.py:FusedMLP". */
void kb_repo_operator_job_path(struct strbuf *out, const struct kb_repo_operator *op);
/*
 * Split a job's operator path "PATH.py:TARGET" into path and target (out
 * strings owned by the caller); false, with nothing allocated, when it is
 * not of that form (a KernelBench file or a task folder).
 */
bool kb_repo_operator_split(const char *job_path, char **path, char **target);
/* A path inside the repository: relative, no "." or ".." component, no control character. */
bool kb_repo_path_ok(const char *p);
/* A size's name, s[0..n): an identifier the generated file can bind (not "_...", "KB_..." or reserved). */
bool kb_repo_size_name_ok(const char *s, size_t n);

/* --- for repo_config.c --- */
struct kb_repo_config;
/* One key of [operator NAME] (section is what follows "operator "). */
void kb_repo_operator_key(struct kb_repo_config *rc, const char *section, const char *key,
			  const char *value, struct strbuf *why);
/* After the whole file: parse and check every section's values. */
void kb_repo_operators_finish(struct kb_repo_config *rc, struct strbuf *why);
void kb_repo_operators_release(struct kb_repo_config *rc);

#endif
