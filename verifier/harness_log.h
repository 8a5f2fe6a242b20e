#ifndef KB_HARNESS_LOG_H
#define KB_HARNESS_LOG_H
/*
 * The runner operator's log of what a harness process printed.
 *
 * A harness's stdout and stderr are untrusted: candidate kernels and the
 * operator files of a pull request print there, and may print whatever
 * they managed to read. None of it goes into the evidence, a pull request,
 * a comment or the state database. What is kept, for whoever runs the
 * runner, is one file per evaluation that printed anything:
 *
 *   <state_dir>/logs/harness/<yyyymmddThhmmssZ>-XXXXXX.log
 *
 * mode 0600 in a 0700 folder (outside every sandbox view), holding a few
 * header lines (what was evaluated, the verdict, how the process ended)
 * and the last KB_HARNESS_LOG_KEEP bytes of stdout and of stderr, both
 * redacted (core/redact.h). The folder is kept under
 * KB_HARNESS_LOG_DIR_MAX bytes and KB_HARNESS_LOG_FILES_MAX files by
 * removing the oldest files (checked on the first write of a process and
 * every few writes after).
 */
#include "core/common.h"
#include "core/strbuf.h"

#include <cjson/cJSON.h>

struct child_process;

#define KB_HARNESS_LOG_KEEP (32u << 10)      /* per stream and evaluation */
#define KB_HARNESS_LOG_DIR_MAX (64u << 20)
#define KB_HARNESS_LOG_FILES_MAX 2000

/*
 * Keep cp's captured stdout and stderr (cp->keep_tail says whether the
 * capture holds their first or last bytes) in a new file under dir (made
 * 0700 when missing; NULL or "": nothing is kept). request (may be NULL)
 * names the operator and kernel, ev (may be NULL) the verdict; ev gets
 * "operator_log": the file's path, a local pointer that is never
 * published (kb_evidence_scrub removes it). path (may be NULL) gets the
 * path too, "" when nothing was written (no output). Returns 0, or -1
 * (logged as a warning: the evaluation stands without the log).
 */
int kb_harness_log_keep(const char *dir, const cJSON *request, cJSON *ev,
			const struct child_process *cp, struct strbuf *path);

/*
 * Remove the oldest *.log files of dir until it holds at most max_bytes
 * and max_files of them. 0, or -1 (logged) when dir cannot be read.
 */
int kb_harness_log_prune(const char *dir, uint64_t max_bytes, size_t max_files);

#endif
