#include "core/common.h"
#include "cli/cli.h"
#include "cli/cli_verifier.h"
#include "core/strbuf.h"
#include "verifier/python_env.h"

int cli_verifier_backend(struct cli_verifier *v)
{
	if (v->backend_arg && (kb_backend_parse(v->backend_arg, &v->backend) || v->backend == KB_BACKEND_AUTO))
		return cli_usage_error(v->cmd, "unknown backend '%s' (cuda or cpu)", v->backend_arg);
	return 0;
}

int cli_verifier_start(struct cli_verifier *v)
{
	int rc = cli_load_config(v->config_path, &v->cfg);

	v->cfg_loaded = true;
	if (rc)
		return rc;
	for (size_t i = 0; i < v->nr_sets; i++) {
		struct strbuf why = STRBUF_INIT;

		if (kb_config_set(&v->cfg, v->sets[i], &why)) {
			rc = cli_usage_error(v->cmd, "--set: %s", why.buf);
			strbuf_release(&why);
			return rc;
		}
		strbuf_release(&why);
	}
	if (!v->backend_arg)
		v->backend = v->cfg.backend;
	v->vf_ready = true;
	if (kb_verifier_init(&v->vf, &v->cfg)) {
		fprintf(stderr, "kernelbot %s: cannot run the verifier (see the error above)\n", v->cmd);
		return KB_EXIT_USAGE;
	}
	return 0;
}

void cli_verifier_release(struct cli_verifier *v)
{
	if (v->vf_ready)
		kb_verifier_release(&v->vf);
	if (v->cfg_loaded)
		kb_config_release(&v->cfg);
	v->vf_ready = v->cfg_loaded = false;
}

int cli_eval_arg(struct cli_eval_args *a, int opt, const char *arg)
{
	switch (opt) {
	case 'c': a->v.config_path = arg; return 0;
	case 'b': a->v.backend_arg = arg; return 0;
	case 'j': a->json_path = arg; return 0;
	case 'f': a->fresh = true; return 0;
	case 'S':
		if (a->v.nr_sets == ARRAY_SIZE(a->v.sets))
			return cli_usage_error(a->v.cmd, "more than %zu --set options", ARRAY_SIZE(a->v.sets));
		a->v.sets[a->v.nr_sets++] = arg;
		return 0;
	case 'p': case 't': case 's': case 'm': case 'k':
		return cli_eval_option(a->v.cmd, opt, arg, &a->eo) ? KB_EXIT_USAGE : 0;
	default:
		return 1;
	}
}

int cli_eval_check(struct cli_eval_args *a, const char *const *kernels, size_t n)
{
	struct strbuf why = STRBUF_INIT;
	int rc = cli_verifier_backend(&a->v);

	for (size_t i = 0; !rc && i < n; i++)
		if (kb_verifier_check_paths(a->eo.operator_path, kernels[i], &why))
			rc = cli_usage_error(a->v.cmd, "%s", why.buf);
	strbuf_release(&why);
	return rc;
}

int cli_eval_start(struct cli_eval_args *a, const char *const *kernels, size_t n, enum kb_backend *resolved)
{
	struct strbuf why = STRBUF_INIT;
	int rc = cli_verifier_start(&a->v);

	for (size_t i = 0; !rc && i < n; i++)
		if (kb_verifier_backend(&a->v.vf, kernels[i], a->v.backend, resolved, &why))
			rc = cli_usage_error(a->v.cmd, "%s", why.buf);
	/* a worker started now loads torch while the kernel compiles */
	if (!rc && !a->fresh)
		kb_verifier_use_worker(&a->v.vf);
	strbuf_release(&why);
	return rc;
}
