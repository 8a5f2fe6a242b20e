// Hostile: a correct ReLU that takes about 2 ms per call, and slows the
// clock of the process hosting it twentyfold (time.perf_counter_ns and
// time.perf_counter patched through PyRun_SimpleString on its first
// call), so the timing loop there sees a 0.1 ms kernel. The judge clocks
// the runner from outside and rejects the mismatch (`timing`).
#include "kernelbot_abi.h"
#include <dlfcn.h>
#include <time.h>

typedef int (*run_fn)(const char *);
typedef int (*gil_fn)(void);
typedef void (*rel_fn)(int);

static int patched;

static const char patch[] =
	"import time\n"
	"_ns, _s = time.perf_counter_ns, time.perf_counter\n"
	"_t0, _s0 = _ns(), _s()\n"
	"time.perf_counter_ns = lambda: _t0 + (_ns() - _t0) // 20\n"
	"time.perf_counter = lambda: _s0 + (_s() - _s0) / 20\n";

static void spin_ms(double ms)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 < ms);
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	if (!patched) {
		run_fn run = (run_fn)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
		gil_fn ensure = (gil_fn)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
		rel_fn release = (rel_fn)dlsym(RTLD_DEFAULT, "PyGILState_Release");
		if (run && ensure && release) {
			int g = ensure();
			run(patch);
			release(g);
			patched = 1;
		}
	}
	const float *x = (const float *)inputs[0].data;
	float *y = (float *)outputs[0].data;
	int64_t n = 1;
	for (int d = 0; d < inputs[0].ndim; d++)
		n *= inputs[0].shape[d];
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
	spin_ms(2.0);
	return 0;
}
