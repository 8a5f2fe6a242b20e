#ifndef KB_SYMBOL_ALLOWLIST_H
#define KB_SYMBOL_ALLOWLIST_H
/*
 * What a kernel library may import: the allowlist the build checks every
 * built kernel's undefined symbols against (elf_symbols.h reads them). A
 * kernel needs math, memory, the C++ runtime, OpenMP, the CUDA runtime
 * and driver, cuBLAS/cuBLASLt and printing to stdout/stderr; everything
 * else is refused, by name: the Python C API, dlopen and friends, process,
 * thread, file, socket, environment and raw system calls, memory mapping
 * (mmap/mprotect: a way to make injected bytes executable or to patch the
 * harness's own code), std::filesystem and the file streams.
 *
 * It is a backstop behind the static check of the source and its
 * preprocessed text (static_check.h), not the containment: a kernel can
 * still reach libc through pointer arithmetic from an allowed function's
 * address. The sandbox (sandbox.h) is what contains it.
 *
 * The table is in symbol_allowlist.c, one group per reason.
 */
#include "core/common.h"

/*
 * NULL when a kernel library may import sym (a symbol name as the ELF
 * string table spells it: mangled, no version suffix). Otherwise why not,
 * a short static phrase for a message: "Python C API", "dynamic loading",
 * "file access", ..., or "not on the import allowlist".
 */
const char *kb_import_refusal(const char *sym);

#endif
