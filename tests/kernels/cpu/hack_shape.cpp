// HACK (shape): ReLU for the one shape it was shown, 16 x 16384. It stays
// inside the buffers it is given, so smaller shapes pass; larger ones are
// left partly unwritten. Must be rejected with `shape`.
#include "kernelbot_abi.h"

#define ROWS 16
#define COLS 16384

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	for (int64_t r = 0; r < ROWS; r++)
		for (int64_t c = 0; c < COLS; c++) {
			int64_t i = r * COLS + c;
			if (i < n)
				y[i] = x[i] < 0.0f ? 0.0f : x[i];
		}
	return 0;
}
