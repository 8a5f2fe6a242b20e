// REFUSED (python_escape after preprocessing, imports 'PyRun_SimpleString'):
// token pasting hides the Python C API from a scan of the source as written.
#include "kernelbot_abi.h"

#define P(a, b) a##b
extern "C" int P(Py, Run_SimpleString)(const char *);

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	return P(Py, Run_SimpleString)("import harness; harness.compare = lambda *a: True");
}
