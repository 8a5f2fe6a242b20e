#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "jobs/jobs_priv.h"
#include "jobs/repo_operators.h"

#include <ctype.h>
#include <inttypes.h>

/*
 * A module job's kernel wired back into the module (issue 17, items 2-3)
 * before the branch is committed: `kernelbot wire --check --write` on the
 * run's folder and the job's checkout, a child like every other step that
 * runs the repository's code (the daemon never starts a harness itself).
 * It writes ops.py into the folder, the patched module (and setup.py)
 * into the checkout and the proof into evidence.json's "wiring"; the
 * branch then takes the patched files only when the proof says "wired".
 * Anything else leaves the folder published unwired, with a line saying why.
 */

#define WIRE_TIMEOUT_MS (20 * 60 * 1000)

/* Python literal text to JSON: numbers, strings, True/False/None, a size's name as its first value. */
static cJSON *py_value(const char *text, const struct kb_repo_operator *op)
{
	if (!strcmp(text, "True") || !strcmp(text, "False"))
		return cJSON_CreateBool(text[0] == 'T');
	if (!strcmp(text, "None"))
		return cJSON_CreateNull();
	for (size_t i = 0; i < op->nr_sizes; i++)
		if (op->sizes[i].nr && !strcmp(text, op->sizes[i].name))
			return cJSON_CreateNumber((double)op->sizes[i].values[0]);
	return cJSON_Parse(text); /* "'a'" is no JSON: refused with the others */
}

/* The section's init as {"args": [...], "kwargs": {...}}; NULL with bad naming the item. */
static cJSON *section_init(const struct kb_repo_operator *op, const char **bad)
{
	cJSON *init = cJSON_CreateObject();
	cJSON *args = cJSON_AddArrayToObject(init, "args"), *kw = cJSON_AddObjectToObject(init, "kwargs");

	for (size_t i = 0; i < op->init.nr; i++) {
		const char *item = op->init.v[i], *eq = strchr(item, '='), *p = item;
		cJSON *v;

		while (eq && p < eq && (isalnum((unsigned char)*p) || *p == '_'))
			p++;
		if (eq && p == eq && eq > item && eq[1] != '=') {
			char *name = xstrndup(item, (size_t)(eq - item));

			v = py_value(eq + 1, op);
			if (v)
				cJSON_AddItemToObject(kw, name, v);
			free(name);
		} else {
			v = py_value(item, op);
			if (v)
				cJSON_AddItemToArray(args, v);
		}
		if (!v) {
			*bad = item;
			cJSON_Delete(init);
			return NULL;
		}
	}
	return init;
}

void jwire_op_dir(struct strbuf *out, const struct runner *r)
{
	/* the folder publish_branch commits; a slug that is no identifier is refused by the wiring */
	strbuf_reset(out);
	strbuf_addf(out, "kernelbot/%s", r->slug.buf);
}

/* The repository's tests: the section's selection, else tests/, else the root (a flat repo's test_*.py). */
static void push_tests(struct strvec *args, const struct runner *r, const struct kb_repo_operator *op)
{
	struct strbuf dir = STRBUF_INIT;

	for (size_t i = 0; i < op->tests.nr; i++)
		strvec_pushl(args, "--tests", op->tests.v[i], NULL);
	strbuf_addf(&dir, "%s/tests", r->src.buf);
	if (!op->tests.nr)
		strvec_pushl(args, "--tests", kb_is_dir(dir.buf) ? "tests" : ".", NULL);
	strbuf_release(&dir);
}

/* The wiring record of the run's evidence.json, owned by the caller; NULL: none yet. */
static cJSON *wiring_record(const struct runner *r)
{
	cJSON *ev = jread_json(r->out.buf, "evidence.json");
	cJSON *w = ev ? cJSON_DetachItemFromObjectCaseSensitive(ev, "wiring") : NULL;

	cJSON_Delete(ev);
	return w;
}

static void last_line(struct strbuf *out, const struct strbuf *text)
{
	const char *end = text->buf + text->len, *p;

	while (end > text->buf && (end[-1] == '\n' || end[-1] == '\r'))
		end--;
	for (p = end; p > text->buf && p[-1] != '\n'; p--)
		;
	strbuf_add(out, p, (size_t)(end - p));
}

static int run_wire(struct kb_jobs *j, struct runner *r, const struct kb_repo_operator *op,
		    const char *init, struct strbuf *why)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf module = STRBUF_INIT, cfg = STRBUF_INIT, op_dir = STRBUF_INIT, src = STRBUF_INIT;
	int rc = 0;

	strbuf_addf(&module, "%s:%s", op->path, op->target);
	strbuf_addf(&cfg, "%s/run.ini", r->dir.buf);
	jwire_op_dir(&op_dir, r);
	strvec_pushl(&cp.args, j->bin, "wire", r->out.buf, "--repo", r->src.buf, "--module",
		     module.buf, "--op-dir", op_dir.buf, "-c", cfg.buf, "--check", "--write", NULL);
	strvec_pushf(&cp.args, "--min-speedup=%.17g", j->cfg->bot_wire_min_speedup);
	if (init)
		strvec_pushl(&cp.args, "--init", init, NULL);
	strbuf_addf(&src, "%s/src", r->src.buf);
	if (!strncmp(op->path, "src/", 4) && kb_is_dir(src.buf))
		strvec_pushl(&cp.args, "--sys-path", "src", NULL);
	strvec_pushl(&cp.args, "--sys-path", ".", NULL);
	push_tests(&cp.args, r, op);
	cp.inherit_env = true;
	cp.timeout_ms = WIRE_TIMEOUT_MS;
	cp.err_cap = cp.out_cap = 64 * 1024;
	cp.keep_tail = true;
	log_info("job %" PRId64 ": wiring the kernel into %s", r->job.id, module.buf);
	if (run_command(&cp)) {
		rc = -1;
		goto out;
	}
	if (cp.exit_code == 1 && cp.err.len) {
		/* the child may quote what the repository's code printed: it goes
		 * into a pull request comment only redacted and cut */
		last_line(why, &cp.err);
		kb_redact(why, KB_REDACT_MESSAGE_MAX);
	}
	else if (cp.exit_code > 1 || cp.timed_out)
		strbuf_addf(why, "`kernelbot wire` %s", cp.timed_out ? "ran out of time" : "failed");
	if (cp.exit_code > 1)
		log_warn("job %" PRId64 ": kernelbot wire exited %d: %s", r->job.id, cp.exit_code,
			 cp.err.buf);
out:
	child_process_release(&cp);
	strbuf_release(&module);
	strbuf_release(&cfg);
	strbuf_release(&op_dir);
	strbuf_release(&src);
	return rc;
}

/*
 * A publish again: within the process the checkout holds the patch the
 * proof was made on; after a restart the checkout is fresh and the wiring
 * runs again.
 */
static bool checkout_wired(const struct runner *r, const struct kb_repo_operator *op, const cJSON *rec)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	const char *verdict = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "verdict"));
	bool yes = false;

	strbuf_addf(&path, "%s/%s", r->src.buf, op->path);
	if (verdict && !strbuf_read_file(&text, path.buf, 4u << 20))
		yes = strstr(text.buf, "_kb_") && strstr(text.buf, ".supported(");
	strbuf_release(&path);
	strbuf_release(&text);
	return yes;
}

int jwire_module(struct kb_jobs *j, struct runner *r, struct jwired *out)
{
	const struct kb_repo_operator *op = jmod_section(r);
	struct strbuf why = STRBUF_INIT, path = STRBUF_INIT;
	cJSON *init = NULL, *rec = NULL;
	const char *bad = NULL, *verdict;
	char *init_text = NULL;
	int rc = 0;

	if (!jmod_is_module_job(r) || !op)
		goto out;
	if (op->is_function) {
		strbuf_addstr(&why, "a function is not wired into its callers; the kernel's binding.py is "
			      "published for it");
		goto say;
	}
	rec = wiring_record(r);
	if (!checkout_wired(r, op, rec)) {
		cJSON_Delete(rec);
		rec = NULL;
		if (op->init.nr && !(init = section_init(op, &bad))) {
			strbuf_addf(&why, "its init argument `%s` is no literal the check can build the "
				    "module with", bad);
			goto say;
		}
		init_text = init ? cJSON_PrintUnformatted(init) : NULL;
		if (run_wire(j, r, op, init_text, &why)) {
			strbuf_addstr(&why, "`kernelbot wire` could not be started");
			goto say;
		}
		rec = wiring_record(r);
	}
	verdict = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "verdict"));
	if (verdict && !strcmp(verdict, "wired")) {
		strbuf_addstr(&out->module_path, op->path);
		strbuf_addf(&path, "%s/%s", r->src.buf, op->path);
		if (strbuf_read_file(&out->module_text, path.buf, 4u << 20)) {
			rc = error("could not read the wired module '%s'", path.buf);
			goto out;
		}
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/setup.py", r->src.buf);
		out->setup_changed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "setup_changed"));
		if (out->setup_changed && strbuf_read_file(&out->setup_text, path.buf, 4u << 20)) {
			rc = error("could not read the patched '%s'", path.buf);
			goto out;
		}
		goto out;
	}
	if (!why.len)
		strbuf_addf(&why, "the wiring check says %s (evidence.json's \"wiring\" has the figures)",
			    verdict ? verdict : "nothing");
say:
	strbuf_addf(&r->notes, "The kernel is not wired into `%s:%s`: %s. The kernel, its binding and "
		    "the evidence are published unwired.\n", op->path, op->target, why.buf);
out:
	cJSON_Delete(init);
	cJSON_Delete(rec);
	free(init_text);
	strbuf_release(&why);
	strbuf_release(&path);
	return rc;
}

void jwired_release(struct jwired *w)
{
	strbuf_release(&w->module_path);
	strbuf_release(&w->module_text);
	strbuf_release(&w->setup_text);
	w->setup_changed = false;
}
