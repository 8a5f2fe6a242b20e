// REFUSED (file_io after preprocessing, imports std::filesystem): the
// namespace is spelled by a macro, so the source never says "filesystem".
#include "kernelbot_abi.h"
#include <filesystem>

#define FS std::files##ystem

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	return FS::remove("/tmp/kb-not-there") ? 1 : 0;
}
