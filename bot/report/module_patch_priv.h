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

/* The text of inserts (sorted by offset, none at the same one) put into text, into out. */
void kb_patch_apply(struct strbuf *out, const char *text, size_t len, struct patch_insert *ins, size_t nr);

/*
 * The insert that puts elems at the head of the bracket opened at open (and
 * closed at close) of text: one element a line in the next line's
 * indentation when the bracket's first element starts a line, else inline
 * before the others. code: text's code view (report/pylines.h; a TOML
 * file's alike), which has the same offsets.
 */
void kb_patch_head(struct patch_insert *ins, const char *code, const char *text, size_t open, size_t close,
		   const char *const *elems, size_t nr);

/* The offset of word in the code view as a whole identifier at or after from (after a '.' too when
 * dotted), or SIZE_MAX. */
size_t kb_pyview_word(const struct kb_pylines *pl, size_t from, const char *word, bool dotted);

/* forward's guarded call into ins, its arguments into p->args. 0 or KB_ENOTSUPPORTED with why. */
int kb_module_patch_forward(struct kb_module_patch *p, const struct kb_pylines *pl, const char *text,
			    const struct kb_module_patch_spec *s, struct patch_insert *ins, struct strbuf *why);

#endif
