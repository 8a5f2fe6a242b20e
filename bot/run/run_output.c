#include "core/common.h"
#include "core/json.h"
#include "core/config.h"
#include "core/util.h"
#include "run/kernel_json.h"
#include "run/run_priv.h"
#include "templates/tune.h"
#include "verifier/harness_client.h"

/* Input names in ABI order, from the describe result's first config. */
static void input_names(const cJSON *describe, struct strvec *out)
{
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(describe, "configs");
	const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(configs, 0), "inputs"), *in;

	cJSON_ArrayForEach(in, inputs) {
		const char *name = kb_json_str(in, "name");

		strvec_push(out, name ? name : "");
	}
}

void run_binding_init(struct run_binding *b, const struct kb_run_result *res)
{
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(res->tune.describe, "operator");
	const char *operator_path = res->operator_path ? res->operator_path : "";
	struct strbuf base = STRBUF_INIT;

	strbuf_init(&b->name, 0);
	strbuf_init(&b->kernel_file, 0);
	strbuf_init(&b->reference, 0);
	strvec_init(&b->inputs);
	kb_operator_name(operator_path, &b->name);
	strbuf_addstr(&b->kernel_file, res->backend == KB_BACKEND_CUDA ? "kernel.cu" : "kernel.cpp");
	/* reference/<file name> or reference/<folder name> */
	strbuf_addstr(&base, operator_path);
	while (base.len > 1 && base.buf[base.len - 1] == '/')
		strbuf_setlen(&base, base.len - 1);
	strbuf_addf(&b->reference, "reference/%s",
		    strrchr(base.buf, '/') ? strrchr(base.buf, '/') + 1 : base.buf);
	strbuf_release(&base);
	input_names(res->tune.describe, &b->inputs);
	b->format = kb_json_str(op, "format") ? kb_json_str(op, "format") :
		    (kb_is_dir(operator_path) ? "robust-kbench" : "kernelbench");
	/* a search's kernel exports kb_backward on a backward pass; a template's when it generates one */
	b->has_backward = res->searched ? res->pass && !strcmp(res->pass, "backward") : res->tune.has_backward;
}

void run_binding_release(struct run_binding *b)
{
	strbuf_release(&b->name);
	strbuf_release(&b->kernel_file);
	strbuf_release(&b->reference);
	strvec_clear(&b->inputs);
}

void run_output_init(struct run_output *ro, const struct kb_verifier *vf, const struct kb_run_result *res,
		     const char *out_dir)
{
	struct run_binding *b = &ro->b;
	struct kb_run_output *o = &ro->o;

	memset(ro, 0, sizeof(*ro));
	ro->res = res;
	run_binding_init(b, res);
	o->dir = out_dir;
	o->abi_header = vf->dd.abi_header;
	o->dlpack_include = vf->dd.dlpack_include;
	o->report.operator_path = res->operator_path;
	o->report.operator_name = b->name.buf;
	o->report.out_dir = out_dir;
	o->report.kernel_file = b->kernel_file.buf;
	o->report.backend = kb_backend_name(res->backend);
	o->report.pass = res->pass;
	o->report.seeds = res->seeds;
	o->report.noise_band = vf->cfg->report_noise_band;
	/* libraries: the binding reads the kernel's "// kernelbot: link ..." line itself */
	o->binding.operator_name = b->name.buf;
	o->binding.kernel_file = b->kernel_file.buf;
	o->binding.backend = kb_backend_name(res->backend);
	o->binding.format = b->format;
	o->binding.reference = b->reference.buf;
	o->binding.input_names = (const char *const *)b->inputs.v;
	o->binding.nr_inputs = b->inputs.nr;
	o->binding.has_backward = b->has_backward;
}

void run_output_tuning(struct run_output *ro, const struct kb_tune_result *t)
{
	struct kb_run_tuning *tu = &ro->o.report.tuning;

	tu->family = t->family;
	tu->kind = t->kind;
	tu->point = t->points[t->best].name;
	tu->space_size = t->space_size;
	tu->tried = t->nr_points;
	tu->verified = 0;
	for (size_t i = 0; i < t->nr_points; i++)
		tu->verified += t->points[i].state == KB_TP_VERIFIED;
	tu->built = t->built;
	tu->timed = t->timed;
	tu->cache_hits = t->cache_hits;
	tu->all_cached = t->all_cached;
	tu->final_cached = t->final_cached;
	tu->seconds = t->seconds;
	tu->cut_short = t->cut_short;
}

int run_output_write(struct run_output *ro)
{
	if (kb_run_write_dir(&ro->o))
		return -1;
	return kb_kernel_json_write(ro->o.dir, ro->res);
}

void run_output_release(struct run_output *ro)
{
	run_binding_release(&ro->b);
}
