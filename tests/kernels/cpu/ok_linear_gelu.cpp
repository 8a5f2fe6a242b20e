// Correct gelu(x @ W^T + b) (CPU backend). Inputs: x (B, K), then the
// module's parameters linear.weight (N, K) and linear.bias (N).
#include "kernelbot_abi.h"
#include <math.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 3 || n_outputs != 1)
		return 1;
	const float *x = (const float *)kb_data(&inputs[0]);
	const float *w = (const float *)kb_data(&inputs[1]);
	const float *b = (const float *)kb_data(&inputs[2]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t B = kb_dim(&inputs[0], 0), K = kb_dim(&inputs[0], 1);
	int64_t N = kb_dim(&inputs[1], 0);
#pragma omp parallel for collapse(2)
	for (int64_t i = 0; i < B; i++)
		for (int64_t j = 0; j < N; j++) {
			double acc = 0.0;
			for (int64_t k = 0; k < K; k++)
				acc += (double)x[i * K + k] * w[j * K + k];
			float v = (float)acc + b[j];
			y[i * N + j] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
		}
	return 0;
}
