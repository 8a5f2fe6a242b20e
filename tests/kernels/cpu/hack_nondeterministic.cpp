// HACK (nondeterminism): ReLU whose result depends on how often it was
// called (a stand-in for a race): every other call perturbs a block of
// outputs. Must be rejected.
#include "kernelbot_abi.h"

static unsigned calls;

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] < 0.0f ? 0.0f : x[i];
	if (calls++ % 2)
		for (int64_t i = 0; i < n && i < 64; i++)
			y[i] += 0.5f;
	return 0;
}
