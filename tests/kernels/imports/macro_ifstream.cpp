// REFUSED (file_io after preprocessing, imports std::basic_ifstream): the
// stream type is spelled by a macro.
#include "kernelbot_abi.h"
#include <fstream>

#define IN(t) std::basic_if##t<char>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	IN(stream) in("/etc/hostname");
	char c = 0;

	in.get(c);
	*(char *)kb_data(&outputs[0]) = c;
	return 0;
}
