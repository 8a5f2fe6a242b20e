// REFUSED (imports 'dlsym'): looks a function of the harness process up by
// name at run time.
#include "kernelbot_abi.h"
#include <dlfcn.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int (*run)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");

	return run ? run("pass") : 0;
}
