// REFUSED (imports 'fopen'): copies the first bytes of a file it opens into
// its output. The build's import check refuses the library.
#include "kernelbot_abi.h"
#include <stdio.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	FILE *fp = fopen("/etc/hostname", "r");
	char *y = (char *)kb_data(&outputs[0]);

	if (fp) {
		fread(y, 1, 4, fp);
		fclose(fp);
	}
	return 0;
}
