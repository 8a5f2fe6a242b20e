#ifndef KB_RUN_REPORT_H
#define KB_RUN_REPORT_H
/*
 * What `kernelbot run` leaves in its output directory (issue 4):
 *
 *   kernel.cu | kernel.cpp   the best kernel (native ABI)
 *   kernel.json              the run's record (run/kernel_json.h writes it;
 *                            its format: bot/run/KERNEL_JSON.md)
 *   evidence.json            the final verification's evidence
 *   report.md                summary (the headline policy of
 *                            bot/report/HEADLINE.md), speedup table,
 *                            configs left out, tuning table,
 *                            environment, how to reproduce
 *   binding.py               a loader: call the kernel like a torch op
 *   include/                 kernelbot_abi.h and dlpack/dlpack.h, so the
 *                            binding compiles the kernel with plain nvcc/g++
 *   reference/               a copy of the operator (the binding takes
 *                            output shapes from it)
 *
 * Rendering is pure (data in, text out) and tested on canned evidence;
 * kb_run_write_dir does the file work.
 */
#include "core/common.h"
#include "core/strbuf.h"

#include <cjson/cJSON.h>

/* The tuning figures the report shows. */
struct kb_run_tuning {
	const char *family, *kind;      /* "rowwise", "softmax" */
	const char *point;              /* "threads=256 rows=4" */
	size_t space_size;              /* points in the template's space */
	size_t tried;                   /* points evaluated (cached ones too) */
	size_t verified;                /* of those, verified */
	size_t built, timed, cache_hits; /* this run's work */
	bool all_cached;                /* nothing built or timed: an earlier run's measurements */
	bool final_cached;              /* the final verdict came from the cache */
	bool cut_short;                 /* the time budget stopped the search early */
	double seconds;                 /* wall time of the tuning */
};

struct kb_run_report {
	const char *operator_path;      /* as the user gave it */
	const char *operator_name;
	const char *out_dir;            /* as the user gave it */
	const char *kernel_file;        /* "kernel.cu" or "kernel.cpp" */
	const char *backend;            /* "cuda" or "cpu" */
	const char *pass;               /* "forward" (NULL) or "backward" */
	int64_t seeds;                  /* of the final check */
	const cJSON *evidence;          /* the final check's */
	struct kb_run_tuning tuning;
	/* a kernel the LLM search found (NULL: the templates'): the sentence
	 * naming where it came from, in place of the template and point (the
	 * Tuning section is then left out) */
	const char *found_by_md;
	const char *extra_md;           /* sections before Environment (the search's), or NULL */
	double noise_band;              /* [report] noise_band, the band's floor; <= 0: the default */
};

/* report.md's text, appended to out. */
void kb_run_report_markdown(struct strbuf *out, const struct kb_run_report *r);

/* What the generated binding needs to know. */
struct kb_binding_spec {
	const char *operator_name;
	const char *kernel_file;        /* "kernel.cu" or "kernel.cpp", next to binding.py */
	const char *backend;            /* "cuda" or "cpu" */
	const char *format;             /* "kernelbench" or "robust-kbench" */
	const char *reference;          /* relative to the dir: "reference/x.py" or "reference/x" */
	const char *const *input_names; /* in ABI order */
	size_t nr_inputs;
	bool has_backward;              /* the kernel exports kb_backward */
	/*
	 * The kernel file (relative to the dir) whose kb_backward gives the
	 * gradients of the binding's apply(): a backward pass's kernel next to
	 * a forward one. NULL: kernel_file when has_backward, else the
	 * reference's backward (PyTorch autograd through reference/).
	 */
	const char *backward_kernel;
	const char *const *link_flags;  /* extra compiler arguments, e.g. "-lcublasLt" */
	size_t nr_link_flags;
};

/* binding.py's text, appended to out. */
void kb_binding_render(struct strbuf *out, const struct kb_binding_spec *b);

/* Everything kb_run_write_dir writes (kernel.json aside). */
struct kb_run_output {
	const char *dir;
	const char *source;             /* the kernel's text */
	size_t source_len;
	const char *abi_header;         /* kernelbot_abi.h to copy */
	const char *dlpack_include;     /* directory holding dlpack/dlpack.h; NULL: the system's */
	struct kb_run_report report;
	struct kb_binding_spec binding;
};

/*
 * Create dir (and parents) and write every file listed above but
 * kernel.json (run/kernel_json.h writes that one); the
 * evidence's kernelbot.kernel.path is pointed at the copy in dir (same
 * bytes, same sha256). Files are written atomically; an earlier run's
 * files are replaced. 0 or -1 (logged).
 */
int kb_run_write_dir(const struct kb_run_output *o);

/* The operator's name: a file's base name without ".py", a folder's name. */
void kb_operator_name(const char *operator_path, struct strbuf *out);

#endif
