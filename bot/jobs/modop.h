#ifndef KB_JOBS_MODOP_H
#define KB_JOBS_MODOP_H
/*
 * A repository's own module (or function) as a KernelBench operator file
 * the verifier already knows how to run: `class Model` built like the
 * repository's class with the section's init arguments, get_inputs() and
 * get_init_inputs() giving its shapes, and KB_SHAPE_SETS listing the
 * further shape sets, one config each (verifier/harness/kernelbot_harness/
 * configs.py). The file lies in the root of the job's checkout: the
 * sandbox shows the operator's folder, so the repository's files are
 * visible (read-only) beside it, and the file puts the root (and src/,
 * for src layouts) on sys.path before importing the class. Nothing here
 * runs anything: the file is imported only by the harness, in its sandbox.
 *
 * Shapes come from the [operator NAME] section (kb_modop_from_section), or
 * from the repository's tests, recorded in the sandbox by
 * kernelbot_harness/record_shapes.py (kb_modop_from_record). Either way
 * the first shape set's literal sizes become module constants
 * (kb_modop_symbolize), so the verifier's scaled and odd configs check
 * that a kernel is not written for one size only.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "jobs/pymodules.h"
#include "jobs/repo_operators.h"

#define KB_MODOP_MAX_SYMS 48
#define KB_MODOP_MAX_RECORD (256 * 1024)

/* One branch of get_inputs() and get_init_inputs(). */
struct kb_modop_form {
	struct kb_op_form inputs;
	struct strvec init;         /* Python text; keywords "name=text" */
	char *init_json;            /* a recorded init as {"args": [...], "kwargs": {...}}; NULL: the section's */
	int64_t calls;              /* the calls the tests made with it (kb_modop_from_record) */
};

/* One shape set: a form and the value of every size. */
struct kb_modop_set {
	size_t form;
	int64_t values[KB_MODOP_MAX_SYMS];
};

struct kb_modop {
	struct kb_modop_form *forms;
	size_t nr_forms;
	char syms[KB_MODOP_MAX_SYMS][KB_OPSEC_NAME];
	size_t nr_syms;
	struct kb_modop_set *sets;  /* sets[0]: the constants' own values */
	size_t nr_sets;
	size_t recorded_calls;      /* kb_modop_from_record: the calls the sets stand for */
};
#define KB_MODOP_INIT { 0 }

void kb_modop_release(struct kb_modop *m);

/*
 * The section's shape sets: inputs, inputs.2 ... each in each of dtypes
 * (floating inputs), each with every combination of the sizes'
 * alternatives, at most KB_OPSEC_MAX_SETS. 0, or -1 when the section has
 * no inputs.
 */
int kb_modop_from_section(struct kb_modop *m, const struct kb_repo_operator *op);

/*
 * What record_shapes.py wrote (untrusted: parsed strictly, every count
 * and size capped): the max_sets most frequent calls that can be written
 * as literals become the shape sets; op's init, when given, replaces the
 * recorded one. why gets what the tests did and what was left out, and,
 * on failure (-1), why there is nothing to use.
 */
int kb_modop_from_record(struct kb_modop *m, const char *json, size_t len, size_t max_sets,
			 const struct kb_repo_operator *op, struct strbuf *why);

/*
 * The init the tests built the module with most often (the calls of the
 * forms with that init summed), as JSON {"args": [...], "kwargs": {...}}:
 * what the wiring check builds it with. NULL when the forms have no
 * recorded init (the section gave one, or the shapes came from it).
 */
const char *kb_modop_recorded_init(const struct kb_modop *m);

/*
 * The first shape set's literal sizes (above 1) as constants: named after
 * the init parameter (cls's __init__) whose value they are, else DIM0,
 * DIM1...; an init argument of that value becomes the constant too.
 */
void kb_modop_symbolize(struct kb_modop *m, const struct kb_pyop *cls);

/* What the file says about where its operator comes from. */
struct kb_modop_origin {
	const struct kb_repo_operator *op;
	const char *head;           /* the commit, "" when not known */
	const char *source;         /* the .py file's text (embedded for reading), NULL: none */
	const struct kb_pyop *found;  /* the class or function in source, NULL: none */
};

/* The operator file's text. */
void kb_modop_render(struct strbuf *out, const struct kb_modop *m, const struct kb_modop_origin *o);

/*
 * The .kernelbot.ini lines that would give op (a class or function of
 * path, found by kb_pyops_scan) its shapes: an [operator NAME] section
 * naming it, with placeholder init arguments and inputs made from its
 * signatures, to be edited, or a tests line instead. name: the section's
 * name (NULL: made from the class's). Plain INI text, one key a line.
 */
void kb_modop_hint(struct strbuf *out, const char *name, const char *path, const struct kb_pyop *op);

/* The file's name in the checkout's root: "kernelbot_op_<name>.py". */
void kb_modop_file_name(struct strbuf *out, const char *section_name);
/* Its first line, by which a file kernelbot wrote is told from the repository's own. */
#define KB_MODOP_HEADER "# kernelbot: generated operator file"

#endif
