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
 * module_path and, when w->setup_changed, w->setup_py at setup.py.
 */
#include "core/common.h"
#include "core/strbuf.h"
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
	const char *op_dir;             /* where run_dir goes, relative to repo_dir: "kernelbot/mlp" */
	const cJSON *init;              /* {"args": [...], "kwargs": {...}} for the module; NULL: none */
	const char *const *sys_path;    /* import roots relative to repo_dir; none: "." */
	size_t nr_sys_path;
	const char *const *tests;       /* a pytest selection relative to repo_dir; none: no tests run */
	size_t nr_tests;
	double min_speedup;             /* the speed gate (kb_torch_op_speed_gate); 0: none */
};

struct kb_wire {
	struct kb_torch_op op;
	struct strbuf ops_py;
	struct kb_module_patch patch;
	struct strbuf setup_py;         /* setup.py's new text when setup_changed */
	bool setup_changed;
	struct strbuf build_note;       /* the build's story for the pull request */
	cJSON *proof;                   /* kb_wire_prove's, NULL before */
};

void kb_wire_init(struct kb_wire *w);
void kb_wire_release(struct kb_wire *w);

/* The op's Python package for op_dir: "kernelbot/mlp" -> "kernelbot.mlp" (identifiers only, else -1). */
int kb_wire_package(struct strbuf *out, const char *op_dir);

/*
 * Fill w. 0; KB_ENOTSUPPORTED with why when the module cannot be wired
 * (why names the file and the change to make) or should not be (the
 * kernel measured below min_speedup on every timed config); -1 (logged)
 * when a file cannot be read.
 */
int kb_wire_prepare(struct kb_wire *w, const struct kb_wire_spec *s, struct strbuf *why);

int kb_wire_write_run(const struct kb_wire *w, const struct kb_wire_spec *s);

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
