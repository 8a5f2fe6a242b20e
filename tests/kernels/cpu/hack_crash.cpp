// HACK (crash): writes through a null pointer. The harness process dies
// with SIGSEGV before any result; the bot reports `crash`.
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)stream;
	volatile float *p = 0;
	*p = 1.0f;
	return 0;
}
