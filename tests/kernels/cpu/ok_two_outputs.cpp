// Correct kernel for a two-output task: relu(x) (B, D) and x.sum(1) (B).
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 1 || n_outputs != 2)
		return 1;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	float *s = (float *)kb_data(&outputs[1]);
	int64_t B = kb_dim(&inputs[0], 0), D = kb_dim(&inputs[0], 1);
	for (int64_t r = 0; r < B; r++) {
		double acc = 0.0;
		for (int64_t c = 0; c < D; c++) {
			float v = x[r * D + c];
			y[r * D + c] = v < 0.0f ? 0.0f : v;
			acc += v;
		}
		s[r] = (float)acc;
	}
	return 0;
}
