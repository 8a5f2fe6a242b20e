// HACK (input_mutation): ReLU computed in place in the input, then copied
// out. The output is right; the caller's input is destroyed. Must be rejected.
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	float *x = (float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	for (int64_t i = 0; i < n; i++) {
		x[i] = x[i] < 0.0f ? 0.0f : x[i];
		y[i] = x[i];
	}
	return 0;
}
