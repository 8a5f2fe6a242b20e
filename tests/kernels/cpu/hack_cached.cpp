// HACK (cached_result): computes ReLU on the first call and returns that
// result on every later call. Must be rejected.
#include "kernelbot_abi.h"
#include <string.h>
#include <vector>

static std::vector<float> cache;

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	if (cache.empty()) {
		cache.resize(n);
		for (int64_t i = 0; i < n; i++)
			cache[i] = x[i] < 0.0f ? 0.0f : x[i];
	}
	int64_t m = n < (int64_t)cache.size() ? n : (int64_t)cache.size();
	memcpy(y, cache.data(), m * sizeof(float));
	for (int64_t i = m; i < n; i++)
		y[i] = 0.0f;
	return 0;
}
