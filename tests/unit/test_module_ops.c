/*
 * Operators in ordinary model code (issue 17, item 1): the static finder
 * of nn.Module classes and operator functions (jobs/pymodules.h), the
 * [operator NAME] sections of .kernelbot.ini with every message their
 * checks can give (jobs/repo_operators.h), and the KernelBench file made
 * from a section or from recorded shapes (jobs/modop.h). The generated
 * file is run by the harness in tests/python/test_module_operators.py.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "jobs/jobs.h"
#include "jobs/modop.h"
#include "jobs/pymodules.h"
#include "jobs/repo_operators.h"

#include <setjmp.h>
#include <cmocka.h>

/* --- the finder --- */

static const struct kb_pyop *scan_find(struct kb_pyops *ops, const char *text, const char *name)
{
	kb_pyops_scan(ops, text, strlen(text));
	return kb_pyops_find(ops, name);
}

static void test_finder_bases(void **state)
{
	struct kb_pyops ops = KB_PYOPS_INIT;
	struct strbuf sig = STRBUF_INIT;
	const struct kb_pyop *op;
	const char *src =
		"import torch\n"
		"from torch import nn\n"
		"import torch.nn as tnn\n"
		"\n"
		"class Plain(nn.Module):\n"
		"    def __init__(self, dim: int, eps=1e-6):\n"
		"        super().__init__()\n"
		"\n"
		"    def forward(self, x: torch.Tensor,\n"
		"                mask=None):  # a comment (with parens\n"
		"        return x\n"
		"\n"
		"class Full(torch.nn.Module):\n"
		"    def forward(self, x): return x\n"
		"class Aliased(tnn.Module, metaclass=Meta):\n"
		"    pass\n"
		"class Child(Plain):\n"
		"    pass\n"
		"class GrandChild(Child):\n"
		"    def forward(self, a, b, *args, scale=2.0, **kw):\n"
		"        return a\n"
		"class NotModule(object):\n"
		"    def forward(self, x):\n"
		"        return x\n"
		"class Linearish(nn.Linear):\n"
		"    pass\n"
		"class Tensorish(nn.Parameter):\n"
		"    pass\n";

	kb_pyops_scan(&ops, src, strlen(src));
	op = kb_pyops_find(&ops, "Plain");
	assert_non_null(op);
	assert_true(op->is_module);
	assert_int_equal(op->line, 5);
	assert_int_equal(op->end_line, 11);
	assert_int_equal(op->forward_line, 9);
	kb_pyop_signature(&sig, op, false);
	assert_string_equal(sig.buf, "(x: torch.Tensor, mask=None)");
	kb_pyop_signature(&sig, op, true);
	assert_string_equal(sig.buf, "(dim: int, eps=1e-6)");
	assert_true(kb_pyops_find(&ops, "Full")->is_module);
	assert_true(kb_pyops_find(&ops, "Aliased")->is_module);
	/* a subclass of a module of the file is one, and inherits forward and __init__ */
	op = kb_pyops_find(&ops, "Child");
	assert_true(op->is_module);
	assert_int_equal(op->forward_line, 9);
	kb_pyop_signature(&sig, op, true);
	assert_string_equal(sig.buf, "(dim: int, eps=1e-6)");
	op = kb_pyops_find(&ops, "GrandChild");
	assert_true(op->is_module);
	kb_pyop_signature(&sig, op, false);
	assert_string_equal(sig.buf, "(a, b, *args, scale=2.0, **kw)");
	assert_false(kb_pyops_find(&ops, "NotModule")->is_module);
	/* torch.nn's module classes are modules, its tensors are not */
	assert_true(kb_pyops_find(&ops, "Linearish")->is_module);
	assert_false(kb_pyops_find(&ops, "Tensorish")->is_module);
	kb_pyops_release(&ops);
	strbuf_release(&sig);
}

static void test_finder_imports(void **state)
{
	struct kb_pyops ops = KB_PYOPS_INIT;

	/* bare Module only after it was imported from torch.nn (or an alias of it) */
	assert_false(scan_find(&ops, "class A(Module):\n    def forward(self, x): return x\n", "A")->is_module);
	assert_true(scan_find(&ops, "from torch.nn import Module\nclass A(Module):\n    pass\n", "A")->is_module);
	assert_true(scan_find(&ops, "from torch.nn import (Linear,\n    Module as M)\nclass A(M):\n    pass\n",
			      "A")->is_module);
	assert_false(scan_find(&ops, "from mylib import Module\nclass A(Module):\n    pass\n", "A")->is_module);
	/* nn bound to something else than torch.nn */
	assert_false(scan_find(&ops, "import mylib.nn as nn\nclass A(nn.Module):\n    pass\n", "A")->is_module);
	assert_true(scan_find(&ops, "import torch as T\nclass A(T.nn.Module):\n    pass\n", "A")->is_module);
	/* a relative import binds nothing of torch */
	assert_false(scan_find(&ops, "from . import Module\nclass A(Module):\n    pass\n", "A")->is_module);
	kb_pyops_release(&ops);
}

static void test_finder_nesting(void **state)
{
	struct kb_pyops ops = KB_PYOPS_INIT;
	const struct kb_pyop *op;
	const char *src =
		"import torch.nn as nn\n"
		"class Outer:\n"
		"    class Inner(nn.Module):\n"
		"        def forward(self, x):\n"
		"            return x\n"
		"    def helper(self):\n"
		"        class Local(nn.Module):\n"
		"            def forward(self, y): return y\n"
		"        return Local\n"
		"def factory():\n"
		"    class Hidden(nn.Module):\n"
		"        pass\n"
		"    return Hidden\n"
		"class After(Outer.Inner):\n"
		"\tdef forward(self, z):\n"
		"\t\treturn z\n";

	kb_pyops_scan(&ops, src, strlen(src));
	op = kb_pyops_find(&ops, "Outer.Inner");
	assert_non_null(op);
	assert_true(op->is_module);
	assert_int_equal(op->line, 3);
	assert_int_equal(op->end_line, 5);
	assert_int_equal(op->forward_line, 4);
	/* classes inside a def cannot be imported: not found */
	assert_null(kb_pyops_find(&ops, "Local"));
	assert_null(kb_pyops_find(&ops, "Outer.helper.Local"));
	assert_null(kb_pyops_find(&ops, "Hidden"));
	assert_false(kb_pyops_find(&ops, "Outer")->is_module);
	/* a base named by its qualified name; tabs indent */
	op = kb_pyops_find(&ops, "After");
	assert_true(op->is_module);
	assert_int_equal(op->forward_line, 15);
	assert_string_equal(op->params.v[0], "z");
	/* helper is a method, factory a function */
	assert_null(kb_pyops_find(&ops, "helper"));
	assert_true(kb_pyops_find(&ops, "factory")->is_function);
	kb_pyops_release(&ops);
}

static void test_finder_strings_and_oddities(void **state)
{
	struct kb_pyops ops = KB_PYOPS_INIT;
	const struct kb_pyop *op;
	const char *src =
		"import torch.nn as nn\n"
		"DOC = \"\"\"\n"
		"class InDocstring(nn.Module):\n"
		"    def forward(self, x): return x\n"
		"\"\"\"\n"
		"S = 'class InString(nn.Module):'\n"
		"# class InComment(nn.Module):\n"
		"class Real(nn.Module):\n"
		"    '''A docstring\n"
		"class AlsoInDocstring(nn.Module):\n"
		"'''\n"
		"    x = (1,\n"
		"2)\n"
		"    def forward(self, x,\n"
		"# a comment line inside the signature\n"
		"            y=\"a, b) : weird\",  # ) more\n"
		"            z=(1, 2)) -> 'Tensor':\n"
		"        return x\n"
		"class Continued \\\n"
		"    (nn.Module):\n"
		"    def forward(self, q): return q\n"
		"class  Spaced ( nn . Module ) :\n"
		"    pass\n"
		"async def not_an_operator(x):\n"
		"    class Inside(nn.Module):\n"
		"        pass\n"
		"class Unterminated(nn.Module):\n"
		"    s = 'no end\n"
		"    def forward(self, w): return w\n";

	kb_pyops_scan(&ops, src, strlen(src));
	assert_null(kb_pyops_find(&ops, "InDocstring"));
	assert_null(kb_pyops_find(&ops, "InString"));
	assert_null(kb_pyops_find(&ops, "InComment"));
	assert_null(kb_pyops_find(&ops, "AlsoInDocstring"));
	assert_null(kb_pyops_find(&ops, "Inside"));
	assert_null(kb_pyops_find(&ops, "not_an_operator"));
	op = kb_pyops_find(&ops, "Real");
	assert_non_null(op);
	assert_true(op->is_module);
	/* the docstring and the bracket spanning lines at column 0 did not close the class */
	assert_int_equal(op->forward_line, 14);
	assert_int_equal(op->params.nr, 3);
	assert_string_equal(op->params.v[1], "y=\"a, b) : weird\"");
	assert_string_equal(op->params.v[2], "z=(1, 2)");
	op = kb_pyops_find(&ops, "Continued");
	assert_true(op->is_module);
	assert_int_equal(op->forward_line, 21);
	assert_true(kb_pyops_find(&ops, "Spaced")->is_module);
	op = kb_pyops_find(&ops, "Unterminated");
	assert_true(op->is_module);
	assert_int_equal(op->forward_line, 29);
	kb_pyops_release(&ops);
}

static void test_finder_functions(void **state)
{
	struct kb_pyops ops = KB_PYOPS_INIT;
	const struct kb_pyop *op;
	const char *src =
		"import kernelbot\n"
		"from kernelbot import operator as kop\n"
		"@kernelbot.operator\n"
		"def fused_gelu(x, bias):\n"
		"    return x\n"
		"@kernelbot.operator(name='y')\n"
		"def with_call(x): return x\n"
		"@kop\n"
		"def aliased(x): return x\n"
		"@other.decorator\n"
		"def plain(x, y=1): return x\n"
		"class K:\n"
		"    @kernelbot.operator\n"
		"    def method(self, x): return x\n"
		"    @staticmethod\n"
		"    def forward(a, b): return a\n";

	kb_pyops_scan(&ops, src, strlen(src));
	op = kb_pyops_find(&ops, "fused_gelu");
	assert_true(op->is_function && op->marked);
	assert_int_equal(op->line, 4);
	assert_int_equal(op->params.nr, 2);
	assert_true(kb_pyops_find(&ops, "with_call")->marked);
	assert_true(kb_pyops_find(&ops, "aliased")->marked);
	op = kb_pyops_find(&ops, "plain");
	assert_true(op->is_function);
	assert_false(op->marked);
	assert_null(kb_pyops_find(&ops, "method"));
	/* a static forward keeps its first parameter */
	op = kb_pyops_find(&ops, "K");
	assert_int_equal(op->params.nr, 2);
	assert_string_equal(op->params.v[0], "a");
	kb_pyops_release(&ops);
}

static void test_param_names(void **state)
{
	struct strbuf n = STRBUF_INIT;
	bool req;
	int kind;

	kb_pyparam_name(&n, "x: torch.Tensor", &req, &kind);
	assert_string_equal(n.buf, "x");
	assert_true(req);
	assert_int_equal(kind, 0);
	kb_pyparam_name(&n, "mask: Optional[Tensor] = None", &req, &kind);
	assert_string_equal(n.buf, "mask");
	assert_false(req);
	kb_pyparam_name(&n, "*args", &req, &kind);
	assert_string_equal(n.buf, "args");
	assert_int_equal(kind, 1);
	kb_pyparam_name(&n, "*", &req, &kind);
	assert_int_equal(kind, 1);
	kb_pyparam_name(&n, "**kw", &req, &kind);
	assert_int_equal(kind, 2);
	kb_pyparam_name(&n, "/", &req, &kind);
	assert_int_equal(kind, 3);
	strbuf_release(&n);
}

/* --- .kernelbot.ini's [operator NAME] --- */

static struct kb_config cfg;

static int cfg_setup(void **state)
{
	kb_config_init(&cfg);
	return 0;
}

static int cfg_teardown(void **state)
{
	kb_config_release(&cfg);
	return 0;
}

/* Parse text; why gets the messages. */
static void parse(struct kb_repo_config *rc, struct strbuf *why, const char *text)
{
	strbuf_reset(why);
	assert_int_equal(kb_repo_config_parse(rc, text, &cfg, why), 0);
}

static void test_ini_good(void **state)
{
	struct kb_repo_config rc;
	struct strbuf why = STRBUF_INIT;
	const struct kb_repo_operator *op;

	parse(&rc, &why,
	      "[operator mlp]\n"
	      "module = models/mlp.py:FusedMLP\n"
	      "init = H, eps=1e-6, act='gelu', dims=(4, H), flag=True\n"
	      "inputs = float32[B,H], [H], 3, -0.5\n"
	      "inputs.2 = bfloat16[4,\n"
	      "   H], float32[H], 1, 2.0\n"
	      "sizes = B=8|32, H=4096\n"
	      "dtypes = float32, bfloat16\n"
	      "requires_grad = true, false, false, false\n"
	      "tests = tests/test_mlp.py::test_forward, tests/test_mlp.py::TestX::test_y[1,2]\n"
	      "[operator gelu]\n"
	      "function = pkg/ops.py:fused_gelu\n"
	      "inputs = float16[1024]\n");
	assert_int_equal(rc.nr_ops, 2);
	op = &rc.ops[0];
	assert_false(op->bad);
	assert_false(op->needs_inputs);
	assert_string_equal(op->name, "mlp");
	assert_string_equal(op->path, "models/mlp.py");
	assert_string_equal(op->target, "FusedMLP");
	assert_false(op->is_function);
	assert_int_equal(op->init.nr, 5);
	assert_string_equal(op->init.v[0], "H");
	assert_string_equal(op->init.v[1], "eps=1e-6");
	assert_string_equal(op->init.v[2], "act='gelu'");
	assert_string_equal(op->init.v[3], "dims=(4, H)");
	assert_int_equal(op->nr_forms, 2);
	assert_int_equal(op->forms[0].nr, 4);
	assert_true(op->forms[0].args[0].tensor);
	assert_string_equal(op->forms[0].args[0].dtype, "float32");
	assert_int_equal(op->forms[0].args[0].rank, 2);
	assert_string_equal(op->forms[0].args[0].dims[0].sym, "B");
	assert_string_equal(op->forms[0].args[1].dtype, "float32"); /* the default */
	assert_false(op->forms[0].args[2].tensor);
	assert_string_equal(op->forms[0].args[2].value, "3");
	assert_string_equal(op->forms[0].args[3].value, "-0.5");
	/* the continuation line of inputs.2 */
	assert_int_equal(op->forms[1].args[0].rank, 2);
	assert_int_equal(op->forms[1].args[0].dims[0].value, 4);
	assert_string_equal(op->forms[1].args[0].dims[1].sym, "H");
	assert_int_equal(op->nr_sizes, 2);
	assert_int_equal(op->sizes[0].nr, 2);
	assert_int_equal(op->sizes[0].values[1], 32);
	assert_int_equal(op->nr_dtypes, 2);
	assert_true(op->requires_grad);
	assert_true(op->forms[0].args[0].requires_grad);
	assert_false(op->forms[0].args[1].requires_grad);
	assert_int_equal(op->tests.nr, 2);
	assert_string_equal(op->tests.v[1], "tests/test_mlp.py::TestX::test_y[1,2]");
	/* inputs and tests both: the inputs are used, and that is said */
	assert_non_null(strstr(why.buf, "[operator mlp] tests: 'inputs' gives the shapes already"));
	assert_true(rc.ops[1].is_function);
	assert_string_equal(rc.ops[1].target, "fused_gelu");
	kb_repo_config_release(&rc);
	strbuf_release(&why);
}

struct bad_case {
	const char *section; /* the body of [operator x] */
	const char *message; /* what why must say */
	bool bad;            /* the section is left out (else a warning) */
};

static void test_ini_messages(void **state)
{
	static const struct bad_case cases[] = {
		{ "inputs = [4]\n", "[operator x]: no 'module = path.py:Class' or 'function = path.py:function'; "
		  "the operator is left out", true },
		{ "module = a.py:A\nfunction = a.py:f\n", "both 'module' and 'function' are given", true },
		{ "module = a.py\n", "[operator x] module: 'a.py' is not path.py:Class", true },
		{ "module = a.txt:A\n", "'a.txt:A' is not path.py:Class", true },
		{ "module = a.py:1A\n", "'a.py:1A' is not path.py:Class", true },
		{ "module = ../a.py:A\n", "[operator x] module: '../a.py' is not a path in the repository", true },
		{ "module = /abs/a.py:A\n", "'/abs/a.py' is not a path in the repository", true },
		{ "function = a.py:K.f\n", "[operator x] function: 'K.f' is not a module-level function", true },
		{ "function = a.py:f\ninit = 1\ninputs = [4]\n", "[operator x] init: a function is not constructed", true },
		{ "module = a.py:A\nmodule = b.py:B\ninputs = [4]\n", "[operator x] module: given twice; the first value is used", false },
		{ "module = a.py:A\ninputs = float33[4]\n", "[operator x] inputs: 'float33' is not a dtype", true },
		{ "module = a.py:A\ninputs = float32(4)\n", "'float32(4)' is not dtype[dims] (float32[8,4096]) or a number", true },
		{ "module = a.py:A\ninputs = [4,0]\n", "'[4,0]': a dimension is not a size from 1 to 2^31", true },
		{ "module = a.py:A\ninputs = [4,99999999999]\n", "a dimension is not a size from 1 to 2^31", true },
		{ "module = a.py:A\ninputs = [1,2,3,4,5,6,7,8,9]\n", "'[1,2,3,4,5,6,7,8,9]' has more than 8 dimensions", true },
		{ "module = a.py:A\ninputs = [4] x\n", "'[4] x' has more after its ']'", true },
		{ "module = a.py:A\ninputs = [4 4]\n", "the dims are sizes between commas", true },
		{ "module = a.py:A\ninputs = [4],, [4]\n", "[operator x] inputs: an empty item", true },
		{ "module = a.py:A\ninputs = 1e999\n", "'1e999' is not a number", true },
		{ "module = a.py:A\ninputs = 007\n", "'007' is not a number", true },
		{ "module = a.py:A\ninputs =\n", "[operator x] inputs: no value", true },
		{ "module = a.py:A\ninputs = [N]\n", "[operator x] inputs: the size 'N' is not given in 'sizes'", true },
		{ "module = a.py:A\ninit = N\ninputs = [4]\n", "[operator x] init: the size 'N' is not given in 'sizes'", true },
		{ "module = a.py:A\ninputs = [4]\ninputs.1 = [4]\n", "[operator x] inputs.1: 'inputs' is given too", true },
		{ "module = a.py:A\ninputs = [4]\ninputs.17 = [4]\n", "[operator x] inputs.17: shape sets are inputs, inputs.2 ... inputs.16", true },
		{ "module = a.py:A\ninputs = [4]\ninit = x=1, x=2\n", "[operator x] init: the keyword 'x' is given twice", true },
		{ "module = a.py:A\ninputs = [4]\ninit = x=1, 2\n", "the positional argument '2' follows a keyword argument", true },
		{ "module = a.py:A\ninputs = [4]\ninit = open('f')\n", "'open('f')' is not a Python literal", true },
		{ "module = a.py:A\ninputs = [4]\ninit = 'a\\\\b'\n", "is not a Python literal", true },
		{ "module = a.py:A\ninputs = [4]\ninit = ((((1,),),),)\n", "is not a Python literal", true },
		{ "module = a.py:A\ninputs = [4]\ninit = 1 2\n", "'1 2' is not a Python literal", true },
		{ "module = a.py:A\ninputs = [B]\nsizes = B\n", "[operator x] sizes: 'B' is not NAME=SIZE", true },
		{ "module = a.py:A\ninputs = [B]\nsizes = class=4\n", "'class=4' is not NAME=SIZE", true },
		{ "module = a.py:A\ninputs = [B]\nsizes = KB_SET=4\n", "'KB_SET=4' is not NAME=SIZE", true },
		{ "module = a.py:A\ninputs = [B]\nsizes = B=4, B=5\n", "[operator x] sizes: the size 'B' is given twice", true },
		{ "module = a.py:A\ninputs = [B]\nsizes = B=four\n", "'B=four': a size is a whole number from 1 to 2^31", true },
		{ "module = a.py:A\ninputs = [B]\nsizes = B=1|2|3|4|5|6|7|8|9\n", "has more than 8 alternatives", true },
		{ "module = a.py:A\ninputs = [4]\nsizes = B=4\n", "[operator x] sizes: 'B' is used by no input and no init argument; ignored", false },
		{ "module = a.py:A\ninputs = [4]\ndtypes = int64\n", "[operator x] dtypes: 'int64' is not a floating-point dtype", true },
		{ "module = a.py:A\ninputs = [4]\ndtypes = float16, float16\n", "[operator x] dtypes: 'float16' is given twice", true },
		{ "module = a.py:A\ninputs = [4]\ndtypes = float16, float32, float64, bfloat16, float16\n", "is given twice", true },
		{ "module = a.py:A\ntests = t.py\ndtypes = float16\n", "[operator x] dtypes: there are no 'inputs' to give these dtypes; ignored", false },
		{ "module = a.py:A\ninputs = [4]\nrequires_grad = maybe\n", "[operator x] requires_grad: 'maybe' is not true or false", true },
		{ "module = a.py:A\ninputs = [4], [4]\nrequires_grad = true, false, true\n", "3 values for 2 inputs (shape set 1)", true },
		{ "module = a.py:A\ninputs = int64[4], [4]\nrequires_grad = true, false\n", "input 1 is not a floating-point tensor", true },
		{ "module = a.py:A\ntests = -x\n", "[operator x] tests: '-x' is not a pytest selection", true },
		{ "module = a.py:A\ntests = ../t.py\n", "'../t.py' is not a pytest selection", true },
		{ "module = a.py:A\ntests = t.py::\n", "'t.py::' is not a pytest selection", true },
		{ "module = a.py:A\ntests = t.py::test_a[x y]\n", "is not a pytest selection", true },
		{ "module = a.py:A\ntests = a.py, b.py, c.py, d.py, e.py, f.py, g.py, h.py, i.py\n",
		  "[operator x] tests: more than 8 selections", true },
		{ "module = a.py:A\n", "[operator x]: no 'inputs' and no 'tests': kernelbot has nothing to call A with", false },
		{ "module = a.py:A\ninput = [4]\ninputs = [4]\n", "[operator x] input: unknown key (did you mean 'inputs'?); ignored", false },
		{ "module = a.py:A\ncolour = blue\ninputs = [4]\n", "[operator x] colour: unknown key; ignored", false },
		{ "module = a.py:A\ninputs = [B], [C]\nsizes = B=1|2|3|4|5|6|7|8, C=1|2|3|4|5\n",
		  "[operator x] sizes: the inputs, dtypes and sizes make more than 32 shape sets; the first 32 are used", false },
	};
	struct kb_repo_config rc;
	struct strbuf why = STRBUF_INIT, text = STRBUF_INIT;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		strbuf_reset(&text);
		strbuf_addf(&text, "[operator x]\n%s", cases[i].section);
		parse(&rc, &why, text.buf);
		if (!strstr(why.buf, cases[i].message))
			fail_msg("case %zu: '%s' not in:\n%s", i, cases[i].message, why.buf);
		assert_int_equal(rc.nr_ops, 1);
		if (rc.ops[0].bad != cases[i].bad)
			fail_msg("case %zu: bad is %d, wanted %d (%s)", i, rc.ops[0].bad, cases[i].bad, why.buf);
		if (cases[i].bad)
			assert_non_null(strstr(why.buf, "; the operator is left out"));
		kb_repo_config_release(&rc);
	}
	/* sections: a bad name, none, the same operator twice */
	parse(&rc, &why, "[operator a b]\nmodule = a.py:A\ninputs = [4]\n");
	assert_non_null(strstr(why.buf, "[operator a b]: the name 'a b' is not 1 to 48 letters"));
	assert_true(rc.ops[0].bad);
	kb_repo_config_release(&rc);
	parse(&rc, &why, "[operator]\nmodule = a.py:A\n");
	assert_non_null(strstr(why.buf, "[operator] has no name: a section is [operator NAME]; ignored"));
	assert_int_equal(rc.nr_ops, 0);
	kb_repo_config_release(&rc);
	parse(&rc, &why, "[operator one]\nmodule = a.py:A\ninputs = [4]\n[operator two]\nmodule = a.py:A\ninputs = [8]\n");
	assert_non_null(strstr(why.buf, "[operator two] module: a.py:A is the operator of [operator one] already"));
	assert_false(rc.ops[0].bad);
	assert_true(rc.ops[1].bad);
	kb_repo_config_release(&rc);
	strbuf_release(&why);
	strbuf_release(&text);
}

static void test_job_path(void **state)
{
	char *path, *target;

	assert_true(kb_repo_operator_split("models/mlp.py:FusedMLP", &path, &target));
	assert_string_equal(path, "models/mlp.py");
	assert_string_equal(target, "FusedMLP");
	free(path);
	free(target);
	assert_true(kb_repo_operator_split("a.py:Outer.Inner", &path, &target));
	assert_string_equal(target, "Outer.Inner");
	free(path);
	free(target);
	/* a KernelBench file, a folder, near misses: not a module operator */
	assert_false(kb_repo_operator_split("ops/relu.py", &path, &target));
	assert_null(path);
	assert_false(kb_repo_operator_split("tasks/softmax", &path, &target));
	assert_false(kb_repo_operator_split("a.py:", &path, &target));
	assert_false(kb_repo_operator_split("a.py:A.", &path, &target));
	assert_false(kb_repo_operator_split("a.py:A-B", &path, &target));
	assert_false(kb_repo_operator_split(".py:A", &path, &target));
}

/* --- the generated operator file --- */

static void test_modop_section(void **state)
{
	struct kb_repo_config rc;
	struct strbuf why = STRBUF_INIT, text = STRBUF_INIT;
	struct kb_modop m = KB_MODOP_INIT;
	struct kb_pyops ops = KB_PYOPS_INIT;
	struct kb_modop_origin o;
	const char *src = "import torch.nn as nn\nclass Outer:\n    class Norm(nn.Module):\n"
			  "        def __init__(self, hidden, eps=1e-6):\n            super().__init__()\n"
			  "        def forward(self, x, w):\n            return x\n";

	parse(&rc, &why, "[operator norm]\nmodule = src/pkg/norm.py:Outer.Norm\ninit = 4096, eps=1e-5\n"
	      "inputs = float32[B,4096], [4096]\ninputs.2 = float32[B,3,4096], [4096]\n"
	      "dtypes = float32, bfloat16\nsizes = B=8|2\n");
	assert_false(rc.ops[0].bad);
	assert_int_equal(kb_modop_from_section(&m, &rc.ops[0]), 0);
	/* 2 inputs x 2 dtypes = 4 forms, x 2 sizes = 8 sets, every form first */
	assert_int_equal(m.nr_forms, 4);
	assert_int_equal(m.nr_sets, 8);
	assert_int_equal(m.sets[0].form, 0);
	assert_int_equal(m.sets[3].form, 3);
	assert_int_equal(m.sets[3].values[0], 8);
	assert_int_equal(m.sets[4].form, 0);
	assert_int_equal(m.sets[4].values[0], 2);
	assert_string_equal(m.forms[1].inputs.args[0].dtype, "bfloat16");
	assert_string_equal(m.forms[1].inputs.args[1].dtype, "bfloat16");
	/* the literal 4096 is the init's hidden: a constant of that name, in the init too */
	kb_pyops_scan(&ops, src, strlen(src));
	kb_modop_symbolize(&m, kb_pyops_find(&ops, "Outer.Norm"));
	assert_int_equal(m.nr_syms, 2);
	assert_string_equal(m.syms[1], "hidden");
	assert_int_equal(m.sets[5].values[1], 4096);
	assert_string_equal(m.forms[0].init.v[0], "hidden");
	assert_string_equal(m.forms[0].inputs.args[0].dims[1].sym, "hidden");
	assert_int_equal(m.forms[1].inputs.args[0].dims[1].sym[0], '\0'); /* other forms stay literal */
	o = (struct kb_modop_origin){ .op = &rc.ops[0], .head = "0123456789abcdef", .source = src,
				      .found = kb_pyops_find(&ops, "Outer.Norm") };
	kb_modop_render(&text, &m, &o);
	assert_true(!strncmp(text.buf, KB_MODOP_HEADER "\n", strlen(KB_MODOP_HEADER) + 1));
	assert_non_null(strstr(text.buf, "of src/pkg/norm.py at 0123456789abcdef.\n"));
	assert_non_null(strstr(text.buf, "from pkg.norm import Outer as _Outer  # noqa: E402\n"
					 "_Target = _Outer.Norm\n"));
	assert_non_null(strstr(text.buf, "\nKB_SET = 0\nB = 8\nhidden = 4096\nKB_SHAPE_SETS = [\n"
					 "    {\"KB_SET\": 1, \"B\": 8, \"hidden\": 4096},\n"));
	assert_non_null(strstr(text.buf, "def init_kwargs():\n    return {\"eps\": 1e-5}\n"));
	assert_non_null(strstr(text.buf, "def get_init_inputs():\n    if KB_SET == 3:\n        return [4096]\n"));
	assert_non_null(strstr(text.buf, "    return [_tensor(\"float32\", (B, hidden)), _tensor(\"float32\", (hidden,))]\n"));
	assert_non_null(strstr(text.buf, "    if KB_SET == 3:\n        return [_tensor(\"bfloat16\", (B, 3, 4096)), "
					 "_tensor(\"bfloat16\", (4096,))]\n"));
	assert_non_null(strstr(text.buf, "# |         def forward(self, x, w):\n"));
	assert_null(strstr(text.buf, "kernelbot as _kb")); /* the stand-in is for functions */
	kb_modop_release(&m);
	kb_repo_config_release(&rc);

	/* a function, in a folder that is no Python name: loaded by its path */
	parse(&rc, &why, "[operator g]\nfunction = my-ops/g\"x.py:gelu\ninputs = float16[B]\nsizes = B=1024\n");
	assert_false(rc.ops[0].bad);
	assert_int_equal(kb_modop_from_section(&m, &rc.ops[0]), 0);
	o = (struct kb_modop_origin){ .op = &rc.ops[0], .head = "" };
	kb_modop_render(&text, &m, &o);
	assert_non_null(strstr(text.buf, "_os.fsdecode(b\"my-ops/g\\x22x.py\")"));
	assert_non_null(strstr(text.buf, "_target = _module.gelu\n"));
	assert_non_null(strstr(text.buf, "import kernelbot as _kb"));
	assert_non_null(strstr(text.buf, "def forward(self, *args):\n        return _target(*args)\n"));
	assert_non_null(strstr(text.buf, "def get_init_inputs():\n    return []\n"));
	assert_null(strstr(text.buf, "init_kwargs"));
	kb_modop_release(&m);
	kb_repo_config_release(&rc);
	/* no inputs: nothing to make from the section */
	parse(&rc, &why, "[operator t]\nmodule = a.py:A\ntests = t.py\n");
	assert_int_equal(kb_modop_from_section(&m, &rc.ops[0]), -1);
	kb_repo_config_release(&rc);
	kb_pyops_release(&ops);
	strbuf_release(&why);
	strbuf_release(&text);
}

static const char *const good_record =
	"{\"version\": 1, \"collected\": 3, \"passed\": 2, \"failed\": 1, \"skipped\": 0, \"errors\": 0,"
	" \"calls\": 9, \"import_error\": null, \"records\": ["
	"{\"count\": 5, \"init\": {\"args\": [[\"int\", 64]], \"kwargs\": {\"eps\": [\"float\", \"1e-06\"],"
	"  \"act\": [\"str\", \"gelu\"], \"dims\": [\"tuple\", [[\"int\", 2]]], \"on\": [\"bool\", true]}},"
	" \"inputs\": [{\"tensor\": {\"shape\": [4, 64], \"dtype\": \"float32\", \"requires_grad\": true}},"
	"  [\"float\", \"0.5\"]], \"unbound\": false},"
	"{\"count\": 2, \"init\": {\"args\": [[\"object\", \"Config\"]], \"kwargs\": {}},"
	" \"inputs\": [], \"unbound\": false},"
	"{\"count\": 1, \"init\": {\"args\": [[\"int\", 8]], \"kwargs\": {}},"
	" \"inputs\": [{\"tensor\": {\"shape\": [2, 8], \"dtype\": \"complex64\"}}], \"unbound\": false},"
	"{\"count\": 1, \"init\": {\"args\": [[\"int\", 8]], \"kwargs\": {}}, \"inputs\": [], \"unbound\": true}"
	"]}";

static void test_modop_record(void **state)
{
	struct kb_repo_config rc;
	struct kb_modop m = KB_MODOP_INIT;
	struct strbuf why = STRBUF_INIT;
	const struct kb_repo_operator *op;

	parse(&rc, &why, "[operator a]\nmodule = a.py:A\ntests = t.py\n");
	op = &rc.ops[0];
	strbuf_reset(&why);
	assert_int_equal(kb_modop_from_record(&m, good_record, strlen(good_record), 8, op, &why), 0);
	assert_int_equal(m.nr_forms, 1);
	assert_int_equal(m.nr_sets, 1);
	assert_int_equal(m.recorded_calls, 9);
	assert_int_equal(m.forms[0].init.nr, 5);
	assert_string_equal(m.forms[0].init.v[0], "64");
	assert_string_equal(m.forms[0].init.v[1], "eps=1e-06");
	assert_string_equal(m.forms[0].init.v[2], "act='gelu'");
	assert_string_equal(m.forms[0].init.v[3], "dims=(2,)");
	assert_string_equal(m.forms[0].init.v[4], "on=True");
	assert_int_equal(m.forms[0].inputs.nr, 2);
	assert_true(m.forms[0].inputs.args[0].requires_grad);
	assert_string_equal(m.forms[0].inputs.args[1].value, "0.5");
	assert_non_null(strstr(why.buf, "3 tests selected: 2 passed, 1 failed, 0 skipped, 0 errors\n"));
	assert_non_null(strstr(why.buf, "left out: 2 calls where the module was built with an argument "
				       "that is not a literal (Config)\n"));
	assert_non_null(strstr(why.buf, "left out: 1 call where forward was called with a tensor of a "
				       "dtype the verifier does not take\n"));
	assert_non_null(strstr(why.buf, "left out: 1 call where forward was called with arguments that "
				       "cannot be given by position\n"));
	assert_non_null(strstr(why.buf, "9 calls of A recorded, 4 distinct; the 1 most frequent are"));
	/* the init the wiring check builds the module with: JSON made from the checked values */
	assert_string_equal(kb_modop_recorded_init(&m), "{\"args\":[64],\"kwargs\":{\"eps\":1e-06,"
			    "\"act\":\"gelu\",\"dims\":[2],\"on\":true}}");
	kb_modop_release(&m);
	kb_repo_config_release(&rc);

	/* a section's init replaces the recorded one */
	parse(&rc, &why, "[operator a]\nmodule = a.py:A\ninit = 7\ntests = t.py\n");
	assert_int_equal(kb_modop_from_record(&m, good_record, strlen(good_record), 1, &rc.ops[0], &why), 0);
	assert_int_equal(m.forms[0].init.nr, 1);
	assert_string_equal(m.forms[0].init.v[0], "7");
	assert_null(kb_modop_recorded_init(&m)); /* the wiring builds it with the section's */
	kb_modop_release(&m);
	kb_repo_config_release(&rc);
	strbuf_release(&why);
}

/* Two inits: the one with the most calls among the searched shape sets is the wiring's. */
static void test_modop_recorded_init(void **state)
{
	static const char *const rec =
		"{\"version\": 1, \"collected\": 2, \"passed\": 2, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		" \"records\": ["
		"{\"count\": 5, \"init\": {\"args\": [[\"float\", \"0.5\"]], \"kwargs\": {}},"
		" \"inputs\": [{\"tensor\": {\"shape\": [4, 8], \"dtype\": \"float32\"}}]},"
		"{\"count\": 4, \"init\": {\"args\": [], \"kwargs\": {\"scale\": [\"int\", 2],"
		"  \"mode\": [\"list\", [[\"str\", \"a\"], [\"none\"]]]}},"
		" \"inputs\": [{\"tensor\": {\"shape\": [4, 8], \"dtype\": \"float32\"}}]},"
		"{\"count\": 3, \"init\": {\"args\": [], \"kwargs\": {\"scale\": [\"int\", 2],"
		"  \"mode\": [\"list\", [[\"str\", \"a\"], [\"none\"]]]}},"
		" \"inputs\": [{\"tensor\": {\"shape\": [16, 8], \"dtype\": \"float32\"}}]}]}";
	static const char *const two = "{\"args\":[],\"kwargs\":{\"scale\":2,\"mode\":[\"a\",null]}}";
	struct kb_repo_config rc;
	struct kb_modop m = KB_MODOP_INIT;
	struct strbuf why = STRBUF_INIT;

	parse(&rc, &why, "[operator a]\nmodule = a.py:A\ntests = t.py\n");
	/* 7 calls with scale=2 against 5 with 0.5 */
	assert_int_equal(kb_modop_from_record(&m, rec, strlen(rec), 8, &rc.ops[0], &why), 0);
	assert_int_equal(m.nr_forms, 3);
	assert_string_equal(kb_modop_recorded_init(&m), two);
	kb_modop_release(&m);
	/* two shape sets: the third call was not searched, 0.5's 5 calls lead 4 */
	assert_int_equal(kb_modop_from_record(&m, rec, strlen(rec), 2, &rc.ops[0], &why), 0);
	assert_int_equal(m.nr_forms, 2);
	assert_string_equal(kb_modop_recorded_init(&m), "{\"args\":[0.5],\"kwargs\":{}}");
	kb_modop_release(&m);
	kb_repo_config_release(&rc);
	/* shapes from the section: no recorded init */
	parse(&rc, &why, "[operator a]\nmodule = a.py:A\ninputs = float32[4, 8]\n");
	assert_int_equal(kb_modop_from_section(&m, &rc.ops[0]), 0);
	assert_int_equal(m.nr_forms, 1);
	assert_null(kb_modop_recorded_init(&m));
	kb_modop_release(&m);
	kb_repo_config_release(&rc);
	strbuf_release(&why);
}

static void test_modop_record_refused(void **state)
{
	static const struct { const char *json, *message; } cases[] = {
		{ "not json", "the recorder's output is not what record_shapes.py writes" },
		{ "{\"version\": 2, \"records\": []}", "is not what record_shapes.py writes" },
		{ "{\"version\": 1, \"records\": {}}", "is not what record_shapes.py writes" },
		{ "{\"version\": 1, \"records\": [], \"import_error\": \"ImportError: no torch_geometric\\u0007\"}",
		  "A could not be imported: ImportError: no torch_geometric?" },
		{ "{\"version\": 1, \"records\": [], \"collected\": 0, \"passed\": 0, \"failed\": 0,"
		  " \"skipped\": 0, \"errors\": 0}", "the test selection found no test\n" },
		{ "{\"version\": 1, \"records\": [], \"collected\": 0, \"passed\": 0, \"failed\": 0,"
		  " \"skipped\": 0, \"errors\": 1}", "found no test (pytest could not collect it" },
		{ "{\"version\": 1, \"records\": [], \"collected\": -1, \"passed\": 0, \"failed\": 0,"
		  " \"skipped\": 0, \"errors\": 0}", "has no valid test counts" },
		{ "{\"version\": 1, \"records\": [], \"collected\": 2, \"passed\": 2, \"failed\": 0,"
		  " \"skipped\": 0, \"errors\": 0}", "A: no call the tests made can be written as shapes and literals" },
		{ "{\"version\": 1, \"collected\": 1, \"passed\": 1, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		  " \"records\": [{\"count\": 1, \"init\": {\"args\": [], \"kwargs\": {}}, \"inputs\": []},"
		  " {\"count\": 2, \"init\": {\"args\": [], \"kwargs\": {}}, \"inputs\": []}]}",
		  "not counts in decreasing order" },
		{ "{\"version\": 1, \"collected\": 1, \"passed\": 1, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		  " \"records\": [{\"count\": 1, \"init\": {\"args\": [], \"kwargs\": {}},"
		  " \"inputs\": [{\"tensor\": {\"shape\": [0, 4], \"dtype\": \"float32\"}}]}]}",
		  "an empty tensor or one of a size beyond 2^31" },
		{ "{\"version\": 1, \"collected\": 1, \"passed\": 1, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		  " \"records\": [{\"count\": 1, \"init\": {\"args\": [], \"kwargs\": {}},"
		  " \"inputs\": [{\"tensor\": {\"shape\": [65536, 65536], \"dtype\": \"float32\"}}]}]}",
		  "a tensor of more than 2^31 elements" },
		{ "{\"version\": 1, \"collected\": 1, \"passed\": 1, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		  " \"records\": [{\"count\": 1, \"init\": {\"args\": [[\"str\", \"a'b\"]], \"kwargs\": {}},"
		  " \"inputs\": []}]}", "built with an argument that is not a literal\n" },
		{ "{\"version\": 1, \"collected\": 1, \"passed\": 1, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		  " \"records\": [{\"count\": 1, \"init\": {\"args\": [[\"float\", \"inf\"]], \"kwargs\": {}},"
		  " \"inputs\": []}]}", "built with an argument that is not a literal\n" },
		{ "{\"version\": 1, \"collected\": 1, \"passed\": 1, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		  " \"records\": [{\"count\": 1, \"init\": {\"args\": [], \"kwargs\": {\"a b\": [\"int\", 1]}},"
		  " \"inputs\": []}]}", "built with an argument that is not a literal\n" },
		{ "{\"version\": 1, \"collected\": 1, \"passed\": 1, \"failed\": 0, \"skipped\": 0, \"errors\": 0,"
		  " \"records\": [{\"count\": 1, \"init\": {\"args\": [], \"kwargs\": {}},"
		  " \"inputs\": [[\"none\"]]}]}", "neither a tensor nor a number" },
	};
	struct kb_repo_config rc;
	struct kb_modop m = KB_MODOP_INIT;
	struct strbuf why = STRBUF_INIT, big = STRBUF_INIT;

	parse(&rc, &why, "[operator a]\nmodule = a.py:A\ntests = t.py\n");
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		strbuf_reset(&why);
		assert_int_equal(kb_modop_from_record(&m, cases[i].json, strlen(cases[i].json), 8,
						      &rc.ops[0], &why), -1);
		if (!strstr(why.buf, cases[i].message))
			fail_msg("case %zu: '%s' not in:\n%s", i, cases[i].message, why.buf);
		assert_int_equal(m.nr_forms, 0);
	}
	strbuf_reset(&why);
	for (size_t i = 0; i <= KB_MODOP_MAX_RECORD; i++)
		strbuf_addch(&big, ' ');
	assert_int_equal(kb_modop_from_record(&m, big.buf, big.len, 8, &rc.ops[0], &why), -1);
	assert_non_null(strstr(why.buf, "larger than 256 KiB"));
	kb_repo_config_release(&rc);
	strbuf_release(&why);
	strbuf_release(&big);
}

/* The lines to add parse as they are, into a section that is run. */
static void test_modop_hint(void **state)
{
	struct kb_pyops ops = KB_PYOPS_INIT;
	struct kb_repo_config rc;
	struct strbuf hint = STRBUF_INIT, why = STRBUF_INIT;
	const char *src = "import torch.nn as nn\n"
			  "class Attention(nn.Module):\n"
			  "    def __init__(self, d_model: int, num_heads, B, dropout=0.0, *, bias=True):\n"
			  "        super().__init__()\n"
			  "    def forward(self, q, k, v, mask=None, *rest):\n"
			  "        return q\n"
			  "import kernelbot\n"
			  "@kernelbot.operator\n"
			  "def fused(x, y, /, scale=1.0):\n"
			  "    return x\n";

	kb_pyops_scan(&ops, src, strlen(src));
	kb_modop_hint(&hint, NULL, "models/attn.py", kb_pyops_find(&ops, "Attention"));
	assert_string_equal(hint.buf,
		"[operator attention]\n"
		"module = models/attn.py:Attention\n"
		"; placeholders from Attention(d_model: int, num_heads, B, dropout=0.0, *, bias=True) and "
		"forward(q, k, v, mask=None, *rest)\n"
		"; edit them to the sizes and dtypes your model runs at\n"
		"init = d_model=D_MODEL, num_heads=NUM_HEADS, B=N3\n"
		"inputs = float32[B,D_MODEL], float32[B,D_MODEL], float32[B,D_MODEL]\n"
		"sizes = B=8, D_MODEL=1024, NUM_HEADS=8, N3=1024\n"
		"; or, instead of inputs and sizes, record them from your tests:\n"
		"; tests = tests/test_x.py::test_y\n");
	kb_modop_hint(&hint, "f", "pkg/ops.py", kb_pyops_find(&ops, "fused"));
	parse(&rc, &why, hint.buf);
	assert_int_equal(rc.nr_ops, 2);
	for (size_t i = 0; i < 2; i++) {
		assert_false(rc.ops[i].bad);
		assert_false(rc.ops[i].needs_inputs);
	}
	assert_true(rc.ops[1].is_function);
	assert_int_equal(rc.ops[1].forms[0].nr, 2);
	assert_string_equal(why.buf, "");
	kb_repo_config_release(&rc);
	kb_pyops_release(&ops);
	strbuf_release(&hint);
	strbuf_release(&why);
}

static void test_module_slug(void **state)
{
	struct strbuf s = STRBUF_INIT;

	kb_jobs_operator_slug(&s, "models/mlp.py:FusedMLP");
	assert_string_equal(s.buf, "fusedmlp");
	kb_jobs_operator_slug(&s, "a.py:Outer.Inner");
	assert_string_equal(s.buf, "outer-inner");
	kb_jobs_operator_slug(&s, "ops/kb_relu.py");
	assert_string_equal(s.buf, "kb_relu");
	strbuf_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_finder_bases),
		cmocka_unit_test(test_finder_imports),
		cmocka_unit_test(test_finder_nesting),
		cmocka_unit_test(test_finder_strings_and_oddities),
		cmocka_unit_test(test_finder_functions),
		cmocka_unit_test(test_param_names),
		cmocka_unit_test(test_ini_good),
		cmocka_unit_test(test_ini_messages),
		cmocka_unit_test(test_job_path),
		cmocka_unit_test(test_modop_section),
		cmocka_unit_test(test_modop_record),
		cmocka_unit_test(test_modop_recorded_init),
		cmocka_unit_test(test_modop_record_refused),
		cmocka_unit_test(test_modop_hint),
		cmocka_unit_test(test_module_slug),
	};

	return cmocka_run_group_tests(tests, cfg_setup, cfg_teardown);
}
