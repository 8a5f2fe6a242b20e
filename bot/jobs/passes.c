#include "core/common.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/util.h"
#include "jobs/jobs_priv.h"
#include "jobs/repo_operators.h"
#include "report/run_report.h"
#include "run/kernel_json.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>

/*
 * A job of both passes (README.md, "Forward and backward"): the forward
 * child writes out/, then the backward child (`kernelbot run --pass
 * backward`) writes out-backward/; its kernel and records then move into
 * out/backward/ (and so into the branch) and binding.py is rendered again,
 * its apply() calling the forward kernel and the backward kernel's
 * kb_backward, or the reference's backward when no backward kernel
 * passed. The job's folder keeps the steps, so a restart resumes:
 *
 *   forward.json    the forward child ended well: start the backward one
 *   backward.json   what the backward search left: {"kernel": bool, "note": "..."}
 *   result.json     (jobs.c) both done: publish
 */

/* `kernelbot run`'s exit code when nothing verified (cli/cli.h KB_EXIT_NO). */
#define RUN_EXIT_NONE_VERIFIED 1
/* what of the backward child's folder goes beside the forward kernel (its binding, headers and
 * reference copy are the forward's) */
static const char *const backward_records[] = { "kernel.json", "evidence.json", "report.md" };

void jpasses_path(struct strbuf *out, const struct runner *r, const char *name)
{
	strbuf_reset(out);
	strbuf_addf(out, "%s/%s", r->dir.buf, name);
}

bool jpasses_both(const struct runner *r)
{
	struct strbuf path = STRBUF_INIT;
	bool ships;

	if (r->rcfg.passes != KB_PASSES_AUTO)
		return r->rcfg.passes == KB_PASSES_BOTH;
	/* a module whose [operator NAME] section says requires_grad is used with autograd */
	if (jmod_is_module_job(r))
		return jmod_section(r) && jmod_section(r)->requires_grad;
	/* a robust-kbench task with a backward of its own is used with autograd */
	strbuf_addf(&path, "%s/%s/func_backward.py", r->src.buf, r->job.operator_path);
	ships = kb_is_file(path.buf);
	strbuf_release(&path);
	return ships;
}

bool jpasses_forward_done(const struct runner *r)
{
	struct strbuf path = STRBUF_INIT;
	bool done;

	jpasses_path(&path, r, "forward.json");
	done = kb_is_file(path.buf);
	strbuf_release(&path);
	return done;
}

int jpasses_mark_forward_done(struct runner *r)
{
	struct strbuf path = STRBUF_INIT;
	int rc;

	jpasses_path(&path, r, "forward.json");
	rc = kb_write_file_atomic(path.buf, "{\"exit_code\": 0}\n", 17);
	strbuf_release(&path);
	return rc;
}

int64_t jpasses_child_budget(const struct runner *r, int64_t left)
{
	/* the forward gets half; the backward what is left when it starts, the forward's
	 * unused time included (README.md, "Forward and backward") */
	int64_t b = r->both && !r->backward ? left / 2 : left;

	return b < 1 ? 1 : b;
}

/*
 * Can the binding call this backward kernel's kb_backward on the forward's
 * arguments? A verified backward pass on the same backend, over the same
 * inputs in the same order. Otherwise why not, into why.
 */
static bool usable(const struct kb_kernel_info *fwd, const struct kb_kernel_info *bwd, struct strbuf *why)
{
	const struct strvec *a = &fwd->binding.input_names, *b = &bwd->binding.input_names;
	bool same = a->nr == b->nr && a->nr > 0;

	for (size_t i = 0; same && i < a->nr; i++)
		same = !strcmp(a->v[i], b->v[i]);
	if (!bwd->verdict || strcmp(bwd->verdict, "verified") || !bwd->pass ||
	    strcmp(bwd->pass, "backward") || !bwd->binding.has_backward || !jplain_name(bwd->source))
		strbuf_addstr(why, "The backward run left no verified backward kernel");
	else if (!fwd->binding.operator_name || !bwd->binding.operator_name)
		strbuf_addstr(why, "The kernels' kernel.json do not say which inputs they take");
	else if (!fwd->backend || !bwd->backend || strcmp(fwd->backend, bwd->backend))
		strbuf_addstr(why, "The backward kernel is for another backend than the forward one");
	else if (!same)
		strbuf_addstr(why, "The backward kernel takes other inputs than the forward one (its task's "
			      "backward has another signature), so the binding cannot pass it the "
			      "forward's arguments");
	else
		return true;
	return false;
}

/* Move the backward kernel and its records from from/ into to/. */
static int move_backward(const char *from, const char *to, const char *source)
{
	struct strbuf a = STRBUF_INIT, b = STRBUF_INIT;
	int rc = 0;

	if (kb_mkdir_p(to, 0755))
		return error_errno("could not create '%s'", to);
	for (size_t i = 0; !rc && i <= ARRAY_SIZE(backward_records); i++) {
		const char *name = i < ARRAY_SIZE(backward_records) ? backward_records[i] : source;

		strbuf_reset(&a);
		strbuf_reset(&b);
		strbuf_addf(&a, "%s/%s", from, name);
		strbuf_addf(&b, "%s/%s", to, name);
		if (rename(a.buf, b.buf))
			rc = error_errno("could not move '%s' to '%s'", a.buf, b.buf);
	}
	strbuf_release(&a);
	strbuf_release(&b);
	return rc;
}

/*
 * out/binding.py again from the forward's kernel.json: apply() calls
 * backward_kernel's kb_backward (NULL: the reference's backward). A
 * forward without its binding record keeps the binding it wrote, whose
 * apply() has the reference's backward.
 */
static int render_binding(struct runner *r, const struct kb_kernel_info *fwd, const char *backward_kernel,
			  struct strbuf *note)
{
	struct kb_binding_spec spec;
	struct strbuf path = STRBUF_INIT, py = STRBUF_INIT;
	int rc;

	if (!fwd->binding.operator_name || !jplain_name(fwd->source)) {
		if (backward_kernel)
			strbuf_addstr(note, "The forward kernel's kernel.json does not say how its binding was "
				      "made, so binding.py keeps the reference's backward");
		return 0;
	}
	memset(&spec, 0, sizeof(spec));
	spec.operator_name = fwd->binding.operator_name;
	spec.kernel_file = fwd->source;
	spec.backend = fwd->backend;
	spec.format = fwd->binding.format;
	spec.reference = fwd->binding.reference;
	spec.input_names = (const char *const *)fwd->binding.input_names.v;
	spec.nr_inputs = fwd->binding.input_names.nr;
	spec.has_backward = fwd->binding.has_backward;
	spec.backward_kernel = backward_kernel;
	kb_binding_render(&py, &spec);
	strbuf_addf(&path, "%s/binding.py", r->out.buf);
	rc = kb_write_file_atomic(path.buf, py.buf, py.len);
	if (rc)
		error("could not write '%s'", path.buf);
	strbuf_release(&path);
	strbuf_release(&py);
	return rc;
}

/* backward.json: whether a backward kernel is beside the forward one, and the note. */
static int write_record(struct runner *r, bool kernel, struct strbuf *note)
{
	struct strbuf path = STRBUF_INIT;
	cJSON *rec = cJSON_CreateObject();
	char *text;
	int rc;

	/* it may quote the child's log, which quotes reasons and model replies */
	kb_redact(note, KB_REDACT_MESSAGE_MAX);
	cJSON_AddBoolToObject(rec, "kernel", kernel);
	cJSON_AddStringToObject(rec, "note", note->buf);
	text = cJSON_PrintUnformatted(rec);
	if (!text)
		die("out of memory");
	jpasses_path(&path, r, "backward.json");
	rc = kb_write_file_atomic(path.buf, text, strlen(text));
	free(text);
	cJSON_Delete(rec);
	strbuf_release(&path);
	return rc;
}

int jpasses_finish(struct runner *r, int exit_code, const char *why)
{
	struct strbuf from = STRBUF_INIT, to = STRBUF_INIT, note = STRBUF_INIT, bk = STRBUF_INIT;
	struct kb_kernel_info fwd, bwd;
	bool kernel = false;
	int rc = -1;

	kb_kernel_info_init(&fwd);
	kb_kernel_info_init(&bwd);
	jpasses_path(&from, r, "out-backward");
	strbuf_addf(&to, "%s/backward", r->out.buf);
	kb_kernel_json_read(r->out.buf, &fwd);
	if (kb_rm_rf(to.buf)) /* an earlier attempt's */
		goto out;
	if (exit_code == 0) {
		kb_kernel_json_read(from.buf, &bwd);
		if (usable(&fwd, &bwd, &note)) {
			if (move_backward(from.buf, to.buf, bwd.source))
				goto out;
			kernel = true;
			strbuf_addf(&bk, "backward/%s", bwd.source);
		}
	} else if (exit_code == RUN_EXIT_NONE_VERIFIED) {
		strbuf_addstr(&note, "The backward search found no verified kernel");
	} else if (exit_code < 0) {
		strbuf_addstr(&note, "The backward search was stopped");
	} else {
		strbuf_addf(&note, "The backward search failed (exit %d)", exit_code);
	}
	if (!kernel && exit_code && why && *why)
		strbuf_addf(&note, ": %s", why);
	if (render_binding(r, &fwd, kernel ? bk.buf : NULL, &note) || write_record(r, kernel, &note))
		goto out;
	log_info("job %" PRId64 ": backward pass: %s", r->job.id,
		 kernel ? bk.buf : note.buf);
	rc = 0;
out:
	kb_kernel_info_release(&fwd);
	kb_kernel_info_release(&bwd);
	strbuf_release(&from);
	strbuf_release(&to);
	strbuf_release(&note);
	strbuf_release(&bk);
	return rc;
}

void jpasses_notes(struct runner *r)
{
	cJSON *rec = jread_json(r->dir.buf, "backward.json");
	const cJSON *note = cJSON_GetObjectItemCaseSensitive(rec, "note");
	struct strbuf bdir = STRBUF_INIT;
	struct kb_kernel_info bwd;

	kb_kernel_info_init(&bwd);
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "kernel"))) {
		strbuf_addf(&r->notes, "No backward kernel: %s. The binding's apply() runs the forward kernel "
			    "with the reference's backward (PyTorch autograd).\n",
			    cJSON_IsString(note) && *note->valuestring ? note->valuestring
									: "the backward search left no record");
	} else {
		strbuf_addf(&bdir, "%s/backward", r->out.buf);
		kb_kernel_json_read(bdir.buf, &bwd);
		if (bwd.tuning.cut_short || bwd.search.cut_short)
			strbuf_addstr(&r->notes, "The time budget cut the backward search short: its kernel is "
				      "the best found by then.\n");
	}
	kb_kernel_info_release(&bwd);
	strbuf_release(&bdir);
	cJSON_Delete(rec);
}
