#ifndef KB_RUN_KERNEL_JSON_H
#define KB_RUN_KERNEL_JSON_H
/*
 * kernel.json, the run's record next to its kernel (bot/run/KERNEL_JSON.md
 * is the format): one writer, from a run's result, and one reader, for the
 * job loop (jobs/render.c, jobs/jobs.c) and everyone else who reads it.
 */
#include "core/common.h"
#include "core/strvec.h"

#include <cjson/cJSON.h>

struct kb_run_result;

/* kernel.json's object for res (a verified run), keys in the documented order. */
cJSON *kb_kernel_json_build(const struct kb_run_result *res);

/*
 * Write DIR/kernel.json for res (a verified run): compiler text left out,
 * every string redacted, atomically. 0 or -1 (logged).
 */
int kb_kernel_json_write(const char *dir, const struct kb_run_result *res);

/* What readers take from kernel.json. Missing or mistyped keys read as the defaults shown. */
struct kb_kernel_info {
	char *source;              /* "kernel.cu" or "kernel.cpp" as written (not checked); NULL */
	char *backend;             /* "cuda" or "cpu"; NULL */
	char *verdict;             /* the final check's; NULL */
	char *pass;                /* "forward" or "backward" as written; NULL */
	double screening_speedup;  /* screening.speedup_eager; 0 */
	/* "tuning" (the templates' kernel) */
	struct {
		int64_t points_tried, verified;   /* 0 */
		double seconds;                   /* 0 */
		bool cut_short;                   /* tuning.cut_short is true */
	} tuning;
	/* "search" (with [llm] models) */
	bool searched;             /* "search" is an object */
	struct {
		int64_t candidates, verified, generations;  /* 0 */
		double wall_s, llm_cost_usd;                /* 0 */
		struct strvec models;                       /* the strings of search.models */
		bool cut_short;                             /* search.cut_short is a string */
	} search;
	/*
	 * "binding": what binding.py was rendered from. All NULL / empty
	 * unless the object is whole: strings, a format of the two, a
	 * reference "reference/<one name>", input names all strings.
	 */
	struct {
		char *operator_name, *format, *reference;   /* NULL */
		struct strvec input_names;                  /* in ABI order */
		bool has_backward;                          /* binding.has_backward is true */
	} binding;
};

void kb_kernel_info_init(struct kb_kernel_info *ki);
void kb_kernel_info_release(struct kb_kernel_info *ki);
/* ki (initialised) from kernel.json's object; NULL leaves the defaults. */
void kb_kernel_info_parse(struct kb_kernel_info *ki, const cJSON *kj);
/*
 * Read DIR/kernel.json into ki (initialised). 0, or -1 (quietly) when the
 * file is missing or is not JSON: ki keeps its defaults.
 */
int kb_kernel_json_read(const char *dir, struct kb_kernel_info *ki);

#endif
