#include "core/common.h"
#include "verifier/symbol_allowlist.h"

#include <ctype.h>

enum match {
	EXACT,          /* the whole name */
	PREFIX,         /* the name starts with pattern */
	PREFIX_UPPER,   /* pattern, then an upper-case letter: "cuda" + Malloc */
	CONTAINS,       /* pattern anywhere (a class inside a mangled name) */
	MATH,           /* pattern, pattern + "f", pattern + "l", glibc's __pattern_finite */
};

/* NULL group text: allowed. Otherwise the reason the import is refused. */
#define OK NULL

struct import_rule {
	enum match how;
	const char *pattern;
	const char *refused;
};

/*
 * The import allowlist, read top to bottom, first match wins. Refusals
 * come first: they name the reason in the message, and they carve out of
 * the broad C++ prefixes further down (std::filesystem is under _ZNSt). A
 * name that matches nothing is refused too ("not on the import
 * allowlist"): a new need is added here, with its reason.
 */
static const struct import_rule rules[] = {
	/* Refused: the Python C API (the harness is a python process: a
	 * kernel could run code in it or patch the judge) */
	{ PREFIX, "Py_", "Python C API" }, { PREFIX_UPPER, "Py", "Python C API" },
	{ PREFIX, "_Py", "Python C API" },

	/* Refused: loading code or finding symbols at run time */
	{ EXACT, "dlopen", "dynamic loading" }, { EXACT, "dlmopen", "dynamic loading" },
	{ EXACT, "dlsym", "dynamic loading" }, { EXACT, "dlvsym", "dynamic loading" },
	{ EXACT, "dlclose", "dynamic loading" }, { EXACT, "dlerror", "dynamic loading" },
	{ EXACT, "dladdr", "dynamic loading" }, { EXACT, "dladdr1", "dynamic loading" },
	{ EXACT, "dlinfo", "dynamic loading" }, { EXACT, "dl_iterate_phdr", "dynamic loading" },
	{ PREFIX, "_dl_", "dynamic loading" }, { PREFIX, "__libc_dl", "dynamic loading" },

	/* Refused: other processes, ending or signalling the harness */
	{ EXACT, "fork", "process control" }, { EXACT, "vfork", "process control" },
	{ EXACT, "clone", "process control" }, { EXACT, "clone3", "process control" },
	{ EXACT, "__clone", "process control" }, { PREFIX, "exec", "process control" },
	{ EXACT, "fexecve", "process control" }, { EXACT, "system", "process control" },
	{ EXACT, "popen", "process control" }, { EXACT, "pclose", "process control" },
	{ PREFIX, "posix_spawn", "process control" }, { EXACT, "kill", "process control" },
	{ EXACT, "killpg", "process control" }, { EXACT, "exit", "process control" },
	{ EXACT, "_exit", "process control" }, { EXACT, "_Exit", "process control" },
	{ EXACT, "quick_exit", "process control" }, { EXACT, "setsid", "process control" },
	{ EXACT, "daemon", "process control" }, { PREFIX, "wait", "process control" },
	{ EXACT, "signal", "process control" }, { EXACT, "sigaction", "process control" },
	{ EXACT, "sigprocmask", "process control" },

	/* Refused: threads that outlive the call (OpenMP joins before returning) */
	{ EXACT, "pthread_create", "threads" }, { EXACT, "thrd_create", "threads" },
	{ CONTAINS, "St6thread", "threads" }, { CONTAINS, "St7jthread", "threads" },

	/* Refused: the network */
	{ EXACT, "socket", "network" }, { EXACT, "socketpair", "network" },
	{ EXACT, "connect", "network" }, { EXACT, "bind", "network" }, { EXACT, "listen", "network" },
	{ EXACT, "accept", "network" }, { EXACT, "accept4", "network" }, { EXACT, "send", "network" },
	{ EXACT, "sendto", "network" }, { EXACT, "sendmsg", "network" },
	{ EXACT, "sendmmsg", "network" }, { EXACT, "recv", "network" },
	{ EXACT, "recvfrom", "network" }, { EXACT, "recvmsg", "network" },
	{ EXACT, "recvmmsg", "network" }, { EXACT, "getaddrinfo", "network" },
	{ PREFIX, "gethostby", "network" }, { EXACT, "getnameinfo", "network" },
	{ EXACT, "setsockopt", "network" }, { EXACT, "getsockopt", "network" },

	/* Refused: files and descriptors (the harness's result channel is a
	 * descriptor of the same process), C and C++ alike */
	{ PREFIX, "open", "file access" }, { PREFIX, "__open", "file access" },
	{ PREFIX, "fopen", "file access" }, { PREFIX, "freopen", "file access" },
	{ EXACT, "fdopen", "file access" }, { PREFIX, "creat", "file access" },
	{ PREFIX, "tmpfile", "file access" }, { PREFIX, "mkstemp", "file access" },
	{ PREFIX, "mkostemp", "file access" }, { EXACT, "read", "file access" },
	{ PREFIX, "pread", "file access" }, { EXACT, "readv", "file access" },
	{ PREFIX, "__read", "file access" }, { PREFIX, "__pread", "file access" },
	{ EXACT, "write", "file access" }, { PREFIX, "pwrite", "file access" },
	{ EXACT, "writev", "file access" }, { PREFIX, "unlink", "file access" },
	{ PREFIX, "rename", "file access" }, { PREFIX, "mkdir", "file access" },
	{ EXACT, "rmdir", "file access" }, { EXACT, "remove", "file access" },
	{ PREFIX, "opendir", "file access" }, { EXACT, "fdopendir", "file access" },
	{ PREFIX, "readdir", "file access" }, { PREFIX, "chmod", "file access" },
	{ EXACT, "fchmod", "file access" }, { PREFIX, "chown", "file access" },
	{ EXACT, "fchown", "file access" }, { PREFIX, "truncate", "file access" },
	{ PREFIX, "ftruncate", "file access" }, { PREFIX, "symlink", "file access" },
	{ PREFIX, "link", "file access" }, { EXACT, "chdir", "file access" },
	{ PREFIX, "dup", "file access" }, { PREFIX, "fcntl", "file access" },
	{ EXACT, "ioctl", "file access" }, { EXACT, "memfd_create", "file access" },
	{ PREFIX, "sendfile", "file access" }, { EXACT, "mkfifo", "file access" },
	{ EXACT, "close", "file access" },
	{ CONTAINS, "10filesystem", "file access (std::filesystem)" },
	{ CONTAINS, "14basic_ifstream", "file access (std::ifstream)" },
	{ CONTAINS, "14basic_ofstream", "file access (std::ofstream)" },
	{ CONTAINS, "13basic_fstream", "file access (std::fstream)" },
	{ CONTAINS, "13basic_filebuf", "file access (std::filebuf)" },
	{ CONTAINS, "12__basic_file", "file access (std::filebuf)" },
	{ CONTAINS, "stdio_filebuf", "file access (a stream on a descriptor)" },

	/* Refused: raw system calls and changing the process itself */
	{ EXACT, "syscall", "system call" }, { EXACT, "ptrace", "system call" },
	{ EXACT, "prctl", "system call" }, { EXACT, "seccomp", "system call" },
	{ EXACT, "personality", "system call" }, { EXACT, "unshare", "system call" },
	{ EXACT, "setns", "system call" }, { EXACT, "setrlimit", "system call" },
	{ PREFIX, "prlimit", "system call" },

	/* Refused: mapping memory. malloc, new and cudaMalloc are enough for
	 * a kernel; mprotect/mmap with PROT_EXEC make injected bytes code, and
	 * with PROT_WRITE they let a kernel patch the harness's compare */
	{ PREFIX, "mmap", "memory mapping" }, { EXACT, "mprotect", "memory mapping" },
	{ EXACT, "pkey_mprotect", "memory mapping" }, { EXACT, "munmap", "memory mapping" },
	{ EXACT, "mremap", "memory mapping" }, { EXACT, "madvise", "memory mapping" },

	/* Refused: the environment (it held secrets before the sandbox) */
	{ EXACT, "getenv", "environment" }, { EXACT, "secure_getenv", "environment" },
	{ EXACT, "setenv", "environment" }, { EXACT, "putenv", "environment" },
	{ EXACT, "unsetenv", "environment" }, { EXACT, "clearenv", "environment" },
	{ EXACT, "environ", "environment" }, { EXACT, "__environ", "environment" },
	{ EXACT, "_environ", "environment" },

	/* libm: pure functions of the kernel's own values */
	{ MATH, "sin", OK }, { MATH, "cos", OK }, { MATH, "tan", OK }, { MATH, "sincos", OK },
	{ MATH, "asin", OK }, { MATH, "acos", OK }, { MATH, "atan", OK }, { MATH, "atan2", OK },
	{ MATH, "sinh", OK }, { MATH, "cosh", OK }, { MATH, "tanh", OK }, { MATH, "asinh", OK },
	{ MATH, "acosh", OK }, { MATH, "atanh", OK }, { MATH, "exp", OK }, { MATH, "exp2", OK },
	{ MATH, "exp10", OK }, { MATH, "expm1", OK }, { MATH, "log", OK }, { MATH, "log2", OK },
	{ MATH, "log10", OK }, { MATH, "log1p", OK }, { MATH, "logb", OK }, { MATH, "ilogb", OK },
	{ MATH, "pow", OK }, { MATH, "sqrt", OK }, { MATH, "cbrt", OK }, { MATH, "hypot", OK },
	{ MATH, "erf", OK }, { MATH, "erfc", OK }, { MATH, "tgamma", OK }, { MATH, "lgamma", OK },
	{ MATH, "lgamma_r", OK }, { MATH, "ceil", OK }, { MATH, "floor", OK }, { MATH, "round", OK },
	{ MATH, "lround", OK }, { MATH, "llround", OK }, { MATH, "trunc", OK }, { MATH, "rint", OK },
	{ MATH, "lrint", OK }, { MATH, "llrint", OK }, { MATH, "nearbyint", OK }, { MATH, "fmod", OK },
	{ MATH, "remainder", OK }, { MATH, "remquo", OK }, { MATH, "fma", OK }, { MATH, "fmax", OK },
	{ MATH, "fmin", OK }, { MATH, "fdim", OK }, { MATH, "fabs", OK }, { MATH, "copysign", OK },
	{ MATH, "nan", OK }, { MATH, "frexp", OK }, { MATH, "ldexp", OK }, { MATH, "modf", OK },
	{ MATH, "scalbn", OK }, { MATH, "scalbln", OK }, { MATH, "nextafter", OK },
	{ MATH, "nexttoward", OK }, { MATH, "significand", OK },
	{ PREFIX, "__isnan", OK }, { PREFIX, "__isinf", OK }, { PREFIX, "__finite", OK },
	{ PREFIX, "__fpclassify", OK }, { PREFIX, "__signbit", OK },
	/* libmvec's vector variants (_ZGVdN8v_expf) of the same functions */
	{ PREFIX, "_ZGV", OK },

	/* memory and strings: work on the kernel's own buffers */
	{ EXACT, "malloc", OK }, { EXACT, "free", OK }, { EXACT, "calloc", OK },
	{ EXACT, "realloc", OK }, { EXACT, "aligned_alloc", OK }, { EXACT, "posix_memalign", OK },
	{ EXACT, "memalign", OK }, { EXACT, "memcpy", OK }, { EXACT, "memmove", OK },
	{ EXACT, "memset", OK }, { EXACT, "memcmp", OK }, { EXACT, "memchr", OK },
	{ EXACT, "__memcpy_chk", OK }, { EXACT, "__memmove_chk", OK }, { EXACT, "__memset_chk", OK },
	{ EXACT, "strlen", OK }, { EXACT, "strnlen", OK }, { EXACT, "strcmp", OK },
	{ EXACT, "strncmp", OK }, { EXACT, "strchr", OK }, { EXACT, "strrchr", OK },
	{ EXACT, "strstr", OK }, { EXACT, "strcpy", OK }, { EXACT, "strncpy", OK },
	{ EXACT, "strcat", OK }, { EXACT, "strncat", OK }, { EXACT, "strdup", OK },
	{ PREFIX, "strto", OK }, { EXACT, "atoi", OK }, { EXACT, "atol", OK }, { EXACT, "atof", OK },
	{ EXACT, "qsort", OK }, { EXACT, "bsearch", OK }, { EXACT, "abs", OK }, { EXACT, "labs", OK },
	{ EXACT, "llabs", OK }, { EXACT, "__errno_location", OK }, { PREFIX, "__ctype_", OK },
	{ EXACT, "toupper", OK }, { EXACT, "tolower", OK }, { EXACT, "__tls_get_addr", OK },
	{ EXACT, "clock_gettime", OK },

	/* printing: logs on stdout/stderr, the only streams a kernel can reach
	 * (fopen, fdopen, freopen and tmpfile are refused above) */
	{ EXACT, "printf", OK }, { EXACT, "fprintf", OK }, { EXACT, "vprintf", OK },
	{ EXACT, "vfprintf", OK }, { EXACT, "puts", OK }, { EXACT, "putchar", OK },
	{ EXACT, "fputs", OK }, { EXACT, "fputc", OK }, { EXACT, "putc", OK }, { EXACT, "_IO_putc", OK },
	{ EXACT, "fwrite", OK }, { EXACT, "fflush", OK }, { EXACT, "stdout", OK },
	{ EXACT, "stderr", OK }, { EXACT, "snprintf", OK }, { EXACT, "vsnprintf", OK },
	{ EXACT, "sprintf", OK }, { EXACT, "vsprintf", OK }, { PREFIX, "__printf_chk", OK },
	{ PREFIX, "__fprintf_chk", OK }, { PREFIX, "__vprintf_chk", OK },
	{ PREFIX, "__vfprintf_chk", OK }, { PREFIX, "__snprintf_chk", OK },
	{ PREFIX, "__vsnprintf_chk", OK }, { PREFIX, "__sprintf_chk", OK },

	/* assert and abort: end the harness process, which the judge sees as a crash */
	{ EXACT, "__assert_fail", OK }, { EXACT, "__assert_perror_fail", OK },
	{ EXACT, "__stack_chk_fail", OK }, { EXACT, "__stack_chk_guard", OK },
	{ EXACT, "abort", OK },

	/* the C++ runtime: operator new/delete (_Znwm, _ZdlPv, ...), exceptions,
	 * guards of function-local statics, RTTI of the ABI's classes */
	{ PREFIX, "_Znw", OK }, { PREFIX, "_Zna", OK }, { PREFIX, "_Zdl", OK },
	{ PREFIX, "_Zda", OK }, { PREFIX, "__cxa_", OK }, { EXACT, "__gxx_personality_v0", OK },
	{ PREFIX, "_Unwind_", OK }, { PREFIX, "_ZTVN10__cxxabiv1", OK },
	{ EXACT, "__dso_handle", OK },
	/* type_info objects and their names: data a throw or a catch compares */
	{ PREFIX, "_ZTI", OK }, { PREFIX, "_ZTS", OK },
	/* a static object's destructor, and nvcc's host stub unregistering its
	 * fat binary, run through atexit (the source check refuses a call) */
	{ EXACT, "atexit", OK },

	/* libstdc++: std:: containers, strings, exceptions (std::__throw_*),
	 * algorithms, locks and iostreams on cout/cerr, all in the kernel's own
	 * memory; threads, files and the filesystem are refused above */
	{ PREFIX, "_ZSt", OK }, { PREFIX, "_ZNSt", OK }, { PREFIX, "_ZNKSt", OK },
	{ PREFIX, "_ZNSo", OK }, { PREFIX, "_ZNKSo", OK }, { PREFIX, "_ZTVSt", OK },
	{ PREFIX, "_ZTTSt", OK }, { PREFIX, "_ZTVNSt", OK }, { PREFIX, "_ZTTNSt", OK },
	/* std::mutex and std::call_once: locks, no thread of their own */
	{ EXACT, "pthread_mutex_lock", OK }, { EXACT, "pthread_mutex_unlock", OK },
	{ EXACT, "pthread_mutex_trylock", OK }, { EXACT, "pthread_once", OK },
	{ EXACT, "__pthread_key_create", OK },

	/* libgcc's helpers (128-bit and complex arithmetic, half-float
	 * conversion, aarch64's outline atomics, CPU feature checks): an
	 * object file (nvcc's) references them, the link takes them from
	 * libgcc.a */
	{ PREFIX, "__div", OK }, { PREFIX, "__udiv", OK }, { PREFIX, "__mod", OK },
	{ PREFIX, "__umod", OK }, { PREFIX, "__mul", OK }, { PREFIX, "__popcount", OK },
	{ PREFIX, "__powi", OK }, { PREFIX, "__extend", OK }, { PREFIX, "__trunc", OK },
	{ PREFIX, "__float", OK }, { PREFIX, "__fix", OK }, { PREFIX, "__aarch64_", OK },
	{ PREFIX, "__cpu_", OK },

	/* OpenMP: a parallel region joins before the kernel returns */
	{ PREFIX, "omp_", OK }, { PREFIX, "GOMP_", OK },

	/* CUDA runtime API, nvcc's registration and launch stubs
	 * (__cudaRegisterFatBinary, __cudaPushCallConfiguration, ...) and the
	 * driver API (cuLaunchKernel, ...): what a GPU kernel is made of */
	{ PREFIX_UPPER, "cuda", OK }, { PREFIX_UPPER, "__cuda", OK }, { PREFIX_UPPER, "cu", OK },

	/* cuBLAS and cuBLASLt (the matmul templates link them) */
	{ PREFIX, "cublas", OK },

	/* weak references every shared object carries from the C runtime */
	{ EXACT, "__gmon_start__", OK }, { EXACT, "_ITM_deregisterTMCloneTable", OK },
	{ EXACT, "_ITM_registerTMCloneTable", OK }, { EXACT, "_Jv_RegisterClasses", OK },
};

static bool starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* name is base, base + "f" or "l", or glibc's __base[fl]_finite. */
static bool math_name(const char *name, const char *base)
{
	size_t n = strlen(base), len;

	if (starts_with(name, "__")) {
		name += 2;
		len = strlen(name);
		if (len < 7 || strcmp(name + len - 7, "_finite"))
			return false;
		len -= 7;
	} else {
		len = strlen(name);
	}
	if (strncmp(name, base, n))
		return false;
	return len == n || (len == n + 1 && (name[n] == 'f' || name[n] == 'l'));
}

static bool rule_matches(const struct import_rule *r, const char *sym)
{
	switch (r->how) {
	case EXACT:
		return !strcmp(sym, r->pattern);
	case PREFIX:
		return starts_with(sym, r->pattern);
	case PREFIX_UPPER:
		return starts_with(sym, r->pattern) && isupper((unsigned char)sym[strlen(r->pattern)]);
	case CONTAINS:
		return strstr(sym, r->pattern) != NULL;
	case MATH:
		return math_name(sym, r->pattern);
	}
	return false;
}

const char *kb_import_refusal(const char *sym)
{
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++)
		if (rule_matches(&rules[i], sym))
			return rules[i].refused;
	return "not on the import allowlist";
}
