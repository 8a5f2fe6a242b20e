#ifndef KB_RUN_PRIV_H
#define KB_RUN_PRIV_H
/*
 * Inside the run room: the two ways a run ends in a kernel (run.c: the
 * templates alone; run_search.c: templates then the LLM search) and what
 * both fill the same way for the output folder (run_output.c).
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "report/run_report.h"
#include "run/run.h"

struct kb_verifier;

/*
 * What binding.py is rendered from, for a run's result: kb_run renders it,
 * and kernel.json's "binding" records it, so that the job loop can render
 * it again beside a backward pass's kernel (bot/jobs/passes.c).
 */
struct run_binding {
	struct strbuf name;         /* the operator's name */
	struct strbuf kernel_file;  /* "kernel.cu" or "kernel.cpp" */
	struct strbuf reference;    /* "reference/<file or folder name>" */
	struct strvec inputs;       /* input names in ABI order (the describe result's first config) */
	const char *format;         /* "kernelbench" or "robust-kbench" (static) */
	bool has_backward;          /* the kernel exports kb_backward */
};

void run_binding_init(struct run_binding *b, const struct kb_run_result *res);
void run_binding_release(struct run_binding *b);

/*
 * What kb_run writes into out_dir besides kernel.json (report/run_report.h):
 * names, paths, the report's header and the binding. The caller adds the
 * source, the evidence and the tuning block, then calls run_output_write.
 */
struct run_output {
	struct kb_run_output o;
	struct run_binding b;
	const struct kb_run_result *res;
};

/* res: the run so far (its templates' describe result gives the input names and the task format). */
void run_output_init(struct run_output *ro, const struct kb_verifier *vf, const struct kb_run_result *res,
		     const char *out_dir);
/* The report's tuning block from the templates' run (its best point). */
void run_output_tuning(struct run_output *ro, const struct kb_tune_result *t);
/* The folder's files (kb_run_write_dir), then kernel.json. 0 or -1 (logged). */
int run_output_write(struct run_output *ro);
void run_output_release(struct run_output *ro);

/* The templates, then the LLM search (run_search.c): res->outcome. */
enum kb_run_outcome run_search(struct kb_verifier *vf, const struct kb_config *cfg, const struct kb_run_opts *o,
			       struct kb_run_result *res);

#endif
