#ifndef KB_CLI_RUN_OUTPUT_H
#define KB_CLI_RUN_OUTPUT_H
/*
 * What `kernelbot run` writes into --out (report/run_report.h), filled the
 * same way whether the templates' kernel won (cmd_run.c) or the search's
 * (run_search.c): names, paths, the report's header and the binding. The
 * caller adds the source, kernel.json, the evidence, the tuning block and
 * whether the binding has a backward, then calls kb_run_write_dir(&ro.o).
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "report/run_report.h"

struct kb_verifier;
struct kb_tune_result;

struct cli_run_output {
	struct kb_run_output o;
	struct strbuf name;         /* the operator's name */
	struct strbuf kernel_file;  /* "kernel.cu" or "kernel.cpp" */
	struct strbuf reference;    /* "reference/<file or folder name>" */
	struct strvec inputs;       /* input names in ABI order */
};

/*
 * t: the templates' run (its describe result gives the input names and
 * the task format). Every string the output points at is owned by ro.
 */
void cli_run_output_init(struct cli_run_output *ro, const struct kb_verifier *vf,
			 const struct kb_tune_result *t, const char *operator_path, const char *out_dir,
			 const char *backend, const char *pass, int64_t seeds);
/* The report's tuning block from the templates' run (its best point). */
void cli_run_output_tuning(struct cli_run_output *ro, const struct kb_tune_result *t);
void cli_run_output_release(struct cli_run_output *ro);

#endif
