// Correct robust-kbench scale_shift, forward and backward (CPU backend).
// forward inputs: x (B, F), weight (F), bias (F), alpha (0-d float64 host).
// backward inputs: the same, then grad_out (B, F); outputs: grad x, weight, bias.
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 4 || n_outputs != 1)
		return 1;
	const float *x = (const float *)kb_data(&inputs[0]);
	const float *w = (const float *)kb_data(&inputs[1]);
	const float *b = (const float *)kb_data(&inputs[2]);
	float alpha = (float)kb_scalar_f64(&inputs[3]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t F = kb_dim(&inputs[0], -1), n = kb_numel(&inputs[0]);
#pragma omp parallel for
	for (int64_t i = 0; i < n; i++)
		y[i] = (x[i] * w[i % F] + b[i % F]) * alpha;
	return 0;
}

KB_EXPORT int kb_backward(const DLTensor *inputs, int n_inputs,
			  DLTensor *outputs, int n_outputs, void *stream)
{
	(void)stream;
	if (n_inputs != 5 || n_outputs != 3)
		return 1;
	const float *x = (const float *)kb_data(&inputs[0]);
	const float *w = (const float *)kb_data(&inputs[1]);
	float alpha = (float)kb_scalar_f64(&inputs[3]);
	const float *g = (const float *)kb_data(&inputs[4]);
	float *gx = (float *)kb_data(&outputs[0]);
	float *gw = (float *)kb_data(&outputs[1]);
	float *gb = (float *)kb_data(&outputs[2]);
	int64_t F = kb_dim(&inputs[0], -1), B = F ? kb_numel(&inputs[0]) / F : 0;
#pragma omp parallel for
	for (int64_t f = 0; f < F; f++) {
		double sw = 0.0, sb = 0.0;
		for (int64_t r = 0; r < B; r++) {
			float ga = g[r * F + f] * alpha;
			gx[r * F + f] = ga * w[f];
			sw += (double)(ga * x[r * F + f]);
			sb += ga;
		}
		gw[f] = (float)sw;
		gb[f] = (float)sb;
	}
	return 0;
}
