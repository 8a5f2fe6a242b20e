// HACK (cached_result): computes ReLU for an input buffer and keeps the
// result; a later call with the same input address returns it, whatever
// the buffer holds now. It passes a check whose trials hand their inputs
// over in new buffers (a new address: computed afresh) and is fast when
// timed (the same buffers over and over). Must be rejected.
#include "kernelbot_abi.h"
#include <string.h>
#include <vector>

static const void *cached_for;
static std::vector<float> cache;

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 1 || n_outputs != 1)
		return 1;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	if (cached_for != (const void *)x || (int64_t)cache.size() != n) {
		cache.resize((size_t)n);
		for (int64_t i = 0; i < n; i++)
			cache[(size_t)i] = x[i] < 0.0f ? 0.0f : x[i];
		cached_for = x;
	}
	memcpy(y, cache.data(), (size_t)n * sizeof(float));
	return 0;
}
