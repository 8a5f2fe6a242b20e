#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "report/module_patch.h"

#include <setjmp.h>
#include <cmocka.h>

/*
 * The edits that wire a kernel into a repository's module
 * (report/module_patch.h): exactly the inserted lines and nothing else, in
 * the file's indentation and line endings, after the docstring, behind
 * decorators, past multi-line typed signatures; the import after the last
 * top-level import (a try block of imports counted whole) in the style of
 * the import it follows; refusals with the reason; setup.py's extensions.
 */

static const char *const linear_inputs[] = { "input0", "param:fc.weight", "param:fc.bias" };

static void spec_init(struct kb_module_patch_spec *s, const char *cls)
{
	memset(s, 0, sizeof(*s));
	s->path = "pkg/mlp.py";
	s->class_name = cls;
	s->op_module = "kernelbot.mlp.ops";
	s->alias = "_kb_mlp";
	s->op_function = "mlp";
	s->inputs = linear_inputs;
	s->nr_inputs = ARRAY_SIZE(linear_inputs);
}

/* Patch src; 0 expected: the result equals want exactly. */
static void expect(const char *src, const struct kb_module_patch_spec *s, const char *want)
{
	struct kb_module_patch p;
	struct strbuf why = STRBUF_INIT;
	int rc;

	kb_module_patch_init(&p);
	rc = kb_module_patch(&p, src, strlen(src), s, &why);
	if (rc)
		fprintf(stderr, "refused: %s\n", why.buf);
	assert_int_equal(rc, 0);
	if (strcmp(p.text.buf, want))
		fprintf(stderr, "got:\n%s\nwant:\n%s\n", p.text.buf, want);
	assert_string_equal(p.text.buf, want);
	kb_module_patch_release(&p);
	strbuf_release(&why);
}

/* Patch src; a refusal expected whose reason holds needle. */
static void refuse(const char *src, const struct kb_module_patch_spec *s, const char *needle)
{
	struct kb_module_patch p;
	struct strbuf why = STRBUF_INIT;

	kb_module_patch_init(&p);
	assert_int_equal(kb_module_patch(&p, src, strlen(src), s, &why), KB_ENOTSUPPORTED);
	if (!strstr(why.buf, needle))
		fprintf(stderr, "reason: %s\n", why.buf);
	assert_non_null(strstr(why.buf, needle));
	kb_module_patch_release(&p);
	strbuf_release(&why);
}

static void test_spaces_docstring_from_import(void **state)
{
	struct kb_module_patch_spec s;
	struct kb_module_patch p;
	struct strbuf why = STRBUF_INIT;
	const char *src =
		"\"\"\"An MLP.\"\"\"\n"
		"import torch\n"
		"from torch import nn\n"
		"\n"
		"\n"
		"class MLP(nn.Module):\n"
		"    def __init__(self):\n"
		"        super().__init__()\n"
		"        self.fc = nn.Linear(4, 8)\n"
		"\n"
		"    def forward(self, x):\n"
		"        \"\"\"y = gelu(fc(x)).\n"
		"\n"
		"        Two lines of docstring.\n"
		"        \"\"\"\n"
		"        return torch.nn.functional.gelu(self.fc(x))\n";

	(void)state;
	spec_init(&s, "MLP");
	expect(src, &s,
	       "\"\"\"An MLP.\"\"\"\n"
	       "import torch\n"
	       "from torch import nn\n"
	       "from kernelbot.mlp import ops as _kb_mlp\n"
	       "\n"
	       "\n"
	       "class MLP(nn.Module):\n"
	       "    def __init__(self):\n"
	       "        super().__init__()\n"
	       "        self.fc = nn.Linear(4, 8)\n"
	       "\n"
	       "    def forward(self, x):\n"
	       "        \"\"\"y = gelu(fc(x)).\n"
	       "\n"
	       "        Two lines of docstring.\n"
	       "        \"\"\"\n"
	       "        if _kb_mlp.supported(x, self.fc.weight, self.fc.bias) and _kb_mlp.configured(self):\n"
	       "            return _kb_mlp.mlp(x, self.fc.weight, self.fc.bias)\n"
	       "        return torch.nn.functional.gelu(self.fc(x))\n");
	/* the lines reported are the inserted ones */
	kb_module_patch_init(&p);
	assert_int_equal(kb_module_patch(&p, src, strlen(src), &s, &why), 0);
	assert_int_equal(p.import_line, 4);
	assert_int_equal(p.guard_line, 17);
	assert_string_equal(p.args.buf, "x, self.fc.weight, self.fc.bias");
	kb_module_patch_release(&p);
	strbuf_release(&why);
}

static void test_tabs_crlf_plain_import(void **state)
{
	struct kb_module_patch_spec s;

	(void)state;
	spec_init(&s, "MLP");
	expect("import torch\r\n"
	       "import torch.nn as nn\r\n"
	       "\r\n"
	       "class MLP(nn.Module):\r\n"
	       "\tdef forward(self, x):\r\n"
	       "\t\ty = self.fc(x)\r\n"
	       "\t\treturn y\r\n", &s,
	       "import torch\r\n"
	       "import torch.nn as nn\r\n"
	       "import kernelbot.mlp.ops as _kb_mlp\r\n"
	       "\r\n"
	       "class MLP(nn.Module):\r\n"
	       "\tdef forward(self, x):\r\n"
	       "\t\tif _kb_mlp.supported(x, self.fc.weight, self.fc.bias) and _kb_mlp.configured(self):\r\n"
	       "\t\t\treturn _kb_mlp.mlp(x, self.fc.weight, self.fc.bias)\r\n"
	       "\t\ty = self.fc(x)\r\n"
	       "\t\treturn y\r\n");
}

/* two-space indentation, a decorator, a typed multi-line signature, the line given at the decorator */
static void test_decorator_type_hints(void **state)
{
	struct kb_module_patch_spec s;

	(void)state;
	spec_init(&s, "MLP");
	s.forward_line = 6;
	expect("from typing import Optional\n"
	       "import torch\n"
	       "\n"
	       "class MLP(torch.nn.Module):\n"
	       "  # the forward pass\n"
	       "  @torch.jit.ignore\n"
	       "  def forward(self,\n"
	       "              x: torch.Tensor,  # (batch, features)\n"
	       "              scale: Optional[float] = None,\n"
	       "              mode: str = \"fast\") -> torch.Tensor:\n"
	       "    return self.fc(x)\n", &s,
	       "from typing import Optional\n"
	       "import torch\n"
	       "import kernelbot.mlp.ops as _kb_mlp\n"
	       "\n"
	       "class MLP(torch.nn.Module):\n"
	       "  # the forward pass\n"
	       "  @torch.jit.ignore\n"
	       "  def forward(self,\n"
	       "              x: torch.Tensor,  # (batch, features)\n"
	       "              scale: Optional[float] = None,\n"
	       "              mode: str = \"fast\") -> torch.Tensor:\n"
	       "    if scale is None and mode == \"fast\" and _kb_mlp.supported(x, self.fc.weight, self.fc.bias) and _kb_mlp.configured(self):\n"
	       "      return _kb_mlp.mlp(x, self.fc.weight, self.fc.bias)\n"
	       "    return self.fc(x)\n");
}

/* imports in a try block count whole; nested module paths; the class chosen by name */
static void test_try_imports_module_paths(void **state)
{
	static const char *const inputs[] = { "input0", "param:layers.0.weight", "buffer:stats.mean" };
	struct kb_module_patch_spec s;

	(void)state;
	spec_init(&s, "Net");
	s.inputs = inputs;
	s.nr_inputs = ARRAY_SIZE(inputs);
	expect("import torch\n"
	       "try:\n"
	       "    from apex import fused\n"
	       "except ImportError:  # no apex\n"
	       "    fused = None\n"
	       "\n"
	       "SIZE = 4\n"
	       "\n"
	       "class Other(torch.nn.Module):\n"
	       "    def forward(self, x):\n"
	       "        return x\n"
	       "\n"
	       "class Net(torch.nn.Module):\n"
	       "    def forward(self, x):\n"
	       "        return x\n", &s,
	       "import torch\n"
	       "try:\n"
	       "    from apex import fused\n"
	       "except ImportError:  # no apex\n"
	       "    fused = None\n"
	       "from kernelbot.mlp import ops as _kb_mlp\n"
	       "\n"
	       "SIZE = 4\n"
	       "\n"
	       "class Other(torch.nn.Module):\n"
	       "    def forward(self, x):\n"
	       "        return x\n"
	       "\n"
	       "class Net(torch.nn.Module):\n"
	       "    def forward(self, x):\n"
	       "        if _kb_mlp.supported(x, self.layers[0].weight, self.stats.mean) and _kb_mlp.configured(self):\n"
	       "            return _kb_mlp.mlp(x, self.layers[0].weight, self.stats.mean)\n"
	       "        return x\n");
}

/* a robust-kbench operator's inputs by name; a one-line docstring; no newline at the end */
static void test_named_inputs_no_final_newline(void **state)
{
	static const char *const inputs[] = { "b", "a" };
	struct kb_module_patch_spec s;

	(void)state;
	spec_init(&s, "Add");
	s.inputs = inputs;
	s.nr_inputs = ARRAY_SIZE(inputs);
	expect("class Add:\n"
	       "    def forward(self, a, b):\n"
	       "        'Sum.'\n"
	       "        return a + b", &s,
	       "import kernelbot.mlp.ops as _kb_mlp\n"
	       "class Add:\n"
	       "    def forward(self, a, b):\n"
	       "        'Sum.'\n"
	       "        if _kb_mlp.supported(b, a) and _kb_mlp.configured(self):\n"
	       "            return _kb_mlp.mlp(b, a)\n"
	       "        return a + b");
}

static void test_refusals(void **state)
{
	struct kb_module_patch_spec s;

	(void)state;
	spec_init(&s, "MLP");
	refuse("class MLP:\n    def forward(self, *args):\n        return args[0]\n", &s, "'*args'");
	refuse("class MLP:\n    def forward(self, x, **kwargs):\n        return x\n", &s, "'**kwargs'");
	refuse("class MLP:\n    def forward(self, x): return x\n", &s, "body on the def line");
	refuse("class MLP:\n    def forward(self, x, mask):\n        return x\n", &s,
	       "'mask' is no input of the kernel and has no default");
	refuse("class MLP:\n    def forward(self, x, dim=DIM):\n        return x\n", &s,
	       "default is not a literal");
	refuse("class MLP:\n    def forward(self):\n        return 1\n", &s, "'input0' is no parameter");
	refuse("class MLQ:\n    def forward(self, x):\n        return x\n", &s, "has no class MLP");
	refuse("class MLP:\n    def step(self, x):\n        return x\n", &s, "no forward method");
	refuse("import kernelbot.mlp.ops as _kb_mlp\nclass MLP:\n    def forward(self, x):\n        return x\n",
	       &s, "wired already");
	s.forward_line = 1;
	refuse("class MLP:\n    def forward(self, x):\n        return x\n", &s, "no class MLP around");
	s.forward_line = 2;
	refuse("class MLP:\n    x = 1\n    def forward(self, x):\n        return x\n", &s,
	       "line 2 of pkg/mlp.py is not `def forward`");
}

/* strings holding brackets, colons and quotes do not confuse the reading */
static void test_strings_in_signature(void **state)
{
	static const char *const inputs[] = { "input0" };
	struct kb_module_patch_spec s;

	(void)state;
	spec_init(&s, "M");
	s.inputs = inputs;
	s.nr_inputs = 1;
	expect("class M:\n"
	       "    def forward(self, x, tag=\"a):(b\") -> 'Tensor':  # note: (\n"
	       "        return x\n", &s,
	       "import kernelbot.mlp.ops as _kb_mlp\n"
	       "class M:\n"
	       "    def forward(self, x, tag=\"a):(b\") -> 'Tensor':  # note: (\n"
	       "        if tag == \"a):(b\" and _kb_mlp.supported(x) and _kb_mlp.configured(self):\n"
	       "            return _kb_mlp.mlp(x)\n"
	       "        return x\n");
}

static void test_setup_patch(void **state)
{
	static const char *const kernels[] = { "kernel.cu", "backward/kernel.cu" };
	static const char *const cpu_kernels[] = { "kernel.cpp" };
	static const char *const libs[] = { "cublasLt" };
	struct kb_build_ext e = { "kernelbot.mlp", "kernelbot/mlp", "cuda", kernels, 2, libs, 1 };
	struct strbuf out = STRBUF_INIT, why = STRBUF_INIT, twice = STRBUF_INIT;
	const char *src =
		"from setuptools import setup\n"
		"from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
		"\n"
		"setup(\n"
		"    name=\"pkg\",\n"
		"    ext_modules=[\n"
		"        CUDAExtension(\"pkg._C\", [\"csrc/ops.cu\"]),\n"
		"    ],\n"
		"    cmdclass={\"build_ext\": BuildExtension},\n"
		")\n";
	const char *one = "from torch.utils.cpp_extension import CppExtension\n"
			  "setup(ext_modules=[CppExtension('a', ['a.cpp'])])\n";

	(void)state;
	assert_int_equal(kb_setup_patch(&out, src, strlen(src), &e, &why), 0);
	assert_non_null(strstr(out.buf,
		"    ext_modules=[\n"
		"        CUDAExtension(\"kernelbot.mlp._kernel\", [\"kernelbot/mlp/kernel.cu\"], "
		"include_dirs=[\"kernelbot/mlp/include\"], extra_compile_args={\"nvcc\": [\"-O3\"]}, "
		"libraries=[\"cublasLt\"]),\n"
		"        CUDAExtension(\"kernelbot.mlp.backward._kernel\", [\"kernelbot/mlp/backward/kernel.cu\"], "));
	assert_non_null(strstr(out.buf, "        CUDAExtension(\"pkg._C\", [\"csrc/ops.cu\"]),\n    ],\n"));
	/* twice is refused: the build has it */
	strbuf_reset(&why);
	strbuf_add(&twice, out.buf, out.len);
	assert_int_equal(kb_setup_patch(&out, twice.buf, twice.len, &e, &why), KB_ENOTSUPPORTED);
	assert_non_null(strstr(why.buf, "builds kernelbot/mlp already"));
	/* the cpu backend wants CppExtension; a one-line list gets the element inline */
	strbuf_reset(&why);
	e.backend = "cpu";
	e.kernels = cpu_kernels;
	e.nr_kernels = 1;
	e.nr_libraries = 0;
	assert_int_equal(kb_setup_patch(&out, src, strlen(src), &e, &why), KB_ENOTSUPPORTED);
	assert_non_null(strstr(why.buf, "does not import CppExtension"));
	assert_int_equal(kb_setup_patch(&out, one, strlen(one), &e, &why), 0);
	assert_string_equal(out.buf, "from torch.utils.cpp_extension import CppExtension\n"
			    "setup(ext_modules=[CppExtension(\"kernelbot.mlp._kernel\", [\"kernelbot/mlp/kernel.cpp\"], "
			    "include_dirs=[\"kernelbot/mlp/include\"], extra_compile_args=[\"-O3\", \"-fopenmp\"], "
			    "extra_link_args=[\"-fopenmp\"]), CppExtension('a', ['a.cpp'])])\n");
	strbuf_reset(&why);
	assert_int_equal(kb_setup_patch(&out, "setup(name='x')\n", 16, &e, &why), KB_ENOTSUPPORTED);
	strbuf_release(&out);
	strbuf_release(&why);
	strbuf_release(&twice);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spaces_docstring_from_import),
		cmocka_unit_test(test_tabs_crlf_plain_import),
		cmocka_unit_test(test_decorator_type_hints),
		cmocka_unit_test(test_try_imports_module_paths),
		cmocka_unit_test(test_named_inputs_no_final_newline),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_strings_in_signature),
		cmocka_unit_test(test_setup_patch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
