// HACK (partial garbage): a correct a @ b^T except one element in 64,
// off by 1%: a handful of wrong elements among right ones must be
// rejected, under the fixed tolerances and under the error bound.
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 2 || n_outputs != 1)
		return 1;
	const float *a = (const float *)kb_data(&inputs[0]);
	const float *b = (const float *)kb_data(&inputs[1]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t R = kb_dim(&inputs[0], 0), K = kb_dim(&inputs[0], 1), C = kb_dim(&inputs[1], 0);
	for (int64_t i = 0; i < R; i++)
		for (int64_t j = 0; j < C; j++) {
			double acc = 0.0;
			for (int64_t k = 0; k < K; k++)
				acc += (double)a[i * K + k] * b[j * K + k];
			y[i * C + j] = (float)acc * ((i * C + j) % 64 == 5 ? 1.01f : 1.0f);
		}
	return 0;
}
