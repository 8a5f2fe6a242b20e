// Hostile: a wrong ReLU (every output + 1) that reaches into the Python
// interpreter hosting it (PyRun_SimpleString, found at run time) and
// replaces the harness's compare functions with ones that always pass.
// In one process with the judge this was verified (issue 12); the judge
// now runs in another process, so the patch changes only the runner.
#include "kernelbot_abi.h"
#include <dlfcn.h>

typedef int (*run_fn)(const char *);
typedef int (*gil_fn)(void);
typedef void (*rel_fn)(int);

static const char patch[] =
	"import sys\n"
	"class _Ok:\n"
	"    ok = True; bad = False; nan_bad = False; max_abs = 0.0; max_rel = 0.0\n"
	"for _name in list(sys.modules):\n"
	"    _m = sys.modules[_name]\n"
	"    if _name.startswith('kbh_checks'):\n"
	"        _m.compare = lambda *a, **k: _Ok()\n"
	"        _m.equal_within = lambda *a, **k: True\n"
	"    if _name == 'kbh_verify':\n"
	"        _m.Verifier._compare = lambda *a, **k: None\n"
	"        _m.Verifier._repeat_checks = lambda *a, **k: None\n";

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	run_fn run = (run_fn)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
	gil_fn ensure = (gil_fn)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
	rel_fn release = (rel_fn)dlsym(RTLD_DEFAULT, "PyGILState_Release");
	if (run && ensure && release) {
		int g = ensure();
		run(patch);
		release(g);
	}
	const float *x = (const float *)inputs[0].data;
	float *y = (float *)outputs[0].data;
	int64_t n = 1;
	for (int d = 0; d < inputs[0].ndim; d++)
		n *= inputs[0].shape[d];
	for (int64_t i = 0; i < n; i++)
		y[i] = (x[i] > 0.0f ? x[i] : 0.0f) + 1.0f;
	return 0;
}
