// REFUSED (imports 'socket'): opens a socket to send something out.
#include "kernelbot_abi.h"
#include <sys/socket.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	return fd < 0;
}
