// REFUSED (imports 'getenv'): reads a variable of the process environment.
#include "kernelbot_abi.h"
#include <stdlib.h>
#include <string.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	const char *token = getenv("GITHUB_TOKEN");

	if (token)
		memcpy(kb_data(&outputs[0]), token, 4);
	return 0;
}
