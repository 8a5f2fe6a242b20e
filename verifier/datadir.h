#ifndef KB_DATADIR_H
#define KB_DATADIR_H
/*
 * Where the verifier's files live at run time: the data dir holds the
 * Python harness (verifier/harness/kb_harness.py) and the kernel ABI header
 * (kernelbot_abi.h); a kernel is compiled against the ABI header and the
 * DLPack header it includes.
 *
 * The data dir is the first of: config [harness] data_dir; $KERNELBOT_DATA_DIR;
 * the repository checkout the binary sits in (up to three levels above the
 * binary's directory: build/kernelbot, build/asan/kernelbot, build/tests/x);
 * <exe>/../share/kernelbot (an installed binary). An installed tree keeps the
 * header in share/kernelbot/include, a checkout in verifier/include: both work.
 *
 * DLPack (dlpack/dlpack.h) comes from $KERNELBOT_DLPACK_INCLUDE, the system
 * (/usr/include via libdlpack-dev, /usr/local/include), the ABI include dir,
 * or <exe_dir>/include (a copy the build may carry next to the binary).
 */
#include "core/common.h"

struct kb_config;
struct strbuf;

struct kb_datadir {
	char *root;        /* the data dir */
	char *harness;     /* <root>/verifier/harness/kb_harness.py */
	char *abi_include; /* directory holding kernelbot_abi.h */
	char *abi_header;  /* <abi_include>/kernelbot_abi.h */
	char *dlpack_include; /* directory holding dlpack/dlpack.h; NULL: a system default dir */
};

/*
 * Locate the data dir and include dirs. Returns 0, or -1 after logging what
 * was tried. The struct must be released either way.
 */
int kb_datadir_find(const struct kb_config *cfg, struct kb_datadir *dd);
void kb_datadir_release(struct kb_datadir *dd);

/* Push the -I flags a kernel needs onto argv-style vector (see strvec.h). */
struct strvec;
void kb_datadir_include_flags(const struct kb_datadir *dd, struct strvec *flags);

/* The directory holding the running binary (from /proc/self/exe). */
int kb_exe_dir(struct strbuf *out);

/*
 * Resolve a program name the way execvp would: a name with '/' is taken
 * as is (must be executable), else the first executable match in $PATH.
 * Returns 0 with the path in out, or KB_ENOTFOUND (nothing logged).
 */
int kb_find_program(const char *name, struct strbuf *out);

#endif
