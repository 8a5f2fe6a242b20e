// ACCEPTED: ReLU through what a correct CPU kernel legitimately imports:
// libm (expf), memory (new[]/delete[], std::vector, memcpy) and OpenMP.
#include "kernelbot_abi.h"
#include <math.h>
#include <string.h>
#include <vector>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	float *tmp = new float[n];
	std::vector<int64_t> order(n);

#pragma omp parallel for
	for (int64_t i = 0; i < n; i++) {
		/* 0 * expf(x) is 0 for x <= 0, but the call stays */
		tmp[i] = x[i] > 0.f ? x[i] : 0.f * expf(x[i]);
		order[i] = i;
	}
	memcpy(y, tmp, (size_t)n * sizeof(float));
	delete[] tmp;
	return order.size() != (size_t)n;
}
