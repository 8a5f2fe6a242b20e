/*
 * Operators in a pull request's ordinary code (issue 17): at the trigger,
 * which [operator NAME] sections become jobs and which modules of the
 * changed files still need one (the lines to add, kept per trigger and
 * shown in its progress comment); in a job, the section it was made from.
 *
 * A section becomes a job when the pull request changes its file (or
 * .kernelbot.ini itself) and its class or function is found at the
 * pinned sha, read as text (pymodules.h). A module of a changed file
 * that no section names, with a forward of its own or of a base in its
 * file, and a function decorated @kernelbot.operator, get the lines of a
 * section to paste (modop.h, kb_modop_hint). Test files are left out:
 * their modules are fixtures, not the model.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/markdown.h"
#include "core/strvec.h"
#include "core/util.h"
#include "git/git.h"
#include "jobs/jobs_priv.h"
#include "jobs/modop.h"
#include "jobs/pymodules.h"
#include "jobs/repo_operators.h"

#include <inttypes.h>

#define MAX_SOURCE (1024 * 1024)
#define MAX_FILES 64     /* changed .py files read for modules */
#define MAX_HINTS 5      /* modules given the lines to add */

static bool ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && !strcmp(s + ls - lx, suffix);
}

/* tests/..., test_x.py, x_test.py, conftest.py: the repository's tests, not its model. */
static bool test_file(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(path, "tests/", 6) || !strncmp(path, "test/", 5) || strstr(path, "/tests/") ||
	       strstr(path, "/test/") || !strncmp(base, "test_", 5) || ends_with(base, "_test.py") ||
	       !strcmp(base, "conftest.py");
}

static bool listed(const struct strvec *v, const char *s)
{
	for (size_t i = 0; i < v->nr; i++)
		if (!strcmp(v->v[i], s))
			return true;
	return false;
}

/* The classes and functions of path at sha; false when it cannot be read. */
static bool scan_file(struct kb_git_repo *git, const char *sha, const char *path, struct kb_pyops *ops)
{
	struct strbuf src = STRBUF_INIT;
	bool ok = !kb_git_read_file(git, sha, path, &src, MAX_SOURCE);

	if (ok)
		kb_pyops_scan(ops, src.buf, src.len);
	strbuf_release(&src);
	return ok;
}

/*
 * A section naming path:name would parse: ASCII identifiers, and no ';'
 * (an INI comment) or blank at the ends of the path.
 */
static bool pasteable(const char *path, const char *name)
{
	struct strbuf jp = STRBUF_INIT;
	char *p = NULL, *t = NULL;
	bool ok;

	strbuf_addf(&jp, "%s:%s", path, name);
	ok = kb_repo_operator_split(jp.buf, &p, &t) && !strchr(path, ';') && path[0] != ' ' &&
	     path[strlen(path) - 1] != ' ';
	free(p);
	free(t);
	strbuf_release(&jp);
	return ok;
}

/* One more section to paste (a blank line between two), up to MAX_HINTS; all are counted. */
static void add_hint(struct strbuf *hints, size_t *nr_hints, const char *name, const char *path,
		     const struct kb_pyop *t)
{
	if ((*nr_hints)++ >= MAX_HINTS)
		return;
	if (hints->len)
		strbuf_addch(hints, '\n');
	kb_modop_hint(hints, name, path, t);
}

static const struct kb_repo_operator *section_of(const struct kb_repo_config *rc, const char *path,
						 const char *name)
{
	for (size_t i = 0; i < rc->nr_ops; i++)
		if (!rc->ops[i].bad && !strcmp(rc->ops[i].path, path) && !strcmp(rc->ops[i].target, name))
			return &rc->ops[i];
	return NULL;
}

/* The sections whose file (or .kernelbot.ini) changed: jobs, or lines to add. */
static void sections(struct kb_git_repo *git, const char *sha, const struct kb_repo_config *rc,
		     const struct strvec *changed, struct strvec *ops, struct strbuf *missing,
		     struct strbuf *hints, size_t *nr_hints)
{
	bool ini_changed = listed(changed, ".kernelbot.ini");
	struct strbuf jp = STRBUF_INIT;

	for (size_t i = 0; i < rc->nr_ops; i++) {
		const struct kb_repo_operator *op = &rc->ops[i];
		struct kb_pyops found = KB_PYOPS_INIT;
		const struct kb_pyop *t;

		if (op->bad || (!ini_changed && !listed(changed, op->path)))
			continue;
		if (!scan_file(git, sha, op->path, &found)) {
			strbuf_addf(missing, "[operator %s]: there is no file '%s' (at most 1 MiB) at this commit; "
				    "not run\n", op->name, op->path);
		} else if (!(t = kb_pyops_find(&found, op->target)) || t->is_function != op->is_function) {
			strbuf_addf(missing, "[operator %s]: %s has no %s %s at this commit (read as text); not run\n",
				    op->name, op->path, op->is_function ? "function" : "class", op->target);
		} else if (op->needs_inputs) {
			add_hint(hints, nr_hints, op->name, op->path, t);
		} else {
			kb_repo_operator_job_path(&jp, op);
			if (!listed(ops, jp.buf))
				strvec_push(ops, jp.buf);
		}
		kb_pyops_release(&found);
	}
	strbuf_release(&jp);
}

/* Modules and marked functions of the changed files that no section names. */
static void unnamed(struct kb_git_repo *git, const char *sha, const struct kb_repo_config *rc,
		    const struct strvec *changed, const struct strvec *ops, struct strbuf *hints,
		    size_t *nr_hints)
{
	size_t files = 0;

	for (size_t i = 0; i < changed->nr && files < MAX_FILES; i++) {
		const char *path = changed->v[i];
		struct kb_pyops found = KB_PYOPS_INIT;

		if (!ends_with(path, ".py") || test_file(path) || listed(ops, path) || !kb_repo_path_ok(path))
			continue;
		files++;
		if (!scan_file(git, sha, path, &found))
			continue;
		for (size_t k = 0; k < found.nr; k++) {
			const struct kb_pyop *t = &found.v[k];
			bool candidate = t->is_function ? t->marked : t->is_module && t->forward_line;

			if (!candidate || section_of(rc, path, t->name) || !pasteable(path, t->name))
				continue;
			add_hint(hints, nr_hints, NULL, path, t);
		}
		kb_pyops_release(&found);
	}
}

int jmodops_find(struct kb_git_repo *git, const char *sha, const struct kb_repo_config *rc,
		 const struct strvec *changed, bool hint_unnamed, struct strvec *ops, struct strbuf *hints)
{
	struct strbuf ini = STRBUF_INIT, missing = STRBUF_INIT;
	size_t nr = 0;

	sections(git, sha, rc, changed, ops, &missing, &ini, &nr);
	if (hint_unnamed)
		unnamed(git, sha, rc, changed, ops, &ini, &nr);
	/* kept with the hints, not the notes: every progress comment of the trigger shows them */
	jrender_list(hints, missing.buf);
	if (missing.len && nr)
		strbuf_addch(hints, '\n');
	if (nr) {
		strbuf_addf(hints, "**%zu module%s without shapes.** kernelbot runs a module of the "
			    "repository once `.kernelbot.ini` says what to build it and call it with. "
			    "These lines would do it (edit the placeholder sizes; or name tests to record "
			    "the shapes from), then comment `/kernelbot run`:\n\n", nr, nr == 1 ? "" : "s");
		kb_md_fence(hints, "ini", ini.buf, ini.len);
		if (nr > MAX_HINTS)
			strbuf_addf(hints, "\nand %zu more.\n", nr - MAX_HINTS);
	}
	strbuf_release(&ini);
	strbuf_release(&missing);
	return 0;
}

/* --- kept per trigger: <state_dir>/triggers/<id>/modules.md --- */

static void hints_path(struct strbuf *out, const struct kb_jobs *j, int64_t tid)
{
	strbuf_addf(out, "%s/triggers/%" PRId64, j->cfg->state_dir, tid);
}

int jmodops_save_hints(struct kb_jobs *j, int64_t tid, const char *md)
{
	struct strbuf dir = STRBUF_INIT, path = STRBUF_INIT;
	int rc = 0;

	hints_path(&dir, j, tid);
	strbuf_addf(&path, "%s/modules.md", dir.buf);
	if (!md || !*md)
		unlink(path.buf);
	else if (kb_mkdir_p(dir.buf, 0700) || kb_write_file_atomic(path.buf, md, strlen(md)))
		rc = error("could not keep the modules without shapes in '%s'", path.buf);
	strbuf_release(&dir);
	strbuf_release(&path);
	return rc;
}

void jmodops_load_hints(struct kb_jobs *j, int64_t tid, struct strbuf *out)
{
	struct strbuf path = STRBUF_INIT;

	hints_path(&path, j, tid);
	strbuf_addstr(&path, "/modules.md");
	if (kb_is_file(path.buf) && strbuf_read_file(out, path.buf, 64 * 1024))
		strbuf_reset(out);
	strbuf_release(&path);
}

/* --- in a job --- */

const struct kb_repo_operator *jmod_section(const struct runner *r)
{
	struct strbuf jp = STRBUF_INIT;
	const struct kb_repo_operator *found = NULL;

	for (size_t i = 0; i < r->rcfg.nr_ops && !found; i++) {
		if (r->rcfg.ops[i].bad || !r->rcfg.ops[i].path)
			continue;
		kb_repo_operator_job_path(&jp, &r->rcfg.ops[i]);
		if (!strcmp(jp.buf, r->job.operator_path))
			found = &r->rcfg.ops[i];
	}
	strbuf_release(&jp);
	return found;
}

bool jmod_is_module_job(const struct runner *r)
{
	char *path, *target;
	bool yes = kb_repo_operator_split(r->job.operator_path, &path, &target);

	free(path);
	free(target);
	return yes;
}

int jmod_operator_file(const struct runner *r, struct strbuf *out)
{
	const struct kb_repo_operator *op = jmod_section(r);
	struct strbuf name = STRBUF_INIT;

	strbuf_reset(out);
	if (!op)
		return -1;
	kb_modop_file_name(&name, op->name);
	strbuf_addf(out, "%s/%s", r->src.buf, name.buf);
	strbuf_release(&name);
	return 0;
}
