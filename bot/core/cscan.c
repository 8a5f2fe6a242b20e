#include "core/common.h"
#include "core/cscan.h"

#include <ctype.h>

bool kb_c_ident_char(int c)
{
	return isalnum((unsigned char)c) || c == '_';
}

bool kb_c_raw_string_at(const char *s, size_t quote)
{
	size_t k;

	if (quote == 0 || s[quote - 1] != 'R')
		return false;
	k = quote - 1;
	while (k > 0 && kb_c_ident_char(s[k - 1]))
		k--;
	switch (quote - k) {
	case 1: return true;                               /* R */
	case 2: return strchr("uUL", s[k]) != NULL;        /* uR UR LR */
	case 3: return s[k] == 'u' && s[k + 1] == '8';     /* u8R */
	default: return false;
	}
}

bool kb_c_digit_separator_at(const char *s, size_t q)
{
	size_t k = q;

	while (k > 0 && (kb_c_ident_char(s[k - 1]) || s[k - 1] == '.' || s[k - 1] == '\''))
		k--;
	return k < q && isdigit((unsigned char)s[k]);
}
