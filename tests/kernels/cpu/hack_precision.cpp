// HACK (precision): ReLU whose result is rounded to bfloat16 (as if
// computed in reduced precision) in an fp32 task. Must be rejected.
#include "kernelbot_abi.h"
#include <string.h>

static float to_bf16(float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	u += 0x7FFF + ((u >> 16) & 1); /* round to nearest even */
	u &= 0xFFFF0000u;
	memcpy(&v, &u, 4);
	return v;
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	for (int64_t i = 0; i < n; i++)
		y[i] = to_bf16(x[i] < 0.0f ? 0.0f : x[i]);
	return 0;
}
