#include "core/common.h"
#include "core/strvec.h"
#include "core/util.h"
#include "report/wire.h"

#include <dirent.h>
#include <sys/stat.h>

/*
 * Where the operator's folder lies in the repository and what that asks of
 * its build (report/wire.h): kb_wire_op_dir, kb_wire_package,
 * kb_wire_in_package, kb_wire_data_patterns.
 */

#define KB_OPS_PACKAGE "_kernelbot"

static bool ident(const char *p, size_t n)
{
	if (!n || (*p >= '0' && *p <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
		      (p[i] >= '0' && p[i] <= '9')))
			return false;
	return true;
}

/* An import root as a path prefix: "." and "./" -> "", "./src/" -> "src". */
static void root_of(struct strbuf *out, const char *root)
{
	strbuf_reset(out);
	while (root[0] == '.' && root[1] == '/')
		root += 2;
	strbuf_addstr(out, strcmp(root, ".") ? root : "");
	while (out->len && out->buf[out->len - 1] == '/')
		strbuf_setlen(out, out->len - 1);
}

/* How much of path the longest import root holding it takes ("src/" of "src/pkg/x"; 0: the top). */
static size_t root_len(const char *path, const char *const *roots, size_t nr)
{
	struct strbuf r = STRBUF_INIT;
	size_t best = 0;

	for (size_t i = 0; i < nr; i++) {
		root_of(&r, roots[i]);
		if (r.len && r.len + 1 > best && !strncmp(path, r.buf, r.len) && path[r.len] == '/')
			best = r.len + 1;
	}
	strbuf_release(&r);
	return best;
}

/*
 * The top-level package holding module_path under root (a path prefix, ""
 * for the repository's top) into top: every folder from the root down to
 * the module's is an identifier with an __init__.py. false: none.
 */
static bool top_package(struct strbuf *top, const char *repo_dir, const char *root, const char *module_path)
{
	struct strbuf init = STRBUF_INIT;
	const char *rel = module_path, *p, *slash;
	size_t n = strlen(root);
	bool yes = true;

	if (n && (strncmp(module_path, root, n) || module_path[n] != '/'))
		return false;
	rel += n ? n + 1 : 0;
	if (!strchr(rel, '/'))
		return false; /* a module at the root: no package */
	for (p = rel; yes && (slash = strchr(p, '/')); p = slash + 1) {
		strbuf_reset(&init);
		strbuf_addf(&init, "%s/%s%s%.*s/__init__.py", repo_dir, root, n ? "/" : "", (int)(slash - rel), rel);
		yes = ident(p, (size_t)(slash - p)) && kb_is_file(init.buf);
	}
	if (yes)
		strbuf_add(top, rel, strcspn(rel, "/"));
	strbuf_release(&init);
	return yes;
}

void kb_wire_op_dir(struct strbuf *out, const char *repo_dir, const char *module_path,
		    const char *const *roots, size_t nr_roots, const char *slug)
{
	static const char *const top[] = { "." };
	struct strbuf root = STRBUF_INIT, pkg = STRBUF_INIT;

	if (!nr_roots) {
		roots = top;
		nr_roots = 1;
	}
	strbuf_reset(out);
	for (size_t i = 0; i < nr_roots && !out->len; i++) {
		root_of(&root, roots[i]);
		strbuf_reset(&pkg);
		if (top_package(&pkg, repo_dir, root.buf, module_path))
			strbuf_addf(out, "%s%s%s/" KB_OPS_PACKAGE "/%s", root.buf, root.len ? "/" : "", pkg.buf,
				    slug);
	}
	if (!out->len)
		strbuf_addf(out, "kernelbot/%s", slug);
	strbuf_release(&root);
	strbuf_release(&pkg);
}

int kb_wire_package(struct strbuf *out, const char *op_dir, const char *const *roots, size_t nr_roots)
{
	const char *start = op_dir + root_len(op_dir, roots, nr_roots);

	for (const char *p = start; *p; p++) {
		bool first = p == start || p[-1] == '/';

		if (*p == '/' && !first && p[1])
			strbuf_addch(out, '.');
		else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
			 (!first && *p >= '0' && *p <= '9'))
			strbuf_addch(out, *p);
		else if (*p != '/' || first)
			return -1;
	}
	return out->len ? 0 : -1;
}

bool kb_wire_in_package(const struct kb_wire_spec *s, struct strvec *packages, struct strvec *inits)
{
	struct strbuf path = STRBUF_INIT, pkg = STRBUF_INIT;
	size_t skip = root_len(s->op_dir, s->sys_path, s->nr_sys_path), len = strlen(s->op_dir);
	const char *end, *slash;
	bool yes = false;

	while (len > skip && s->op_dir[len - 1] == '/')
		len--;
	end = s->op_dir + len;
	slash = memchr(s->op_dir + skip, '/', len - skip);
	if (!slash || kb_wire_package(&pkg, s->op_dir, s->sys_path, s->nr_sys_path))
		goto out;
	strbuf_addf(&path, "%s/%.*s/__init__.py", s->repo_dir, (int)(slash - s->op_dir), s->op_dir);
	if (!(yes = kb_is_file(path.buf)))
		goto out;
	/* each folder below the top package down to op_dir; pkg is that path with '.' for '/' */
	for (const char *p = slash + 1; p <= end; p++) {
		size_t n = (size_t)(p - s->op_dir);

		if (p < end && *p != '/')
			continue;
		strvec_pushf(packages, "%.*s", (int)(n - skip), pkg.buf);
		if (p == end)
			break; /* op_dir's own __init__.py comes with the run's folder */
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/%.*s/__init__.py", s->repo_dir, (int)n, s->op_dir);
		if (!kb_is_file(path.buf))
			strvec_pushf(inits, "%.*s/__init__.py", (int)n, s->op_dir);
	}
out:
	strbuf_release(&path);
	strbuf_release(&pkg);
	return yes;
}

/* A pattern's byte: what setuptools' glob takes literally, else '?' (any one byte). */
static char pattern_byte(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_.-/", c)
		       ? c : '?';
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int walk(struct strvec *out, const char *dir, const char *rel, int depth)
{
	struct strbuf path = STRBUF_INIT, pat = STRBUF_INIT;
	struct dirent *de;
	struct stat st;
	DIR *d;
	int rc = 0;

	strbuf_addf(&path, "%s%s%s", dir, *rel ? "/" : "", rel);
	if (!(d = opendir(path.buf))) {
		rc = error_errno("could not read '%s'", path.buf);
		goto out;
	}
	while (!rc && (de = readdir(d))) {
		const char *dot = strrchr(de->d_name, '.');
		bool seen = false;

		strbuf_reset(&path);
		strbuf_addf(&path, "%s/%s%s%s", dir, rel, *rel ? "/" : "", de->d_name);
		if (de->d_name[0] == '.' || lstat(path.buf, &st))
			continue; /* hidden: .kb_build, the binding's cache */
		strbuf_reset(&pat);
		strbuf_addf(&pat, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		if (S_ISDIR(st.st_mode) && depth < 4) {
			rc = walk(out, dir, pat.buf, depth + 1);
			continue;
		}
		if (!S_ISREG(st.st_mode) || (!*rel && dot && !strcmp(dot, ".py")))
			continue; /* the package's own modules are installed anyway */
		strbuf_setlen(&pat, *rel ? strlen(rel) + 1 : 0);
		if (dot)
			strbuf_addch(&pat, '*');
		strbuf_addstr(&pat, dot ? dot : de->d_name);
		for (size_t i = 0; i < pat.len; i++)
			pat.buf[i] = pat.buf[i] == '*' ? '*' : pattern_byte(pat.buf[i]);
		for (size_t i = 0; i < out->nr; i++)
			seen = seen || !strcmp(out->v[i], pat.buf);
		if (!seen)
			strvec_push(out, pat.buf);
	}
	closedir(d);
out:
	strbuf_release(&path);
	strbuf_release(&pat);
	return rc;
}

int kb_wire_data_patterns(struct strvec *out, const char *run_dir)
{
	if (walk(out, run_dir, "", 0))
		return -1;
	qsort(out->v, out->nr, sizeof(*out->v), cmp_str);
	return 0;
}
