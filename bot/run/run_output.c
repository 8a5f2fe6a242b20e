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

void run_output_init(struct run_output *ro, const struct kb_verifier *vf, const struct kb_run_result *res,
		     const char *out_dir)
{
	const struct kb_tune_result *t = &res->tune;
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(t->describe, "operator");
	const char *operator_path = res->operator_path, *backend = kb_backend_name(res->backend);
	struct strbuf base = STRBUF_INIT;
	struct kb_run_output *o = &ro->o;

	memset(ro, 0, sizeof(*ro));
	ro->res = res;
	strbuf_init(&ro->name, 0);
	strbuf_init(&ro->kernel_file, 0);
	strbuf_init(&ro->reference, 0);
	strvec_init(&ro->inputs);
	kb_operator_name(operator_path, &ro->name);
	strbuf_addf(&ro->kernel_file, "kernel%s", !strcmp(backend, "cuda") ? ".cu" : ".cpp");
	/* reference/<file name> or reference/<folder name> */
	strbuf_addstr(&base, operator_path);
	while (base.len > 1 && base.buf[base.len - 1] == '/')
		strbuf_setlen(&base, base.len - 1);
	strbuf_addf(&ro->reference, "reference/%s",
		    strrchr(base.buf, '/') ? strrchr(base.buf, '/') + 1 : base.buf);
	strbuf_release(&base);
	input_names(t->describe, &ro->inputs);

	o->dir = out_dir;
	o->abi_header = vf->dd.abi_header;
	o->dlpack_include = vf->dd.dlpack_include;
	o->report.operator_path = operator_path;
	o->report.operator_name = ro->name.buf;
	o->report.out_dir = out_dir;
	o->report.kernel_file = ro->kernel_file.buf;
	o->report.backend = backend;
	o->report.pass = res->pass;
	o->report.seeds = res->seeds;
	o->report.noise_band = vf->cfg->report_noise_band;
	/* libraries: the binding reads the kernel's "// kernelbot: link ..." line itself */
	o->binding.operator_name = ro->name.buf;
	o->binding.kernel_file = ro->kernel_file.buf;
	o->binding.backend = backend;
	o->binding.format = kb_json_str(op, "format") ? kb_json_str(op, "format") :
			    (kb_is_dir(operator_path) ? "robust-kbench" : "kernelbench");
	o->binding.reference = ro->reference.buf;
	o->binding.input_names = (const char *const *)ro->inputs.v;
	o->binding.nr_inputs = ro->inputs.nr;
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
	strbuf_release(&ro->name);
	strbuf_release(&ro->kernel_file);
	strbuf_release(&ro->reference);
	strvec_clear(&ro->inputs);
}
