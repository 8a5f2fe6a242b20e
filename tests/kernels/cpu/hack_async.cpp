// HACK (stream): computes ReLU into a private buffer and returns at once;
// a detached thread copies the result to the output ~20 ms later, like work
// left on another stream. Must be rejected.
#include "kernelbot_abi.h"
#include <chrono>
#include <string.h>
#include <thread>
#include <vector>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)n_inputs; (void)n_outputs; (void)stream;
	const float *x = (const float *)kb_data(&inputs[0]);
	float *y = (float *)kb_data(&outputs[0]);
	int64_t n = kb_numel(&inputs[0]);
	std::vector<float> res(n);
	for (int64_t i = 0; i < n; i++)
		res[i] = x[i] < 0.0f ? 0.0f : x[i];
	std::thread([y, res]() {
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		memcpy(y, res.data(), res.size() * sizeof(float));
	}).detach();
	return 0;
}
