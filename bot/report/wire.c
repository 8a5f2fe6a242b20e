#include "core/common.h"
#include "core/json.h"
#include "core/log.h"
#include "core/util.h"
#include "report/wire.h"
#include "verifier/wiring.h"

#include <limits.h>

#define MODULE_MAX_BYTES (4u << 20)

void kb_wire_init(struct kb_wire *w)
{
	memset(w, 0, sizeof(*w));
	kb_torch_op_init(&w->op);
	strbuf_init(&w->ops_py, 0);
	kb_module_patch_init(&w->patch);
	strbuf_init(&w->build_note, 0);
	strbuf_init(&w->build_add, 0);
}

void kb_wire_release(struct kb_wire *w)
{
	kb_torch_op_release(&w->op);
	strbuf_release(&w->ops_py);
	kb_module_patch_release(&w->patch);
	kb_wire_files_free(&w->files, &w->nr_files);
	strbuf_release(&w->build_note);
	strbuf_release(&w->build_add);
	cJSON_Delete(w->proof);
	w->proof = NULL;
}

void kb_wire_file_add(struct kb_wire_file **files, size_t *nr, const char *path, const char *text, size_t len)
{
	struct kb_wire_file *f;

	*files = xrealloc(*files, (*nr + 1) * sizeof(**files));
	f = &(*files)[(*nr)++];
	f->path = xstrdup(path);
	strbuf_init(&f->text, len + 1);
	strbuf_add(&f->text, text, len);
}

void kb_wire_files_free(struct kb_wire_file **files, size_t *nr)
{
	for (size_t i = 0; i < *nr; i++) {
		free((*files)[i].path);
		strbuf_release(&(*files)[i].text);
	}
	free(*files);
	*files = NULL;
	*nr = 0;
}

/* One more file for the branch; text is emptied. */
static void add_file(struct kb_wire *w, const char *path, struct strbuf *text)
{
	kb_wire_file_add(&w->files, &w->nr_files, path, text->buf, text->len);
	strbuf_reset(text);
}

/* s->repo_dir/name into text: 1 read, 0 none, -1 (logged) unreadable. */
static int read_repo_file(struct strbuf *text, const struct kb_wire_spec *s, const char *name)
{
	struct strbuf path = STRBUF_INIT;
	int rc = 0;

	strbuf_reset(text);
	strbuf_addf(&path, "%s/%s", s->repo_dir, name);
	if (kb_is_file(path.buf))
		rc = strbuf_read_file(text, path.buf, MODULE_MAX_BYTES) ? error("could not read '%s'", path.buf) : 1;
	strbuf_release(&path);
	return rc;
}

/*
 * setup.py (text; NULL: none), when it builds torch extensions: the kernels
 * join them; *changed when text was patched.
 */
static void patch_ext(struct kb_wire *w, const struct kb_wire_spec *s, const char *package, const char *backend,
		      struct strbuf *text, bool has_toml, bool *changed)
{
	struct strbuf out = STRBUF_INIT, why = STRBUF_INIT;
	struct strvec kernels = STRVEC_INIT;
	struct kb_build_ext ext = { package, s->op_dir, backend, NULL, 0, NULL, 0 };
	const struct kb_binding_spec *b = s->binding;

	if (!text) {
		strbuf_addstr(&w->build_note, has_toml
			      ? "The repository builds with pyproject.toml and no setup.py, which cannot "
				"declare a torch extension: binding.py compiles the kernel on first use."
			      : "The repository has no build (no setup.py): binding.py compiles the kernel "
				"on first use.");
		return;
	}
	strvec_push(&kernels, b && b->kernel_file ? b->kernel_file : "kernel.cu");
	if (b && b->backward_kernel)
		strvec_push(&kernels, b->backward_kernel);
	ext.kernels = (const char *const *)kernels.v;
	ext.nr_kernels = kernels.nr;
	if (!kb_setup_patch(&out, text->buf, text->len, &ext, &why)) {
		strbuf_reset(text);
		strbuf_add(text, out.buf, out.len);
		*changed = true;
		strbuf_addf(&w->build_note, "setup.py builds the kernel ahead of time as `%s._kernel` "
			    "(one line in its ext_modules); binding.py loads that library and compiles "
			    "on first use only without it.", package);
	} else {
		strbuf_addf(&w->build_note, "setup.py is left alone (%s): binding.py compiles the kernel "
			    "on first use. To build it ahead of time, add `%s(\"%s._kernel\", [\"%s/%s\"], "
			    "include_dirs=[\"%s/include\"])` to its ext_modules.", why.buf,
			    !strcmp(backend, "cuda") ? "CUDAExtension" : "CppExtension", package, s->op_dir,
			    kernels.v[0], s->op_dir);
	}
	strbuf_release(&out);
	strbuf_release(&why);
	strvec_clear(&kernels);
}

/* What to add by hand to a build file left alone: the package-data entry, the packages to list. */
static void data_by_hand(struct strbuf *sb, const struct kb_package_data *pd, bool toml)
{
	strbuf_addf(sb, toml ? "[tool.setuptools.package-data]\n\"%s\" = " : "package_data={\"%s\": ",
		    pd->package);
	kb_package_data_list(sb, pd);
	strbuf_addstr(sb, toml ? "\n# and, where [tool.setuptools] lists its packages:"
			       : "},\n# and, where packages= is a list:");
	for (size_t i = 0; i < pd->nr_packages; i++)
		strbuf_addf(sb, "%s \"%s\"", i ? "," : "", pd->packages[i]);
	strbuf_addch(sb, '\n');
}

/*
 * A folder inside the package: its files that are no module become package
 * data of the build that installs the package, pyproject.toml (toml) when
 * it configures setuptools or there is no setup.py, else setup.py (setup);
 * NULL: no such file. The build note says which, or what to add by hand.
 */
static int patch_data(struct kb_wire *w, const struct kb_wire_spec *s, const char *package,
		      const struct strvec *packages, struct strbuf *setup, struct strbuf *toml,
		      bool *setup_changed, bool *toml_changed)
{
	struct strvec patterns = STRVEC_INIT;
	struct strbuf out = STRBUF_INIT, why = STRBUF_INIT;
	struct kb_package_data pd;
	bool use_toml = toml && (!setup || kb_pyproject_configures_setuptools(toml->buf, toml->len));
	const char *file = use_toml ? "pyproject.toml" : "setup.py";
	int rc = -1;

	if (kb_wire_data_patterns(&patterns, s->run_dir))
		goto out;
	pd.package = package;
	pd.patterns = (const char *const *)patterns.v;
	pd.nr_patterns = patterns.nr;
	pd.packages = (const char *const *)packages->v;
	pd.nr_packages = packages->nr;
	rc = 0;
	if (!setup && !toml) {
		strbuf_addf(&w->build_note, " The package has no setup.py or pyproject.toml: a build that "
			    "installs it must carry %s's files that are no module as package data.", s->op_dir);
		goto out;
	}
	if (!(use_toml ? kb_pyproject_package_data(&out, toml->buf, toml->len, &pd, &why)
		       : kb_setup_package_data(&out, setup->buf, setup->len, &pd, &why))) {
		strbuf_reset(use_toml ? toml : setup);
		strbuf_add(use_toml ? toml : setup, out.buf, out.len);
		*(use_toml ? toml_changed : setup_changed) = true;
		strbuf_addf(&w->build_note, " %s installs the kernel's folder with the package: its kernel "
			    "sources, headers, reference and evidence as package data of `%s`, so the "
			    "installed package imports and builds it as the source tree does.", file, package);
		goto out;
	}
	strbuf_addf(&w->build_note, " %s is left alone for the install (%s): an installed package would "
		    "lack the kernel's sources, which binding.py compiles on first use. The lines to add to "
		    "it follow.", file, why.buf);
	data_by_hand(&w->build_add, &pd, use_toml);
	w->build_add_file = file;
out:
	strvec_clear(&patterns);
	strbuf_release(&out);
	strbuf_release(&why);
	return rc;
}

/*
 * The repository's build (patch_ext, patch_data); w->files gets setup.py and
 * pyproject.toml when changed and the __init__.py files a folder inside the
 * package needs above it.
 */
static int patch_build(struct kb_wire *w, const struct kb_wire_spec *s, const char *package,
		       const char *backend)
{
	struct strbuf setup = STRBUF_INIT, toml = STRBUF_INIT, init = STRBUF_INIT;
	struct strvec packages = STRVEC_INIT, inits = STRVEC_INIT;
	bool setup_changed = false, toml_changed = false;
	int has_setup, has_toml = 0, rc = -1;

	if ((has_setup = read_repo_file(&setup, s, "setup.py")) < 0 ||
	    (has_toml = read_repo_file(&toml, s, "pyproject.toml")) < 0)
		goto out;
	patch_ext(w, s, package, backend, has_setup ? &setup : NULL, has_toml, &setup_changed);
	if (kb_wire_in_package(s, &packages, &inits) &&
	    patch_data(w, s, package, &packages, has_setup ? &setup : NULL, has_toml ? &toml : NULL,
		       &setup_changed, &toml_changed))
		goto out;
	if (setup_changed)
		add_file(w, "setup.py", &setup);
	if (toml_changed)
		add_file(w, "pyproject.toml", &toml);
	for (size_t i = 0; i < inits.nr; i++) {
		strbuf_addstr(&init, "\"\"\"Kernels kernelbot verified for this package, a folder each: ops.py "
			      "(the operator the model imports), binding.py, the kernel and its evidence.\"\"\"\n");
		add_file(w, inits.v[i], &init);
	}
	rc = 0;
out:
	strbuf_release(&setup);
	strbuf_release(&toml);
	strbuf_release(&init);
	strvec_clear(&packages);
	strvec_clear(&inits);
	return rc;
}

int kb_wire_prepare(struct kb_wire *w, const struct kb_wire_spec *s, struct strbuf *why)
{
	struct strbuf package = STRBUF_INIT, path = STRBUF_INIT, text = STRBUF_INIT;
	struct strbuf module = STRBUF_INIT, alias = STRBUF_INIT;
	struct strvec names = STRVEC_INIT;
	struct kb_module_patch_spec ps;
	const char *slash = strrchr(s->op_dir, '/');
	const char *backend = kb_json_str(cJSON_GetObjectItemCaseSensitive(s->evidence, "environment"), "backend");
	int rc = KB_ENOTSUPPORTED;

	if (kb_wire_package(&package, s->op_dir, s->sys_path, s->nr_sys_path)) {
		strbuf_addf(why, "'%s' is no Python package path (letters, digits, '_' and '/')", s->op_dir);
		goto out;
	}
	if (kb_torch_op_from_evidence(&w->op, s->evidence, slash ? slash + 1 : s->op_dir, why) ||
	    kb_torch_op_speed_gate(&w->op, s->evidence, s->min_speedup, why))
		goto out;
	kb_torch_op_render(&w->ops_py, &w->op);
	strbuf_addf(&path, "%s/%s", s->repo_dir, s->module_path);
	if (strbuf_read_file(&text, path.buf, MODULE_MAX_BYTES)) {
		rc = error("could not read '%s'", path.buf);
		goto out;
	}
	for (size_t i = 0; i < w->op.nr_inputs; i++)
		strvec_push(&names, w->op.inputs[i].name);
	strbuf_addf(&module, "%s.ops", package.buf);
	strbuf_addf(&alias, "_kb_%s", w->op.name);
	memset(&ps, 0, sizeof(ps));
	ps.path = s->module_path;
	ps.class_name = s->class_name;
	ps.forward_line = s->forward_line;
	ps.op_module = module.buf;
	ps.alias = alias.buf;
	ps.op_function = w->op.name;
	ps.inputs = (const char *const *)names.v;
	ps.nr_inputs = names.nr;
	if ((rc = kb_module_patch(&w->patch, text.buf, text.len, &ps, why)))
		goto out;
	rc = patch_build(w, s, package.buf, backend ? backend : "cuda");
out:
	strbuf_release(&package);
	strbuf_release(&path);
	strbuf_release(&text);
	strbuf_release(&module);
	strbuf_release(&alias);
	strvec_clear(&names);
	return rc;
}

static int write_in(const char *dir, const char *name, const struct strbuf *data)
{
	struct strbuf path = STRBUF_INIT;
	char *slash;
	int rc;

	strbuf_addf(&path, "%s/%s", dir, name);
	slash = strrchr(path.buf, '/');
	*slash = '\0';
	rc = kb_mkdir_p(path.buf, 0755);
	*slash = '/';
	if (rc || kb_write_file_atomic(path.buf, data->buf, data->len))
		rc = error("could not write '%s'", path.buf);
	strbuf_release(&path);
	return rc;
}

int kb_wire_write_run(const struct kb_wire *w, const struct kb_wire_spec *s)
{
	struct strbuf py = STRBUF_INIT;
	int rc = write_in(s->run_dir, "ops.py", &w->ops_py);

	if (!rc && s->binding) {
		kb_binding_render(&py, s->binding);
		rc = write_in(s->run_dir, "binding.py", &py);
	}
	/* a package, so that setuptools' find_packages() installs it with the repository's own */
	strbuf_reset(&py);
	strbuf_addf(&py, "\"\"\"kernelbot's verified kernel for %s: ops.py is the operator the model imports, "
		    "binding.py the library it calls, evidence.json the proof.\"\"\"\n", w->op.name);
	if (!rc)
		rc = write_in(s->run_dir, "__init__.py", &py);
	strbuf_release(&py);
	return rc;
}

int kb_wire_write_files(const struct kb_wire *w, const struct kb_wire_spec *s, const char *root)
{
	int rc = write_in(root, s->module_path, &w->patch.text);

	for (size_t i = 0; !rc && i < w->nr_files; i++)
		rc = write_in(root, w->files[i].path, &w->files[i].text);
	return rc;
}
