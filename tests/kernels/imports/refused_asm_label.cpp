// REFUSED (imports 'PyRun_SimpleString'): an asm label gives an innocent
// name the symbol of the Python C API. Neither the source nor its
// preprocessed text names it: only the import check sees it.
#include "kernelbot_abi.h"

extern "C" int innocent_helper(const char *) __asm__("PyRun_SimpleString");

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	return innocent_helper("import os");
}
