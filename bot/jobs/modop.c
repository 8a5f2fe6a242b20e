/*
 * The shape sets of a generated operator (modop.h): from a section's
 * inputs, dtypes and sizes, and the first set's literal sizes turned into
 * the constants the verifier scales.
 */
#include "core/common.h"
#include "core/util.h"
#include "jobs/modop.h"

void kb_modop_release(struct kb_modop *m)
{
	for (size_t i = 0; i < m->nr_forms; i++) {
		strvec_clear(&m->forms[i].init);
		free(m->forms[i].init_json);
	}
	free(m->forms);
	free(m->sets);
	memset(m, 0, sizeof(*m));
}

static struct kb_modop_form *add_form(struct kb_modop *m, const struct kb_op_form *inputs)
{
	struct kb_modop_form *f;

	m->forms = xrealloc(m->forms, (m->nr_forms + 1) * sizeof(*m->forms));
	f = &m->forms[m->nr_forms++];
	memset(f, 0, sizeof(*f));
	f->inputs = *inputs;
	strvec_init(&f->init);
	return f;
}

static bool floating(const char *dtype)
{
	return !strncmp(dtype, "float", 5) || !strcmp(dtype, "bfloat16");
}

int kb_modop_from_section(struct kb_modop *m, const struct kb_repo_operator *op)
{
	size_t nd = op->nr_dtypes ? op->nr_dtypes : 1, combos = 1;

	memset(m, 0, sizeof(*m));
	if (!op->nr_forms)
		return -1;
	for (size_t i = 0; i < op->nr_sizes; i++) {
		kb_strlcpy(m->syms[m->nr_syms++], op->sizes[i].name, KB_OPSEC_NAME);
		combos *= op->sizes[i].nr;
	}
	for (size_t f = 0; f < op->nr_forms; f++)
		for (size_t d = 0; d < nd; d++) {
			struct kb_modop_form *form = add_form(m, &op->forms[f]);

			for (size_t a = 0; op->nr_dtypes && a < form->inputs.nr; a++)
				if (form->inputs.args[a].tensor && floating(form->inputs.args[a].dtype))
					kb_strlcpy(form->inputs.args[a].dtype, op->dtypes[d], KB_OPSEC_NAME);
			strvec_pushv(&form->init, op->init.v);
		}
	/* every form early, then the sizes' other alternatives: a cap keeps a mix */
	for (size_t c = 0; c < combos && m->nr_sets < KB_OPSEC_MAX_SETS; c++)
		for (size_t f = 0; f < m->nr_forms && m->nr_sets < KB_OPSEC_MAX_SETS; f++) {
			struct kb_modop_set *s;
			size_t rest = c;

			m->sets = xrealloc(m->sets, (m->nr_sets + 1) * sizeof(*m->sets));
			s = &m->sets[m->nr_sets++];
			memset(s, 0, sizeof(*s));
			s->form = f;
			for (size_t i = 0; i < op->nr_sizes; i++) {
				s->values[i] = op->sizes[i].values[rest % op->sizes[i].nr];
				rest /= op->sizes[i].nr;
			}
		}
	return 0;
}

/* The constant a value of the first set is: an existing one, or a new one. */
static const char *constant_for(struct kb_modop *m, int64_t value, const char *named, size_t *dims)
{
	struct strbuf name = STRBUF_INIT;
	const char *out = NULL;

	for (size_t i = 0; i < m->nr_syms; i++)
		if (m->sets[0].values[i] == value && !strncmp(m->syms[i], "DIM", 3))
			return m->syms[i];
	if (m->nr_syms >= KB_MODOP_MAX_SYMS)
		return NULL;
	if (named && kb_repo_size_name_ok(named, strlen(named)))
		strbuf_addstr(&name, named);
	for (size_t i = 0; i < m->nr_syms && name.len; i++)
		if (!strcmp(m->syms[i], name.buf))
			strbuf_reset(&name); /* taken: a size of the section, or another value */
	if (!name.len)
		strbuf_addf(&name, "DIM%zu", (*dims)++);
	kb_strlcpy(m->syms[m->nr_syms], name.buf, KB_OPSEC_NAME);
	for (size_t s = 0; s < m->nr_sets; s++)
		m->sets[s].values[m->nr_syms] = value;
	out = m->syms[m->nr_syms++];
	strbuf_release(&name);
	return out;
}

/* The parameter an init argument of the first form binds, and its int value; false when it is no int. */
static bool init_int(const char *arg, size_t pos, const struct kb_pyop *cls, struct strbuf *name,
		     int64_t *value)
{
	const char *eq = strchr(arg, '=');
	const char *text = eq ? eq + 1 : arg;
	bool required;
	int kind;

	strbuf_reset(name);
	if (kb_parse_i64(text, value) || strchr(text, '.'))
		return false;
	if (eq)
		strbuf_add(name, arg, (size_t)(eq - arg));
	else if (cls && pos < cls->init_params.nr) {
		kb_pyparam_name(name, cls->init_params.v[pos], &required, &kind);
		if (kind)
			strbuf_reset(name);
	}
	return true;
}

void kb_modop_symbolize(struct kb_modop *m, const struct kb_pyop *cls)
{
	struct kb_modop_form *f;
	struct strbuf name = STRBUF_INIT, arg = STRBUF_INIT;
	size_t dims = 0;
	int64_t v;

	if (!m->nr_sets)
		return;
	f = &m->forms[m->sets[0].form];
	/* an init argument of a dimension's value names that dimension */
	for (size_t i = 0; i < f->init.nr; i++) {
		const char *sym;
		bool used = false;

		if (!init_int(f->init.v[i], i, cls, &name, &v) || v <= 1 || !name.len)
			continue;
		for (size_t a = 0; a < f->inputs.nr && !used; a++)
			for (size_t d = 0; d < f->inputs.args[a].rank; d++)
				used |= !f->inputs.args[a].dims[d].sym[0] && f->inputs.args[a].dims[d].value == v;
		if (!used || !(sym = constant_for(m, v, name.buf, &dims)))
			continue;
		strbuf_reset(&arg);
		if (strchr(f->init.v[i], '='))
			strbuf_addf(&arg, "%s=", name.buf);
		strbuf_addstr(&arg, sym);
		free((char *)f->init.v[i]);
		f->init.v[i] = strbuf_detach(&arg, NULL);
		for (size_t a = 0; a < f->inputs.nr; a++)
			for (size_t d = 0; d < f->inputs.args[a].rank; d++) {
				struct kb_op_dim *dim = &f->inputs.args[a].dims[d];

				if (!dim->sym[0] && dim->value == v)
					kb_strlcpy(dim->sym, sym, KB_OPSEC_NAME);
			}
	}
	for (size_t a = 0; a < f->inputs.nr; a++)
		for (size_t d = 0; d < f->inputs.args[a].rank; d++) {
			struct kb_op_dim *dim = &f->inputs.args[a].dims[d];
			const char *sym;

			if (dim->sym[0] || dim->value <= 1 || !(sym = constant_for(m, dim->value, NULL, &dims)))
				continue;
			kb_strlcpy(dim->sym, sym, KB_OPSEC_NAME);
		}
	strbuf_release(&name);
	strbuf_release(&arg);
}

void kb_modop_file_name(struct strbuf *out, const char *section_name)
{
	strbuf_reset(out);
	strbuf_addstr(out, "kernelbot_op_");
	for (const char *p = section_name; *p; p++)
		strbuf_addch(out, *p == '-' ? '_' : *p);
	strbuf_addstr(out, ".py");
}
