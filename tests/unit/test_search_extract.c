#include "core/common.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"
#include "search/extract.h"
#include "core/hash.h"

#include <setjmp.h>
#include <cmocka.h>
#include "skip.h"

static struct strbuf out = STRBUF_INIT, why = STRBUF_INIT;

static int ex(const char *reply)
{
	return kb_extract_kernel(reply, &out, &why);
}

static void ok(const char *reply, const char *want)
{
	int rc = ex(reply);

	if (rc || strcmp(out.buf, want))
		fprintf(stderr, "reply:\n%s\n-- rc %d why '%s' got:\n%s\n-- want:\n%s\n", reply, rc, why.buf, out.buf, want);
	assert_int_equal(rc, 0);
	assert_string_equal(out.buf, want);
	assert_int_equal(why.len, 0);
}

static void bad(const char *reply, const char *reason)
{
	int rc = ex(reply);

	if (rc != -1 || strcmp(why.buf, reason))
		fprintf(stderr, "reply:\n%s\n-- rc %d why '%s' (want '%s')\n", reply ? reply : "(null)", rc, why.buf, reason);
	assert_int_equal(rc, -1);
	assert_string_equal(why.buf, reason);
}

#define KERNEL "__global__ void k(float *y) { y[0] = 1; }\nint kb_forward(const DLTensor *i, int ni, DLTensor *o, int no, void *s)\n{\n\treturn 0;\n}\n"

static void test_extract_basic(void **state)
{
	ok("Here is the kernel:\n\n```cuda\n" KERNEL "```\n\nIt is fast.\n", KERNEL);
	/* no text around, no info string, no final newline */
	ok("```\n" KERNEL "```", KERNEL);
	/* ~~~ fences and a long info string */
	ok("~~~c++ title=\"kernel.cu\"\n" KERNEL "~~~\n", KERNEL);
	/* a longer closing fence closes; a shorter one is content */
	ok("````cpp\nint a;\n```\nint b;\n``````\n", "int a;\n```\nint b;\n");
	/* ~~~ inside a ``` block is content */
	ok("```\nint a;\n~~~\nint b;\n```\n", "int a;\n~~~\nint b;\n");
	/* `inline` ```code``` on one line is not a fence */
	ok("Use ```x``` here.\n```c\nint x;\n```\n", "int x;\n");
	/* out is replaced, why reset */
	strbuf_addstr(&out, "stale");
	strbuf_addstr(&why, "stale");
	ok("```\nint y;\n```\n", "int y;\n");
	/* why may be NULL */
	assert_int_equal(kb_extract_kernel("```\nint z;\n```\n", &out, NULL), 0);
	assert_int_equal(kb_extract_kernel("no code", &out, NULL), -1);
}

static void test_extract_crlf_and_indent(void **state)
{
	ok("Kernel:\r\n```cuda\r\nint a;\r\n\r\nint b;\r\n```\r\nend\r\n", "int a;\n\nint b;\n");
	/* a fence indented in a list: the indentation is removed from the content */
	ok("1. The kernel:\n   ```cuda\n   int a;\n     int b;\n   ```\n", "int a;\n  int b;\n");
}

static void test_extract_several_blocks(void **state)
{
	static const char py_then_kernel[] =
		"Test with:\n```python\nimport torch\nx = torch.randn(1024, 1024, device='cuda')\n"
		"y = torch.relu(x)\nprint(y.sum())\nprint('a much longer python block than the kernel')\n```\n"
		"Kernel:\n```cuda\nint kb_forward(const DLTensor *i, int ni, DLTensor *o, int no, void *s)\n{ return 0; }\n```\n";
	static const char two_kernels[] =
		"First try:\n```cuda\nint kb_forward(const DLTensor *i, int ni, DLTensor *o, int no, void *s) { return 1; }\n```\n"
		"Better:\n```cuda\n__global__ void k(float *y) { y[0] = 2; }\n"
		"int kb_forward(const DLTensor *i, int ni, DLTensor *o, int no, void *s) { return 0; }\n```\n";
	static const char none[] =
		"```sh\nnvcc -O3 k.cu\n```\n```cuda\n__global__ void k(float *y) { y[0] = 2; }\n```\n```\nshort\n```\n";
	static const char mention_only[] =
		"```cuda\n// this block is long and only mentions kb_forward in a comment and a string\n"
		"const char *s = \"kb_forward() {\";\nvoid call(void) { kb_forward(0, 0, 0, 0, 0); }\n"
		"/* padding padding padding padding padding padding padding padding padding */\n```\n"
		"```cuda\nint kb_forward(void) { return 0; }\n```\n";
	static const char ext[] =
		"```cpp\n#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n"
		"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &f); }\n```\n"
		"```cpp\n// a much longer block that defines nothing at all, only words words words words words\n```\n";

	assert_int_equal(ex(py_then_kernel), 0);
	assert_non_null(strstr(out.buf, "int kb_forward"));
	assert_null(strstr(out.buf, "torch"));
	assert_int_equal(ex(two_kernels), 0);
	assert_non_null(strstr(out.buf, "__global__"));
	/* the last kernel, said so: not the longer first one */
	{
		struct strbuf note = STRBUF_INIT;
		static const char revised[] =
			"```cuda\n// a long first try, longer than the revision that follows it\n"
			"int kb_forward(const DLTensor *i, int ni, DLTensor *o, int no, void *s) { return 1; }\n```\n"
			"Fixed:\n```cuda\nint kb_forward(void) { return 0; }\n```\n";

		assert_int_equal(kb_extract_kernel(revised, &out, &note), 0);
		assert_string_equal(out.buf, "int kb_forward(void) { return 0; }\n");
		assert_string_equal(note.buf, "reply has 2 kernels (code blocks defining the ABI entry); "
				     "the last one is used");
		assert_int_equal(kb_extract_kernel(py_then_kernel, &out, &note), 0);
		assert_int_equal(note.len, 0);
		strbuf_release(&note);
	}
	assert_int_equal(ex(none), 0);
	assert_string_equal(out.buf, "__global__ void k(float *y) { y[0] = 2; }\n");
	ok(mention_only, "int kb_forward(void) { return 0; }\n");
	assert_int_equal(ex(ext), 0);
	assert_non_null(strstr(out.buf, "PYBIND11_MODULE"));
}

static void test_extract_failures(void **state)
{
	bad(NULL, "reply is empty");
	bad("", "reply is empty");
	bad(" \n\t\r\n", "reply is empty");
	bad("I cannot write this kernel.", "reply has no code block");
	bad("int kb_forward(void) { return 0; }\n", "reply has no code block");
	bad("Here:\n```cuda\nint kb_forward(void) {\n", "reply's code block is not closed");
	bad("```cuda\n```\n", "reply's code block is empty");
	bad("```cuda\n  \n\n```\n~~~\n~~~\n", "reply's code block is empty");
	bad("```cuda\n```\n```cuda\nint x;\n", "reply's code block is not closed");
	/* a closed block is used even when a later one (cut off) is not closed */
	ok("```cuda\nint a;\n```\nand a second try:\n```cuda\nint b; // cut o", "int a;\n");
}

static void test_extract_fence_inside_code(void **state)
{
	/* a fence line inside a raw string or a block comment does not close the block */
	ok("```cpp\nconst char *doc = R\"(\n```\n)\";\nint a;\n```\n", "const char *doc = R\"(\n```\n)\";\nint a;\n");
	ok("```cpp\n/* example:\n```\n*/\nint a;\n```\n", "/* example:\n```\n*/\nint a;\n");
	/* ... nor in a string or after // on the same line (not at line start anyway) */
	ok("```cpp\nputs(\"```\");\nint a; // ```\n```\n", "puts(\"```\");\nint a; // ```\n");
	/* a comment opener in non-C text that never closes: the block still closes at its fence */
	ok("```sh\nls /*.cu\n```\ntext\n```cuda\nint kb_forward(void) { return 0; }\n```\n",
	   "int kb_forward(void) { return 0; }\n");
	ok("```sh\nls /*.cu\n```\n", "ls /*.cu\n");
	/* a line comment ending in a quote does not open a string */
	ok("```c\nint a; // it's\n```\n", "int a; // it's\n");
}

/* --- source views and hashes --- */

static void test_source_view(void **state)
{
	static const char src[] =
		"int a = 1'000; // c'mt \"x\"\n"
		"const char *s = \"a /* b */ \\\" c\"; char q = '\\'';\n"
		"/* multi\nline */ auto r = R\"d(raw \" // )\" )d\";\n";
	char *code = kb_source_view(src, strlen(src), true);
	char *text = kb_source_view(src, strlen(src), false);

	assert_int_equal(strlen(code), strlen(src));
	assert_int_equal(strlen(text), strlen(src));
	for (size_t i = 0; i < strlen(src); i++) {
		assert_int_equal(code[i] == '\n', src[i] == '\n');
		assert_int_equal(text[i] == '\n', src[i] == '\n');
	}
	assert_non_null(strstr(code, "int a = 1'000;"));
	assert_null(strstr(code, "c'mt"));
	assert_null(strstr(text, "c'mt"));
	assert_non_null(strstr(code, "const char *s = \""));
	assert_null(strstr(code, "/* b */"));
	assert_non_null(strstr(text, "\"a /* b */ \\\" c\""));
	assert_non_null(strstr(code, "char q = '"));
	assert_null(strstr(code, "multi"));
	assert_non_null(strstr(code, "auto r = R\""));
	assert_null(strstr(code, "raw"));
	assert_non_null(strstr(text, "raw \" // )\" )d\";"));
	free(code);
	free(text);
}

static void hash(const char *s, char hex[65])
{
	kb_source_hash(s, hex);
	assert_int_equal(strlen(hex), 64);
	for (int i = 0; i < 64; i++)
		assert_non_null(strchr("0123456789abcdef", hex[i]));
}

static void same(const char *a, const char *b)
{
	char ha[65], hb[65];

	hash(a, ha);
	hash(b, hb);
	if (strcmp(ha, hb))
		fprintf(stderr, "expected equal hashes:\n%s\n--\n%s\n", a, b);
	assert_string_equal(ha, hb);
}

static void differ(const char *a, const char *b)
{
	char ha[65], hb[65];

	hash(a, ha);
	hash(b, hb);
	if (!strcmp(ha, hb))
		fprintf(stderr, "expected different hashes:\n%s\n--\n%s\n", a, b);
	assert_string_not_equal(ha, hb);
}

static void test_source_hash(void **state)
{
	char h[65], want[65];

	/* the normalised text is what is hashed */
	hash("  int   x ;\n// c\n", h);
	kb_sha256_hex("int x;", 6, want);
	assert_string_equal(h, want);
	hash("/* only a comment */\n\n", h);
	kb_sha256_hex("", 0, want);
	assert_string_equal(h, want);

	same("__global__ void k(float *y)\n{\n\ty[0] = 1.0f;\n}\n",
	     "/* the kernel */\n__global__   void k( float* y ) {   // body\n  y[ 0 ]=1.0f; }");
	same("int a=1;\r\nint b=2;\r\n", "int a = 1;\nint b = 2;\n");
	same("x = a /* mid */ + b;", "x = a + b;");
	same("#define N 4 \\\n  + 1\nint a;", "#define N 4 + 1\nint a;");
	same("#include <x.h>\n\n\n#define A 1\n", "#include <x.h>\n#define A 1");
	/* strings are kept verbatim */
	differ("puts(\"a  b\");", "puts(\"a b\");");
	differ("puts(\"/* x */\");", "puts(\"\");");
	differ("puts(\"// x\");", "puts(\"\");");
	differ("char c = ' ';", "char c = '';");
	/* tokens matter */
	differ("y[0] = 1.0f;", "y[0] = 2.0f;");
	differ("int a;", "inta;");
	differ("x = a - -b;", "x = a--b;");
	differ("x = a + +b;", "x = a++b;");
	/* the end of a preprocessor line matters */
	differ("#define A 1\nint x;", "#define A 1 int x;");
	kb_source_hash(NULL, h);
	kb_sha256_hex("", 0, want);
	assert_string_equal(h, want);
}

/* --- template parameters --- */

static const char tuned[] =
	"// a kernel with two tunables\n"
	"// kb-tune KB_P_BLOCK: 256 128 512 1024\n"
	"#ifndef KB_P_BLOCK\n"
	"#define KB_P_BLOCK 256\n"
	"#endif\n"
	"  //   kb-tune   KB_P_VEC :  4, 1,2\n"
	"# ifndef KB_P_VEC\n"
	"\n"
	"#  define KB_P_VEC 4\n"
	"# endif\n"
	"int block = KB_P_BLOCK, vec = KB_P_VEC;\n";

static void test_tparams_parse(void **state)
{
	struct kb_tparams tp;

	assert_int_equal(kb_tparams_parse(tuned, &tp, &why), 0);
	assert_int_equal(why.len, 0);
	assert_int_equal(tp.nr, 2);
	assert_string_equal(tp.p[0].name, "KB_P_BLOCK");
	assert_int_equal(tp.p[0].nr_values, 4);
	assert_int_equal(tp.p[0].values[0], 256);
	assert_int_equal(tp.p[0].values[3], 1024);
	assert_string_equal(tp.p[1].name, "KB_P_VEC");
	assert_int_equal(tp.p[1].nr_values, 3);
	assert_int_equal(tp.p[1].values[1], 1);
	assert_int_equal(tp.p[1].values[2], 2);

	/* no parameters */
	assert_int_equal(kb_tparams_parse("int x; // kb-tuned later, see kb-tune docs\n", &tp, &why), 0);
	assert_int_equal(tp.nr, 0);
	assert_int_equal(kb_tparams_parse("", &tp, NULL), 0);
	/* negative values are integers */
	assert_int_equal(kb_tparams_parse("// kb-tune OFF: -1 0 1\n#ifndef OFF\n#define OFF -1\n#endif\n", &tp, &why), 0);
	assert_int_equal(tp.p[0].values[0], -1);
}

static void tp_bad(const char *src, const char *needle)
{
	struct kb_tparams tp;
	int rc = kb_tparams_parse(src, &tp, &why);

	if (rc != -1 || !strstr(why.buf, needle))
		fprintf(stderr, "source:\n%s\n-- rc %d why '%s' (want '%s')\n", src, rc, why.buf, needle);
	assert_int_equal(rc, -1);
	assert_non_null(strstr(why.buf, needle));
	assert_int_equal(tp.nr, 0);
}

#define GUARD(n, v) "#ifndef " n "\n#define " n " " v "\n#endif\n"

static void test_tparams_malformed(void **state)
{
	struct strbuf sb = STRBUF_INIT;

	tp_bad("// kb-tune : 1 2\n", "has no parameter name");
	tp_bad("// kb-tune 9X: 1 2\n", "has no parameter name");
	tp_bad("// kb-tune X 1 2\n" GUARD("X", "1"), "expected ':' after 'X'");
	tp_bad("// kb-tune X:\n" GUARD("X", "1"), "'X' has no values");
	tp_bad("// kb-tune X: 1 2x\n" GUARD("X", "1"), "value '2x' of 'X' is not an integer");
	tp_bad("// kb-tune X: 1 0x10\n" GUARD("X", "1"), "is not an integer");
	tp_bad("// kb-tune X: 1 2 // note\n" GUARD("X", "1"), "is not an integer");
	tp_bad("// kb-tune X: 99999999999999999999\n" GUARD("X", "1"), "is not an integer");
	tp_bad("// kb-tune X: 4 8 4\n" GUARD("X", "4"), "repeats the value 4");
	tp_bad("// kb-tune X: 1 2\n// kb-tune X: 3\n" GUARD("X", "1"), "'X' is declared twice");
	tp_bad("// kb-tune X: 1 2\nint x = X;\n", "'X' has no '#ifndef X' / '#define X' guard");
	tp_bad("// kb-tune X: 1 2\n#define X 1\n", "guard");
	tp_bad("// kb-tune X: 1 2\n#ifndef X\n#endif\n#define X 1\n", "guard");
	tp_bad("// kb-tune X: 1 2\n#ifndef X\n#define X\n#endif\n", "guard");
	tp_bad("// kb-tune X: 1 2\n#ifndef X\n#define X 1\n", "guard");
	tp_bad("// kb-tune X: 1 2\n#ifndef XY\n#define XY 1\n#endif\n", "guard");
	/* a guard that is commented out or in a string is no guard */
	tp_bad("// kb-tune X: 1 2\n/*\n#ifndef X\n#define X 1\n#endif\n*/\n", "guard");
	tp_bad("// kb-tune X: 1 2\n// #ifndef X\n// #define X 1\n// #endif\n", "guard");

	strbuf_addstr(&sb, "// kb-tune X:");
	for (int i = 0; i < KB_TPARAM_MAX_VALUES + 1; i++)
		strbuf_addf(&sb, " %d", i);
	strbuf_addstr(&sb, "\n" GUARD("X", "0"));
	tp_bad(sb.buf, "has more than 16 values");
	strbuf_reset(&sb);
	for (int i = 0; i < KB_TPARAM_MAX + 1; i++)
		strbuf_addf(&sb, "// kb-tune P%d: 1 2\n#ifndef P%d\n#define P%d 1\n#endif\n", i, i, i);
	tp_bad(sb.buf, "more than 8 parameters");
	strbuf_reset(&sb);
	strbuf_addstr(&sb, "// kb-tune ");
	for (int i = 0; i < 70; i++)
		strbuf_addch(&sb, 'N');
	strbuf_addstr(&sb, ": 1\n");
	tp_bad(sb.buf, "name is too long");
	strbuf_release(&sb);
}

#define PREFIX "#define KB_P_BLOCK 512\n#define KB_P_VEC 4\n"

static void test_tparams_render(void **state)
{
	struct kb_tparams tp;
	size_t digits[2] = { 2, 0 }, bad[2] = { 99, 1 };
	struct strbuf r = STRBUF_INIT, name = STRBUF_INIT, path = STRBUF_INIT;
	struct child_process cp = CHILD_PROCESS_INIT;
	char dir[] = "/tmp/kb-tparams-XXXXXX";

	assert_int_equal(kb_tparams_parse(tuned, &tp, &why), 0);
	kb_tparams_render(tuned, &tp, digits, &r);
	assert_true(!strncmp(r.buf, PREFIX, strlen(PREFIX)));
	assert_string_equal(r.buf + strlen(PREFIX), tuned);
	kb_tparams_point_name(&tp, digits, &name);
	assert_string_equal(name.buf, "KB_P_BLOCK=512 KB_P_VEC=4");
	strbuf_reset(&name);
	kb_tparams_point_name(&tp, bad, &name);
	assert_string_equal(name.buf, "KB_P_BLOCK=256 KB_P_VEC=1");

	/* the real preprocessor sees the point's values, without redefinition warnings */
	assert_non_null(mkdtemp(dir));
	strbuf_addf(&path, "%s/k.c", dir);
	assert_int_equal(kb_write_file_atomic(path.buf, r.buf, r.len), 0);
	strvec_pushl(&cp.args, "cc", "-E", "-P", "-Werror", path.buf, NULL);
	cp.timeout_ms = 30000;
	if (run_command(&cp) < 0 || cp.exit_code == 127) {
		kb_rm_rf(dir);
		KB_SKIP("no C preprocessor (cc) on this machine");
	}
	if (cp.exit_code)
		fprintf(stderr, "%s\n", cp.err.buf);
	assert_int_equal(cp.exit_code, 0);
	assert_non_null(strstr(cp.out.buf, "int block = 512, vec = 4;"));
	/* the source as it is: the defaults */
	child_process_release(&cp);
	child_process_init(&cp);
	assert_int_equal(kb_write_file_atomic(path.buf, tuned, strlen(tuned)), 0);
	strvec_pushl(&cp.args, "cc", "-E", "-P", path.buf, NULL);
	assert_int_equal(run_command(&cp), 0);
	assert_non_null(strstr(cp.out.buf, "int block = 256, vec = 4;"));
	child_process_release(&cp);
	kb_rm_rf(dir);
	strbuf_release(&r);
	strbuf_release(&name);
	strbuf_release(&path);
}

static int teardown(void **state)
{
	strbuf_release(&out);
	strbuf_release(&why);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_extract_basic),
		cmocka_unit_test(test_extract_crlf_and_indent),
		cmocka_unit_test(test_extract_several_blocks),
		cmocka_unit_test(test_extract_failures),
		cmocka_unit_test(test_extract_fence_inside_code),
		cmocka_unit_test(test_source_view),
		cmocka_unit_test(test_source_hash),
		cmocka_unit_test(test_tparams_parse),
		cmocka_unit_test(test_tparams_malformed),
		cmocka_unit_test(test_tparams_render),
	};

	return cmocka_run_group_tests(tests, NULL, teardown);
}
