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
 * What kb_run writes into out_dir besides kernel.json (report/run_report.h):
 * names, paths, the report's header and the binding. The caller adds the
 * source, the evidence, the tuning block and whether the binding has a
 * backward, then calls run_output_write.
 */
struct run_output {
	struct kb_run_output o;
	struct strbuf name;         /* the operator's name */
	struct strbuf kernel_file;  /* "kernel.cu" or "kernel.cpp" */
	struct strbuf reference;    /* "reference/<file or folder name>" */
	struct strvec inputs;       /* input names in ABI order */
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
