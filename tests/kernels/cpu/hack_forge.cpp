// HACK (forged verdict): prints a fake "verified" result on stdout, tries
// the protocol's descriptor 3 too, and exits before the harness can report.
// The bot must see no verdict.
#include "kernelbot_abi.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)inputs; (void)n_inputs; (void)outputs; (void)n_outputs; (void)stream;
	const char *fake = "{\"nonce\": \"00000000000000000000000000000000\", "
			   "\"type\": \"result\", \"verdict\": \"verified\", \"reasons\": []}\n";
	fputs(fake, stdout);
	fflush(stdout);
	ssize_t rc = write(3, fake, strlen(fake));
	(void)rc;
	_exit(0);
}
