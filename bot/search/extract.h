#ifndef KB_SEARCH_EXTRACT_H
#define KB_SEARCH_EXTRACT_H
/*
 * From a model's reply to a kernel source, and sources to their identity.
 *
 * The reply carries the kernel in one fenced code block (``` or ~~~, any
 * info string: cuda, cpp, c++, c, or none). Anything around it (names,
 * reasoning, markdown) is optional and ignored. With several blocks, the
 * one that defines the ABI entry (kb_forward, or PYBIND11_MODULE) wins,
 * the last of those (a reply's revision: "first try ... better ..."),
 * which why then says; with none defining it, the longest block.
 */
#include "core/common.h"

struct strbuf;

/*
 * The kernel of reply into out (replacing its contents; CRLF line endings
 * become LF, the fence's indentation is removed). 0, or -1 with a
 * one-line reason in why (reset first; may be NULL; nothing logged):
 * "reply is empty", "reply has no code block", "reply's code block is not
 * closed", "reply's code block is empty". A fence line inside a block
 * comment or raw string of the code does not close the block (unless the
 * block would then never close). An unclosed block is used only as the
 * reason when no closed block has code. On success why holds a note when
 * a choice between kernels was made, else is empty.
 */
int kb_extract_kernel(const char *reply, struct strbuf *out, struct strbuf *why);

/*
 * Whether s (n bytes, one line) opens or closes a Markdown code fence:
 * optional indentation, then three or more ` or ~. Sets the fence
 * character, its count and the indentation.
 */
bool kb_fence_marker(const char *s, size_t n, char *ch, size_t *count, size_t *indent);

/*
 * A view of source for scanners (behavior.c, the ABI test above): a
 * malloc'd string of the same length with newlines kept, comments blanked
 * to spaces and, with blank_strings, the insides of string and character
 * literals (raw strings too) blanked as well; the quotes stay.
 */
char *kb_source_view(const char *source, size_t len, bool blank_strings);

/*
 * SHA-256 (hex) of the normalised source: comments removed, string
 * literals kept, runs of whitespace collapsed to one space, whitespace
 * next to punctuation dropped, so two sources that differ only in
 * layout or comments are duplicates. (Kept where dropping it would join
 * tokens: "a - -b", "x + +y"; the newline ending a preprocessor line is
 * kept; backslash-newline splices are removed.)
 */
void kb_source_hash(const char *source, char hex[65]);

/*
 * Template parameters in a kernel (the search's template step): a model
 * rewrites a good kernel so each tunable constant is
 *
 *     // kb-tune NAME: V1 V2 V3 ...      (the first value is the default)
 *     #ifndef NAME
 *     #define NAME V1
 *     #endif
 *
 * NAME is an identifier (conventionally KB_P_...), values are integers
 * (at most 16 per parameter, at most 8 parameters). A point is rendered
 * by prepending "#define NAME V" lines for every parameter.
 */
#define KB_TPARAM_MAX 8
#define KB_TPARAM_MAX_VALUES 16

struct kb_tparam {
	char name[64];
	long long values[KB_TPARAM_MAX_VALUES];
	size_t nr_values;
};

struct kb_tparams {
	struct kb_tparam p[KB_TPARAM_MAX];
	size_t nr;
};

/*
 * Parse the kb-tune lines of source. 0 (nr may be 0: no parameters), or
 * -1 with why (reset first; may be NULL) and out->nr 0: a malformed line
 * (no name, no ':', no values, a value that is not a decimal integer, a
 * value repeated), too many values or parameters, a name declared twice,
 * a declared name without its #ifndef/#define guard. A kb-tune line is a
 * `//` comment line whose text starts with "kb-tune"; values may be
 * separated by spaces or commas.
 */
int kb_tparams_parse(const char *source, struct kb_tparams *out, struct strbuf *why);
/* Appends source with one value per parameter (digits[i] indexes p[i].values; out of range: the default) defined first. */
void kb_tparams_render(const char *source, const struct kb_tparams *tp, const size_t *digits,
		       struct strbuf *out);
/* Appends "BLOCK=256 VEC=4" for digits. */
void kb_tparams_point_name(const struct kb_tparams *tp, const size_t *digits, struct strbuf *out);

#endif
