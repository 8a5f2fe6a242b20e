// HACK (out_of_bounds): correct ReLU, plus a "padding" write one element
// past the end of the output. Must be rejected.
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] < 0.0f ? 0.0f : x[i];
	y[n] = 0.0f;
	return 0;
}
