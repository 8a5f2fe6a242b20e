#ifndef KB_REPORT_PYLINES_H
#define KB_REPORT_PYLINES_H
/*
 * A Python source as logical lines (a statement's physical lines joined by
 * brackets, backslashes or a triple-quoted string), for the edits the bot
 * makes to a repository's own files (report/module_patch.h): where a
 * statement starts and ends, its indentation, and a code view of the text
 * in which comments and the contents of string literals are blanked (the
 * quotes and every newline stay), so that a bracket, colon or keyword found
 * in the view is real code at the same offset in the source. Nothing is run.
 */
#include "core/common.h"
#include "core/strbuf.h"

struct kb_pyline {
	size_t start;        /* first byte of the line (its indentation) */
	size_t code;         /* first byte that is neither blank nor a comment; == end when none */
	size_t end;          /* just past the logical line's last newline (or the text's end) */
	size_t body_end;     /* end less that newline ("\n" or "\r\n") */
	int lineno;          /* 1-based physical line of start */
	bool blank;          /* blank, or a comment only */
};

struct kb_pylines {
	struct kb_pyline *v;
	size_t nr;
	struct strbuf code;  /* the code view: same length and offsets as the source */
	bool crlf;           /* the first line ends in "\r\n" */
};

/* Split text into logical lines. Never fails: an unterminated string or bracket runs to the end. */
void kb_pylines_init(struct kb_pylines *pl, const char *text, size_t len);
void kb_pylines_release(struct kb_pylines *pl);

/* The indentation of line l, in bytes (its leading spaces and tabs). */
size_t kb_pyline_indent(const struct kb_pylines *pl, const struct kb_pyline *l);

/* Does the code of l start with the keyword kw, followed by a non-identifier byte? */
bool kb_pyline_starts(const struct kb_pylines *pl, const struct kb_pyline *l, const char *kw);

/* The index of the first line after line i (a block's header) back at i's indentation or less. */
size_t kb_pylines_block_end(const struct kb_pylines *pl, size_t i);

/* The index of the logical line that holds physical line lineno (1-based), or SIZE_MAX. */
size_t kb_pylines_at(const struct kb_pylines *pl, int lineno);

/*
 * In the code view, the offset of the bracket closing the one at open
 * ('(', '[' or '{'), searching before limit; SIZE_MAX when there is none.
 */
size_t kb_pyview_match(const struct kb_pylines *pl, size_t open, size_t limit);

#endif
