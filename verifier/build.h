#ifndef KB_BUILD_H
#define KB_BUILD_H
/*
 * Building native-ABI candidate kernels (kernelbot_abi.h) into shared
 * libraries the harness loads.
 *
 *   .cu  -> nvcc -O3 -std=c++17 -arch=ARCH -shared -Xcompiler -fPIC
 *               -Xptxas -v -lineinfo -I... -o kernel.so
 *   .cpp -> g++ -O3 -std=c++17 -march=native -fopenmp -shared -fPIC
 *               -I... -o kernel.so
 *
 * A .cu whose first line is "// kernelbot: link cublasLt" (or cublas) is
 * linked with that library too (-lcublasLt after the source).
 *
 * Builds are cached by content: the key is the SHA-256 of the source bytes,
 * the compiler's path and `--version` output, the flags, and the ABI
 * header's bytes. An entry is <cache_dir>/<hex>/ holding kernel.so (when
 * it built), build.json (the outcome: ok, seconds, per-kernel registers,
 * shared memory, spills and stack from ptxas -v; the trimmed error text on
 * failure), build.log (the compiler's output) and a copy of the source.
 * Entries are built in a temp dir inside cache_dir and renamed into place,
 * so a reader never sees half an entry. Failed builds are cached too (a
 * compile that timed out is not: the machine may have been busy).
 *
 * Compiles run through the subprocess runner with a scrubbed environment,
 * LC_ALL=C and a timeout; the source is compiled under its own base name
 * from inside the temp dir, so messages name "kernel.cu:12", never a
 * temp path.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/strvec.h"

#include <cjson/cJSON.h>

struct kb_config;
struct kb_datadir;
struct kb_python_probe;

struct kb_build_env {
	char *nvcc;             /* CUDA compiler as configured (resolved when run) */
	char *cxx;              /* C++ compiler for the CPU backend */
	char *arch;             /* nvcc -arch value, e.g. "sm_90" */
	char *cache_dir;        /* <state_dir>/build-cache */
	char *abi_header;       /* its bytes are part of the key; NULL: none */
	struct strvec include_flags; /* "-I<dir>" entries */
	int64_t timeout_ms;     /* per compile */
	int jobs;               /* kb_build_many's worker threads, >= 1 */
};

/*
 * From the config: compilers, build_jobs (0: one per core), cuda_arch
 * ("auto": the GPU's compute capability from the probe, e.g. sm_90, or
 * sm_90 when there is no GPU; probe may be NULL), cache_dir
 * <state_dir>/build-cache, includes and ABI header from dd (may be NULL:
 * no -I flags). Creates the cache dir. Returns 0 or -1.
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
	bool ok;                /* the library built */
	bool cached;            /* from the cache: no compiler ran */
	char hash[65];          /* the cache key, hex */
	char *dir;              /* the cache entry */
	char *library;          /* <dir>/kernel.so when ok */
	double seconds;         /* compile time (of the original build when cached) */
	char *errors;           /* trimmed compiler messages when !ok ("" when ok) */
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
 * outcome in res (look at res->ok: a compile error is an outcome, cached
 * like a success), -1 when nothing could be decided (source unreadable,
 * compiler missing, cache dir unwritable, compile timed out; logged),
 * KB_ECANCELLED when a stop was requested. res must be initialised.
 */
int kb_build_native(const struct kb_build_env *env, const char *source, struct kb_build_result *res);

/*
 * Build n sources with up to env->jobs threads. results[i] (initialised by
 * the caller) receives source i's outcome. Returns 0 when every build
 * returned 0, else the first failure's code (the others still ran).
 */
int kb_build_many(const struct kb_build_env *env, const char *const *sources, size_t n,
		  struct kb_build_result *results);

/* The build.json object for res (the caller frees it). */
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
