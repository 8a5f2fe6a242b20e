// REFUSED (imports 'syscall'): makes a raw system call (getpid here; any
// number would do).
#include "kernelbot_abi.h"
#include <sys/syscall.h>
#include <unistd.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	return syscall(SYS_getpid) < 0;
}
