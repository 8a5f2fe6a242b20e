#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/build.h"
#include "verifier/datadir.h"
#include "verifier/elf_symbols.h"
#include "core/hash.h"
#include "verifier/sandbox.h"
#include "verifier/static_check.h"
#include "verifier/symbol_allowlist.h"

#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

/*
 * Real compilers. g++ is wrapped by a shell script that counts compile
 * invocations, so a cache hit is seen as "no compiler ran", not inferred.
 */

struct fixture {
	char dir[64];
	char counter[128];
	char wrapper[128];
	struct kb_build_env env;
};

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

static char *path_in(const struct fixture *f, const char *name)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s/%s", f->dir, name);
	return strbuf_detach(&sb, NULL);
}

static int compiles(const struct fixture *f)
{
	struct strbuf sb = STRBUF_INIT;
	int n = 0;

	if (kb_is_file(f->counter)) {
		assert_true(strbuf_read_file(&sb, f->counter, 0) >= 0);
		for (size_t i = 0; i < sb.len; i++)
			n += sb.buf[i] == '\n';
	}
	strbuf_release(&sb);
	return n;
}

static const char *top(void)
{
	const char *t = getenv("KB_TOP");

	return t && *t ? t : ".";
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	struct kb_config cfg;
	struct strbuf sb = STRBUF_INIT;

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	xsnprintf(f->dir, sizeof(f->dir), "/tmp/kb-test-build-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	xsnprintf(f->counter, sizeof(f->counter), "%s/compiles", f->dir);
	xsnprintf(f->wrapper, sizeof(f->wrapper), "%s/cxx.sh", f->dir);
	strbuf_addf(&sb,
		    "#!/bin/sh\n"
		    "case \" $* \" in *\" -shared \"*) echo x >> '%s' ;; esac\n"
		    "exec g++ \"$@\"\n", f->counter);
	write_file(f->wrapper, sb.buf, 0755);

	kb_config_init(&cfg);
	free(cfg.state_dir);
	cfg.state_dir = xstrdup(f->dir);
	free(cfg.cxx);
	cfg.cxx = xstrdup(f->wrapper);
	cfg.build_jobs = 4;
	assert_int_equal(kb_build_env_init(&f->env, &cfg, NULL, NULL), 0);
	kb_config_release(&cfg);
	/* no GPU probe: auto means sm_90 */
	assert_string_equal(f->env.arch, "sm_90");
	assert_int_equal(f->env.jobs, 4);
	strvec_pushf(&f->env.include_flags, "-I%s/verifier/include", top());
	strbuf_reset(&sb);
	strbuf_addf(&sb, "%s/verifier/include/kernelbot_abi.h", top());
	f->env.abi_header = strbuf_detach(&sb, NULL);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kb_build_env_release(&f->env);
	kb_rm_rf(f->dir);
	free(f);
	return 0;
}

static const char relu_cpp[] =
	"#include \"kernelbot_abi.h\"\n"
	"KB_EXPORT int kb_forward(const DLTensor *in, int n_in, DLTensor *out, int n_out, void *stream)\n"
	"{\n"
	"\tconst float *x = (const float *)kb_data(&in[0]);\n"
	"\tfloat *y = (float *)kb_data(&out[0]);\n"
	"\tint64_t n = kb_numel(&in[0]);\n"
	"#pragma omp parallel for\n"
	"\tfor (int64_t i = 0; i < n; i++)\n"
	"\t\ty[i] = x[i] > 0.f ? x[i] : 0.f;\n"
	"\treturn 0;\n"
	"}\n";

/* Load the built library and run it: the build is real, not just a file.
 * RTLD_NODELETE: unloading a library whose OpenMP pool is still alive crashes. */
static void run_relu(const char *library)
{
	float xs[5] = { -1.f, 2.f, -3.f, 4.f, 0.f }, ys[5] = { 9, 9, 9, 9, 9 };
	int64_t shape[1] = { 5 };
	DLTensor x = { .data = xs, .ndim = 1, .shape = shape, .dtype = { kDLFloat, 32, 1 } };
	DLTensor y = { .data = ys, .ndim = 1, .shape = shape, .dtype = { kDLFloat, 32, 1 } };
	void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	int (*fwd)(const DLTensor *, int, DLTensor *, int, void *);

	assert_non_null(h);
	*(void **)&fwd = dlsym(h, "kb_forward");
	assert_non_null(fwd);
	assert_int_equal(fwd(&x, 1, &y, 1, NULL), 0);
	assert_true(ys[0] == 0.f && ys[1] == 2.f && ys[2] == 0.f && ys[3] == 4.f && ys[4] == 0.f);
	dlclose(h);
}

static void test_cpp_miss_then_hit(void **state)
{
	struct fixture *f = *state;
	char *src = path_in(f, "relu.cpp");
	struct kb_build_result a, b;

	write_file(src, relu_cpp, 0644);
	kb_build_result_init(&a);
	kb_build_result_init(&b);

	assert_int_equal(kb_build_native(&f->env, src, &a), 0);
	assert_true(a.ok);
	assert_false(a.cached);
	assert_int_equal(compiles(f), 1);
	assert_non_null(a.library);
	assert_true(kb_is_file(a.library));
	assert_string_equal(a.errors, "");
	assert_int_equal(strlen(a.hash), 64);
	run_relu(a.library);

	/* the same source again: no compiler run, same entry */
	assert_int_equal(kb_build_native(&f->env, src, &b), 0);
	assert_true(b.ok);
	assert_true(b.cached);
	assert_int_equal(compiles(f), 1);
	assert_string_equal(a.hash, b.hash);
	assert_string_equal(a.library, b.library);

	/* build.json is the entry's record */
	{
		struct strbuf sb = STRBUF_INIT;
		cJSON *j;

		strbuf_addf(&sb, "%s/build.json", a.dir);
		assert_true(kb_is_file(sb.buf));
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/build.json", a.dir);
		{
			struct strbuf text = STRBUF_INIT;

			assert_true(strbuf_read_file(&text, sb.buf, 0) >= 0);
			j = cJSON_Parse(text.buf);
			strbuf_release(&text);
		}
		assert_non_null(j);
		assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
		assert_string_equal(cJSON_GetObjectItem(j, "source")->valuestring, "relu.cpp");
		cJSON_Delete(j);
		strbuf_release(&sb);
	}

	/* one byte more is another key */
	kb_build_result_release(&b);
	kb_build_result_init(&b);
	{
		struct strbuf sb = STRBUF_INIT;

		strbuf_addf(&sb, "%s\n", relu_cpp);
		write_file(src, sb.buf, 0644);
		strbuf_release(&sb);
	}
	assert_int_equal(kb_build_native(&f->env, src, &b), 0);
	assert_true(b.ok);
	assert_false(b.cached);
	assert_int_equal(compiles(f), 2);
	assert_string_not_equal(a.hash, b.hash);

	kb_build_result_release(&a);
	kb_build_result_release(&b);
	free(src);
}

static void test_cpp_error_trimmed_and_cached(void **state)
{
	struct fixture *f = *state;
	char *src = path_in(f, "broken.cpp");
	struct kb_build_result a, b;

	write_file(src,
		   "#include \"kernelbot_abi.h\"\n"
		   "KB_EXPORT int kb_forward(const DLTensor *in, int n_in, DLTensor *out, int n_out, void *stream)\n"
		   "{\n"
		   "\treturn undefined_thing + 1;\n"
		   "}\n", 0644);
	kb_build_result_init(&a);
	kb_build_result_init(&b);
	assert_int_equal(kb_build_native(&f->env, src, &a), 0);
	assert_false(a.ok);
	assert_null(a.library);
	assert_non_null(a.errors);
	assert_non_null(strstr(a.errors, "broken.cpp:4"));
	assert_non_null(strstr(a.errors, "undefined_thing"));
	/* no temp path, no cache path: the proposer sees only the file name */
	assert_null(strstr(a.errors, f->dir));
	assert_null(strstr(a.errors, "tmp-"));
	assert_true(strlen(a.errors) <= 4096);
	assert_int_equal(compiles(f), 1);

	/* failures are cached too */
	assert_int_equal(kb_build_native(&f->env, src, &b), 0);
	assert_false(b.ok);
	assert_true(b.cached);
	assert_string_equal(a.errors, b.errors);
	assert_int_equal(compiles(f), 1);

	kb_build_result_release(&a);
	kb_build_result_release(&b);
	free(src);
}

static void test_parallel_builds(void **state)
{
	struct fixture *f = *state;
	char *srcs[4];
	struct kb_build_result res[4];

	for (int i = 0; i < 4; i++) {
		struct strbuf name = STRBUF_INIT, text = STRBUF_INIT;

		strbuf_addf(&name, "k%d.cpp", i);
		srcs[i] = path_in(f, name.buf);
		/* distinct sources: distinct keys */
		strbuf_addf(&text, "%s// variant %d\n", relu_cpp, i);
		write_file(srcs[i], text.buf, 0644);
		kb_build_result_init(&res[i]);
		strbuf_release(&name);
		strbuf_release(&text);
	}
	assert_int_equal(kb_build_many(&f->env, (const char *const *)srcs, 4, res), 0);
	assert_int_equal(compiles(f), 4);
	for (int i = 0; i < 4; i++) {
		assert_true(res[i].ok);
		assert_false(res[i].cached);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(res[i].hash, res[j].hash);
		run_relu(res[i].library);
	}
	/* again: all hits */
	for (int i = 0; i < 4; i++) {
		kb_build_result_release(&res[i]);
		kb_build_result_init(&res[i]);
	}
	assert_int_equal(kb_build_many(&f->env, (const char *const *)srcs, 4, res), 0);
	assert_int_equal(compiles(f), 4);
	for (int i = 0; i < 4; i++) {
		assert_true(res[i].cached);
		kb_build_result_release(&res[i]);
		free(srcs[i]);
	}
}

static void test_unknown_extension_and_missing_compiler(void **state)
{
	struct fixture *f = *state;
	char *src = path_in(f, "k.txt");
	char *cpp = path_in(f, "k.cpp");
	struct kb_build_result r;
	char *saved = f->env.cxx;

	write_file(src, relu_cpp, 0644);
	write_file(cpp, relu_cpp, 0644);
	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), -1);
	f->env.cxx = (char *)"/nonexistent/g++";
	assert_int_equal(kb_build_native(&f->env, cpp, &r), -1);
	f->env.cxx = saved;
	kb_build_result_release(&r);
	free(src);
	free(cpp);
}

static const char ptxas_sample[] =
	"ptxas info    : 0 bytes gmem\n"
	"ptxas info    : Compiling entry function '_Z5otherPfi' for 'sm_90'\n"
	"ptxas info    : Function properties for _Z5otherPfi\n"
	"    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
	"ptxas info    : Used 72 registers, used 0 barriers\n"
	"ptxas info    : Function properties for _Z6helperf\n"
	"    24 bytes stack frame, 100 bytes spill stores, 100 bytes spill loads\n"
	"ptxas info    : Compiling entry function '_Z6relu_kPKfPfl' for 'sm_90'\n"
	"ptxas info    : Function properties for _Z6relu_kPKfPfl\n"
	"    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
	"ptxas info    : Used 12 registers, used 1 barriers, 4096 bytes smem\n"
	"ptxas info    : Compiling entry function 'old' for 'sm_80'\n"
	"ptxas info    : Used 8 registers, 380 bytes cmem[0], 2048 bytes smem\n";

static void test_parse_ptxas(void **state)
{
	struct kb_build_result r;

	kb_build_result_init(&r);
	kb_build_parse_ptxas(ptxas_sample, &r);
	assert_int_equal(r.nr_kernels, 3);
	assert_string_equal(r.kernels[0].name, "_Z5otherPfi");
	assert_int_equal(r.kernels[0].registers, 72);
	assert_int_equal(r.kernels[0].stack_bytes, 16);
	assert_int_equal(r.kernels[0].spill_stores, 8);
	assert_int_equal(r.kernels[0].spill_loads, 4);
	assert_int_equal(r.kernels[0].shared_bytes, 0);
	assert_int_equal(r.kernels[1].registers, 12);
	assert_int_equal(r.kernels[1].shared_bytes, 4096);
	assert_int_equal(r.kernels[2].registers, 8);
	assert_int_equal(r.kernels[2].shared_bytes, 2048);
	/* totals: max registers/shared/stack, summed spills; the device function is not an entry */
	assert_int_equal(r.registers, 72);
	assert_int_equal(r.shared_bytes, 4096);
	assert_int_equal(r.stack_bytes, 16);
	assert_int_equal(r.spill_stores, 8);
	assert_int_equal(r.spill_loads, 4);
	kb_build_result_release(&r);
}

static void test_trim_errors(void **state)
{
	struct strbuf out = STRBUF_INIT, in = STRBUF_INIT;

	/* a long warning preamble, one error, context kept, temp dir removed */
	for (int i = 0; i < 200; i++)
		strbuf_addf(&in, "/tmp/kb-x/k.cu(%d): warning: something harmless number %d\n", i, i);
	strbuf_addstr(&in, "/tmp/kb-x/k.cu(300): error: identifier \"foo\" is undefined\n"
		      "      return foo;\n"
		      "             ^\n"
		      "\n"
		      "1 error detected in the compilation of \"/tmp/kb-x/k.cu\".\n");
	kb_build_trim_errors(in.buf, "/tmp/kb-x", &out);
	assert_non_null(strstr(out.buf, "k.cu(300): error: identifier \"foo\" is undefined"));
	assert_non_null(strstr(out.buf, "return foo;"));
	assert_non_null(strstr(out.buf, "k.cu(199): warning"));   /* context before */
	assert_null(strstr(out.buf, "k.cu(100): warning"));       /* far lines dropped */
	assert_null(strstr(out.buf, "/tmp/kb-x"));
	assert_true(out.len <= 4096);

	/* many errors: capped near 4 KB, marked */
	strbuf_reset(&in);
	strbuf_reset(&out);
	for (int i = 0; i < 500; i++)
		strbuf_addf(&in, "k.cpp:%d:1: error: this is error number %d of many\n", i, i);
	kb_build_trim_errors(in.buf, NULL, &out);
	assert_true(out.len <= 4096);
	assert_non_null(strstr(out.buf, "(truncated)"));
	assert_non_null(strstr(out.buf, "k.cpp:0:1: error"));

	/* no "error" line at all: the tail */
	strbuf_reset(&in);
	strbuf_reset(&out);
	for (int i = 0; i < 50; i++)
		strbuf_addf(&in, "line %d\n", i);
	kb_build_trim_errors(in.buf, NULL, &out);
	assert_non_null(strstr(out.buf, "line 49"));
	assert_null(strstr(out.buf, "line 10\n"));
	strbuf_release(&in);
	strbuf_release(&out);
}

static const char relu_cu[] =
	"#include \"kernelbot_abi.h\"\n"
	"__global__ void relu_k(const float *x, float *y, int64_t n)\n"
	"{\n"
	"\t__shared__ float s[256];\n"
	"\tint64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
	"\ts[threadIdx.x] = i < n ? x[i] : 0.f;\n"
	"\t__syncthreads();\n"
	"\tif (i < n)\n"
	"\t\ty[i] = s[threadIdx.x] > 0.f ? s[threadIdx.x] : 0.f;\n"
	"}\n"
	"KB_EXPORT int kb_forward(const DLTensor *in, int n_in, DLTensor *out, int n_out, void *stream)\n"
	"{\n"
	"\tint64_t n = kb_numel(&in[0]);\n"
	"\trelu_k<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(\n"
	"\t\t(const float *)kb_data(&in[0]), (float *)kb_data(&out[0]), n);\n"
	"\treturn cudaGetLastError() != cudaSuccess;\n"
	"}\n";

static void test_cuda_registers(void **state)
{
	struct fixture *f = *state;
	struct strbuf nvcc = STRBUF_INIT;
	struct kb_build_result r;
	char *src;

	if (kb_find_program("nvcc", &nvcc) && kb_find_program("/usr/local/cuda/bin/nvcc", &nvcc)) {
		strbuf_release(&nvcc);
		KB_SKIP("no nvcc (CUDA toolkit) on this machine");
	}
	strbuf_release(&nvcc);
	src = path_in(f, "relu.cu");
	write_file(src, relu_cu, 0644);
	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), 0);
	if (!r.ok)
		fprintf(stderr, "nvcc errors:\n%s\n", r.errors);
	assert_true(r.ok);
	assert_true(kb_is_file(r.library));
	assert_int_equal(r.nr_kernels, 1);
	assert_non_null(strstr(r.kernels[0].name, "relu_k"));
	assert_true(r.registers > 0);
	assert_int_equal(r.shared_bytes, 1024);
	/* the cached copy keeps the figures */
	{
		struct kb_build_result again;

		kb_build_result_init(&again);
		assert_int_equal(kb_build_native(&f->env, src, &again), 0);
		assert_true(again.cached);
		assert_int_equal(again.registers, r.registers);
		assert_int_equal(again.shared_bytes, 1024);
		kb_build_result_release(&again);
	}
	kb_build_result_release(&r);
	free(src);
}

/* --- the backstop checks: imports and the preprocessed source --- */

static char *kernel_path(const char *name)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, "%s/tests/kernels/imports/%s", top(), name);
	return strbuf_detach(&sb, NULL);
}

static bool has_finding(const struct kb_build_result *r, const char *rule, int line, const char *needle)
{
	for (size_t i = 0; i < r->findings.nr; i++) {
		const struct kb_finding *f = &r->findings.v[i];

		if (!strcmp(f->rule, rule) && (line < 0 || f->line == line) && strstr(f->message, needle))
			return true;
	}
	return false;
}

static void print_result(const char *name, const struct kb_build_result *r)
{
	fprintf(stderr, "%s: ok=%d compiled=%d errors:\n%s\n", name, r->ok, r->compiled,
		r->errors ? r->errors : "(null)");
}

static cJSON *entry_record(const struct kb_build_result *r)
{
	struct strbuf sb = STRBUF_INIT, text = STRBUF_INIT;
	cJSON *j;

	strbuf_addf(&sb, "%s/build.json", r->dir);
	assert_true(strbuf_read_file(&text, sb.buf, 0) >= 0);
	j = cJSON_Parse(text.buf);
	assert_non_null(j);
	strbuf_release(&sb);
	strbuf_release(&text);
	return j;
}

static bool record_imports(const cJSON *j, const char *sym)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "imports"))
		if (cJSON_IsString(it) && !strcmp(it->valuestring, sym))
			return true;
	return false;
}

/* Real g++ builds of kernels that call what a kernel must not: refused. */
static void test_imports_refused(void **state)
{
	static const struct { const char *file, *symbol, *why; } cases[] = {
		{ "refused_fopen.cpp", "fopen", "file access" },
		{ "refused_dlsym.cpp", "dlsym", "dynamic loading" },
		{ "refused_getenv.cpp", "getenv", "environment" },
		{ "refused_socket.cpp", "socket", "network" },
		{ "refused_syscall.cpp", "syscall", "system call" },
		{ "refused_asm_label.cpp", "PyRun_SimpleString", "Python C API" },
	};
	struct fixture *f = *state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *src = kernel_path(cases[i].file);
		struct kb_build_result r;
		struct strbuf msg = STRBUF_INIT;

		kb_build_result_init(&r);
		assert_int_equal(kb_build_native(&f->env, src, &r), 0);
		if (r.ok || !r.compiled)
			print_result(cases[i].file, &r);
		assert_true(r.compiled);
		assert_false(r.ok);
		assert_null(r.library);
		strbuf_addf(&msg, "kernel library imports '%s' (%s): not allowed", cases[i].symbol,
			    cases[i].why);
		assert_true(has_finding(&r, "imports", 0, msg.buf));
		assert_non_null(strstr(r.errors, msg.buf));
		/* the refusal is an outcome like a compile error: cached, and checked again */
		kb_build_result_release(&r);
		kb_build_result_init(&r);
		assert_int_equal(kb_build_native(&f->env, src, &r), 0);
		assert_true(r.cached);
		assert_false(r.ok);
		assert_true(has_finding(&r, "imports", 0, msg.buf));
		strbuf_release(&msg);
		kb_build_result_release(&r);
		free(src);
	}
	/* the asm label hides the name from both scans: only the imports caught it */
	{
		char *src = kernel_path("refused_asm_label.cpp");
		struct kb_build_result r;

		kb_build_result_init(&r);
		assert_int_equal(kb_build_native(&f->env, src, &r), 0);
		assert_int_equal(r.findings.nr, 1);
		kb_build_result_release(&r);
		free(src);
	}
}

/* What a correct CPU kernel imports (libm, memory, new/delete, OpenMP) is allowed. */
static void test_imports_accepted(void **state)
{
	static const char *const needed[] = { "expf", "memcpy", "GOMP_parallel", "_Znam", "_ZdaPv" };
	struct fixture *f = *state;
	char *src = kernel_path("ok_cxx_runtime.cpp");
	struct kb_build_result r;
	cJSON *j;

	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), 0);
	if (!r.ok)
		print_result("ok_cxx_runtime.cpp", &r);
	assert_true(r.ok);
	assert_int_equal(r.findings.nr, 0);
	assert_string_equal(r.errors, "");
	run_relu(r.library);
	j = entry_record(&r);
	for (size_t i = 0; i < ARRAY_SIZE(needed); i++)
		if (!record_imports(j, needed[i]))
			fail_msg("build.json's imports lack '%s'", needed[i]);
	assert_string_equal(cJSON_GetObjectItem(j, "library_sha256")->valuestring, r.library_sha256);
	cJSON_Delete(j);
	kb_build_result_release(&r);
	free(src);
}

static bool have_nvcc(void)
{
	struct strbuf nvcc = STRBUF_INIT;
	bool found = !kb_find_program("nvcc", &nvcc) || !kb_find_program("/usr/local/cuda/bin/nvcc", &nvcc);

	strbuf_release(&nvcc);
	return found;
}

/* nvcc (compile only, nothing runs): cudaMemcpyAsync and a launch are accepted. */
static void test_cuda_imports_accepted(void **state)
{
	struct fixture *f = *state;
	struct kb_build_result r;
	char *src;
	cJSON *j;

	if (!have_nvcc())
		KB_SKIP("no nvcc (CUDA toolkit) on this machine");
	src = kernel_path("ok_cuda_memcpy.cu");
	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), 0);
	if (!r.ok)
		print_result("ok_cuda_memcpy.cu", &r);
	assert_true(r.ok);
	assert_true(kb_is_file(r.library));
	assert_int_equal(r.nr_kernels, 1);
	j = entry_record(&r);
	/* the kernel's own object: runtime calls and nvcc's stubs, not cudart_static's needs */
	assert_true(record_imports(j, "cudaMemcpyAsync"));
	assert_true(record_imports(j, "__cudaRegisterFatBinary"));
	assert_true(record_imports(j, "__cudaPushCallConfiguration"));
	assert_false(record_imports(j, "dlopen"));
	assert_false(record_imports(j, "fopen"));
	cJSON_Delete(j);
	kb_build_result_release(&r);
	free(src);
}

/* Macros hide names from the word list; the preprocessed scan sees them, at the source's lines. */
static void test_preprocessed_scan(void **state)
{
	static const struct { const char *file, *rule, *needle, *symbol; int line; } cases[] = {
		{ "pasted_pyrun.cpp", "python_escape", "'PyRun_SimpleString'", "PyRun_SimpleString", 11 },
		{ "macro_filesystem.cpp", "file_io", "std::filesystem", "10filesystem", 11 },
		{ "macro_ifstream.cpp", "file_io", "basic_ifstream", "14basic_ifstream", 11 },
	};
	struct fixture *f = *state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *src = kernel_path(cases[i].file);
		struct kb_findings raw = KB_FINDINGS_INIT;
		struct kb_build_result r;

		/* the word list alone lets them through */
		assert_int_equal(kb_static_check_file(src, NULL, &raw), 0);
		kb_findings_release(&raw);

		kb_build_result_init(&r);
		assert_int_equal(kb_build_native(&f->env, src, &r), 0);
		if (r.ok)
			print_result(cases[i].file, &r);
		assert_false(r.ok);
		assert_true(r.compiled);
		if (!has_finding(&r, cases[i].rule, cases[i].line, cases[i].needle))
			print_result(cases[i].file, &r);
		assert_true(has_finding(&r, cases[i].rule, cases[i].line, cases[i].needle));
		assert_true(has_finding(&r, cases[i].rule, cases[i].line, "(after preprocessing)"));
		/* and the library imports it */
		assert_true(has_finding(&r, "imports", 0, cases[i].symbol));
		kb_build_result_release(&r);
		free(src);
	}
}

/* --- a tamper-evident cache --- */

static void copy_file(const char *from, const char *to)
{
	struct strbuf sb = STRBUF_INIT;

	assert_true(strbuf_read_file(&sb, from, 0) >= 0);
	assert_int_equal(kb_write_file_atomic(to, sb.buf, sb.len), 0);
	strbuf_release(&sb);
}

static void log_to(const char *path)
{
	assert_int_equal(log_open(path), 0);
	log_set_level(KB_LOG_WARN);
}

static void log_back(void)
{
	log_open(NULL);
	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
}

/* The log since log_to holds a warning naming the entry dir; the log is then emptied. */
static void assert_warned(const char *log, const char *dir)
{
	struct strbuf sb = STRBUF_INIT;

	assert_true(strbuf_read_file(&sb, log, 0) >= 0);
	if (!strstr(sb.buf, "warn") || !strstr(sb.buf, dir))
		fail_msg("no warning naming '%s' in the log:\n%s", dir, sb.buf);
	assert_int_equal(truncate(log, 0), 0);
	strbuf_release(&sb);
}

static void test_cache_tamper(void **state)
{
	struct fixture *f = *state;
	char *src = path_in(f, "relu.cpp"), *other = path_in(f, "other.cpp"), *log = path_in(f, "log");
	struct kb_build_result a, b, c;
	struct strbuf path = STRBUF_INIT;
	char hex[65];

	write_file(src, relu_cpp, 0644);
	write_file(other, "#include \"kernelbot_abi.h\"\n"
		   "KB_EXPORT int kb_forward(const DLTensor *in, int n_in, DLTensor *out, int n_out, void *stream)\n"
		   "{\n\treturn 7;\n}\n", 0644);
	kb_build_result_init(&a);
	kb_build_result_init(&b);
	kb_build_result_init(&c);
	assert_int_equal(kb_build_native(&f->env, src, &a), 0);
	assert_int_equal(kb_build_native(&f->env, other, &b), 0);
	assert_true(a.ok && b.ok);
	assert_int_equal(compiles(f), 2);

	/* another library's bytes in relu's entry: found, removed, rebuilt */
	copy_file(b.library, a.library);
	log_to(log);
	assert_int_equal(kb_build_native(&f->env, src, &c), 0);
	log_back();
	assert_warned(log, a.dir);
	assert_true(c.ok);
	assert_false(c.cached);
	assert_int_equal(compiles(f), 3);
	assert_string_equal(c.library, a.library);
	assert_string_equal(c.library_sha256, a.library_sha256);
	assert_int_equal(kb_sha256_file(c.library, hex), 0);
	assert_string_equal(hex, a.library_sha256);
	run_relu(c.library);

	/* a garbled build.json, then none at all: the same */
	strbuf_addf(&path, "%s/build.json", a.dir);
	write_file(path.buf, "{\"compiled\": tru", 0644);
	kb_build_result_release(&c);
	kb_build_result_init(&c);
	log_to(log);
	assert_int_equal(kb_build_native(&f->env, src, &c), 0);
	log_back();
	assert_warned(log, a.dir);
	assert_true(c.ok && !c.cached);
	assert_int_equal(compiles(f), 4);
	assert_int_equal(unlink(path.buf), 0);
	kb_build_result_release(&c);
	kb_build_result_init(&c);
	log_to(log);
	assert_int_equal(kb_build_native(&f->env, src, &c), 0);
	log_back();
	assert_warned(log, a.dir);
	assert_true(c.ok && !c.cached);
	assert_int_equal(compiles(f), 5);
	run_relu(c.library);

	/* an intact entry is a quiet hit */
	kb_build_result_release(&c);
	kb_build_result_init(&c);
	log_to(log);
	assert_int_equal(kb_build_native(&f->env, src, &c), 0);
	log_back();
	assert_true(c.ok && c.cached);
	assert_int_equal(compiles(f), 5);
	{
		struct strbuf sb = STRBUF_INIT;

		assert_true(strbuf_read_file(&sb, log, 0) >= 0);
		assert_int_equal(sb.len, 0);
		strbuf_release(&sb);
	}
	strbuf_release(&path);
	kb_build_result_release(&a);
	kb_build_result_release(&b);
	kb_build_result_release(&c);
	free(src);
	free(other);
	free(log);
}

/* --- the sandbox --- */

/* An enabled sandbox when bwrap is installed and works here; else skip, saying why. */
static bool sandbox_or_skip(struct kb_sandbox *sb)
{
	struct strbuf path = STRBUF_INIT, why = STRBUF_INIT;

	kb_sandbox_init(sb);
	if (kb_find_program("bwrap", &path)) {
		fprintf(stderr, "skipped: bubblewrap (bwrap) is not installed: apt-get install bubblewrap\n");
		strbuf_release(&path);
		return false;
	}
	sb->enabled = true;
	sb->seccomp = true;
	sb->bwrap = strbuf_detach(&path, NULL);
	if (kb_sandbox_probe(sb, &why)) {
		fprintf(stderr, "skipped: the sandbox does not work here: %s\n", why.buf);
		strbuf_release(&why);
		kb_sandbox_release(sb);
		return false;
	}
	strbuf_release(&why);
	return true;
}

/*
 * A kernel that includes a secret file (outside the sandbox's view) or
 * /etc/passwd fails to build, and no byte of the file reaches the errors;
 * a correct kernel still builds and runs. The compiler is plain g++: the
 * counting wrapper lives in the state dir, which the sandbox must not see.
 */
static void test_sandbox_secret_include(void **state)
{
	static const char secret_text[] = "KB-SECRET-7d1f0e not c++ at all\n";
	struct fixture *f = *state;
	char *dir = path_in(f, "secrets"), *secret, *src = path_in(f, "steal.cpp");
	char *passwd = path_in(f, "passwd.cpp"), *relu = path_in(f, "relu.cpp");
	struct strbuf text = STRBUF_INIT;
	struct kb_build_result r;
	struct kb_sandbox sb;
	char *saved = f->env.cxx;

	if (!sandbox_or_skip(&sb))
		KB_SKIP("no working bubblewrap sandbox (user namespaces off?)");
	assert_int_equal(kb_mkdir_p(dir, 0700), 0);
	secret = path_in(f, "secrets/id_rsa");
	write_file(secret, secret_text, 0600);
	strbuf_addf(&text, "#include \"%s\"\n%s", secret, relu_cpp);
	write_file(src, text.buf, 0644);
	write_file(passwd, "#include \"/etc/passwd\"\n", 0644);
	write_file(relu, relu_cpp, 0644);
	f->env.cxx = (char *)"g++";
	f->env.sandbox = &sb;

	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), 0);
	assert_false(r.ok);
	assert_false(r.compiled);
	assert_null(strstr(r.errors, "KB-SECRET"));
	assert_non_null(strstr(r.errors, "No such file"));
	kb_build_result_release(&r);

	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, passwd, &r), 0);
	assert_false(r.ok);
	assert_null(strstr(r.errors, "root:"));
	kb_build_result_release(&r);

	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, relu, &r), 0);
	if (!r.ok)
		print_result("relu.cpp (sandboxed)", &r);
	assert_true(r.ok);
	run_relu(r.library);
	kb_build_result_release(&r);

	/* the control: without the sandbox the compiler prints the secret (a
	 * separate cache key: an unsandboxed outcome is never reused) */
	f->env.sandbox = NULL;
	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), 0);
	assert_false(r.ok);
	assert_false(r.cached);
	assert_non_null(strstr(r.errors, "KB-SECRET"));
	kb_build_result_release(&r);

	f->env.cxx = saved;
	kb_sandbox_release(&sb);
	strbuf_release(&text);
	free(dir);
	free(secret);
	free(src);
	free(passwd);
	free(relu);
}

/* nvcc in the sandbox: the toolkit comes with the program's prefix. */
static void test_sandbox_cuda(void **state)
{
	struct fixture *f = *state;
	struct kb_build_result r;
	struct kb_sandbox sb;
	char *src;

	if (!have_nvcc() || !sandbox_or_skip(&sb))
		KB_SKIP("needs nvcc and a working bubblewrap sandbox");
	f->env.sandbox = &sb;
	src = kernel_path("ok_cuda_memcpy.cu");
	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), 0);
	if (!r.ok)
		print_result("ok_cuda_memcpy.cu (sandboxed)", &r);
	assert_true(r.ok);
	assert_int_equal(r.nr_kernels, 1);
	kb_build_result_release(&r);
	f->env.sandbox = NULL;
	kb_sandbox_release(&sb);
	free(src);
}

/* --- the ELF reader and the allowlist --- */

static uint64_t next_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
 * Hostile ELF files: a real library truncated everywhere and with bytes
 * flipped at random. The reader answers 0 or -1, never reads outside the
 * buffer (the ASan build checks that: the copies are exactly sized).
 */
static void test_elf_hostile(void **state)
{
	struct fixture *f = *state;
	char *src = path_in(f, "relu.cpp");
	struct kb_build_result r;
	struct strbuf so = STRBUF_INIT, why = STRBUF_INIT;
	struct strvec syms = STRVEC_INIT;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	size_t step;

	write_file(src, relu_cpp, 0644);
	kb_build_result_init(&r);
	assert_int_equal(kb_build_native(&f->env, src, &r), 0);
	assert_true(r.ok);
	assert_int_equal(strbuf_read_file(&so, r.library, 0), 0);
	assert_int_equal(kb_elf_undefined_symbols(so.buf, so.len, &syms, &why), 0);
	assert_true(syms.nr > 0);
	for (size_t i = 1; i < syms.nr; i++)
		assert_true(strcmp(syms.v[i - 1], syms.v[i]) < 0); /* sorted, no duplicates */

	step = so.len / 997 + 1;
	for (size_t len = 0; len < so.len; len += step) {
		char *copy = xmalloc(len ? len : 1);

		memcpy(copy, so.buf, len);
		strvec_clear(&syms);
		strbuf_reset(&why);
		if (kb_elf_undefined_symbols(copy, len, &syms, &why))
			assert_true(why.len > 0);
		free(copy);
	}
	for (int round = 0; round < 3000; round++) {
		char *copy = xmalloc(so.len);

		memcpy(copy, so.buf, so.len);
		for (int k = 0; k < 1 + round % 8; k++) {
			/* mostly the headers and tables, where the offsets are */
			size_t at = next_random(&seed) % (round % 2 ? so.len : (so.len < 4096 ? so.len : 4096));

			copy[at] = (char)next_random(&seed);
		}
		strvec_clear(&syms);
		strbuf_reset(&why);
		if (kb_elf_undefined_symbols(copy, so.len, &syms, &why))
			assert_true(why.len > 0);
		free(copy);
	}
	strbuf_reset(&why);
	assert_int_equal(kb_elf_undefined_symbols("#!/bin/sh\n", 10, &syms, &why), -1);
	assert_non_null(strstr(why.buf, "not an ELF file"));
	strbuf_reset(&why);
	so.buf[EI_CLASS] = ELFCLASS32;
	assert_int_equal(kb_elf_undefined_symbols(so.buf, so.len, &syms, &why), -1);
	assert_non_null(strstr(why.buf, "64-bit"));
	strvec_clear(&syms);
	strbuf_release(&why);
	strbuf_release(&so);
	kb_build_result_release(&r);
	free(src);
}

static void test_import_allowlist(void **state)
{
	static const char *const allowed[] = {
		"expf", "sinf", "tanh", "powl", "__expf_finite", "_ZGVdN8v_expf", "malloc", "free",
		"aligned_alloc", "posix_memalign", "memcpy", "memset", "strlen", "printf", "fwrite",
		"stderr", "_Znwm", "_ZdlPvm", "_ZnamSt11align_val_t", "__cxa_guard_acquire",
		"__gxx_personality_v0", "_Unwind_Resume", "_ZSt20__throw_length_errorPKc",
		"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm", "_ZSt4cout",
		"omp_get_thread_num", "GOMP_parallel", "__assert_fail", "__stack_chk_fail",
		"cudaMemcpyAsync", "cudaLaunchKernel", "__cudaRegisterFatBinary",
		"__cudaPushCallConfiguration", "__cudaPopCallConfiguration", "cuLaunchKernel",
		"cublasLtMatmul", "cublasSgemm_v2", "__gmon_start__", "_ITM_registerTMCloneTable",
		"__cxa_finalize", "atexit", "__udivti3", "__aarch64_ldadd4_acq_rel", NULL
	};
	static const struct { const char *sym, *why; } refused[] = {
		{ "PyRun_SimpleString", "Python C API" }, { "_PyRuntime", "Python C API" },
		{ "Py_Initialize", "Python C API" }, { "dlopen", "dynamic loading" },
		{ "dlsym", "dynamic loading" }, { "dlmopen", "dynamic loading" },
		{ "dlvsym", "dynamic loading" }, { "fork", "process control" },
		{ "vfork", "process control" }, { "clone", "process control" },
		{ "execve", "process control" }, { "execvp", "process control" },
		{ "system", "process control" }, { "popen", "process control" },
		{ "posix_spawn", "process control" }, { "socket", "network" }, { "connect", "network" },
		{ "bind", "network" }, { "listen", "network" }, { "accept", "network" },
		{ "sendto", "network" }, { "recvfrom", "network" }, { "open", "file access" },
		{ "openat", "file access" }, { "fopen", "file access" }, { "creat", "file access" },
		{ "read", "file access" }, { "write", "file access" }, { "unlink", "file access" },
		{ "rename", "file access" }, { "mkdir", "file access" }, { "syscall", "system call" },
		{ "ptrace", "system call" }, { "prctl", "system call" },
		{ "mmap", "memory mapping" }, { "mprotect", "memory mapping" },
		{ "getenv", "environment" }, { "environ", "environment" },
		{ "pthread_create", "threads" },
		{ "_ZNSt10filesystem6removeERKNS_7__cxx114pathE", "file access (std::filesystem)" },
		{ "_ZNSt14basic_ifstreamIcSt11char_traitsIcEEC1EPKcSt13_Ios_Openmode",
		  "file access (std::ifstream)" },
		{ "_ZNSt14basic_ofstreamIcSt11char_traitsIcEEC1EPKcSt13_Ios_Openmode",
		  "file access (std::ofstream)" },
		{ "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE",
		  "threads" },
		{ "libcudart_static_0056bd523cc9f704dca4e91ee8c0547f1309e92f", "not on the import allowlist" },
		{ "cudnnCreate", "not on the import allowlist" },
		{ "nanosleep", "not on the import allowlist" },
	};

	for (const char *const *p = allowed; *p; p++)
		if (kb_import_refusal(*p))
			fail_msg("'%s' is refused (%s)", *p, kb_import_refusal(*p));
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		const char *why = kb_import_refusal(refused[i].sym);

		if (!why || strcmp(why, refused[i].why))
			fail_msg("'%s': '%s', expected '%s'", refused[i].sym, why ? why : "allowed",
				 refused[i].why);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cpp_miss_then_hit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cpp_error_trimmed_and_cached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_parallel_builds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_extension_and_missing_compiler, setup, teardown),
		cmocka_unit_test(test_parse_ptxas),
		cmocka_unit_test(test_trim_errors),
		cmocka_unit_test_setup_teardown(test_cuda_registers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_imports_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_imports_accepted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cuda_imports_accepted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_preprocessed_scan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_tamper, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandbox_secret_include, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandbox_cuda, setup, teardown),
		cmocka_unit_test_setup_teardown(test_elf_hostile, setup, teardown),
		cmocka_unit_test(test_import_allowlist),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
