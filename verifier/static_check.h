#ifndef KB_STATIC_CHECK_H
#define KB_STATIC_CHECK_H
/*
 * Static checks of a candidate's source, run before it is built: cheap,
 * and they close hacks the harness cannot see at run time. A finding makes
 * the candidate rejected with check "static" (PROTOCOL.md).
 *
 * The scan works on two views of the source, both the length of the
 * original with newlines kept (so line numbers hold): "code", where
 * comments and the insides of string and character literals (raw strings
 * too) are blanked, and "text", where only comments are blanked. Rules
 * match identifiers in the code view, so a forbidden word in a comment or
 * a string does not fire; the exceptions are noted below, where the
 * forbidden thing can only be spelled in a string.
 *
 * Both formats (rule names in quotes):
 *   "process"          fork, vfork, clone, exec*, system, popen, posix_spawn*,
 *                      kill, exit/_exit/quick_exit, signal/sigaction (a
 *                      kernel may not swallow SIGSEGV or end the harness)
 *   "dynamic_loading"  dlopen, dlmopen, dlsym, dlvsym
 *   "syscall"          syscall, ptrace, prctl, mprotect, setrlimit, and
 *                      asm statements whose text says syscall/sysenter/int 0x80
 *                      or .incbin (a file's bytes read at build time)
 *   "forbidden_include" an #include of an absolute path or one with "..",
 *                      a computed #include, #embed: the compiler would read
 *                      files outside the include path into its messages
 *                      (directives are found through %: digraphs and
 *                      backslash-newline splices too)
 *   "line_directive"   #line and GNU line markers ('# 12 "file"'): the scan
 *                      of the preprocessed source trusts line markers to
 *                      tell the kernel's lines from system headers'
 *   "environment"      getenv, secure_getenv, setenv, putenv, unsetenv, environ
 *   "file_io"          fopen, freopen, fdopen, open, openat, creat, write,
 *                      pwrite, writev, fwrite, dprintf, dup*, fcntl, ioctl,
 *                      unlink, *fstream, basic_*fstream, *filebuf,
 *                      std::filesystem (also as a qualifier or namespace
 *                      alias) (the harness's result channel is a
 *                      descriptor in the same process: nothing may write
 *                      to descriptors; printf/fprintf to stdout and stderr
 *                      stay allowed, they are logs only)
 *   "network"          socket, connect, getaddrinfo, gethostbyname, sendto, recvfrom
 *   "threads"          pthread_create, std::thread, std::jthread, std::async
 *                      (OpenMP pragmas are fine: they join before returning)
 *   "stream"           cudaStreamCreate*, cudaStreamPerThread, cudaStreamLegacy:
 *                      all work belongs on the stream the harness passes
 * Short common words (open, write, exit, kill, system, signal, connect,
 * clone) fire when called, when their address is taken (&name, = name) or
 * on a preprocessor line (a #define cannot hide them); member calls such as
 * x.write(...) do not.
 *
 * Native ABI (.cu/.cpp with kb_forward):
 *   "forbidden_include" also torch/, ATen/, c10/, caffe2/, pybind11/, Python.h
 *   "python_escape"     a Python C API name (Py_*, _Py*, PyXxx_*): the
 *                       harness process would resolve it for the kernel
 *   "missing_entry"     no kb_forward
 *
 * The word list alone is fooled by the preprocessor (#define P(a,b) a##b,
 * then P(PyRun_,SimpleString)). The build therefore also runs the
 * compiler's preprocessor on the kernel (in the sandbox, with the build's
 * flags) and scans the expanded text of the kernel's own lines:
 * kb_preprocessed_own_text then kb_static_check_expanded. The raw scan
 * stays: its messages name what the kernel wrote.
 *
 * Torch-extension (PYBIND11_MODULE):
 *   "torch_compute"  a torch::/at:: function other than the allocation and
 *                    metadata helpers (empty, empty_like, empty_strided,
 *                    from_blob, TensorOptions, dtype, device, ...; zeros,
 *                    ones and full are compute: a kernel writes its
 *                    outputs itself); any of torch::nn, at::native,
 *                    torch::autograd, linalg, fft, special, jit, indexing
 *                    (at::cuda, torch::cuda and c10 are allowed: streams,
 *                    guards); a computing Tensor method (.matmul, .sum,
 *                    .add_, .copy_, .clone, .to, .float, .permute,
 *                    .contiguous is allowed, ... the list is in
 *                    static_check.c); such a name called unqualified on a
 *                    tensor variable (ADL finds at::); arithmetic, indexing
 *                    or comparison operators on a tensor variable; `using
 *                    namespace torch/at` (it hides the qualifier).
 *                    Allowed metadata: .size .sizes .stride .strides .numel
 *                    .dim .dtype .scalar_type .device .data_ptr .contiguous
 *                    .is_cuda .options .view .reshape .squeeze .unsqueeze
 *                    .flatten, TORCH_CHECK, AT_DISPATCH_*.
 *   "try_catch"      try/catch (a fallback to torch on failure)
 *   "python_escape"  py::exec, py::eval, py::eval_file, py::module(_)::import,
 *                    py::globals, py::function, .attr(...), PyRun_*,
 *                    PyImport_*, PyEval_*, PyObject_Call*, PyObject_GetAttr*
 *   "timer_patching" setattr/PyObject_SetAttr* anywhere; and, inside string
 *                    literals (where Python names live in C++), Event,
 *                    elapsed_time, synchronize, perf_counter(_ns),
 *                    monotonic(_ns), process_time, __setattr__, timeit
 */
#include "core/common.h"
#include "core/pyscan.h"
#include "core/strbuf.h"

#include <cjson/cJSON.h>

enum kb_kernel_abi { KB_ABI_UNKNOWN, KB_ABI_NATIVE, KB_ABI_TORCH_EXT, KB_ABI_MODELNEW };

struct kb_finding {
	int line;             /* 1-based */
	const char *rule;     /* static string, e.g. "file_io" */
	char *message;        /* short, names the construct */
};

struct kb_findings {
	struct kb_finding *v;
	size_t nr, alloc;
};

#define KB_FINDINGS_INIT { NULL, 0, 0 }

void kb_findings_release(struct kb_findings *f);

/*
 * A line `class ModelNew` (a KernelBench candidate, Python): modelnew; else
 * PYBIND11_MODULE in code: torch-ext; else kb_forward: native; else unknown.
 */
enum kb_kernel_abi kb_source_abi(const char *text, size_t len);
/* "native", "torch-ext", "modelnew", "unknown" (the protocol's spelling). */
const char *kb_abi_name(enum kb_kernel_abi abi);

/* Append a finding (no duplicates, at most a fixed number after first). */
void kb_findings_add(struct kb_findings *f, size_t first, int line, const char *rule,
		     const char *fmt, ...) KB_PRINTF(5, 6);

/*
 * KB_STATIC_MIXED: torch calls in a torch extension or a ModelNew's C++ are
 * allowed (no "torch_compute"): on the cuda backend the harness proves at
 * run time that the custom kernels do work (PROTOCOL.md "Custom work").
 */
#define KB_STATIC_MIXED 1u

/*
 * ModelNew (KernelBench's format, a .py file): the C++/CUDA in its
 * triple-quoted strings is checked with the torch-extension rules, at the
 * .py file's own line numbers; and the Python around it:
 *   "missing_entry"   no `class ModelNew`
 *   "torch_fallback"  no load_inline or cpp_extension load: nothing custom
 *   "timer_patching"  an assignment to a timer or sync (torch.cuda.Event,
 *                     torch.cuda.synchronize, time.perf_counter, ...) or
 *                     setattr on torch or time
 */
int kb_static_check_flags(const char *text, size_t len, enum kb_kernel_abi abi, unsigned flags,
			  struct kb_findings *out);

/* static_check_py.c: the ModelNew file's parts. */
bool kb_py_defines_modelnew(const char *text, size_t len);
/* kb_py_views, the file's C++ and Python views, is in core/pyscan.h (bot/jobs reads .py files too). */
/* The Python-level findings above (missing_entry, torch_fallback, timer_patching). */
void kb_py_check(const char *text, size_t len, struct kb_findings *out);

/*
 * Check text as a kernel of the given ABI (KB_ABI_UNKNOWN: detect). Appends
 * findings in line order to out; returns how many were appended.
 */
int kb_static_check(const char *text, size_t len, enum kb_kernel_abi abi, struct kb_findings *out);

/* Read path (at most 4 MiB) and check it; *abi gets the detected ABI. -1 when unreadable. */
int kb_static_check_file(const char *path, enum kb_kernel_abi *abi, struct kb_findings *out);

/*
 * The kernel's own lines out of `g++ -E` / `nvcc -E` output pp: the line
 * markers ('# 12 "file" flags') say which file and line each output line
 * comes from; lines of files with a relative name or a name under own_dir
 * (the build's scratch directory, where the kernel is compiled under its
 * base name) are kept, system and include-path headers (absolute names
 * elsewhere) and <built-in>/<command-line> are not. out gets exactly
 * nr_lines lines (the kernel's line count), each holding the expansion of
 * that source line, so findings keep the kernel's line numbers. A line
 * inside a raw string literal is never taken for a marker.
 */
void kb_preprocessed_own_text(const char *pp, size_t len, const char *own_dir, size_t nr_lines,
			      struct strbuf *out);

/*
 * The backstop scan of a native kernel: src is the kernel as written, own
 * its preprocessed lines (kb_preprocessed_own_text). src is checked for
 * line control only ("line_directive": the extraction trusts markers);
 * own for the identifier rules above (process, dynamic_loading, syscall,
 * environment, file_io, network, threads, stream, python_escape), with
 * " (after preprocessing)" after each message. Appends findings in line
 * order; returns how many.
 */
int kb_static_check_expanded(const char *src, size_t src_len, const char *own, size_t own_len,
			     struct kb_findings *out);

/* [{"line": n, "rule": "...", "message": "..."}, ...] */
cJSON *kb_findings_to_json(const struct kb_findings *f);

#endif
