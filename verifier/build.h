#ifndef KB_BUILD_H
#define KB_BUILD_H
/*
 * Building native-ABI candidate kernels (kernelbot_abi.h) into shared
 * libraries the harness loads. CFLAGS below stands for the flags every
 * step of one build shares:
 *
 *   .cu  -> nvcc CFLAGS -E -o kernel.ii SRC                 (the check's text)
 *           nvcc CFLAGS -Xptxas -v -lineinfo -c -o kernel.o SRC
 *           nvcc -shared -arch=ARCH -o kernel.so kernel.o [-lcublasLt]
 *           CFLAGS = -O3 -std=c++17 -arch=ARCH -Xcompiler -fPIC -I...
 *   .cpp -> g++ CFLAGS -E -o kernel.ii SRC
 *           g++ CFLAGS -shared -o kernel.so SRC
 *           CFLAGS = -O3 -std=c++17 -march=native -fopenmp -fPIC -I...
 *
 * A .cu whose first line is "// kernelbot: link cublasLt" (or cublas) is
 * linked with that library too (-lcublasLt after the object).
 *
 * Sandbox. Every step runs inside env->sandbox (sandbox.h) when one is
 * set and enabled: the compiler sees the system view, the include dirs
 * (read-only) and one fresh scratch directory under env->tmp_root, where
 * the source is copied and the outputs are written; never the cache, the
 * state dir or a file the kernel names (`#include "/etc/passwd"` fails:
 * the file is not there). The bot, outside, then copies the outputs into
 * the cache (a regular file, no link followed, size-capped). Only
 * `compiler --version`, with no candidate input, runs outside.
 *
 * Checks after the compile (a backstop behind the static check of the
 * source, which callers run first):
 *   - the preprocessed source: the kernel's own lines of the -E output
 *     are scanned with kb_static_check_expanded (token pasting and macros
 *     cannot hide a forbidden call);
 *   - the imports: the undefined symbols of the kernel's own code, read
 *     from the ELF file (elf_symbols.h), against the allowlist
 *     (symbol_allowlist.h). For g++ that is kernel.so's .dynsym; for nvcc
 *     it is kernel.o's .symtab, because nvcc links the CUDA runtime
 *     statically and libcudart_static itself imports dlopen, fopen,
 *     socket, getenv...: the object holds exactly what the kernel's code
 *     calls. Static linking stays (rather than -cudart shared) so the
 *     library does not pick up the harness's torch-bundled libcudart of
 *     the same soname, which may be older than the toolkit's.
 * A finding makes the outcome fail (res->ok false, res->library NULL)
 * with the findings in res->findings and their messages in res->errors,
 * e.g. "kernel library imports 'PyRun_SimpleString' (Python C API): not
 * allowed"; callers report them like static rejections.
 *
 * Cache. Builds are cached by content: the key is the SHA-256 of the
 * source bytes, the compiler's path and `--version` output, the flags
 * (they name the arch), the libraries, the ABI header's bytes and whether
 * the build is sandboxed (an unsandboxed compile may read files a
 * sandboxed one cannot: its outcome is not reused by one). An entry
 * is <cache_dir>/<hex>/ holding kernel.so (when it compiled), build.json
 * (the outcome: compiled, the SHA-256 of kernel.so, the imports, seconds,
 * per-kernel registers, shared memory, spills and stack from ptxas -v; the
 * trimmed error text on failure), build.log (the compiler's output),
 * preprocessed.ii (the kernel's own preprocessed lines) and a copy of the
 * source. Entries are assembled in a temp dir inside cache_dir and renamed
 * into place, so a reader never sees half an entry; no sandbox ever sees
 * cache_dir writable. Every hit re-hashes kernel.so against build.json and
 * re-runs both checks (so a changed allowlist applies to old entries); a
 * mismatch, or a missing or garbled build.json, logs a warning naming the
 * entry, removes it and rebuilds. What the hash cannot rule out is a
 * change between the hit and the harness loading the library by a process
 * of the bot's own user: keeping candidates away from the cache is the
 * sandbox's job. Failed builds are cached too (a compile that timed out is
 * not: the machine may have been busy).
 *
 * Compiles run through the subprocess runner with a scrubbed environment
 * (built from nothing in the sandbox), LC_ALL=C and a timeout; the source
 * is compiled under its own base name from inside the scratch dir, so
 * messages name "kernel.cu:12", never a temp path.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "verifier/static_check.h"

#include <cjson/cJSON.h>

struct kb_config;
struct kb_datadir;
struct kb_python_probe;
struct kb_sandbox;

struct kb_build_env {
	char *nvcc;             /* CUDA compiler as configured (resolved when run) */
	char *cxx;              /* C++ compiler for the CPU backend */
	char *arch;             /* nvcc -arch value, e.g. "sm_90" */
	char *cache_dir;        /* <state_dir>/build-cache */
	char *tmp_root;         /* <state_dir>/build-tmp: scratch dirs, never inside cache_dir */
	/* Borrowed; NULL (or disabled): compiles run unsandboxed. Not set by
	 * kb_build_env_init: the caller points it at its kb_sandbox (set up
	 * from [sandbox], sandbox.h), which must outlive the env. */
	const struct kb_sandbox *sandbox;
	char *abi_header;       /* its bytes are part of the key; NULL: none */
	struct strvec include_flags; /* "-I<dir>" entries */
	int64_t timeout_ms;     /* per compile */
	int jobs;               /* kb_build_many's worker threads, >= 1 */
};

/*
 * From the config: compilers, build_jobs (0: one per core), cuda_arch
 * ("auto": the GPU's compute capability from the probe, e.g. sm_90, or
 * sm_90 when there is no GPU; probe may be NULL), cache_dir
 * <state_dir>/build-cache, tmp_root <state_dir>/build-tmp, includes and
 * ABI header from dd (may be NULL: no -I flags); sandbox NULL. Creates
 * both dirs. Returns 0 or -1.
 */
int kb_build_env_init(struct kb_build_env *env, const struct kb_config *cfg,
		      const struct kb_datadir *dd, const struct kb_python_probe *probe);
void kb_build_env_release(struct kb_build_env *env);

struct kb_kernel_resources {
	char *name;             /* the (mangled) entry function */
	int registers;
	int64_t shared_bytes;   /* static shared memory */
	int64_t spill_stores;   /* bytes */
	int64_t spill_loads;
	int64_t stack_bytes;    /* stack frame */
};

struct kb_build_result {
	bool ok;                /* the library built and passed the checks */
	bool compiled;          /* the compiler produced the library (ok also needs the checks) */
	bool cached;            /* from the cache: no compiler ran */
	char hash[65];          /* the cache key, hex */
	char library_sha256[65];/* of kernel.so when compiled, hex; "" otherwise */
	char *dir;              /* the cache entry */
	char *library;          /* <dir>/kernel.so when ok */
	double seconds;         /* compile time (of the original build when cached) */
	char *errors;           /* trimmed compiler messages, or the findings, when !ok ("" when ok) */
	/* what the checks refused (the preprocessed source's rules, and
	 * "imports" with line 0 for each refused symbol); non-empty => !ok */
	struct kb_findings findings;
	struct kb_kernel_resources *kernels;
	size_t nr_kernels;
	/* over all kernels: max registers, shared and stack; summed spills */
	int registers;
	int64_t shared_bytes, spill_stores, spill_loads, stack_bytes;
};

void kb_build_result_init(struct kb_build_result *r);
void kb_build_result_release(struct kb_build_result *r);

/*
 * Build one source (.cu, or .cpp/.cc/.cxx). Returns 0 when there is an
 * outcome in res (look at res->ok: a compile error or a refused check is
 * an outcome, cached like a success; a compile that timed out is an
 * outcome too, not cached), -1 when nothing could be decided (source
 * unreadable, compiler missing, cache dir unwritable, sandbox failing to
 * start; logged), KB_ECANCELLED when a stop was requested. res must be
 * initialised.
 */
int kb_build_native(const struct kb_build_env *env, const char *source, struct kb_build_result *res);

/*
 * Build n sources with up to env->jobs threads. results[i] (initialised by
 * the caller) receives source i's outcome. Returns 0 when every build
 * returned 0, else the first failure's code (the others still ran).
 */
int kb_build_many(const struct kb_build_env *env, const char *const *sources, size_t n,
		  struct kb_build_result *results);

/* The build.json object for res (the caller frees it); findings as "static". */
cJSON *kb_build_result_to_json(const struct kb_build_result *res);

/* Fill res's kernels and totals from ptxas -v output (exposed for tests). */
void kb_build_parse_ptxas(const char *text, struct kb_build_result *res);

/*
 * Keep what a proposer needs from compiler output: lines mentioning
 * "error" with two lines of context either side (gaps marked "..."),
 * else the last lines; every occurrence of tmpdir (and tmpdir + "/")
 * removed; at most about 4 KB.
 */
void kb_build_trim_errors(const char *output, const char *tmpdir, struct strbuf *out);

#endif
