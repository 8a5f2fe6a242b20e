/*
 * HACK (must be rejected: kernel_error). Gives up and returns 1 without
 * touching anything; the harness must report the failure, not compare
 * whatever the outputs held.
 */
#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)inputs;
	(void)n_inputs;
	(void)outputs;
	(void)n_outputs;
	(void)stream;
	return 1;
}
