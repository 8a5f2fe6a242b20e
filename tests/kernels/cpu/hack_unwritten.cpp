// HACK (unwritten_output): ReLU that skips the last 1% of the output,
// hoping the buffer already holds the answer. Must be rejected.
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	for (int64_t i = 0; i < n - n / 100 - 1; i++)
		y[i] = x[i] < 0.0f ? 0.0f : x[i];
	return 0;
}
