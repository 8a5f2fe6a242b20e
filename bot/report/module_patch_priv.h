#ifndef KB_REPORT_MODULE_PATCH_PRIV_H
#define KB_REPORT_MODULE_PATCH_PRIV_H
/* Shared by module_patch.c (forward's call) and module_import.c (the import, the assembly). */
#include "core/common.h"
#include "core/strbuf.h"
#include "report/module_patch.h"
#include "report/pylines.h"

/* Lines to insert at offset at of the source. */
struct patch_insert {
	size_t at;
	bool guard;          /* forward's call (else the import) */
	struct strbuf text;
};

/* The line ending of the line that ends at offset at ("\r\n" or "\n"; the file's first when none). */
const char *kb_patch_eol(const struct kb_pylines *pl, const char *text, size_t at);

/* forward's guarded call into ins, its arguments into p->args. 0 or KB_ENOTSUPPORTED with why. */
int kb_module_patch_forward(struct kb_module_patch *p, const struct kb_pylines *pl, const char *text,
			    const struct kb_module_patch_spec *s, struct patch_insert *ins, struct strbuf *why);

#endif
