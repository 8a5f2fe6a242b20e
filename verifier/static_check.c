#include "core/common.h"
#include "core/cscan.h"
#include "verifier/static_check.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <ctype.h>

#define MAX_FINDINGS 64
#define MAX_QUAL 4

/* --- the two views --- */

struct views {
	const char *src;
	char *code;   /* comments and literal contents blanked */
	char *text;   /* comments blanked */
	bool *pp;     /* per line (1-based): a preprocessor line */
	size_t len;
	int nr_lines;
};

static void blank(char *view, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (view[i] != '\n')
			view[i] = ' ';
}

static void make_views(const char *src, size_t len, struct views *v)
{
	size_t i = 0;
	int line = 1;
	bool continued = false;

	v->src = src;
	v->len = len;
	v->code = xmalloc(len + 1);
	v->text = xmalloc(len + 1);
	memcpy(v->code, src, len);
	memcpy(v->text, src, len);
	v->code[len] = v->text[len] = '\0';

	while (i < len) {
		char c = src[i];
		size_t j;

		if (c == '/' && i + 1 < len && src[i + 1] == '/') {
			for (j = i; j < len && src[j] != '\n'; j++)
				if (src[j] == '\\' && j + 1 < len && src[j + 1] == '\n')
					j++; /* a continued line comment goes on */
			blank(v->code, i, j);
			blank(v->text, i, j);
			i = j;
		} else if (c == '/' && i + 1 < len && src[i + 1] == '*') {
			for (j = i + 2; j + 1 < len && !(src[j] == '*' && src[j + 1] == '/'); j++)
				;
			j = j + 2 <= len ? j + 2 : len;
			blank(v->code, i, j);
			blank(v->text, i, j);
			i = j;
		} else if (c == '"' && kb_c_raw_string_at(src, i)) {
			char delim[20];
			size_t d = 0, end;
			struct strbuf close = STRBUF_INIT;
			const char *hit;

			for (j = i + 1; j < len && src[j] != '(' && d < sizeof(delim) - 1; j++)
				delim[d++] = src[j];
			delim[d] = '\0';
			strbuf_addf(&close, ")%s\"", delim);
			hit = memmem(src + j, len - j, close.buf, close.len);
			end = hit ? (size_t)(hit - src) + close.len - 1 : len;
			blank(v->code, i + 1, end);
			strbuf_release(&close);
			i = end + 1;
		} else if (c == '"' || (c == '\'' && !kb_c_digit_separator_at(src, i))) {
			for (j = i + 1; j < len && src[j] != c && src[j] != '\n'; j++)
				if (src[j] == '\\' && j + 1 < len)
					j++;
			blank(v->code, i + 1, j < len ? j : len);
			i = j + 1;
		} else {
			i++;
		}
	}

	/* preprocessor lines, following backslash continuations */
	v->nr_lines = 1;
	for (i = 0; i < len; i++)
		if (v->code[i] == '\n')
			v->nr_lines++;
	v->pp = xcalloc((size_t)v->nr_lines + 2, sizeof(bool));
	for (i = 0; i < len; ) {
		size_t start = i, end, k;

		end = i;
		while (end < len && v->code[end] != '\n')
			end++;
		for (k = start; k < end && isspace((unsigned char)v->code[k]); k++)
			;
		v->pp[line] = continued || (k < end && (v->code[k] == '#' ||
			(v->code[k] == '%' && k + 1 < end && v->code[k + 1] == ':')));
		k = end;
		while (k > start && isspace((unsigned char)v->code[k - 1]))
			k--;
		continued = v->pp[line] && k > start && v->code[k - 1] == '\\';
		i = end + 1;
		line++;
	}
}

static void release_views(struct views *v)
{
	free(v->code);
	free(v->text);
	free(v->pp);
}

/* --- findings --- */

void kb_findings_release(struct kb_findings *f)
{
	for (size_t i = 0; i < f->nr; i++)
		free(f->v[i].message);
	free(f->v);
	f->v = NULL;
	f->nr = f->alloc = 0;
}

#define add_finding kb_findings_add

void kb_findings_add(struct kb_findings *f, size_t first, int line, const char *rule,
		     const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	for (size_t i = first; i < f->nr; i++)
		if (f->v[i].line == line && !strcmp(f->v[i].rule, rule) &&
		    !strcmp(f->v[i].message, sb.buf)) {
			strbuf_release(&sb);
			return;
		}
	if (f->nr - first >= MAX_FINDINGS) {
		strbuf_release(&sb);
		return;
	}
	if (f->nr == f->alloc) {
		f->alloc = f->alloc ? 2 * f->alloc : 8;
		f->v = xrealloc(f->v, f->alloc * sizeof(*f->v));
	}
	f->v[f->nr].line = line;
	f->v[f->nr].rule = rule;
	f->v[f->nr].message = strbuf_detach(&sb, NULL);
	f->nr++;
}

cJSON *kb_findings_to_json(const struct kb_findings *f)
{
	cJSON *arr = cJSON_CreateArray();

	for (size_t i = 0; i < f->nr; i++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddNumberToObject(o, "line", f->v[i].line);
		cJSON_AddStringToObject(o, "rule", f->v[i].rule);
		cJSON_AddStringToObject(o, "message", f->v[i].message);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

/* --- identifiers in the code view --- */

struct ident {
	size_t start, end;
	int line;
	char name[64];
	bool pp;          /* on a preprocessor line */
	bool member;      /* after . or -> */
	bool call;        /* followed by ( */
	bool scope_qual;  /* followed by :: (a namespace or class, checked with what follows) */
	bool addr;        /* after & (not &&) or = (not ==, <=, >=, !=) */
	int nqual;        /* qualifiers, outermost first: torch::nn::relu -> {torch, nn} */
	char qual[MAX_QUAL][32];
	size_t chain_start; /* where the qualified name begins */
};

static size_t prev_nonspace(const char *s, size_t pos)
{
	while (pos > 0) {
		pos--;
		if (!isspace((unsigned char)s[pos]))
			return pos;
	}
	return SIZE_MAX;
}

static size_t next_nonspace(const char *s, size_t len, size_t pos)
{
	while (pos < len && isspace((unsigned char)s[pos]))
		pos++;
	return pos;
}

static void copy_name(char *dst, size_t size, const char *s, size_t len)
{
	if (len >= size)
		len = size - 1;
	memcpy(dst, s, len);
	dst[len] = '\0';
}

static void fill_ident(const struct views *v, size_t start, size_t end, int line, struct ident *id)
{
	const char *c = v->code;
	size_t p, n;

	memset(id, 0, sizeof(*id));
	id->start = start;
	id->end = end;
	id->line = line;
	id->pp = v->pp[line];
	copy_name(id->name, sizeof(id->name), c + start, end - start);
	n = next_nonspace(c, v->len, end);
	id->call = n < v->len && c[n] == '(';
	id->scope_qual = n + 1 < v->len && c[n] == ':' && c[n + 1] == ':';

	/* walk the qualifier chain backwards: a::b::name */
	id->chain_start = start;
	for (size_t pos = start; id->nqual < MAX_QUAL; ) {
		size_t q, qe, qs;

		p = prev_nonspace(c, pos);
		if (p == SIZE_MAX || p == 0 || c[p] != ':' || c[p - 1] != ':')
			break;
		q = prev_nonspace(c, p - 1);
		if (q == SIZE_MAX || !kb_c_ident_char(c[q])) {
			id->chain_start = p - 1; /* ::name, the global namespace */
			break;
		}
		qe = q + 1;
		qs = q;
		while (qs > 0 && kb_c_ident_char(c[qs - 1]))
			qs--;
		memmove(id->qual[1], id->qual[0], sizeof(id->qual[0]) * (size_t)id->nqual);
		copy_name(id->qual[0], sizeof(id->qual[0]), c + qs, qe - qs);
		id->nqual++;
		id->chain_start = qs;
		pos = qs;
	}
	p = prev_nonspace(c, id->chain_start);
	if (p != SIZE_MAX) {
		id->member = c[p] == '.' || (c[p] == '>' && p > 0 && c[p - 1] == '-');
		id->addr = (c[p] == '&' && (p == 0 || c[p - 1] != '&')) ||
			(c[p] == '=' && (p == 0 || !strchr("=<>!+-*/%&|^", c[p - 1])));
	}
}

static bool qual_is(const struct ident *id, const char *q0)
{
	return id->nqual == 1 && !strcmp(id->qual[0], q0);
}

static bool in_list(const char *name, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(name, *list))
			return true;
	return false;
}

/* Calls fn for every identifier of the code view (numbers skipped). */
typedef void (*ident_fn)(const struct views *v, const struct ident *id, void *payload);

static void for_each_ident(const struct views *v, ident_fn fn, void *payload)
{
	const char *c = v->code;
	int line = 1;

	for (size_t i = 0; i < v->len; ) {
		if (c[i] == '\n') {
			line++;
			i++;
		} else if (isdigit((unsigned char)c[i])) {
			while (i < v->len && (kb_c_ident_char(c[i]) || c[i] == '.'))
				i++;
		} else if (kb_c_ident_char(c[i])) {
			struct ident id;
			size_t s = i;

			while (i < v->len && kb_c_ident_char(c[i]))
				i++;
			fill_ident(v, s, i, line, &id);
			fn(v, &id, payload);
		} else {
			i++;
		}
	}
}

/* --- rule tables --- */

#define W_COMMON 1  /* a common word: only as a call, an address or on a #line */
#define W_STD 2     /* only as std::name */

struct word_rule {
	const char *name;
	const char *rule;
	unsigned flags;
};

static const struct word_rule escape_words[] = {
	{ "fork", "process", 0 }, { "vfork", "process", 0 }, { "clone", "process", W_COMMON },
	{ "clone3", "process", 0 }, { "execl", "process", 0 }, { "execlp", "process", 0 },
	{ "execle", "process", 0 }, { "execv", "process", 0 }, { "execvp", "process", 0 },
	{ "execvpe", "process", 0 }, { "execve", "process", 0 }, { "execveat", "process", 0 },
	{ "fexecve", "process", 0 }, { "system", "process", W_COMMON }, { "popen", "process", 0 },
	{ "posix_spawn", "process", 0 }, { "posix_spawnp", "process", 0 },
	{ "kill", "process", W_COMMON }, { "exit", "process", W_COMMON }, { "_exit", "process", 0 },
	{ "_Exit", "process", 0 }, { "quick_exit", "process", 0 }, { "signal", "process", W_COMMON },
	{ "sigaction", "process", W_COMMON }, { "atexit", "process", 0 },

	{ "dlopen", "dynamic_loading", 0 }, { "dlmopen", "dynamic_loading", 0 },
	{ "dlsym", "dynamic_loading", 0 }, { "dlvsym", "dynamic_loading", 0 },

	{ "syscall", "syscall", 0 }, { "ptrace", "syscall", 0 }, { "prctl", "syscall", 0 },
	{ "mprotect", "syscall", 0 }, { "setrlimit", "syscall", 0 }, { "prlimit", "syscall", 0 },

	{ "getenv", "environment", 0 }, { "secure_getenv", "environment", 0 },
	{ "setenv", "environment", 0 }, { "putenv", "environment", 0 },
	{ "unsetenv", "environment", 0 }, { "clearenv", "environment", 0 },
	{ "environ", "environment", 0 }, { "__environ", "environment", 0 },

	{ "fopen", "file_io", 0 }, { "fopen64", "file_io", 0 }, { "freopen", "file_io", 0 },
	{ "fdopen", "file_io", 0 }, { "open", "file_io", W_COMMON }, { "open64", "file_io", 0 },
	{ "openat", "file_io", 0 }, { "creat", "file_io", 0 }, { "write", "file_io", W_COMMON },
	{ "pwrite", "file_io", 0 }, { "pwrite64", "file_io", 0 }, { "writev", "file_io", 0 },
	{ "pwritev", "file_io", 0 }, { "fwrite", "file_io", 0 }, { "dprintf", "file_io", 0 },
	{ "vdprintf", "file_io", 0 }, { "dup", "file_io", W_COMMON }, { "dup2", "file_io", 0 },
	{ "dup3", "file_io", 0 }, { "fcntl", "file_io", 0 }, { "ioctl", "file_io", 0 },
	{ "unlink", "file_io", 0 }, { "unlinkat", "file_io", 0 }, { "memfd_create", "file_io", 0 },
	{ "sendfile", "file_io", 0 }, { "mkfifo", "file_io", 0 },
	{ "ofstream", "file_io", 0 }, { "ifstream", "file_io", 0 }, { "fstream", "file_io", 0 },
	{ "wofstream", "file_io", 0 }, { "wifstream", "file_io", 0 }, { "wfstream", "file_io", 0 },
	{ "basic_ofstream", "file_io", 0 }, { "basic_ifstream", "file_io", 0 },
	{ "basic_fstream", "file_io", 0 }, { "basic_filebuf", "file_io", 0 },
	{ "filebuf", "file_io", 0 }, { "stdio_filebuf", "file_io", 0 },

	{ "socket", "network", 0 }, { "socketpair", "network", 0 },
	{ "connect", "network", W_COMMON }, { "getaddrinfo", "network", 0 },
	{ "gethostbyname", "network", 0 }, { "sendto", "network", 0 },
	{ "sendmsg", "network", 0 }, { "recvfrom", "network", 0 },

	{ "pthread_create", "threads", 0 }, { "thread", "threads", W_STD },
	{ "jthread", "threads", W_STD }, { "async", "threads", W_STD },

	{ "cudaStreamCreate", "stream", 0 }, { "cudaStreamCreateWithFlags", "stream", 0 },
	{ "cudaStreamCreateWithPriority", "stream", 0 }, { "cudaStreamPerThread", "stream", 0 },
	{ "cudaStreamLegacy", "stream", 0 },
};

static const char *const forbidden_include_prefixes[] = {
	"torch/", "torch.h", "ATen/", "c10/", "caffe2/", "pybind11/", "Python.h", NULL
};

/* torch::X(...) / at::X(...) calls that allocate or describe, never compute */
static const char *const torch_allowed_calls[] = {
	"empty", "empty_like", "empty_strided", "from_blob", "TensorOptions", "dtype",
	"device", "layout", "requires_grad", "memory_format", "Device", "Scalar",
	"IntArrayRef", "ArrayRef", "Tensor", "elementSize", "toString", "isFloatingType",
	"isIntegralType", "isComplexType", "isReducedFloatingType", "typeMetaToScalarType",
	"scalarTypeToTypeMeta", "DeviceGuard", "OptionalDeviceGuard", "ceil_div",
	"device_of", "get_device", NULL
};

/* torch::NS:: and at::NS:: namespaces that hold compute */
static const char *const torch_compute_namespaces[] = {
	"nn", "native", "functional", "autograd", "linalg", "fft", "special", "jit",
	"indexing", "nested", "sparse", "_ops", "autocast", "compositeimplicitautograd",
	"cpu", NULL
};

/* Tensor methods (and at:: functions, when called on a tensor) that compute */
static const char *const tensor_compute_methods[] = {
	"matmul", "mm", "bmm", "addmm", "addmm_", "addmv", "addr", "addbmm", "baddbmm", "mv",
	"dot", "vdot", "outer", "ger", "einsum", "tensordot", "linear", "bilinear",
	"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
	"conv_transpose3d", "convolution", "relu", "relu_", "gelu", "silu", "elu", "selu",
	"leaky_relu", "hardtanh", "sigmoid", "sigmoid_", "tanh", "tanh_", "softmax",
	"log_softmax", "softplus", "sum", "sum_to_size", "mean", "var", "std", "norm",
	"prod", "cumsum", "cumprod", "max", "min", "amax", "amin", "argmax", "argmin",
	"maximum", "minimum", "exp", "exp_", "exp2", "expm1", "log", "log_", "log2",
	"log10", "log1p", "pow", "pow_", "sqrt", "sqrt_", "rsqrt", "rsqrt_", "abs", "abs_",
	"neg", "neg_", "reciprocal", "sin", "cos", "tan", "sign", "floor", "ceil", "round",
	"trunc", "frac", "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_",
	"true_divide", "floor_divide", "remainder", "fmod", "clamp", "clamp_",
	"clamp_min", "clamp_max", "clip", "where", "masked_fill", "masked_fill_",
	"masked_scatter", "fill_", "zero_", "copy_", "clone", "to", "type", "half",
	"float", "double", "bfloat16", "index", "index_select", "index_add",
	"index_add_", "index_put", "index_put_", "index_copy", "gather", "scatter",
	"scatter_", "scatter_add", "scatter_add_", "take", "put_", "repeat", "tile",
	"permute", "transpose", "transpose_", "t", "t_", "expand", "expand_as",
	"sort", "topk", "kthvalue", "median", "mode", "unique", "flip", "roll", "tril",
	"triu", "matrix_power", "inverse", "lerp", "addcmul", "addcdiv", "logsumexp",
	"dropout", "layer_norm", "batch_norm", "group_norm", "instance_norm", "embedding",
	"mse_loss", "cross_entropy", "nll_loss", "backward", "cat", "stack", "chunk",
	"split", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
	"rand", "randn", "tensor", "arange", "linspace", "eq", "ne", "lt", "le", "gt",
	"ge", "all", "any", "nonzero", "isnan", "isinf", "nan_to_num", "erf", "erf_",
	"sinh", "cosh", "atan", "atan2", "asin", "acos", "square", "mish", "hardswish",
	"hardsigmoid", "prelu", "threshold", "baddbmm_", "sub_", NULL
};

static const char *const py_escape_names[] = {
	"exec", "eval", "eval_file", "import", "globals", "function", NULL
};

static const char *const py_escape_prefixes[] = {
	"PyRun_", "PyImport_", "PyEval_", "PyObject_Call", "PyObject_GetAttr",
	"Py_CompileString", NULL
};

static const char *const timer_code_names[] = {
	"setattr", "delattr", "PyObject_SetAttr", "PyObject_SetAttrString",
	"PyObject_GenericSetAttr", NULL
};

/* Python names that only matter inside a string literal */
static const char *const timer_string_words[] = {
	"Event", "elapsed_time", "synchronize", "perf_counter", "perf_counter_ns",
	"monotonic", "monotonic_ns", "process_time", "__setattr__", "timeit", NULL
};

static const char *const not_a_type[] = {
	"return", "else", "case", "throw", "new", "delete", "co_return", "sizeof",
	"do", "if", "while", "for", "switch", "and", "or", "not", NULL
};

/* --- the scan --- */

/* A declared variable: its name, where it was declared and where it is visible. */
struct decl {
	char name[64];
	size_t at;           /* the name's position */
	size_t from, to;     /* visible in [from, to) */
	bool tensor;
};

struct scan {
	enum kb_kernel_abi abi;
	struct kb_findings *out;
	size_t first;               /* out->nr before this scan */
	bool has_entry;             /* kb_forward seen */
	bool expanded;              /* scanning preprocessed text (kb_static_check_expanded) */
	bool mixed;                 /* KB_STATIC_MIXED: torch calls allowed */
	struct decl *decls;         /* variables, tensors and others */
	size_t nr_decls, alloc_decls;
	/* names the source itself defines as functions (with a body) */
	char (*defs)[64];
	size_t nr_defs, alloc_defs;
};

static void push_name(char (**arr)[64], size_t *nr, size_t *alloc, const char *name)
{
	for (size_t i = 0; i < *nr; i++)
		if (!strcmp((*arr)[i], name))
			return;
	if (*nr == *alloc) {
		*alloc = *alloc ? 2 * *alloc : 16;
		*arr = xrealloc(*arr, *alloc * sizeof(**arr));
	}
	kb_strlcpy((*arr)[(*nr)++], name, 64);
}

static bool has_name(char (*arr)[64], size_t nr, const char *name)
{
	for (size_t i = 0; i < nr; i++)
		if (!strcmp(arr[i], name))
			return true;
	return false;
}

static void read_word_at(const char *s, size_t len, size_t pos, char *dst, size_t size)
{
	size_t e = pos;

	while (e < len && kb_c_ident_char(s[e]))
		e++;
	copy_name(dst, size, s + pos, e - pos);
}

/* The word that ends at p (inclusive). */
static size_t word_before(const char *s, size_t p, char *dst, size_t size)
{
	size_t st = p;

	while (st > 0 && kb_c_ident_char(s[st - 1]))
		st--;
	copy_name(dst, size, s + st, p + 1 - st);
	return st;
}

/* Index of the bracket matching the opening one at open, or len. */
static size_t match_forward(const char *c, size_t len, size_t open)
{
	char o = c[open], cl = o == '(' ? ')' : o == '{' ? '}' : ']';
	int depth = 0;

	for (size_t i = open; i < len; i++) {
		if (c[i] == o)
			depth++;
		else if (c[i] == cl && !--depth)
			return i;
	}
	return len;
}

/*
 * Where a variable declared at q is visible: a parameter, the body after
 * its list; a local, the rest of its block. Scans back to the innermost
 * unclosed ( or {.
 */
static void decl_scope(const struct views *v, size_t q, size_t *from, size_t *to)
{
	const char *c = v->code;
	int paren = 0, brace = 0;

	*from = q;
	*to = v->len;
	for (size_t i = q; i-- > 0; ) {
		if (c[i] == ')')
			paren++;
		else if (c[i] == '}')
			brace++;
		else if (c[i] == '(' && paren-- == 0) {
			size_t close = match_forward(c, v->len, i), b;

			b = close < v->len ? next_nonspace(c, v->len, close + 1) : v->len;
			/* skip qualifiers such as const, noexcept, override, -> T */
			while (b < v->len && (kb_c_ident_char(c[b]) || c[b] == '-' || c[b] == '>' || c[b] == ':'))
				b = next_nonspace(c, v->len, b + 1);
			if (b < v->len && c[b] == '{') {
				*from = b;
				*to = match_forward(c, v->len, b);
			}
			return;
		} else if (c[i] == '{' && brace-- == 0) {
			*to = match_forward(c, v->len, i);
			return;
		}
	}
}

/* Pass 1: variables (tensor or not) and the functions the source defines. */
static void collect(const struct views *v, const struct ident *id, void *payload)
{
	struct scan *sc = payload;
	const char *c = v->code;
	char word[64];
	size_t p, n;
	bool tensor;

	if (id->member || id->nqual || id->scope_qual)
		return;
	p = prev_nonspace(c, id->chain_start);
	if (id->call) {
		/* "float relu(...) {" defines relu; "return relu(" and prototypes do not */
		size_t close = match_forward(c, v->len, next_nonspace(c, v->len, id->end)), b;

		if (p == SIZE_MAX || close >= v->len)
			return;
		if (kb_c_ident_char(c[p])) {
			word_before(c, p, word, sizeof(word));
			if (in_list(word, not_a_type))
				return;
		} else if (c[p] != '*' && c[p] != '&') {
			return;
		}
		b = next_nonspace(c, v->len, close + 1);
		while (b < v->len && kb_c_ident_char(c[b]))
			b = next_nonspace(c, v->len, b + 1);
		if (b < v->len && c[b] == '{')
			push_name(&sc->defs, &sc->nr_defs, &sc->alloc_defs, id->name);
		return;
	}

	/* a declaration: TYPE [*&]* name followed by , ) = ; [ { */
	n = next_nonspace(c, v->len, id->end);
	if (n >= v->len || !strchr(",)=;[{", c[n]) || (c[n] == '=' && n + 1 < v->len && c[n + 1] == '='))
		return;
	if (p == SIZE_MAX)
		return;
	while (p != SIZE_MAX && (c[p] == '*' || c[p] == '&'))
		p = prev_nonspace(c, p);
	if (p == SIZE_MAX || !kb_c_ident_char(c[p]) || isdigit((unsigned char)c[p]))
		return;
	p = word_before(c, p, word, sizeof(word));
	if (!strcmp(word, "const") || !strcmp(word, "volatile")) {
		p = prev_nonspace(c, p);
		if (p == SIZE_MAX || !kb_c_ident_char(c[p]))
			return;
		word_before(c, p, word, sizeof(word));
	}
	if (in_list(word, not_a_type))
		return;
	tensor = !strcmp(word, "Tensor");
	if (!strcmp(word, "auto") && c[n] == '=') {
		/* auto name = torch::empty...(...) / at::from_blob(...) */
		size_t r = next_nonspace(c, v->len, n + 1);
		char rhs[64], fn[64];

		if (r < v->len && kb_c_ident_char(c[r])) {
			read_word_at(c, v->len, r, rhs, sizeof(rhs));
			r = next_nonspace(c, v->len, r + strlen(rhs));
			if ((!strcmp(rhs, "torch") || !strcmp(rhs, "at")) && r + 1 < v->len &&
			    c[r] == ':' && c[r + 1] == ':') {
				r = next_nonspace(c, v->len, r + 2);
				read_word_at(c, v->len, r, fn, sizeof(fn));
				tensor = !strncmp(fn, "empty", 5) || !strcmp(fn, "from_blob");
			}
		}
	}
	if (sc->nr_decls == sc->alloc_decls) {
		sc->alloc_decls = sc->alloc_decls ? 2 * sc->alloc_decls : 16;
		sc->decls = xrealloc(sc->decls, sc->alloc_decls * sizeof(*sc->decls));
	}
	{
		struct decl *d = &sc->decls[sc->nr_decls++];

		kb_strlcpy(d->name, id->name, sizeof(d->name));
		d->at = id->start;
		d->tensor = tensor;
		decl_scope(v, id->start, &d->from, &d->to);
	}
}

static bool is_decl(const struct scan *sc, size_t pos)
{
	for (size_t i = 0; i < sc->nr_decls; i++)
		if (sc->decls[i].at == pos)
			return true;
	return false;
}

/* Is name at pos a tensor: the innermost declaration in view says so. */
static bool is_tensor_at(const struct scan *sc, const char *name, size_t pos)
{
	const struct decl *best = NULL;

	for (size_t i = 0; i < sc->nr_decls; i++) {
		const struct decl *d = &sc->decls[i];

		if (strcmp(d->name, name) || pos < d->from || pos >= d->to)
			continue;
		if (!best || d->from >= best->from)
			best = d;
	}
	return best && best->tensor;
}

static void qualified_name(const struct ident *id, struct strbuf *sb)
{
	for (int i = 0; i < id->nqual; i++)
		strbuf_addf(sb, "%s::", id->qual[i]);
	strbuf_addstr(sb, id->name);
}

static void check_escape(struct scan *sc, const struct ident *id)
{
	for (size_t i = 0; i < ARRAY_SIZE(escape_words); i++) {
		const struct word_rule *w = &escape_words[i];
		struct strbuf sb = STRBUF_INIT;

		if (strcmp(id->name, w->name))
			continue;
		if (id->member)
			return;
		if ((w->flags & W_STD) && !qual_is(id, "std"))
			return;
		if ((w->flags & W_COMMON) && !id->call && !id->addr && !id->pp)
			return;
		/* the source's own function of that name (with a body) */
		if ((w->flags & W_COMMON) && !id->nqual && id->chain_start == id->start &&
		    has_name(sc->defs, sc->nr_defs, id->name))
			return;
		/* a qualified name outside std (foo::write) is the source's own */
		if (id->nqual && !qual_is(id, "std") && !qual_is(id, "__gnu_cxx"))
			return;
		qualified_name(id, &sb);
		add_finding(sc->out, sc->first, id->line, w->rule, "'%s' is not allowed in a kernel", sb.buf);
		strbuf_release(&sb);
		return;
	}
}

/* asm("syscall") and friends: the statement's text, strings included. */
static void check_asm(struct scan *sc, const struct views *v, const struct ident *id)
{
	static const char *const traps[] = { "syscall", "sysenter", "int $0x80", "int 0x80",
					     "svc #", "svc 0", ".incbin", NULL };
	const char *c = v->code;
	size_t p = id->end, end;
	int depth = 0;

	if (strcmp(id->name, "asm") && strcmp(id->name, "__asm__") && strcmp(id->name, "__asm"))
		return;
	while (p < v->len && c[p] != '(' && c[p] != ';')
		p++;
	if (p >= v->len || c[p] != '(')
		return;
	for (end = p; end < v->len; end++) {
		if (c[end] == '(')
			depth++;
		else if (c[end] == ')' && !--depth)
			break;
	}
	for (const char *const *t = traps; *t; t++)
		if (memmem(v->text + p, end - p, *t, strlen(*t))) {
			add_finding(sc->out, sc->first, id->line, "syscall",
				    "inline asm with '%s' is not allowed in a kernel", *t);
			return;
		}
}

/* First argument of a call at id: is it a tensor variable? */
static bool first_arg_is_tensor(const struct scan *sc, const struct views *v, const struct ident *id)
{
	size_t p = next_nonspace(v->code, v->len, id->end);
	char word[64];
	size_t e;

	if (p >= v->len || v->code[p] != '(')
		return false;
	p = next_nonspace(v->code, v->len, p + 1);
	if (p >= v->len || !kb_c_ident_char(v->code[p]))
		return false;
	read_word_at(v->code, v->len, p, word, sizeof(word));
	e = next_nonspace(v->code, v->len, p + strlen(word));
	return is_tensor_at(sc, word, p) && e < v->len && (v->code[e] == ')' || v->code[e] == ',');
}

static void check_tensor_operator(struct scan *sc, const struct views *v, const struct ident *id)
{
	const char *c = v->code;
	size_t n, p;
	char op[3] = "";

	if (id->member || id->nqual || id->scope_qual || is_decl(sc, id->start) ||
	    !is_tensor_at(sc, id->name, id->start))
		return;
	n = next_nonspace(c, v->len, id->end);
	if (n < v->len && strchr("+-*/%[<>&|^", c[n])) {
		char n1 = n + 1 < v->len ? c[n + 1] : '\0';

		if (c[n] == '-' && n1 == '>')
			goto before;                    /* pointer member access */
		if ((c[n] == '&' && n1 == '&') || (c[n] == '|' && n1 == '|'))
			goto before;                    /* logic on a bool-ish use */
		if ((c[n] == '<' && n1 == '<') || (c[n] == '>' && n1 == '>'))
			goto before;                    /* stream insertion */
		op[0] = c[n];
		goto found;
	}
before:
	p = prev_nonspace(c, id->start);
	if (p != SIZE_MAX && strchr("+-*/%~", c[p])) {
		op[0] = c[p];
		goto found;
	}
	return;
found:
	add_finding(sc->out, sc->first, id->line, "torch_compute",
		    "'%s' on tensor '%s' runs a torch op", op, id->name);
}

static void check_torch_ext(struct scan *sc, const struct views *v, const struct ident *id)
{
	struct strbuf sb = STRBUF_INIT;

	if (!strcmp(id->name, "try") && !id->member) {
		size_t n = next_nonspace(v->code, v->len, id->end);

		if (n < v->len && v->code[n] == '{')
			add_finding(sc->out, sc->first, id->line, "try_catch",
				    "try/catch is not allowed (a fallback path)");
		goto out;
	}
	if (!strcmp(id->name, "namespace") && !id->member) {
		size_t p = prev_nonspace(v->code, id->start), n;
		char word[64];

		if (p == SIZE_MAX || p < 4 || strncmp(v->code + p - 4, "using", 5))
			goto out;
		n = next_nonspace(v->code, v->len, id->end);
		if (n >= v->len || !kb_c_ident_char(v->code[n]))
			goto out;
		read_word_at(v->code, v->len, n, word, sizeof(word));
		if ((!strcmp(word, "torch") || !strcmp(word, "at")) && !sc->mixed)
			add_finding(sc->out, sc->first, id->line, "torch_compute",
				    "'using namespace %s' hides torch calls", word);
		goto out;
	}

	/* python escape hatches */
	if (id->nqual && (!strcmp(id->qual[0], "py") || !strcmp(id->qual[0], "pybind11")) &&
	    in_list(id->name, py_escape_names)) {
		qualified_name(id, &sb);
		add_finding(sc->out, sc->first, id->line, "python_escape",
			    "'%s' runs python from the kernel", sb.buf);
		goto out;
	}
	if (id->member && id->call && !strcmp(id->name, "attr")) {
		add_finding(sc->out, sc->first, id->line, "python_escape",
			    "'.attr()' reaches python objects from the kernel");
		goto out;
	}
	for (const char *const *pre = py_escape_prefixes; *pre; pre++)
		if (!strncmp(id->name, *pre, strlen(*pre))) {
			add_finding(sc->out, sc->first, id->line, "python_escape",
				    "'%s' runs python from the kernel", id->name);
			goto out;
		}
	if (in_list(id->name, timer_code_names)) {
		qualified_name(id, &sb);
		add_finding(sc->out, sc->first, id->line, "timer_patching",
			    "'%s' can patch python objects such as timers", sb.buf);
		goto out;
	}

	/* torch compute (mixed kernels: proven to do work at run time instead) */
	if (sc->mixed)
		goto out;
	if (id->nqual && (!strcmp(id->qual[0], "torch") || !strcmp(id->qual[0], "at"))) {
		qualified_name(id, &sb);
		for (int i = 1; i < id->nqual; i++)
			if (in_list(id->qual[i], torch_compute_namespaces)) {
				add_finding(sc->out, sc->first, id->line, "torch_compute",
					    "'%s' is a torch op", sb.buf);
				goto out;
			}
		if (id->nqual == 1 && (id->call || id->addr) && !in_list(id->name, torch_allowed_calls))
			add_finding(sc->out, sc->first, id->line, "torch_compute",
				    "'%s' is a torch op (only empty/empty_like allocate outputs)", sb.buf);
		goto out;
	}
	if (id->member && id->call && in_list(id->name, tensor_compute_methods)) {
		add_finding(sc->out, sc->first, id->line, "torch_compute",
			    "'.%s()' is a torch op", id->name);
		goto out;
	}
	if (!id->member && !id->nqual && id->call && in_list(id->name, tensor_compute_methods) &&
	    !has_name(sc->defs, sc->nr_defs, id->name) && first_arg_is_tensor(sc, v, id)) {
		add_finding(sc->out, sc->first, id->line, "torch_compute",
			    "'%s()' on a tensor is a torch op", id->name);
		goto out;
	}
	check_tensor_operator(sc, v, id);
out:
	strbuf_release(&sb);
}

/*
 * The Python C API by its naming scheme: Py_*, _Py*, and Py + capital with
 * an underscore later (PyRun_SimpleString, PyObject_Call, PyExc_...).
 */
static bool python_api_name(const char *name)
{
	if (!strncmp(name, "Py_", 3) || !strncmp(name, "_Py", 3))
		return true;
	return !strncmp(name, "Py", 2) && isupper((unsigned char)name[2]) && strchr(name + 3, '_');
}

/*
 * Rules on names that may also be a qualifier: std::filesystem is a
 * namespace (std::filesystem::remove, namespace fs = std::filesystem), and
 * a native kernel has no business with the Python C API, which the harness
 * process would resolve for it (torch extensions have their own rules).
 */
static void check_namespaces(struct scan *sc, const struct ident *id)
{
	if (id->member)
		return;
	if (!strcmp(id->name, "filesystem") &&
	    (id->scope_qual || (id->nqual && !strcmp(id->qual[0], "std")))) {
		add_finding(sc->out, sc->first, id->line, "file_io",
			    "'std::filesystem' is not allowed in a kernel");
		return;
	}
	if (sc->abi == KB_ABI_NATIVE && python_api_name(id->name))
		add_finding(sc->out, sc->first, id->line, "python_escape",
			    "'%s' (Python C API) is not allowed in a native kernel", id->name);
}

static void check_ident(const struct views *v, const struct ident *id, void *payload)
{
	struct scan *sc = payload;

	if (!strcmp(id->name, "kb_forward"))
		sc->has_entry = true;
	check_namespaces(sc, id);
	if (id->scope_qual)
		return;
	check_escape(sc, id);
	check_asm(sc, v, id);
	if (sc->abi == KB_ABI_TORCH_EXT)
		check_torch_ext(sc, v, id);
}

/* Past blanks and backslash-newlines: a directive may be spliced over lines. */
static size_t skip_blank(const char *s, size_t len, size_t pos)
{
	for (;;) {
		while (pos < len && s[pos] != '\n' && isspace((unsigned char)s[pos]))
			pos++;
		if (pos + 1 < len && s[pos] == '\\' && s[pos + 1] == '\n')
			pos += 2;
		else if (pos + 2 < len && s[pos] == '\\' && s[pos + 1] == '\r' && s[pos + 2] == '\n')
			pos += 3;
		else
			return pos;
	}
}

/* The identifier at pos, spliced lines joined, into name; returns where it ends. */
static size_t read_spliced_word(const char *s, size_t len, size_t pos, char *name, size_t size)
{
	size_t n = 0;

	for (;;) {
		if (pos + 1 < len && s[pos] == '\\' && s[pos + 1] == '\n') {
			pos += 2;
			continue;
		}
		if (pos >= len || !kb_c_ident_char(s[pos]))
			break;
		if (n + 1 < size)
			name[n++] = s[pos];
		pos++;
	}
	name[n] = '\0';
	return pos;
}

/* The newline ending the logical line that starts at i (or len). */
static size_t logical_end(const char *s, size_t len, size_t i)
{
	for (;;) {
		size_t end = i, k;

		while (end < len && s[end] != '\n')
			end++;
		k = end;
		while (k > i && (s[k - 1] == ' ' || s[k - 1] == '\t' || s[k - 1] == '\r'))
			k--;
		if (end >= len || k == i || s[k - 1] != '\\')
			return end;
		i = end + 1;
	}
}

/* The header of an #include whose name ends at pos (text view: quotes keep their contents). */
static void check_include(struct scan *sc, const struct views *v, size_t pos, size_t end, int line)
{
	size_t hs = skip_blank(v->text, end, pos), he;
	char close, header[256];
	size_t n = 0;

	if (hs >= end || (v->text[hs] != '<' && v->text[hs] != '"')) {
		add_finding(sc->out, sc->first, line, "forbidden_include",
			    "a computed #include is not allowed in a kernel");
		return;
	}
	close = v->text[hs] == '<' ? '>' : '"';
	for (he = hs + 1; he < end && v->text[he] != close; he++) {
		if (v->text[he] == '\\' && he + 1 < end && v->text[he + 1] == '\n') {
			he++;
			continue;
		}
		if (v->text[he] != '\n' && n + 1 < sizeof(header))
			header[n++] = v->text[he];
	}
	header[n] = '\0';
	/* a file outside the include path would reach the compiler's
	 * messages, and through them the proposer and the logs */
	if (header[0] == '/' || strstr(header, "..")) {
		add_finding(sc->out, sc->first, line, "forbidden_include",
			    "'#include %c%s%c' reads a file outside the include path",
			    v->text[hs], header, close);
		return;
	}
	if (sc->abi != KB_ABI_NATIVE)
		return;
	for (const char *const *p = forbidden_include_prefixes; *p; p++)
		if (!strncmp(header, *p, strlen(*p))) {
			add_finding(sc->out, sc->first, line, "forbidden_include",
				    "'#include %c%s%c' is not allowed in a native kernel (no torch, no python)",
				    v->text[hs], header, close);
			return;
		}
}

/*
 * One logical line [start, end): when it is a directive (# or the digraph
 * %:), check #include, #embed and line control. Line markers say which
 * file the preprocessed text comes from, and the scan of that text trusts
 * them: a kernel writing its own could pass code off as a system header's.
 */
static void check_directive(struct scan *sc, struct views *v, size_t start, size_t end, int line)
{
	size_t k = skip_blank(v->code, end, start);
	char name[16];

	if (k < end && v->code[k] == '#')
		k++;
	else if (k + 1 < end && v->code[k] == '%' && v->code[k + 1] == ':')
		k += 2;
	else
		return;
	k = skip_blank(v->code, end, k);
	if (k < end && isdigit((unsigned char)v->code[k])) {
		add_finding(sc->out, sc->first, line, "line_directive",
			    "a line marker ('# N \"file\"') is not allowed in a kernel (it hides code from the checks)");
		return;
	}
	k = read_spliced_word(v->code, end, k, name, sizeof(name));
	if (!strcmp(name, "line")) {
		add_finding(sc->out, sc->first, line, "line_directive",
			    "'#line' is not allowed in a kernel (it hides code from the checks)");
	} else if (sc->expanded) {
		return; /* the preprocessed scan looks at line control only */
	} else if (!strcmp(name, "embed")) {
		/* C23 #embed pulls a file's bytes into the kernel */
		add_finding(sc->out, sc->first, line, "forbidden_include",
			    "'#embed' is not allowed in a kernel");
		blank(v->code, start, end);
	} else if (!strcmp(name, "include") || !strcmp(name, "include_next") ||
		   !strcmp(name, "import")) {
		check_include(sc, v, k, end, line);
		blank(v->code, start, end);
	}
}

/* Directives: #include read from the text view, then blanked from the code view. */
static void check_includes(struct scan *sc, struct views *v)
{
	int line = 1;

	for (size_t i = 0; i < v->len; ) {
		size_t end = logical_end(v->code, v->len, i);

		check_directive(sc, v, i, end, line);
		for (size_t k = i; k < end; k++)
			line += v->code[k] == '\n';
		i = end + 1;
		line++;
	}
}

/* Python names inside string literals: the text view where the code view is blank. */
static void check_string_words(struct scan *sc, const struct views *v)
{
	int line = 1;

	for (size_t i = 0; i < v->len; ) {
		if (v->text[i] == '\n') {
			line++;
			i++;
		} else if (v->code[i] == ' ' && kb_c_ident_char(v->text[i]) &&
			   (i == 0 || !kb_c_ident_char(v->text[i - 1]))) {
			char word[64];
			size_t e = i;

			while (e < v->len && kb_c_ident_char(v->text[e]) && v->code[e] == ' ')
				e++;
			copy_name(word, sizeof(word), v->text + i, e - i);
			if (in_list(word, timer_string_words))
				add_finding(sc->out, sc->first, line, "timer_patching",
					    "the string '%s' names a python timer or hook", word);
			i = e;
		} else {
			i++;
		}
	}
}

static int cmp_finding(const void *a, const void *b)
{
	const struct kb_finding *x = a, *y = b;

	return x->line - y->line;
}

static bool code_has_word(const struct views *v, const char *word)
{
	size_t n = strlen(word);
	const char *p = v->code;

	while ((p = memmem(p, v->len - (size_t)(p - v->code), word, n))) {
		bool left = p == v->code || !kb_c_ident_char(p[-1]);
		bool right = (size_t)(p - v->code) + n >= v->len || !kb_c_ident_char(p[n]);

		if (left && right)
			return true;
		p += n;
	}
	return false;
}

enum kb_kernel_abi kb_source_abi(const char *text, size_t len)
{
	struct views v;
	enum kb_kernel_abi abi = KB_ABI_UNKNOWN;

	if (kb_py_defines_modelnew(text, len))
		return KB_ABI_MODELNEW;
	make_views(text, len, &v);
	if (code_has_word(&v, "PYBIND11_MODULE"))
		abi = KB_ABI_TORCH_EXT;
	else if (code_has_word(&v, "kb_forward"))
		abi = KB_ABI_NATIVE;
	release_views(&v);
	return abi;
}

const char *kb_abi_name(enum kb_kernel_abi abi)
{
	switch (abi) {
	case KB_ABI_NATIVE: return "native";
	case KB_ABI_TORCH_EXT: return "torch-ext";
	case KB_ABI_MODELNEW: return "modelnew";
	default: return "unknown";
	}
}

int kb_static_check(const char *text, size_t len, enum kb_kernel_abi abi, struct kb_findings *out)
{
	return kb_static_check_flags(text, len, abi, 0, out);
}

/* A ModelNew file: its C++ as a torch extension's, then its Python. */
static int static_check_modelnew(const char *text, size_t len, unsigned flags,
				 struct kb_findings *out)
{
	struct strbuf cxx = STRBUF_INIT, code = STRBUF_INIT;
	size_t first = out->nr;

	kb_py_views(text, len, &cxx, &code);
	kb_static_check_flags(cxx.buf, cxx.len, KB_ABI_TORCH_EXT, flags, out);
	kb_py_check(text, len, out);
	if (out->nr > first)
		qsort(out->v + first, out->nr - first, sizeof(*out->v), cmp_finding);
	strbuf_release(&cxx);
	strbuf_release(&code);
	return (int)(out->nr - first);
}

int kb_static_check_flags(const char *text, size_t len, enum kb_kernel_abi abi, unsigned flags,
			  struct kb_findings *out)
{
	struct scan sc = { 0 };
	struct views v;

	if (abi == KB_ABI_UNKNOWN)
		abi = kb_source_abi(text, len);
	if (abi == KB_ABI_MODELNEW)
		return static_check_modelnew(text, len, flags, out);
	sc.abi = abi;
	sc.mixed = (flags & KB_STATIC_MIXED) != 0;
	sc.out = out;
	sc.first = out->nr;
	make_views(text, len, &v);
	check_includes(&sc, &v);
	for_each_ident(&v, collect, &sc);
	if (abi == KB_ABI_TORCH_EXT)
		check_string_words(&sc, &v);
	for_each_ident(&v, check_ident, &sc);
	if (abi == KB_ABI_NATIVE && !sc.has_entry)
		add_finding(out, sc.first, 1, "missing_entry", "no 'kb_forward' is defined");
	if (abi == KB_ABI_UNKNOWN)
		add_finding(out, sc.first, 1, "missing_entry",
			    "neither 'kb_forward' (native abi) nor 'PYBIND11_MODULE' (torch extension) is defined");
	if (out->nr > sc.first)
		qsort(out->v + sc.first, out->nr - sc.first, sizeof(*out->v), cmp_finding);
	release_views(&v);
	free(sc.decls);
	free(sc.defs);
	return (int)(out->nr - sc.first);
}

/* --- the preprocessed source --- */

/*
 * A line marker of `cc -E` output at [p, end): '# 12 "file" 1 3' (or
 * '#line 12 "file"'). file is left empty when the marker names none.
 */
static bool parse_marker(const char *p, const char *end, long *lineno, struct strbuf *file)
{
	long n = 0;

	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (p >= end || *p != '#')
		return false;
	for (p++; p < end && (*p == ' ' || *p == '\t'); p++)
		;
	if (end - p >= 4 && !strncmp(p, "line", 4))
		for (p += 4; p < end && (*p == ' ' || *p == '\t'); p++)
			;
	if (p >= end || !isdigit((unsigned char)*p))
		return false;
	for (; p < end && isdigit((unsigned char)*p); p++)
		if (n < 100000000)
			n = 10 * n + (*p - '0');
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	strbuf_reset(file);
	if (p < end && *p == '"')
		for (p++; p < end && *p != '"'; p++) {
			if (*p == '\\' && p + 1 < end)
				p++; /* the preprocessor escapes " and \ in file names */
			strbuf_addch(file, *p);
		}
	*lineno = n;
	return true;
}

/* Relative names and names under own_dir are the kernel's; <built-in>,
 * <command-line> and absolute paths elsewhere (system and -I headers) are not. */
static bool own_file(const char *name, const char *own_dir)
{
	size_t n = own_dir ? strlen(own_dir) : 0;

	if (name[0] == '<')
		return false;
	if (name[0] != '/')
		return true;
	return n && !strncmp(name, own_dir, n) && (name[n] == '/' || name[n] == '\0');
}

/* Append text to line `line` of out (which holds *at lines, the last one open). */
static void own_line(struct strbuf *out, size_t *at, size_t line, const char *text, size_t len)
{
	while (len && isspace((unsigned char)text[len - 1]))
		len--;
	if (!len)
		return;
	if (line > *at) {
		for (; *at < line; (*at)++)
			strbuf_addch(out, '\n');
	} else if (out->len && out->buf[out->len - 1] != '\n') {
		/* the same line again (a macro call spread over lines), or an
		 * earlier one (the kernel including itself): joined */
		strbuf_addch(out, ' ');
	}
	strbuf_add(out, text, len);
}

void kb_preprocessed_own_text(const char *pp, size_t len, const char *own_dir, size_t nr_lines,
			      struct strbuf *out)
{
	struct strbuf file = STRBUF_INIT;
	struct views v;
	size_t at = 1, cur = 1;
	bool own = false;

	if (!nr_lines)
		nr_lines = 1;
	strbuf_reset(out);
	/* the code view blanks literals: a raw string's line that looks like a
	 * marker is the kernel's text, not the preprocessor's word */
	make_views(pp, len, &v);
	for (size_t i = 0; i < len; ) {
		const char *e = memchr(pp + i, '\n', len - i);
		size_t end = e ? (size_t)(e - pp) : len, k = i;
		long n;

		while (k < end && (v.code[k] == ' ' || v.code[k] == '\t'))
			k++;
		if (k < end && v.code[k] == '#' && parse_marker(pp + i, pp + end, &n, &file)) {
			if (file.len)
				own = own_file(file.buf, own_dir);
			cur = n > 0 ? (size_t)n : 1;
		} else {
			if (own)
				own_line(out, &at, cur < nr_lines ? cur : nr_lines, pp + i, end - i);
			cur++;
		}
		i = end + 1;
	}
	for (; at < nr_lines; at++)
		strbuf_addch(out, '\n');
	release_views(&v);
	strbuf_release(&file);
}

int kb_static_check_expanded(const char *src, size_t src_len, const char *own, size_t own_len,
			     struct kb_findings *out)
{
	struct scan sc = { .abi = KB_ABI_NATIVE, .out = out, .first = out->nr, .expanded = true };
	struct views v;
	size_t from;

	/* the extraction trusts line markers: a kernel may not write its own */
	make_views(src, src_len, &v);
	check_includes(&sc, &v);
	release_views(&v);

	from = out->nr;
	make_views(own, own_len, &v);
	for_each_ident(&v, collect, &sc);
	for_each_ident(&v, check_ident, &sc);
	release_views(&v);
	for (size_t i = from; i < out->nr; i++) {
		struct strbuf sb = STRBUF_INIT;

		strbuf_addf(&sb, "%s (after preprocessing)", out->v[i].message);
		free(out->v[i].message);
		out->v[i].message = strbuf_detach(&sb, NULL);
	}
	if (out->nr > sc.first)
		qsort(out->v + sc.first, out->nr - sc.first, sizeof(*out->v), cmp_finding);
	free(sc.decls);
	free(sc.defs);
	return (int)(out->nr - sc.first);
}

int kb_static_check_file(const char *path, enum kb_kernel_abi *abi, struct kb_findings *out)
{
	struct strbuf sb = STRBUF_INIT;
	enum kb_kernel_abi a;
	int n;

	if (strbuf_read_file(&sb, path, 4u << 20) < 0) {
		strbuf_release(&sb);
		return error("could not read kernel '%s'", path);
	}
	a = kb_source_abi(sb.buf, sb.len);
	if (abi)
		*abi = a;
	n = kb_static_check(sb.buf, sb.len, a, out);
	strbuf_release(&sb);
	return n;
}
