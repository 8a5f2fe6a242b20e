// Correct softmax over the last dimension (CPU backend).
#include "kernelbot_abi.h"
#include <math.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 1 || n_outputs != 1)
		return 1;
	const DLTensor *t = &inputs[0];
	const float *x = (const float *)kb_data(t);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t cols = kb_dim(t, -1);
	int64_t rows = cols ? kb_numel(t) / cols : 0;
#pragma omp parallel for
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * cols;
		float *yr = y + r * cols;
		float m = -INFINITY;
		for (int64_t c = 0; c < cols; c++)
			m = xr[c] > m ? xr[c] : m;
		double sum = 0.0;
		for (int64_t c = 0; c < cols; c++) {
			yr[c] = expf(xr[c] - m);
			sum += yr[c];
		}
		float inv = (float)(1.0 / sum);
		for (int64_t c = 0; c < cols; c++)
			yr[c] *= inv;
	}
	return 0;
}
