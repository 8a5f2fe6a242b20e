#include "core/common.h"
#include "core/json.h"
#include "core/log.h"
#include "core/util.h"
#include "report/wire.h"
#include "verifier/wiring.h"

/* kb_wire_prove and kb_wire_record (report/wire.h). */

#define WIRING_SEEDS 2
#define WIRING_TESTS_TIMEOUT_S 600

/*
 * Each verified config: the module's forward arguments (tensors by shape and
 * dtype, numbers by kind) and the shapes of its own tensors ("tensors").
 */
static cJSON *request_configs(const cJSON *evidence)
{
	cJSON *out = cJSON_CreateArray();
	const cJSON *c, *in;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(evidence, "configs")) {
		cJSON *cfg = cJSON_CreateObject(), *inputs = cJSON_AddArrayToObject(cfg, "inputs");
		cJSON *tensors = cJSON_AddObjectToObject(cfg, "tensors");

		cJSON_AddStringToObject(cfg, "name", kb_json_str(c, "name") ? kb_json_str(c, "name") : "");
		cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(c, "inputs")) {
			const char *name = kb_json_str(in, "name"), *dtype = kb_json_str(in, "dtype");
			cJSON *x;

			if (!name || !dtype)
				continue;
			if (!strncmp(name, "param:", 6) || !strncmp(name, "buffer:", 7)) {
				/* the module's own tensors: a config another init made is left out */
				cJSON_AddItemToObject(tensors, strchr(name, ':') + 1,
						      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(in, "shape"), true));
				continue;
			}
			x = cJSON_CreateObject();
			if (strncmp(name, "input", 5))
				cJSON_AddStringToObject(x, "keyword", name);
			if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "scalar"))) {
				/* any number will do: both paths get the same one */
				cJSON_AddNumberToObject(x, "value", strncmp(dtype, "float", 5) ? 1 : 0.5);
			} else {
				cJSON_AddItemToObject(x, "shape",
						      cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(in, "shape"), true));
				cJSON_AddStringToObject(x, "dtype", dtype);
			}
			cJSON_AddItemToArray(inputs, x);
		}
		cJSON_AddItemToArray(out, cfg);
	}
	return out;
}

static cJSON *request(const struct kb_wire *w, const struct kb_wire_spec *s, const char *stage)
{
	const cJSON *settings = cJSON_GetObjectItemCaseSensitive(s->evidence, "settings");
	const cJSON *tol = cJSON_GetObjectItemCaseSensitive(settings, "tolerances");
	const char *backend = kb_json_str(cJSON_GetObjectItemCaseSensitive(s->evidence, "environment"), "backend");
	struct strbuf ops = STRBUF_INIT;
	cJSON *req = cJSON_CreateObject(), *ov = cJSON_AddArrayToObject(req, "overlays"), *pair;
	cJSON *sp = cJSON_AddArrayToObject(req, "sys_path"), *tests = cJSON_AddArrayToObject(req, "tests");

	kb_wire_package(&ops, s->op_dir, s->sys_path, s->nr_sys_path);
	strbuf_addstr(&ops, ".ops");
	cJSON_AddNumberToObject(req, "protocol", 1);
	cJSON_AddStringToObject(req, "tree", s->repo_dir);
	pair = cJSON_CreateArray();
	cJSON_AddItemToArray(pair, cJSON_CreateString(s->run_dir));
	cJSON_AddItemToArray(pair, cJSON_CreateString(s->op_dir));
	cJSON_AddItemToArray(ov, pair);
	pair = cJSON_CreateArray();
	cJSON_AddItemToArray(pair, cJSON_CreateString(stage));
	cJSON_AddItemToArray(pair, cJSON_CreateString(""));
	cJSON_AddItemToArray(ov, pair);
	cJSON_AddStringToObject(req, "module_file", s->module_path);
	cJSON_AddStringToObject(req, "class", s->class_name);
	cJSON_AddStringToObject(req, "ops_module", ops.buf);
	for (size_t i = 0; i < s->nr_sys_path; i++)
		cJSON_AddItemToArray(sp, cJSON_CreateString(s->sys_path[i]));
	if (!s->nr_sys_path)
		cJSON_AddItemToArray(sp, cJSON_CreateString("."));
	if (s->init)
		cJSON_AddItemToObject(req, "init", cJSON_Duplicate(s->init, true));
	cJSON_AddItemToObject(req, "configs", request_configs(s->evidence));
	cJSON_AddItemToObject(req, "tolerances", tol ? cJSON_Duplicate(tol, true)
						    : cJSON_Parse("{\"float32\": {\"atol\": 1e-4, \"rtol\": 1e-4}}"));
	cJSON_AddStringToObject(req, "backend", backend ? backend : "cuda");
	cJSON_AddNumberToObject(req, "seeds", WIRING_SEEDS);
	for (size_t i = 0; i < s->nr_tests; i++)
		cJSON_AddItemToArray(tests, cJSON_CreateString(s->tests[i]));
	cJSON_AddNumberToObject(req, "tests_timeout_s", WIRING_TESTS_TIMEOUT_S);
	(void)w;
	strbuf_release(&ops);
	return req;
}

int kb_wire_prove(struct kb_wire *w, const struct kb_wire_spec *s, const struct kb_harness *h)
{
	struct strbuf stage = STRBUF_INIT;
	cJSON *req = NULL;
	int rc = -1;

	/* the overlay: the patched module and w->files (the build, the new __init__.py files) */
	if (kb_wiring_tmpdir(h, "kb-wire", &stage) || kb_wire_write_files(w, s, stage.buf))
		goto out;
	req = request(w, s, stage.buf);
	cJSON_Delete(w->proof);
	w->proof = NULL;
	rc = kb_wiring_check(h, req, &w->proof);
	/* ops.py as the branch gets it: the module's settings the check recorded guard the kernel */
	if (!rc && w->proof) {
		kb_torch_op_set_attributes(&w->op, cJSON_GetObjectItemCaseSensitive(w->proof, "attributes"));
		strbuf_reset(&w->ops_py);
		kb_torch_op_render(&w->ops_py, &w->op);
		rc = kb_wire_write_run(w, s);
	}
out:
	if (stage.len && kb_rm_rf(stage.buf))
		log_warn("could not remove '%s'", stage.buf);
	cJSON_Delete(req);
	strbuf_release(&stage);
	return rc;
}

/* run_dir/evidence.json's "wiring" replaced by rec (taken). 0 or -1 (logged). */
static int put_wiring(const char *run_dir, cJSON *rec)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	cJSON *ev = NULL;
	char *out = NULL;
	int rc = -1;

	strbuf_addf(&path, "%s/evidence.json", run_dir);
	if (strbuf_read_file(&text, path.buf, 64u << 20) || !(ev = cJSON_Parse(text.buf))) {
		error("could not read '%s'", path.buf);
		cJSON_Delete(rec);
		goto out;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(ev, "wiring");
	cJSON_AddItemToObject(ev, "wiring", rec);
	out = cJSON_Print(ev);
	if (!out)
		die("out of memory");
	if (kb_write_file_atomic(path.buf, out, strlen(out)))
		goto out;
	rc = 0;
out:
	free(out);
	cJSON_Delete(ev);
	strbuf_release(&path);
	strbuf_release(&text);
	return rc;
}

int kb_wire_record_refusal(const struct kb_wire_spec *s, const char *why)
{
	cJSON *rec = cJSON_CreateObject(), *reason = cJSON_CreateObject();

	cJSON_AddStringToObject(rec, "verdict", "not_wired");
	cJSON_AddStringToObject(rec, "module", s->module_path);
	cJSON_AddStringToObject(rec, "class", s->class_name);
	cJSON_AddStringToObject(reason, "message", why);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(rec, "reasons"), reason);
	return put_wiring(s->run_dir, rec);
}

int kb_wire_record(const struct kb_wire *w, const struct kb_wire_spec *s)
{
	cJSON *rec, *gate, *files;

	rec = w->proof ? cJSON_Duplicate(w->proof, true) : cJSON_CreateObject();
	cJSON_AddStringToObject(rec, "module", s->module_path);
	if ((gate = kb_torch_op_speed_json(&w->op)))
		cJSON_AddItemToObject(rec, "speed_gate", gate);
	cJSON_AddStringToObject(rec, "class", s->class_name);
	cJSON_AddNumberToObject(rec, "import_line", w->patch.import_line);
	cJSON_AddNumberToObject(rec, "guard_line", w->patch.guard_line);
	cJSON_AddStringToObject(rec, "call", w->patch.args.buf);
	cJSON_AddStringToObject(rec, "op_dir", s->op_dir);
	cJSON_AddStringToObject(rec, "build", w->build_note.buf);
	files = cJSON_AddArrayToObject(rec, "files");
	for (size_t i = 0; i < w->nr_files; i++)
		cJSON_AddItemToArray(files, cJSON_CreateString(w->files[i].path));
	if (w->build_add.len) {
		cJSON_AddStringToObject(rec, "build_add", w->build_add.buf);
		cJSON_AddStringToObject(rec, "build_add_file", w->build_add_file);
	}
	if (s->nr_tests) {
		cJSON *sel = cJSON_AddArrayToObject(rec, "tests_selection");

		for (size_t i = 0; i < s->nr_tests; i++)
			cJSON_AddItemToArray(sel, cJSON_CreateString(s->tests[i]));
	}
	return put_wiring(s->run_dir, rec);
}
