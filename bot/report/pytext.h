#ifndef KB_REPORT_PYTEXT_H
#define KB_REPORT_PYTEXT_H
/*
 * Writing the Python files the bot ships (binding.py, ops.py): a fixed
 * text with @NAME@ placeholders filled in one pass (a value is never
 * scanned again, so nothing a value holds becomes a placeholder), and the
 * two safe ways to put outside text into it: as a JSON literal (which
 * Python reads as a str or a list of str) or, in a docstring or comment,
 * as sanitised text that cannot end it.
 */
#include "core/common.h"
#include "core/strbuf.h"

/* text with each @names[k]@ replaced by vals[k]; an '@' that starts no known name stays. */
void kb_pytext_fill(struct strbuf *out, const char *text, const char *const *names,
		    const struct strbuf *vals, size_t n);

/* Letters, digits and "_-." (plus the bytes of extra); anything else becomes '_'. */
void kb_pytext_doc_safe(struct strbuf *out, const char *s, const char *extra);

/* s as a JSON string literal (NULL: ""). */
void kb_pytext_json_string(struct strbuf *out, const char *s);

/* v[0..n) as a JSON list of strings. */
void kb_pytext_json_strings(struct strbuf *out, const char *const *v, size_t n);

#endif
