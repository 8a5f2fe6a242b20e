// Correct log (CPU backend): NaN for negatives, -inf for zeros, like torch.
#include "kernelbot_abi.h"
#include <math.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 1 || n_outputs != 1)
		return 1;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
#pragma omp parallel for
	for (int64_t i = 0; i < n; i++)
		y[i] = logf(x[i]);
	return 0;
}
