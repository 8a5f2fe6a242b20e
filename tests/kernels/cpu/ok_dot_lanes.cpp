// Correct a @ b^T (CPU backend) summed in fp32 over 8 interleaved lanes,
// then the lanes added: another order than torch's, an ordinary fp32
// rounding difference. Inputs: a (R, K), b (C, K); output (R, C).
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
#pragma omp parallel for collapse(2)
	for (int64_t i = 0; i < R; i++)
		for (int64_t j = 0; j < C; j++) {
			float lane[8] = { 0 }, acc = 0.0f;
			for (int64_t k = 0; k < K; k++)
				lane[k & 7] += a[i * K + k] * b[j * K + k];
			for (int l = 7; l >= 0; l--)
				acc += lane[l];
			y[i * C + j] = acc;
		}
	return 0;
}
