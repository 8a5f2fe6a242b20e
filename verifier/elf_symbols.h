#ifndef KB_ELF_SYMBOLS_H
#define KB_ELF_SYMBOLS_H
/*
 * The undefined symbols of a kernel's ELF file, read without running
 * anything (no nm, no dlopen): what a shared library imports (its .dynsym)
 * or what a relocatable object references (its .symtab). The build checks
 * them against the import allowlist (symbol_allowlist.h).
 *
 * Only 64-bit little-endian ELF, the format of every runner kernelbot
 * supports (x86-64, aarch64). The bytes come from a compile of hostile
 * source: every offset, size and string is checked against the buffer, and
 * a malformed file is an error with a reason, never a read out of bounds.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

/*
 * The names of the undefined symbols in data (an ELF file of len bytes):
 * entries of every SHT_DYNSYM section for a shared object (ET_DYN), of
 * every SHT_SYMTAB section for a relocatable object (ET_REL), with
 * st_shndx == SHN_UNDEF and a non-empty name, whatever their binding (a
 * weak import is an import too). Appended to out sorted and without
 * duplicates. Returns 0, or -1 with why (e.g. "not a 64-bit little-endian
 * ELF file") set and nothing appended.
 */
int kb_elf_undefined_symbols(const void *data, size_t len, struct strvec *out, struct strbuf *why);

#endif
