#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/static_check.h"

#include <setjmp.h>
#include <cmocka.h>

/* Findings of text as abi, kept in a static for the assertions. */
static struct kb_findings found = KB_FINDINGS_INIT;

static int scan(const char *text, enum kb_kernel_abi abi)
{
	kb_findings_release(&found);
	return kb_static_check(text, strlen(text), abi, &found);
}

static bool has(const char *rule, int line)
{
	for (size_t i = 0; i < found.nr; i++)
		if (!strcmp(found.v[i].rule, rule) && (line < 0 || found.v[i].line == line))
			return true;
	return false;
}

static void dump(void)
{
	for (size_t i = 0; i < found.nr; i++)
		fprintf(stderr, "  line %d: %s: %s\n", found.v[i].line, found.v[i].rule, found.v[i].message);
}

#define NATIVE_HEAD "#include \"kernelbot_abi.h\"\n"
#define NATIVE_ENTRY \
	"KB_EXPORT int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n" \
	"{ return 0; }\n"

/* Fires on line `line` of a native kernel whose line 2 is `stmt`. */
static void native_fires(const char *stmt, const char *rule)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, NATIVE_HEAD "%s\n" NATIVE_ENTRY, stmt);
	scan(sb.buf, KB_ABI_NATIVE);
	if (!has(rule, 2)) {
		fprintf(stderr, "expected %s on line 2 of:\n%s\ngot:\n", rule, sb.buf);
		dump();
	}
	assert_true(has(rule, 2));
	strbuf_release(&sb);
}

static void native_clean(const char *stmt)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, NATIVE_HEAD "%s\n" NATIVE_ENTRY, stmt);
	scan(sb.buf, KB_ABI_NATIVE);
	if (found.nr) {
		fprintf(stderr, "expected no finding in:\n%s\ngot:\n", sb.buf);
		dump();
	}
	assert_int_equal(found.nr, 0);
	strbuf_release(&sb);
}

static const char clean_native[] =
	"// A clean kernel. It never calls fork(), system(\"x\") or getenv(\"HOME\").\n"
	"#include \"kernelbot_abi.h\"\n"
	"#include <math.h>\n"
	"#include <stdio.h>\n"
	"/* write(1, ...) and std::thread in a block comment,\n"
	"   across lines: dlopen socket */\n"
	"static inline float relu(float v) { return v > 0.f ? v : 0.f; }\n"
	"KB_EXPORT int kb_forward(const DLTensor *in, int n_in, DLTensor *out, int n_out, void *stream)\n"
	"{\n"
	"\tconst float *x = (const float *)kb_data(&in[0]);\n"
	"\tfloat *y = (float *)kb_data(&out[0]);\n"
	"\tint64_t n = kb_numel(&in[0]);\n"
	"\tbool write = n > 0; /* a variable named like a syscall */\n"
	"\tint thread = 1'000'000 > n ? 1 : 2;\n"
	"\tconst char *msg = \"fopen(\\\"/etc/passwd\\\") and exec\";\n"
	"\tconst char *raw = R\"x(system(\"rm\") \" dlsym)x\";\n"
	"\tchar c = '\"';\n"
	"\tif (!write || !thread || !msg || !raw || !c)\n"
	"\t\treturn 0;\n"
	"#pragma omp parallel for\n"
	"\tfor (int64_t i = 0; i < n; i++)\n"
	"\t\ty[i] = relu(x[i]);\n"
	"\tfprintf(stderr, \"done\\n\");\n"
	"\treturn 0;\n"
	"}\n";

static void test_clean_native(void **state)
{
	assert_int_equal(kb_source_abi(clean_native, strlen(clean_native)), KB_ABI_NATIVE);
	scan(clean_native, KB_ABI_UNKNOWN);
	if (found.nr)
		dump();
	assert_int_equal(found.nr, 0);
}

static void test_native_rules_fire(void **state)
{
	native_fires("#include <torch/extension.h>", "forbidden_include");
	native_fires("#include <ATen/ATen.h>", "forbidden_include");
	native_fires("#include \"pybind11/pybind11.h\"", "forbidden_include");
	native_fires("#include <Python.h>", "forbidden_include");
	native_fires("#include \"/home/runner/.netrc\"", "forbidden_include");
	native_fires("#include \"../../../etc/passwd\"", "forbidden_include");
	native_fires("#include SECRET_FILE", "forbidden_include");
	native_fires("#embed \"/etc/passwd\"", "forbidden_include");
	native_fires("asm(\".incbin \\\"/etc/passwd\\\"\");", "syscall");
	native_fires("static int f() { return fork(); }", "process");
	native_fires("static int f() { return std::system(\"ls\"); }", "process");
	native_fires("static void f() { execvp(\"sh\", 0); }", "process");
	native_fires("static void f() { popen(\"ls\", \"r\"); }", "process");
	native_fires("static void f() { exit(0); }", "process");
	native_fires("static void f() { _exit(0); }", "process");
	native_fires("static void f() { signal(11, 0); }", "process");
	native_fires("static auto p = &system;", "process");
	native_fires("#define RUN system", "process");
	native_fires("static void *f() { return dlsym(0, \"x\"); }", "dynamic_loading");
	native_fires("static void *f() { return dlopen(\"x\", 0); }", "dynamic_loading");
	native_fires("static long f() { return syscall(39); }", "syscall");
	native_fires("static void f() { asm volatile(\"mov $60, %%eax\\n\\tsyscall\"); }", "syscall");
	native_fires("static const char *f() { return getenv(\"HOME\"); }", "environment");
	native_fires("extern char **environ;", "environment");
	native_fires("static void f() { fopen(\"/tmp/x\", \"w\"); }", "file_io");
	native_fires("static void f(const char *b) { write(3, b, 4); }", "file_io");
	native_fires("static void f() { ::write(3, \"x\", 1); }", "file_io");
	native_fires("static int write(int fd) { return fd; } static void g() { ::write(3, \"x\", 1); }", "file_io");
	native_fires("extern \"C\" long write(int, const void *, unsigned long); static void g() { write(3, \"x\", 1); }", "file_io");
	native_fires("static void f() { dprintf(3, \"x\"); }", "file_io");
	native_fires("static void f() { std::ofstream o(\"x\"); }", "file_io");
	native_fires("static int f() { return socket(2, 1, 0); }", "network");
	native_fires("static void f() { std::thread t([]{}); t.detach(); }", "threads");
	native_fires("static void f() { pthread_create(0, 0, 0, 0); }", "threads");
	native_fires("static void f() { cudaStream_t s; cudaStreamCreate(&s); }", "stream");
	native_fires("static void f() { g<<<1, 1, 0, cudaStreamPerThread>>>(); }", "stream");
}

static void test_native_rules_quiet(void **state)
{
	/* the same words in comments, strings, members, or as plain variables */
	native_clean("// fork(); system(\"ls\"); #include <torch/extension.h>");
	native_clean("/* getenv(\"X\") */ static const char *s = \"dlsym(0, \\\"x\\\") syscall\";");
	native_clean("static const char *s = R\"(exit(1); write(3, x, 1))\";");
	native_clean("struct W { void write(int) {} }; static void f(W w) { w.write(1); }");
	native_clean("static int f(int write, int open) { return write + open; }");
	native_clean("static int thread = 3;");
	native_clean("static void f(float *p) { asm volatile(\"st.global.f32 [%0], 1.0;\" :: \"l\"(p)); }");
	native_clean("static const char *inc = \"#include <torch/extension.h>\";");
	native_clean("#include_next <stdio.h>");
	native_clean("#include <cuda/std/cmath>");
	native_clean("namespace my { int exit(int c) { return c; } } static int f() { return my::exit(1); }");
	native_clean("static int write(int fd) { return fd; } static int g() { return write(3); }");
}

static void test_native_missing_entry_and_lines(void **state)
{
	const char *no_entry = NATIVE_HEAD "// kb_forward is only mentioned\nint f(void) { return 0; }\n";
	const char *lines =
		NATIVE_HEAD                          /* 1 */
		"/* a block comment\n"               /* 2 */
		"   over lines */\n"                 /* 3 */
		"static int n = 1'000'000;\n"        /* 4 */
		"static const char *s = \"a\\\n"    /* 5: string continued */
		"b\";\n"                             /* 6 */
		"static int f() { return fork(); }\n" /* 7 */
		NATIVE_ENTRY;

	assert_int_equal(kb_source_abi(no_entry, strlen(no_entry)), KB_ABI_UNKNOWN);
	scan(no_entry, KB_ABI_NATIVE);
	assert_true(has("missing_entry", 1));
	scan(no_entry, KB_ABI_UNKNOWN);
	assert_true(has("missing_entry", 1));

	assert_int_equal(scan(lines, KB_ABI_NATIVE), 1);
	assert_true(has("process", 7));
}

#define EXT_HEAD "#include <torch/extension.h>\n"
#define EXT_TAIL \
	"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward, \"forward\"); }\n"

static void ext_fires(const char *body, const char *rule)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, EXT_HEAD "%s\n" EXT_TAIL, body);
	scan(sb.buf, KB_ABI_TORCH_EXT);
	if (!has(rule, 2)) {
		fprintf(stderr, "expected %s on line 2 of:\n%s\ngot:\n", rule, sb.buf);
		dump();
	}
	assert_true(has(rule, 2));
	strbuf_release(&sb);
}

static void ext_clean(const char *body)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addf(&sb, EXT_HEAD "%s\n" EXT_TAIL, body);
	scan(sb.buf, KB_ABI_TORCH_EXT);
	if (found.nr) {
		fprintf(stderr, "expected no finding in:\n%s\ngot:\n", sb.buf);
		dump();
	}
	assert_int_equal(found.nr, 0);
	strbuf_release(&sb);
}

static const char clean_ext[] =
	"#include <torch/extension.h>\n"
	"#include <vector>\n"
	"// torch::matmul(a, b) would be a hack; so would try { } catch (...) { }\n"
	"// and patching torch.cuda.Event or time.perf_counter.\n"
	"static float relu(float v) { return v > 0.f ? v : 0.f; }\n"
	"static void relu_kernel(const float *x, float *y, int64_t n)\n"
	"{\n"
	"#pragma omp parallel for\n"
	"\tfor (int64_t i = 0; i < n; i++)\n"
	"\t\ty[i] = relu(x[i]);\n"
	"}\n"
	"torch::Tensor forward(const torch::Tensor &x)\n"
	"{\n"
	"\tTORCH_CHECK(x.is_contiguous(), \"x must be contiguous\");\n"
	"\tTORCH_CHECK(x.dtype() == torch::kFloat32, \"x must be float32\");\n"
	"\tauto y = torch::empty_like(x);\n"
	"\tauto z = torch::empty({x.size(0), x.size(1)}, x.options());\n"
	"\tint64_t n = x.numel();\n"
	"\tint64_t blocks = (n + 255) / 256;\n"
	"\tstd::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());\n"
	"\tauto v = x.contiguous().view({-1});\n"
	"\t(void)z; (void)blocks; (void)v;\n"
	"\trelu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), n);\n"
	"\treturn y;\n"
	"}\n"
	"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)\n"
	"{\n"
	"\tm.def(\"forward\", &forward, \"relu forward (cpu)\");\n"
	"}\n";

static void test_clean_ext(void **state)
{
	assert_int_equal(kb_source_abi(clean_ext, strlen(clean_ext)), KB_ABI_TORCH_EXT);
	scan(clean_ext, KB_ABI_UNKNOWN);
	if (found.nr)
		dump();
	assert_int_equal(found.nr, 0);
}

static void test_ext_rules_fire(void **state)
{
	ext_fires("torch::Tensor forward(torch::Tensor a, torch::Tensor b) { return torch::matmul(a, b); }",
		  "torch_compute");
	ext_fires("at::Tensor forward(at::Tensor a) { return at::relu(a); }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return torch::nn::functional::gelu(a); }",
		  "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return at::native::add(a, a); }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return torch::zeros_like(a); }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return a.sum(1); }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { auto y = torch::empty_like(a); y.copy_(a); return y; }",
		  "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return a->matmul(a); }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a, torch::Tensor b) { return a + b; }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return 2 * a; }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return a[0]; }", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { return exp(a); }", "torch_compute");
	ext_fires("using namespace torch;", "torch_compute");
	ext_fires("torch::Tensor forward(torch::Tensor a) { try { return a; } catch (...) { return a; } }",
		  "try_catch");
	ext_fires("void f() { py::exec(\"import torch\"); }", "python_escape");
	ext_fires("void f() { py::module_::import(\"torch\"); }", "python_escape");
	ext_fires("void f() { pybind11::module::import(\"time\"); }", "python_escape");
	ext_fires("void f(py::object o) { o.attr(\"x\"); }", "python_escape");
	ext_fires("void f() { PyRun_SimpleString(\"x\"); }", "python_escape");
	ext_fires("void f(py::object o, py::object v) { py::setattr(o, \"record\", v); }", "timer_patching");
	ext_fires("static const char *s = \"elapsed_time\";", "timer_patching");
	ext_fires("static const char *s = \"torch.cuda.Event\";", "timer_patching");
	ext_fires("static const char *s = \"time.perf_counter\";", "timer_patching");
	ext_fires("void f() { getenv(\"X\"); }", "environment");
	ext_fires("void f() { std::thread t; }", "threads");
	ext_fires("#include \"/etc/hostname\"", "forbidden_include");
}

static void test_ext_rules_quiet(void **state)
{
	ext_clean("// torch::matmul(a, b); a.sum(); try { } catch (...) { } py::exec(\"x\")");
	ext_clean("/* using namespace torch; setattr(torch.cuda.Event) */");
	ext_clean("static const char *doc = \"calls a.sum() and torch::matmul(a, b) and try {\";");
	ext_clean("static float my_sum(float a, float b) { return a + b; }");
	ext_clean("torch::Tensor forward(torch::Tensor a) { int64_t n = a.numel(); return torch::empty({n * 2}, a.options()); }");
	ext_clean("torch::Tensor forward(torch::Tensor a) { auto s = at::cuda::getCurrentCUDAStream(); (void)s; return a; }");
	ext_clean("torch::Tensor forward(torch::Tensor a) { TORCH_CHECK(a.dim() == 2 && a.size(-1) > 0, \"bad\"); return a; }");
	ext_clean("static float exp_approx(float v) { return 1 + v; } static float g(float v) { return exp_approx(v); }");
}

static void test_findings_json(void **state)
{
	cJSON *j;
	char *text;

	scan(NATIVE_HEAD "static int f() { return fork(); }\n" NATIVE_ENTRY, KB_ABI_NATIVE);
	assert_int_equal(found.nr, 1);
	j = kb_findings_to_json(&found);
	text = cJSON_PrintUnformatted(j);
	assert_string_equal(text, "[{\"line\":2,\"rule\":\"process\",\"message\":\"'fork' is not allowed in a kernel\"}]");
	free(text);
	cJSON_Delete(j);
}

static void test_check_file(void **state)
{
	char path[] = "/tmp/kb-test-static-XXXXXX.cu";
	int fd = mkstemps(path, 3);
	enum kb_kernel_abi abi = KB_ABI_UNKNOWN;
	const char *text = NATIVE_HEAD "static void f() { system(\"x\"); }\n" NATIVE_ENTRY;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	kb_findings_release(&found);
	assert_int_equal(kb_static_check_file(path, &abi, &found), 1);
	assert_int_equal(abi, KB_ABI_NATIVE);
	assert_true(has("process", 2));
	unlink(path);
	assert_int_equal(kb_static_check_file(path, &abi, &found), -1);
	kb_findings_release(&found);
}

static int group_teardown(void **state)
{
	kb_findings_release(&found);
	return 0;
}

static int group_setup(void **state)
{
	log_set_level(KB_LOG_OFF);
	return 0;
}

/* Line control, spliced and digraph directives, the Python C API, std::filesystem. */
/* A ModelNew file: its C++ strings scanned at the .py's lines, its Python around them. */
static void test_modelnew_file(void **state)
{
	static const char py[] =
		"\"\"\"A docstring with braces { } is not C++ worth a finding: try {\"\"\"\n" /* 1 */
		"import torch\n"                                                             /* 2 */
		"from torch.utils.cpp_extension import load_inline\n"                         /* 3 */
		"src = '''\n"                                                                /* 4 */
		"torch::Tensor f(torch::Tensor x) {\n"                                       /* 5 */
		"    auto y = torch::matmul(x, x);\n"                                        /* 6 */
		"    return y;\n"                                                            /* 7 */
		"}\n"                                                                        /* 8 */
		"'''\n"                                                                      /* 9 */
		"# py::exec in a comment is no finding\n"                                    /* 10 */
		"ext = load_inline(name='x', cpp_sources=src, functions=['f'])\n"            /* 11 */
		"class ModelNew(torch.nn.Module):\n"                                         /* 12 */
		"    def forward(self, x):\n"                                                /* 13 */
		"        return ext.f(x)\n";                                                 /* 14 */
	static const char cu[] = "// class ModelNew(nn.Module)\nPYBIND11_MODULE(x, m) {}\n";

	(void)state;
	assert_int_equal(kb_source_abi(py, strlen(py)), KB_ABI_MODELNEW);
	assert_string_equal(kb_abi_name(KB_ABI_MODELNEW), "modelnew");
	/* strict (cpu): the torch call is found on the .py's own line 6 */
	kb_findings_release(&found);
	kb_static_check_flags(py, strlen(py), KB_ABI_MODELNEW, 0, &found);
	if (!has("torch_compute", 6) || found.nr != 1)
		dump();
	assert_true(has("torch_compute", 6));
	assert_int_equal(found.nr, 1);
	/* mixed (cuda): allowed, proven at run time */
	kb_findings_release(&found);
	assert_int_equal(kb_static_check_flags(py, strlen(py), KB_ABI_MODELNEW, KB_STATIC_MIXED,
					       &found), 0);
	/* no extension: torch_fallback on the class line */
	scan("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n", KB_ABI_MODELNEW);
	assert_true(has("torch_fallback", 3));
	/* no ModelNew: missing_entry */
	scan("from torch.utils.cpp_extension import load_inline\nclass Model:\n    pass\n",
	     KB_ABI_MODELNEW);
	assert_true(has("missing_entry", 1));
	/* a timer reassigned: timer_patching at its line; a comparison is not */
	scan("import torch, time\nfrom torch.utils.cpp_extension import load_inline\n"
	     "time.perf_counter = lambda: 0.0\nok = time.time == 3\n"
	     "class ModelNew:\n    pass\n", KB_ABI_MODELNEW);
	assert_true(has("timer_patching", 3));
	assert_false(has("timer_patching", 4));
	/* a .cu file naming class ModelNew in a comment is no ModelNew */
	assert_int_equal(kb_source_abi(cu, strlen(cu)), KB_ABI_TORCH_EXT);
}

static void test_native_backstop_rules(void **state)
{
	native_fires("#line 5 \"/usr/include/stdio.h\"", "line_directive");
	native_fires("# 5 \"/usr/include/stdio.h\" 1 3 4", "line_directive");
	native_fires("%:line 7 \"/usr/include/x.h\"", "line_directive");
	native_fires("  #  \\\nline 9", "line_directive");
	native_fires("%:include \"/etc/passwd\"", "forbidden_include");
	native_fires("#\\\ninclude \"/etc/passwd\"", "forbidden_include");
	native_fires("#include \"/etc/\\\npasswd\"", "forbidden_include");
	native_fires("#import \"/etc/passwd\"", "forbidden_include");
	native_fires("extern \"C\" int PyRun_SimpleString(const char *);", "python_escape");
	native_fires("static void f() { Py_Initialize(); }", "python_escape");
	native_fires("extern int _PyRuntime;", "python_escape");
	/* the pasted fragment alone gives it away (RUN(a, b): a##b) */
	native_fires("static int f() { return RUN(PyRun_, SimpleString)(\"x\"); }", "python_escape");
	native_fires("namespace fs = std::filesystem;", "file_io");
	native_fires("static bool f() { return std::filesystem::exists(\"/x\"); }", "file_io");
	native_fires("using namespace std::filesystem;", "file_io");
	native_fires("static void f() { std::basic_ifstream<char> in(\"x\"); }", "file_io");
	native_fires("static void f() { std::basic_ofstream<char> o(\"x\"); }", "file_io");
	native_fires("static void f() { __gnu_cxx::stdio_filebuf<char> b(3, std::ios::out); }", "file_io");

	native_clean("static int PyramidLevel = 3, PyTorchish = 1;");
	native_clean("static const char *s = R\"(\n#line 5 \"x\"\n# 1 \"/usr/include/y.h\" 1\n)\";");
	native_clean("struct fs { int filesystem; }; static int f(fs x) { return x.filesystem; }");
	native_clean("#define TWO \\\n 2");
	native_clean("%:include <stdio.h>");
}

/*
 * `g++ -E` output as it looks, with the tricks: a raw string whose line
 * looks like a marker, the kernel including itself by an absolute path in
 * its scratch dir, a system header declaring fopen.
 */
static const char expanded[] =
	"# 0 \"k.cpp\"\n"
	"# 0 \"<built-in>\"\n"
	"# 0 \"<command-line>\"\n"
	"# 1 \"/usr/include/stdc-predef.h\" 1 3 4\n"
	"# 0 \"<command-line>\" 2\n"
	"# 1 \"k.cpp\"\n"
	"# 1 \"/usr/include/stdio.h\" 1 3 4\n"
	"extern FILE *fopen(const char *, const char *);\n"
	"extern char *getenv(const char *);\n"
	"# 2 \"k.cpp\" 2\n"
	"\n"
	"int p(void) { return PyRun_SimpleString(\"x\"); }\n"
	"const char *s = R\"(\n"
	"# 1 \"/usr/include/w.h\"\n"
	")\";\n"
	"int evil() { return system(\"x\"); }\n"
	"# 1 \"/scratch/dir/k.cpp\" 1\n"
	"int again() { return getenv(\"X\") != 0; }\n"
	"# 9 \"k.cpp\" 2\n"
	"int last() { return 0; }\n";

static const char expanded_src[] =
	"#include <stdio.h>\n"
	"\n"
	"int p(void) { return PY(Run_SimpleString)(\"x\"); }\n"
	"const char *s = R\"(\n"
	"# 1 \"/usr/include/w.h\"\n"
	")\";\n"
	"int evil() { return SYS(tem)(\"x\"); }\n"
	"#include \"/scratch/dir/k.cpp\"\n"
	"int last() { return 0; }\n"
	"\n";

static void test_preprocessed_own_text(void **state)
{
	struct strbuf own = STRBUF_INIT;
	int lines = 1;

	kb_preprocessed_own_text(expanded, strlen(expanded), "/scratch/dir", 10, &own);
	for (size_t i = 0; i < own.len; i++)
		lines += own.buf[i] == '\n';
	assert_int_equal(lines, 10);
	/* system headers are not the kernel's; the raw string's line is */
	assert_null(strstr(own.buf, "fopen"));
	assert_null(strstr(own.buf, "extern char *getenv"));
	assert_non_null(strstr(own.buf, "# 1 \"/usr/include/w.h\""));
	assert_non_null(strstr(own.buf, "again()"));

	kb_findings_release(&found);
	assert_true(kb_static_check_expanded(expanded_src, strlen(expanded_src), own.buf, own.len,
					     &found) >= 3);
	if (!has("python_escape", 3) || !has("process", 7) || !has("environment", -1))
		dump();
	assert_true(has("python_escape", 3));
	assert_true(has("process", 7));     /* after the raw string: still the kernel's */
	assert_true(has("environment", -1)); /* the self-include */
	assert_false(has("file_io", -1));   /* stdio.h's fopen */
	assert_non_null(strstr(found.v[0].message, "(after preprocessing)"));

	/* line control in the source is refused: the extraction trusts markers */
	kb_findings_release(&found);
	assert_int_equal(kb_static_check_expanded("#line 1 \"/usr/include/x.h\"\nint a;\n", 34,
						  "\nint a;\n", 8, &found), 1);
	assert_true(has("line_directive", 1));

	/* nothing of the kernel's own (a marker-less or empty text) still has its lines */
	kb_preprocessed_own_text("", 0, NULL, 3, &own);
	assert_string_equal(own.buf, "\n\n");
	strbuf_release(&own);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean_native),
		cmocka_unit_test(test_native_rules_fire),
		cmocka_unit_test(test_native_rules_quiet),
		cmocka_unit_test(test_native_missing_entry_and_lines),
		cmocka_unit_test(test_clean_ext),
		cmocka_unit_test(test_ext_rules_fire),
		cmocka_unit_test(test_ext_rules_quiet),
		cmocka_unit_test(test_findings_json),
		cmocka_unit_test(test_check_file),
		cmocka_unit_test(test_native_backstop_rules),
		cmocka_unit_test(test_modelnew_file),
		cmocka_unit_test(test_preprocessed_own_text),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
