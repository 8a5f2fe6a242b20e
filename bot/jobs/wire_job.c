#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/redact.h"
#include "core/util.h"
#include "core/json.h"
#include "jobs/jobs_priv.h"
#include "jobs/modop.h"
#include "jobs/repo_operators.h"
#include "report/wire.h"

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
 * The loop starts and polls the child (jobs.c, stage "wire"): the check
 * runs the repository's tests, minutes that must not stop the daemon.
 * The module is built with the section's init, else with the one the
 * tests recorded (shapes.json), so a constructor with required arguments
 * needs no init line when the shapes come from the tests.
 */

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

/* The import roots the wiring check gets: src/ for a module under it (a src layout), then the root. */
static void import_roots(struct strvec *roots, const struct runner *r, const struct kb_repo_operator *op)
{
	struct strbuf src = STRBUF_INIT;

	strbuf_addf(&src, "%s/src", r->src.buf);
	if (!strncmp(op->path, "src/", 4) && kb_is_dir(src.buf))
		strvec_push(roots, "src");
	strvec_push(roots, ".");
	strbuf_release(&src);
}

void jwire_op_dir(struct strbuf *out, const struct runner *r)
{
	const struct kb_repo_operator *op = jmod_is_module_job(r) ? jmod_section(r) : NULL;
	struct strvec roots = STRVEC_INIT;

	/* the folder publish_branch commits; a slug that is no identifier is refused by the wiring */
	strbuf_reset(out);
	if (!op) {
		strbuf_addf(out, "kernelbot/%s", r->slug.buf);
		return;
	}
	/* the checkout at the job's sha decides, the same at every publish and render */
	import_roots(&roots, r, op);
	kb_wire_op_dir(out, r->src.buf, op->path, roots.v, roots.nr, r->slug.buf);
	strvec_clear(&roots);
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

/*
 * The init the wiring check builds the module with: the section's, else
 * the one the tests built it with most often among the calls whose shapes
 * were searched (shapes.json, what `kernelbot operator` recorded, read as
 * strictly as it was then, with the same max_configs). NULL in *out: none.
 * -1 with bad naming the section's item that is no literal.
 */
static int module_init(struct kb_jobs *j, const struct runner *r, const struct kb_repo_operator *op,
		       char **out, const char **bad)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT, why = STRBUF_INIT;
	struct kb_modop m = KB_MODOP_INIT;
	int64_t max_sets = r->rcfg.max_configs > 0 ? r->rcfg.max_configs : j->cfg->max_configs;
	cJSON *init;
	const char *rec;

	*out = NULL;
	if (op->init.nr) {
		if (!(init = section_init(op, bad)))
			return -1;
		*out = cJSON_PrintUnformatted(init);
		cJSON_Delete(init);
		return 0;
	}
	strbuf_addf(&path, "%s/shapes.json", r->dir.buf);
	if (!op->nr_forms && kb_is_file(path.buf) &&
	    !strbuf_read_file(&text, path.buf, KB_MODOP_MAX_RECORD) &&
	    !kb_modop_from_record(&m, text.buf, text.len, (size_t)max_sets, op, &why) &&
	    (rec = kb_modop_recorded_init(&m)))
		*out = xstrdup(rec);
	kb_modop_release(&m);
	strbuf_release(&path);
	strbuf_release(&text);
	strbuf_release(&why);
	return 0;
}

/* The line of r->notes that says why the module stays as it was. */
static void say_unwired(struct runner *r, const struct kb_repo_operator *op, struct strbuf *why)
{
	/* it may quote what the repository's code printed: redacted and cut */
	kb_redact(why, KB_REDACT_MESSAGE_MAX);
	strbuf_addf(&r->notes, "The kernel is not wired into `%s:%s`: %s. The kernel, its binding and "
		    "the evidence are published unwired.\n", op->path, op->target, why->buf);
}

int jwire_command(struct kb_jobs *j, struct runner *r, struct strvec *args)
{
	const struct kb_repo_operator *op = jmod_section(r);
	struct strbuf why = STRBUF_INIT, module = STRBUF_INIT, cfg = STRBUF_INIT, op_dir = STRBUF_INIT;
	struct strvec roots = STRVEC_INIT;
	const char *bad = NULL;
	char *init = NULL;
	int rc = 0;

	jwired_release(&r->wired);
	if (!jmod_is_module_job(r) || !op)
		goto out;
	if (op->is_function) {
		strbuf_addstr(&why, "a function is not wired into its callers; the kernel's binding.py is "
			      "published for it");
		goto out;
	}
	if (module_init(j, r, op, &init, &bad)) {
		strbuf_addf(&why, "its init argument `%s` is no literal the check can build the module with",
			    bad);
		goto out;
	}
	strbuf_addf(&module, "%s:%s", op->path, op->target);
	strbuf_addf(&cfg, "%s/run.ini", r->dir.buf);
	jwire_op_dir(&op_dir, r);
	strvec_pushl(args, j->bin, "wire", r->out.buf, "--repo", r->src.buf, "--module",
		     module.buf, "--op-dir", op_dir.buf, "-c", cfg.buf, "--check", "--write", NULL);
	strvec_pushf(args, "--min-speedup=%.17g", j->cfg->bot_wire_min_speedup);
	if (init)
		strvec_pushl(args, "--init", init, NULL);
	import_roots(&roots, r, op);
	for (size_t i = 0; i < roots.nr; i++)
		strvec_pushl(args, "--sys-path", roots.v[i], NULL);
	push_tests(args, r, op);
	log_info("job %" PRId64 ": wiring the kernel into %s%s%s", r->job.id, module.buf,
		 init ? ", built with " : "", init ? init : "");
	rc = 1;
out:
	if (why.len)
		say_unwired(r, op, &why);
	free(init);
	strbuf_release(&why);
	strbuf_release(&module);
	strbuf_release(&cfg);
	strbuf_release(&op_dir);
	strvec_clear(&roots);
	return rc;
}

/*
 * Was the checkout patched? The proof is the child's of this attempt, and
 * `--write` put the module it was made on into the checkout (a restart
 * checks out afresh and wires again).
 */
static bool checkout_wired(const struct runner *r, const struct kb_repo_operator *op)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	bool yes = false;

	strbuf_addf(&path, "%s/%s", r->src.buf, op->path);
	if (!strbuf_read_file(&text, path.buf, 4u << 20))
		yes = strstr(text.buf, "_kb_") && strstr(text.buf, ".supported(");
	strbuf_release(&path);
	strbuf_release(&text);
	return yes;
}

/*
 * A file the record says the wiring changed or added: the build's
 * (setup.py, pyproject.toml at the root) or a package's __init__.py; never
 * outside the checkout, hidden or anything else.
 */
static bool wired_file_ok(const char *p)
{
	const char *base = strrchr(p, '/');

	if (!*p || *p == '/' || strstr(p, "..") || strstr(p, "/.") || *p == '.')
		return false;
	return base ? !strcmp(base, "/__init__.py") : !strcmp(p, "setup.py") || !strcmp(p, "pyproject.toml");
}

/* The patched module and the record's "files" (setup.py, pyproject.toml, __init__.py) into r->wired. */
static int take_wired(struct runner *r, const struct kb_repo_operator *op, const cJSON *rec)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	const cJSON *f;
	int rc = 0;

	strbuf_addstr(&r->wired.module_path, op->path);
	strbuf_addf(&path, "%s/%s", r->src.buf, op->path);
	if (strbuf_read_file(&r->wired.module_text, path.buf, 4u << 20)) {
		rc = error("could not read the wired module '%s'", path.buf);
		goto out;
	}
	cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(rec, "files")) {
		if (!cJSON_IsString(f) || !wired_file_ok(f->valuestring)) {
			rc = error("job %" PRId64 ": the wiring names '%s' among its files", r->job.id,
				   cJSON_IsString(f) ? f->valuestring : "?");
			goto out;
		}
		strbuf_reset(&path);
		strbuf_reset(&text);
		strbuf_addf(&path, "%s/%s", r->src.buf, f->valuestring);
		if (strbuf_read_file(&text, path.buf, 4u << 20)) {
			rc = error("could not read the wiring's '%s'", path.buf);
			goto out;
		}
		kb_wire_file_add(&r->wired.files, &r->wired.nr_files, f->valuestring, text.buf, text.len);
	}
out:
	if (rc)
		jwired_release(&r->wired);
	strbuf_release(&path);
	strbuf_release(&text);
	return rc;
}

/* Why a child that exited 1 without a check's verdict refused: its record's reason, else its last line. */
static void refusal(struct strbuf *why, const cJSON *rec, const char *tail, const char *module)
{
	const cJSON *reason = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rec, "reasons"), 0);
	const char *msg = kb_json_str(reason, "message"), *p;

	if (msg && *msg) {
		strbuf_addstr(why, msg);
		return;
	}
	/* "kernelbot wire: cannot wire PATH:CLASS: why" */
	if (tail && !strncmp(tail, "kernelbot wire: ", 16) && (p = strstr(tail, module)) &&
	    !strncmp(p + strlen(module), ": ", 2))
		tail = p + strlen(module) + 2;
	strbuf_addstr(why, tail && *tail ? tail : "`kernelbot wire` said nothing");
}

int jwire_ended(struct runner *r, int exit_code, const char *tail, const char *why_not)
{
	const struct kb_repo_operator *op = jmod_section(r);
	struct kb_wire_spec spec = { 0 };
	struct strbuf why = STRBUF_INIT, module = STRBUF_INIT;
	cJSON *rec = NULL;
	const char *verdict;
	int rc = 0;

	jwired_release(&r->wired);
	if (!op)
		return error("job %" PRId64 ": its [operator] section is gone", r->job.id);
	strbuf_addf(&module, "%s:%s", op->path, op->target);
	if (why_not) {
		strbuf_addstr(&why, why_not);
		goto refuse;
	}
	if (exit_code > 1) {
		log_warn("job %" PRId64 ": kernelbot wire exited %d: %s", r->job.id, exit_code, tail ? tail : "");
		strbuf_addf(&why, "`kernelbot wire` failed (exit %d; the job's log says why)", exit_code);
		goto refuse;
	}
	rec = wiring_record(r);
	verdict = kb_json_str(rec, "verdict");
	if (exit_code == 0 && verdict && !strcmp(verdict, "wired") && checkout_wired(r, op)) {
		rc = take_wired(r, op, rec);
		goto out;
	}
	if (verdict && strcmp(verdict, "not_wired")) {
		strbuf_addf(&why, "the wiring check says %s (evidence.json's \"wiring\" has the figures)",
			    verdict);
		goto say;
	}
	refusal(&why, rec, tail, module.buf);
	if (rec)
		goto say; /* the child recorded its refusal itself */
refuse:
	/* no proof of this attempt: the evidence says so rather than keep an older one */
	kb_redact(&why, KB_REDACT_MESSAGE_MAX);
	spec.run_dir = r->out.buf;
	spec.module_path = op->path;
	spec.class_name = op->target;
	if (kb_wire_record_refusal(&spec, why.buf))
		log_warn("job %" PRId64 ": could not record why the module is not wired", r->job.id);
say:
	say_unwired(r, op, &why);
out:
	cJSON_Delete(rec);
	strbuf_release(&why);
	strbuf_release(&module);
	return rc;
}

void jwired_release(struct jwired *w)
{
	strbuf_release(&w->module_path);
	strbuf_release(&w->module_text);
	kb_wire_files_free(&w->files, &w->nr_files);
}
