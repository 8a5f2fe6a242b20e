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
	strbuf_init(&w->setup_py, 0);
	strbuf_init(&w->build_note, 0);
}

void kb_wire_release(struct kb_wire *w)
{
	kb_torch_op_release(&w->op);
	strbuf_release(&w->ops_py);
	kb_module_patch_release(&w->patch);
	strbuf_release(&w->setup_py);
	strbuf_release(&w->build_note);
	cJSON_Delete(w->proof);
	w->proof = NULL;
}

int kb_wire_package(struct strbuf *out, const char *op_dir)
{
	for (const char *p = op_dir; *p; p++) {
		bool first = p == op_dir || p[-1] == '/';

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

/* setup.py at the repository's root, when it builds torch extensions: the kernels join them. */
static int patch_build(struct kb_wire *w, const struct kb_wire_spec *s, const char *package,
		       const char *backend)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT, why = STRBUF_INIT;
	struct strvec kernels = STRVEC_INIT;
	struct kb_build_ext ext = { package, s->op_dir, backend, NULL, 0, NULL, 0 };
	const struct kb_binding_spec *b = s->binding;
	int rc = 0;

	strbuf_addf(&path, "%s/setup.py", s->repo_dir);
	if (!kb_is_file(path.buf)) {
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/pyproject.toml", s->repo_dir);
		strbuf_addstr(&w->build_note, kb_is_file(path.buf)
			      ? "The repository builds with pyproject.toml and no setup.py, which cannot "
				"declare a torch extension: binding.py compiles the kernel on first use."
			      : "The repository has no build (no setup.py): binding.py compiles the kernel "
				"on first use.");
		goto out;
	}
	strvec_push(&kernels, b && b->kernel_file ? b->kernel_file : "kernel.cu");
	if (b && b->backward_kernel)
		strvec_push(&kernels, b->backward_kernel);
	ext.kernels = (const char *const *)kernels.v;
	ext.nr_kernels = kernels.nr;
	if (strbuf_read_file(&text, path.buf, MODULE_MAX_BYTES)) {
		rc = error("could not read '%s'", path.buf);
		goto out;
	}
	if (!kb_setup_patch(&w->setup_py, text.buf, text.len, &ext, &why)) {
		w->setup_changed = true;
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
out:
	strbuf_release(&path);
	strbuf_release(&text);
	strbuf_release(&why);
	strvec_clear(&kernels);
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

	if (kb_wire_package(&package, s->op_dir)) {
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
	strbuf_release(&py);
	return rc;
}
