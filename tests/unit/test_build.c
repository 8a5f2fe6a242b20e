#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/build.h"
#include "verifier/datadir.h"

#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <setjmp.h>
#include <cmocka.h>

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
		skip();
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
