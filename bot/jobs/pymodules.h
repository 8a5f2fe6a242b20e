#ifndef KB_JOBS_PYMODULES_H
#define KB_JOBS_PYMODULES_H
/*
 * Operators in ordinary model code, found by reading a .py file as text
 * (core/pyscan.h blanks its comments and strings first; nothing of the
 * repository runs here):
 *  - classes that are nn.Module subclasses: a base `nn.Module`,
 *    `torch.nn.Module`, `Module` after `from torch.nn import Module`
 *    (aliases of either import followed), or another module class of the
 *    same file; classes nested in classes count ("Outer.Inner"), classes
 *    defined inside a function do not (they cannot be imported);
 *  - module-level functions; those decorated `@kernelbot.operator` (with
 *    or without a call, or `@operator` after `from kernelbot import
 *    operator`) are marked, the others are found only when a
 *    .kernelbot.ini section names them.
 * Each gets its line and its forward's parameters (a class without a
 * forward of its own takes its base's when that base is in the file).
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

struct kb_pyop {
	char *name;            /* "FusedMLP", "Outer.Inner", or a function's name */
	int line, end_line;    /* 1-based: its class or def line, and its body's last line */
	bool is_function;      /* a module-level def */
	bool marked;           /* is_function: decorated @kernelbot.operator */
	bool is_module;        /* a class that is an nn.Module */
	int forward_line;      /* 0: no forward known (a function: its own line) */
	/* forward's (or the function's) parameters, self left out, whitespace
	 * collapsed, as written: "x", "mask=None", "*", "*args", "x: torch.Tensor" */
	struct strvec params;
	struct strvec init_params; /* the class's own __init__ parameters, self left out */
	bool has_init;
	/* private to the scan */
	struct strvec bases;
	int indent;
};

struct kb_pyops {
	struct kb_pyop *v;
	size_t nr, alloc;
};
#define KB_PYOPS_INIT { NULL, 0, 0 }

/* Every class and module-level function of text (len bytes) into out (released first). */
void kb_pyops_scan(struct kb_pyops *out, const char *text, size_t len);
void kb_pyops_release(struct kb_pyops *ops);
/* The class or function called name ("Outer.Inner" for a nested class); NULL when none. */
const struct kb_pyop *kb_pyops_find(const struct kb_pyops *ops, const char *name);

/* "(x, mask=None)" from op's params. */
void kb_pyop_signature(struct strbuf *out, const struct kb_pyop *op, bool init);
/*
 * The name of parameter text p ("x: Tensor = None" -> "x"), into out;
 * *required: it has no default and is not starred; *kind: 0 a positional
 * or keyword parameter, 1 "*args" or a bare "*" (keyword-only ones follow),
 * 2 "**kwargs", 3 the "/" marker.
 */
void kb_pyparam_name(struct strbuf *out, const char *p, bool *required, int *kind);

#endif
