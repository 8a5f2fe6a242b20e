/*
 * The shape recorder's run (cli_record.h). Like the trusted peaks
 * measurement (verifier/harness_client.c) it is one sandboxed process of
 * the harness's python; unlike it, it runs the repository's code, so it
 * sees nothing of the bot but the harness package and writes only its
 * scratch folder, which is removed afterwards.
 */
#include "core/common.h"
#include "core/log.h"
#include "core/scratch.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "cli/cli_record.h"
#include "jobs/modop.h"

#include <inttypes.h>

#define LOG_CAP (256 * 1024)

static void keep_log(const char *log_path, const struct child_process *cp)
{
	struct strbuf text = STRBUF_INIT;

	if (!log_path)
		return;
	strbuf_addf(&text, "# kb_record.py: exit %d%s\n", cp->exit_code, cp->timed_out ? " (timed out)" : "");
	strbuf_add(&text, cp->out.buf, cp->out.len);
	if (kb_write_file_atomic(log_path, text.buf, text.len))
		log_warn("could not write the tests' output to '%s'", log_path);
	strbuf_release(&text);
}

int cli_record_shapes(const struct kb_harness *h, const char *backend, const char *root,
		      const struct kb_repo_operator *op, int64_t timeout_ms, const char *log_path,
		      struct strbuf *out, struct strbuf *why)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf scratch = STRBUF_INIT, script = STRBUF_INIT, result = STRBUF_INIT;
	struct strvec paths = STRVEC_INIT;
	char *real = realpath(root, NULL), *harness_dir = NULL, *slash;
	int rc = -1;

	if (!real || !h->script) {
		strbuf_addf(why, "could not find the repository '%s' or the harness\n", root);
		goto out;
	}
	harness_dir = xstrdup(h->script);
	if ((slash = strrchr(harness_dir, '/')))
		*slash = '\0';
	if (kb_scratch_make(h->tmp_root, "kb-record", &scratch)) {
		strbuf_addstr(why, "could not make a scratch folder for the tests\n");
		goto out;
	}
	strbuf_addf(&script, "%s/kb_record.py", harness_dir);
	strbuf_addf(&result, "%s/shapes.json", scratch.buf);
	strvec_pushl(&cp.args, h->python, "-I", "-B", script.buf, "--root", real, "--target", NULL);
	strvec_pushf(&cp.args, "%s:%s", op->path, op->target);
	strvec_pushl(&cp.args, "--out", result.buf, NULL);
	if (op->is_function)
		strvec_push(&cp.args, "--function");
	strvec_push(&cp.args, "--");
	for (size_t i = 0; i < op->tests.nr; i++)
		strvec_push(&cp.args, op->tests.v[i]);
	strvec_push(&paths, real);
	cp.dir = real;
	cp.timeout_ms = timeout_ms;
	cp.out_cap = LOG_CAP;
	cp.keep_tail = true;
	cp.err_to_out = true;
	if (kb_harness_sandbox(h, &paths, scratch.buf, backend, &cp) || run_command(&cp)) {
		strbuf_addstr(why, "could not start the tests in the sandbox (see the bot's log)\n");
		goto out;
	}
	keep_log(log_path, &cp);
	if (strbuf_read_file(out, result.buf, KB_MODOP_MAX_RECORD)) {
		if (cp.timed_out)
			strbuf_addf(why, "the tests ran past %" PRId64 " s and were stopped; nothing was recorded\n",
				    timeout_ms / 1000);
		else
			strbuf_addf(why, "the recorder wrote nothing (exit %d: the tests ended the process, or "
				    "its output is larger than 256 KiB)\n", cp.exit_code);
		goto out;
	}
	if (cp.timed_out)
		strbuf_addf(why, "the tests ran past %" PRId64 " s and were stopped; what they had recorded "
			    "by then is used\n", timeout_ms / 1000);
	rc = 0;
out:
	if (scratch.len && kb_rm_rf(scratch.buf))
		log_warn("could not remove '%s'", scratch.buf);
	child_process_release(&cp);
	strvec_clear(&paths);
	strbuf_release(&scratch);
	strbuf_release(&script);
	strbuf_release(&result);
	free(real);
	free(harness_dir);
	return rc;
}
