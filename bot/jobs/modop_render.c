/*
 * The text of a generated operator file (modop.h). Everything written
 * into Python code is either fixed text, an identifier or literal that
 * repo_operators.c or modop_record.c produced from checked tokens, or a
 * path written as a bytes literal; the repository's own source appears
 * only inside comments, for the reader (and the model) to see what Model
 * runs.
 */
#include "core/common.h"
#include "core/util.h"
#include "jobs/modop.h"

#include <inttypes.h>

#define MAX_EMBED (32 * 1024)

/* s as a Python bytes literal: every byte outside printable ASCII, quotes and backslashes escaped. */
static void bytes_literal(struct strbuf *out, const char *s)
{
	strbuf_addstr(out, "b\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
			strbuf_addf(out, "\\x%02x", *p);
		else
			strbuf_addch(out, *p);
	}
	strbuf_addch(out, '"');
}

/* A comment line's text: control characters (Python ends a line at \r and \f) made blanks. */
static void comment_text(struct strbuf *out, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		strbuf_addch(out, (unsigned char)s[i] < 0x20 && s[i] != '\t' ? ' ' : s[i]);
}

static bool ident(const char *s, size_t n)
{
	if (!n || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

/*
 * The dotted module name of path ("models/mlp.py" -> "models.mlp",
 * "src/pkg/__init__.py" -> "pkg"), or false when a part is no identifier
 * (the file is then loaded by its path).
 */
static bool module_name(struct strbuf *out, const char *path)
{
	const char *p = path;

	strbuf_reset(out);
	if (!strncmp(p, "src/", 4) && strchr(p + 4, '/'))
		p += 4;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p) - 3;

		if (!slash && n == 8 && !strncmp(p, "__init__", 8))
			break;
		if (!ident(p, n))
			return false;
		strbuf_addf(out, "%s%.*s", out->len ? "." : "", (int)n, p);
		if (!slash)
			break;
		p = slash + 1;
	}
	return out->len > 0;
}

static void header(struct strbuf *out, const struct kb_modop_origin *o)
{
	const struct kb_repo_operator *op = o->op;

	strbuf_addstr(out, KB_MODOP_HEADER "\n");
	strbuf_addf(out, "# [operator %s] of .kernelbot.ini: the %s ", op->name,
		    op->is_function ? "function" : "class");
	comment_text(out, op->target, strlen(op->target));
	strbuf_addstr(out, " of ");
	comment_text(out, op->path, strlen(op->path));
	if (o->head && *o->head)
		strbuf_addf(out, " at %s", o->head); /* whole: the verifier's cache is per file */
	strbuf_addstr(out, ".\n# KernelBench's format: Model, get_inputs(), get_init_inputs(). Each dict of\n"
		      "# KB_SHAPE_SETS is one more config (the constants it sets). kernelbot writes this\n"
		      "# file for its verifier; it is not part of the repository.\n"
		      "import os as _os\nimport sys as _sys\n\n"
		      "_ROOT = _os.path.dirname(_os.path.abspath(__file__))\n"
		      "# the root twice over: the harness's loader takes its own copy off after the\n"
		      "# import, and forward may import more of the repository when it runs\n"
		      "for _p in (_os.path.join(_ROOT, \"src\"), _ROOT):\n"
		      "    if _os.path.isdir(_p) and _sys.path.count(_p) < 2:\n"
		      "        _sys.path.insert(0, _p)\n\n"
		      "import torch  # noqa: E402\n\n");
	if (op->is_function)
		strbuf_addstr(out, "try:  # @kernelbot.operator is a marker: a stand-in where no kernelbot module is\n"
			      "    import kernelbot as _kb  # noqa: F401\n"
			      "except ImportError:\n"
			      "    import types as _types\n"
			      "    _kb = _types.ModuleType(\"kernelbot\")\n"
			      "    _kb.operator = lambda fn=None, **_kw: fn if callable(fn) else (lambda f: f)\n"
			      "    _sys.modules[\"kernelbot\"] = _kb\n\n");
}

static void import_target(struct strbuf *out, const struct kb_repo_operator *op)
{
	struct strbuf mod = STRBUF_INIT;
	const char *dot = strchr(op->target, '.');
	const char *alias = op->is_function ? "_target" : "_Target";

	if (module_name(&mod, op->path)) {
		if (dot)
			strbuf_addf(out, "from %s import %.*s as _Outer  # noqa: E402\n%s = _Outer%s\n", mod.buf,
				    (int)(dot - op->target), op->target, alias, dot);
		else
			strbuf_addf(out, "from %s import %s as %s  # noqa: E402\n", mod.buf, op->target, alias);
	} else {
		/* a folder or file name that is no identifier: loaded by its path */
		strbuf_addstr(out, "import importlib.util as _ilu  # noqa: E402\n\n_spec = _ilu.spec_from_file_location(\n"
			      "    \"kernelbot_target\", _os.path.join(_ROOT, _os.fsdecode(");
		bytes_literal(out, op->path);
		strbuf_addf(out, ")))\n_module = _ilu.module_from_spec(_spec)\n_sys.modules[\"kernelbot_target\"] = _module\n"
			    "_spec.loader.exec_module(_module)\n%s = _module.%s\n", alias, op->target);
	}
	strbuf_release(&mod);
}

static void constants(struct strbuf *out, const struct kb_modop *m)
{
	strbuf_addstr(out, "\nKB_SET = 0\n");
	for (size_t i = 0; i < m->nr_syms; i++)
		strbuf_addf(out, "%s = %" PRId64 "\n", m->syms[i], m->sets[0].values[i]);
	strbuf_addstr(out, "KB_SHAPE_SETS = [\n");
	for (size_t s = 1; s < m->nr_sets; s++) {
		strbuf_addf(out, "    {\"KB_SET\": %zu", m->sets[s].form);
		for (size_t i = 0; i < m->nr_syms; i++)
			strbuf_addf(out, ", \"%s\": %" PRId64, m->syms[i], m->sets[s].values[i]);
		strbuf_addstr(out, "},\n");
	}
	strbuf_addstr(out, "]\n");
}

static void model_class(struct strbuf *out, const struct kb_repo_operator *op)
{
	if (op->is_function) {
		strbuf_addf(out, "\n\nclass Model(torch.nn.Module):\n"
			    "    \"\"\"%s as a module: forward calls it with the inputs.\"\"\"\n\n"
			    "    def forward(self, *args):\n        return _target(*args)\n", op->target);
		return;
	}
	strbuf_addf(out, "\n\nclass Model(_Target):\n"
		    "    \"\"\"%s built with the section's init (init_kwargs() holds its keywords).\"\"\"\n\n"
		    "    def __init__(self, *args):\n        super().__init__(*args, **init_kwargs())\n", op->target);
}

/* The args of one form: positional (keywords false) or keyword ones, as Python list/dict items. */
static void init_items(struct strbuf *out, const struct strvec *init, bool keywords)
{
	size_t n = 0;

	for (size_t i = 0; i < init->nr; i++) {
		const char *arg = init->v[i], *eq = strchr(arg, '=');
		/* '=' in a string literal ("a=b") is no keyword */
		bool kw = eq && ident(arg, (size_t)(eq - arg));

		if (kw != keywords)
			continue;
		strbuf_addstr(out, n++ ? ", " : "");
		if (kw)
			strbuf_addf(out, "\"%.*s\": %s", (int)(eq - arg), arg, eq + 1);
		else
			strbuf_addstr(out, arg);
	}
}

static void dims_tuple(struct strbuf *out, const struct kb_op_arg *a)
{
	strbuf_addch(out, '(');
	for (size_t d = 0; d < a->rank; d++) {
		if (d)
			strbuf_addstr(out, ", ");
		if (a->dims[d].sym[0])
			strbuf_addstr(out, a->dims[d].sym);
		else
			strbuf_addf(out, "%" PRId64, a->dims[d].value);
	}
	strbuf_addstr(out, a->rank == 1 ? ",)" : ")");
}

static void inputs_list(struct strbuf *out, const struct kb_op_form *in)
{
	strbuf_addch(out, '[');
	for (size_t i = 0; i < in->nr; i++) {
		const struct kb_op_arg *a = &in->args[i];

		if (i)
			strbuf_addstr(out, ", ");
		if (!a->tensor) {
			strbuf_addstr(out, a->value);
			continue;
		}
		strbuf_addf(out, "_tensor(\"%s\", ", a->dtype);
		dims_tuple(out, a);
		strbuf_addch(out, ')');
	}
	strbuf_addch(out, ']');
}

/* One form's part of def NAME(): what 0 get_inputs, 1 get_init_inputs, 2 init_kwargs returns. */
static void form_text(struct strbuf *out, const struct kb_modop_form *form, int what)
{
	strbuf_reset(out);
	if (what == 0) {
		inputs_list(out, &form->inputs);
		return;
	}
	strbuf_addch(out, what == 1 ? '[' : '{');
	init_items(out, &form->init, what == 2);
	strbuf_addch(out, what == 1 ? ']' : '}');
}

/* def NAME(): one branch per form whose text differs from the first form's. */
static void branches(struct strbuf *out, const struct kb_modop *m, const char *name, int what)
{
	struct strbuf first = STRBUF_INIT, text = STRBUF_INIT;

	strbuf_addf(out, "\n\ndef %s():\n", name);
	form_text(&first, &m->forms[0], what);
	for (size_t f = m->nr_forms; f-- > 1;) {
		form_text(&text, &m->forms[f], what);
		if (strcmp(text.buf, first.buf))
			strbuf_addf(out, "    if KB_SET == %zu:\n        return %s\n", f, text.buf);
	}
	strbuf_addf(out, "    return %s\n", first.buf);
	strbuf_release(&first);
	strbuf_release(&text);
}

static void embed(struct strbuf *out, const struct kb_modop_origin *o)
{
	const char *s = o->source, *e;
	int line = 1, from = 1, to = INT32_MAX;

	if (!s)
		return;
	if (strlen(s) > MAX_EMBED && o->found) {
		from = o->found->line;
		to = o->found->end_line;
	}
	strbuf_addstr(out, "\n\n# ---- ");
	comment_text(out, o->op->path, strlen(o->op->path));
	if (from > 1 || to < INT32_MAX)
		strbuf_addf(out, ", lines %d-%d", from, to);
	strbuf_addstr(out, ": the code Model runs, for reading ----\n");
	for (size_t budget = MAX_EMBED; *s && line <= to; line++, s = *e ? e + 1 : e) {
		e = strchrnul(s, '\n');
		if (line < from)
			continue;
		if ((size_t)(e - s) + 4 > budget) {
			strbuf_addstr(out, "# | ... (cut)\n");
			break;
		}
		strbuf_addstr(out, "# | ");
		comment_text(out, s, (size_t)(e - s));
		strbuf_addch(out, '\n');
		budget -= (size_t)(e - s) + 4;
	}
}

void kb_modop_render(struct strbuf *out, const struct kb_modop *m, const struct kb_modop_origin *o)
{
	strbuf_reset(out);
	header(out, o);
	import_target(out, o->op);
	constants(out, m);
	model_class(out, o->op);
	if (!o->op->is_function)
		branches(out, m, "init_kwargs", 2);
	branches(out, m, "get_init_inputs", 1);
	branches(out, m, "get_inputs", 0);
	strbuf_addstr(out, "\n\ndef _tensor(dtype, shape):\n"
		      "    \"\"\"A random input: normal floats, integers in [0, 8), random booleans.\"\"\"\n"
		      "    dt = getattr(torch, dtype)\n"
		      "    if dt.is_floating_point:\n"
		      "        return torch.randn(*shape).to(dt)\n"
		      "    if dt == torch.bool:\n"
		      "        return torch.rand(*shape) < 0.5\n"
		      "    return torch.randint(0, 8, tuple(shape), dtype=dt)\n");
	embed(out, o);
}
