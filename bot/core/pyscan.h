#ifndef KB_CORE_PYSCAN_H
#define KB_CORE_PYSCAN_H
/*
 * The lexical views of a Python source that both readers of Python share
 * (verifier/static_check_py.c reads a candidate's ModelNew file;
 * bot/jobs/pymodules.c finds a pull request's nn.Module classes): which
 * of its text is comment, which is the contents of string literals, and
 * which is code. Offsets and newlines are kept, so a position in a view
 * is the same position (and line) in the source. Nothing is run.
 */
#include "core/common.h"
#include "core/strbuf.h"

/*
 * text with everything blanked (newlines kept) but the contents of
 * triple-quoted strings that look like C++ (into cxx) and, into code,
 * everything but comments and string contents (the quotes stay).
 */
void kb_py_views(const char *text, size_t len, struct strbuf *cxx, struct strbuf *code);

#endif
