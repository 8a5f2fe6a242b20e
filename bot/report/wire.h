#ifndef KB_REPORT_WIRE_H
#define KB_REPORT_WIRE_H
/*
 * A verified kernel wired back into a repository's module (issue 17): what
 * the bot's branch adds besides the run's folder, and the proof that the
 * wiring is right. The job loop (or `kernelbot wire`) calls, in order:
 *
 *   kb_wire_prepare    ops.py's text (report/torch_op.h) from the forward's
 *                      evidence; the module's patched text and setup.py's
 *                      (report/module_patch.h). No process runs.
 *   kb_wire_write_run  ops.py (and binding.py rendered again) into the
 *                      run's folder, which goes to op_dir on the branch.
 *   kb_wire_prove      the wiring check in the sandbox (verifier/wiring.h)
 *                      on the repository overlaid with the run's folder at
 *                      op_dir and the patched files; w->proof.
 *   kb_wire_record     w->proof as evidence.json's "wiring" (with where the
 *                      patch went), which pr_body.c renders.
 *
 * The branch then holds run_dir's files at op_dir, w->patch.text at
 * module_path and w->files (kb_wire_write_files writes them all).
 *
 * Where op_dir lies (kb_wire_op_dir): a module of a package gets its
 * kernel inside that package's top level, `<root>/<pkg>/_kernelbot/<op>/`,
 * imported by its absolute name (`<pkg>._kernelbot.<op>.ops`), so that it
 * works from the source tree and installed alike; the build (setup.py or
 * pyproject.toml) then carries the folder's files that are no module as
 * package data, and the folders between get an __init__.py. A module
 * outside any package (a flat repository) gets `kernelbot/<op>/` at the
 * repository's root.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "report/module_patch.h"
#include "report/run_report.h"
#include "report/torch_op.h"
#include "verifier/harness_client.h"

#include <cjson/cJSON.h>

struct kb_wire_spec {
	const char *run_dir;            /* `kernelbot run`'s folder: kernel, binding.py, include/, reference/ */
	const struct kb_binding_spec *binding; /* binding.py rendered again from it; NULL: the run's stays */
	const cJSON *evidence;          /* the forward kernel's verified evidence */
	const char *repo_dir;           /* the repository at the head, read only */
	const char *module_path;        /* the module's file, relative to repo_dir */
	const char *class_name;
	int forward_line;               /* 1-based, 0: the class's forward */
	const char *op_dir;             /* where run_dir goes, relative to repo_dir: "kernelbot/mlp",
					 * "src/pkg/_kernelbot/mlp" (kb_wire_op_dir) */
	const cJSON *init;              /* {"args": [...], "kwargs": {...}} for the module; NULL: none */
	const char *const *sys_path;    /* import roots relative to repo_dir; none: "." */
	size_t nr_sys_path;
	const char *const *tests;       /* a pytest selection relative to repo_dir; none: no tests run */
	size_t nr_tests;
	double min_speedup;             /* the speed gate (kb_torch_op_speed_gate); 0: none */
};

/* A repository file the wiring changes or adds besides the module. */
struct kb_wire_file {
	char *path;                     /* relative to repo_dir: "setup.py", "src/pkg/_kernelbot/__init__.py" */
	struct strbuf text;
};

struct kb_wire {
	struct kb_torch_op op;
	struct strbuf ops_py;
	struct kb_module_patch patch;
	struct kb_wire_file *files;     /* setup.py, pyproject.toml, __init__.py files, in that order */
	size_t nr_files;
	struct strbuf build_note;       /* the build's story for the pull request */
	struct strbuf build_add;        /* a build file left alone: the lines to add to it by hand */
	const char *build_add_file;     /* that file: "pyproject.toml", "setup.py" */
	cJSON *proof;                   /* kb_wire_prove's, NULL before */
};

void kb_wire_init(struct kb_wire *w);
void kb_wire_release(struct kb_wire *w);

/* A copy of path and text[0, len) appended to *files (*nr of them). */
void kb_wire_file_add(struct kb_wire_file **files, size_t *nr, const char *path, const char *text, size_t len);
/* *files and what they hold freed; *files NULL, *nr 0. */
void kb_wire_files_free(struct kb_wire_file **files, size_t *nr);

/*
 * The operator's folder for the module at module_path (relative to
 * repo_dir) under the import roots (relative to repo_dir; none: "."):
 * "<root>/<pkg>/_kernelbot/<slug>" when, under the first root that has it,
 * every folder from the root down to the module's is an identifier with an
 * __init__.py (<pkg> the top one); else "kernelbot/<slug>".
 */
void kb_wire_op_dir(struct strbuf *out, const char *repo_dir, const char *module_path,
		    const char *const *roots, size_t nr_roots, const char *slug);

/*
 * The op's Python package for op_dir, under the longest import root that
 * holds it: "kernelbot/mlp" -> "kernelbot.mlp", "src/pkg/_kernelbot/mlp"
 * under "src" -> "pkg._kernelbot.mlp" (identifiers only, else -1).
 */
int kb_wire_package(struct strbuf *out, const char *op_dir, const char *const *roots, size_t nr_roots);

/*
 * Is s->op_dir inside a package (its first folder under its import root
 * has an __init__.py)? Then packages gets the packages below that top one
 * down to op_dir's ("pkg._kernelbot", "pkg._kernelbot.mlp") and inits the
 * __init__.py files missing above op_dir, relative to repo_dir.
 */
bool kb_wire_in_package(const struct kb_wire_spec *s, struct strvec *packages, struct strvec *inits);

/*
 * The patterns of run_dir's files that are no module of its package
 * ("*.cu"; a subfolder's: its path, '/', "*.h"), sorted. 0 or -1.
 */
int kb_wire_data_patterns(struct strvec *out, const char *run_dir);

/*
 * Fill w. 0; KB_ENOTSUPPORTED with why when the module cannot be wired
 * (why names the file and the change to make) or should not be (the
 * kernel measured below min_speedup on every timed config); -1 (logged)
 * when a file cannot be read.
 */
int kb_wire_prepare(struct kb_wire *w, const struct kb_wire_spec *s, struct strbuf *why);

/* ops.py, binding.py (rendered again) and __init__.py into s->run_dir. 0 or -1. */
int kb_wire_write_run(const struct kb_wire *w, const struct kb_wire_spec *s);

/* The patched module and w->files under root (the repository, or the check's overlay). 0 or -1. */
int kb_wire_write_files(const struct kb_wire *w, const struct kb_wire_spec *s, const char *root);

/*
 * The wiring check on the recorded shapes (the evidence's configs, their
 * forward arguments) with tolerances (the evidence's settings) on backend.
 * 0 with w->proof (whatever its verdict), -1 when it could not start.
 */
int kb_wire_prove(struct kb_wire *w, const struct kb_wire_spec *s, const struct kb_harness *h);

/* run_dir/evidence.json gets "wiring": w->proof plus the module, class, lines and build. 0 or -1. */
int kb_wire_record(const struct kb_wire *w, const struct kb_wire_spec *s);

/*
 * A module left unwired on purpose (kb_wire_prepare's KB_ENOTSUPPORTED):
 * evidence.json's "wiring" becomes {"verdict": "not_wired", "module",
 * "class", "reasons": [{"message": why}]}, so the pull request says why.
 */
int kb_wire_record_refusal(const struct kb_wire_spec *s, const char *why);

/* The pull request's "Wired into the model" section from evidence.json's "wiring" (nothing when not an object). */
void kb_wire_markdown(struct strbuf *sb, const cJSON *wiring);

#endif
