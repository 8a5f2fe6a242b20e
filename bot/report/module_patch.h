#ifndef KB_REPORT_MODULE_PATCH_H
#define KB_REPORT_MODULE_PATCH_H
/*
 * The edits of a repository's own files that wire a verified kernel into
 * its model (issue 17, "Kernels wired back"): a few inserted lines, in the
 * file's own style, and nothing else touched.
 *
 * kb_module_patch: in the module's file, one import placed with the file's
 * other top-level imports (after the last of them before the first class or
 * def, a `try:` block of imports counted whole; `from X import Y as Z` when
 * the import it follows is a from-import, else `import X.Y as Z`), and at
 * the top of `forward` (after its docstring) a guarded call:
 *
 *     def forward(self, x, mask=None):
 *         """..."""
 *         if mask is None and _kb_mlp.supported(x, self.fc.weight, self.fc.bias):
 *             return _kb_mlp.mlp(x, self.fc.weight, self.fc.bias)
 *         ...the original body, unchanged...
 *
 * The operator's ABI inputs map to forward's arguments (`input<i>`: the
 * i-th parameter after self; a robust-kbench name: the parameter of that
 * name) and to the module's own tensors (`param:fc.weight`, `buffer:...`:
 * `self.fc.weight`, `self.layers[0].weight`). A parameter of forward the
 * kernel does not take must be at a literal default for the kernel to run
 * (`mask is None`, `dim == -1`). The inserted lines take the body's
 * indentation (tabs or spaces, its width) and the line ending of the line
 * they follow (CRLF files stay CRLF).
 *
 * What cannot be wired without rewriting code is refused with the reason
 * (KB_ENOTSUPPORTED and *why): forward(*args) or (**kwargs), a body on the
 * def line, an input with no argument or module tensor to map to, a forward
 * argument the kernel ignores whose default is not a literal, a file
 * already wired.
 */
#include "core/common.h"
#include "core/strbuf.h"

struct kb_module_patch_spec {
	const char *path;              /* the file, as messages name it: "src/pkg/mlp.py" */
	const char *class_name;        /* "FusedMLP" */
	int forward_line;              /* 1-based line of `def forward` or of a decorator of it;
					* 0: the class's last forward */
	const char *op_module;         /* what the import names: "kernelbot.mlp.ops" */
	const char *alias;             /* its name in the file: "_kb_mlp" */
	const char *op_function;       /* op_module's function that runs the operator: "mlp" */
	const char *const *inputs;     /* the operator's ABI input names, in order */
	size_t nr_inputs;
};

struct kb_module_patch {
	struct strbuf text;            /* the patched file */
	struct strbuf args;            /* the call's arguments: "x, self.fc.weight, self.fc.bias" */
	int import_line;               /* 1-based line of the inserted import, in text */
	int guard_line;                /* 1-based line of the inserted `if`, in text */
};

void kb_module_patch_init(struct kb_module_patch *p);
void kb_module_patch_release(struct kb_module_patch *p);

/*
 * Patch text (the module's file) as above into p. 0; KB_ENOTSUPPORTED with
 * the reason in why (a sentence naming the file, class and what to change)
 * when the module cannot be wired by inserting lines; nothing is logged.
 */
int kb_module_patch(struct kb_module_patch *p, const char *text, size_t len,
		    const struct kb_module_patch_spec *spec, struct strbuf *why);

/* The kernel libraries a repository's own build compiles ahead of time. */
struct kb_build_ext {
	const char *package;           /* the operator's package: "kernelbot.mlp" */
	const char *dir;               /* its folder, relative to setup.py: "kernelbot/mlp" */
	const char *backend;           /* "cuda" or "cpu" */
	const char *const *kernels;    /* kernel files relative to dir: "kernel.cu", "backward/kernel.cu" */
	size_t nr_kernels;
	const char *const *libraries;  /* link libraries: "cublasLt" */
	size_t nr_libraries;
};

/*
 * setup.py with the kernels added to its torch extensions: when it imports
 * CUDAExtension (cuda) or CppExtension (cpu) from torch.utils.cpp_extension
 * and passes a list literal as ext_modules, one element per kernel is
 * inserted at the list's head (`CUDAExtension("kernelbot.mlp._kernel",
 * ["kernelbot/mlp/kernel.cu"], include_dirs=[...])`), so `pip install .`
 * or `python setup.py build_ext --inplace` builds kernelbot/mlp/_kernel*.so,
 * which binding.py loads instead of compiling on first use. 0;
 * KB_ENOTSUPPORTED with why (what the pull request then says) otherwise.
 */
int kb_setup_patch(struct strbuf *out, const char *text, size_t len, const struct kb_build_ext *ext,
		   struct strbuf *why);

/*
 * The operator's folder inside the repository's own package (report/wire.h):
 * setuptools installs only a package's modules unless told, and binding.py
 * compiles the kernel sources beside it on first use, so the build must
 * carry the folder's other files as package data.
 */
struct kb_package_data {
	const char *package;           /* the operator's package: "tinymlp._kernelbot.mlp" */
	const char *const *patterns;   /* its files that are no module, relative to its folder:
					* "*.cu", and "*.h" under "include", "*.py" under "reference" */
	size_t nr_patterns;
	const char *const *packages;   /* the packages below the top-level one it needs, outermost
					* first: "tinymlp._kernelbot", "tinymlp._kernelbot.mlp" */
	size_t nr_packages;
};

/* pd's patterns as a list literal, Python's and TOML's alike: ["*.cu", "include/...", ...]. */
void kb_package_data_list(struct strbuf *sb, const struct kb_package_data *pd);

/*
 * setup.py with package_data for the folder: an entry at the head of a
 * package_data dict literal, else `package_data={...},` after the packages
 * argument (or first in the one setup() call); a packages list literal gets
 * the missing packages at its head (find_packages() without include= finds
 * them by their __init__.py). 0; KB_ENOTSUPPORTED with why otherwise (no or
 * several setup() calls, a **dict argument, packages or package_data that
 * are no literal, an entry for the package already).
 */
int kb_setup_package_data(struct strbuf *out, const char *text, size_t len, const struct kb_package_data *pd,
			  struct strbuf *why);

/*
 * pyproject.toml with `"<package>" = [patterns]` in [tool.setuptools.package-data]
 * (the table appended at the end when there is none) and, when
 * [tool.setuptools] lists its packages, the missing ones added there. Only
 * for a setuptools build (its build-backend, a [tool.setuptools] table, or
 * none named). 0; KB_ENOTSUPPORTED with why otherwise (another backend,
 * package-data set inline, a packages.find include/exclude that leaves the
 * packages out, an entry for the package already).
 */
int kb_pyproject_package_data(struct strbuf *out, const char *text, size_t len,
			      const struct kb_package_data *pd, struct strbuf *why);

/* Does pyproject.toml have a [tool.setuptools...] table (then it, not setup.py, is where package data goes)? */
bool kb_pyproject_configures_setuptools(const char *text, size_t len);

#endif
