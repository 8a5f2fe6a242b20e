#include "core/common.h"
#include "verifier/build.h"
#include "verifier/datadir.h"
#include "verifier/python_env.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/subprocess.h"
#include "core/util.h"

#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sys/stat.h>

#define BUILD_TIMEOUT_MS (300 * 1000)
#define SOURCE_MAX (4u << 20)
#define OUTPUT_CAP (1u << 20)
#define ERRORS_MAX 4096
#define CACHE_KEY_VERSION "kernelbot-build-1"

enum lang { LANG_CUDA, LANG_CXX };

/* --- compiler versions, asked once per process --- */

struct version_entry {
	char *compiler;
	char *version;
};

static pthread_mutex_t version_lock = PTHREAD_MUTEX_INITIALIZER;
static struct version_entry *versions;
static size_t nr_versions, alloc_versions;

static int compiler_version(const char *compiler, struct strbuf *out)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	int rc = -1;

	pthread_mutex_lock(&version_lock);
	for (size_t i = 0; i < nr_versions; i++)
		if (!strcmp(versions[i].compiler, compiler)) {
			strbuf_addstr(out, versions[i].version);
			rc = 0;
			goto out;
		}
	strvec_pushl(&cp.args, compiler, "--version", NULL);
	strvec_push(&cp.env, "LC_ALL=C");
	cp.err_to_out = true;
	cp.out_cap = 64 * 1024;
	cp.timeout_ms = 60 * 1000;
	if (run_command(&cp))
		goto out;
	if (cp.exit_code || cp.timed_out) {
		error("'%s --version' failed with exit code %d", compiler, cp.exit_code);
		goto out;
	}
	if (nr_versions == alloc_versions) {
		alloc_versions = alloc_versions ? 2 * alloc_versions : 4;
		versions = xrealloc(versions, alloc_versions * sizeof(*versions));
	}
	versions[nr_versions].compiler = xstrdup(compiler);
	versions[nr_versions].version = xstrdup(cp.out.buf);
	nr_versions++;
	strbuf_addstr(out, cp.out.buf);
	rc = 0;
out:
	pthread_mutex_unlock(&version_lock);
	child_process_release(&cp);
	return rc;
}

/* nvcc is often outside PATH (/usr/local/cuda/bin): look there too. */
static int resolve_compiler(const char *name, enum lang lang, struct strbuf *out)
{
	const char *homes[] = { getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda" };

	if (!kb_find_program(name, out))
		return 0;
	if (lang == LANG_CUDA && !strchr(name, '/')) {
		for (size_t i = 0; i < ARRAY_SIZE(homes); i++) {
			struct strbuf sb = STRBUF_INIT;

			if (!homes[i] || !*homes[i])
				continue;
			strbuf_addf(&sb, "%s/bin/%s", homes[i], name);
			if (!kb_find_program(sb.buf, out)) {
				strbuf_release(&sb);
				return 0;
			}
			strbuf_release(&sb);
		}
	}
	return error("%s compiler '%s' not found", lang == LANG_CUDA ? "cuda" : "c++", name);
}

/* --- environment --- */

int kb_build_env_init(struct kb_build_env *env, const struct kb_config *cfg,
		      const struct kb_datadir *dd, const struct kb_python_probe *probe)
{
	struct strbuf sb = STRBUF_INIT;
	char *abs;
	long cores;

	memset(env, 0, sizeof(*env));
	strvec_init(&env->include_flags);
	env->nvcc = xstrdup(cfg->nvcc && *cfg->nvcc ? cfg->nvcc : "nvcc");
	env->cxx = xstrdup(cfg->cxx && *cfg->cxx ? cfg->cxx : "g++");
	if (!cfg->cuda_arch || !*cfg->cuda_arch || !strcmp(cfg->cuda_arch, "auto")) {
		/* the GPU's own capability rather than -arch=native: same code, and
		 * the cache key then says which GPU the binary is for */
		if (probe && probe->device_count > 0 && probe->capability && *probe->capability)
			strbuf_addf(&sb, "sm_%s", probe->capability);
		else if (probe && probe->device_count > 0)
			strbuf_addstr(&sb, "native");
		else
			strbuf_addstr(&sb, "sm_90");
		env->arch = strbuf_detach(&sb, NULL);
	} else {
		env->arch = xstrdup(cfg->cuda_arch);
	}
	cores = sysconf(_SC_NPROCESSORS_ONLN);
	env->jobs = cfg->build_jobs > 0 ? (int)cfg->build_jobs : (cores > 0 ? (int)cores : 1);
	env->timeout_ms = BUILD_TIMEOUT_MS;
	if (dd) {
		kb_datadir_include_flags(dd, &env->include_flags);
		env->abi_header = xstrdup(dd->abi_header);
	}
	strbuf_addf(&sb, "%s/build-cache", cfg->state_dir && *cfg->state_dir ? cfg->state_dir : ".kernelbot");
	if (kb_mkdir_p(sb.buf, 0755)) {
		strbuf_release(&sb);
		kb_build_env_release(env);
		return -1;
	}
	/* compiles run inside the entry's temp dir: every path must be absolute */
	abs = realpath(sb.buf, NULL);
	env->cache_dir = abs ? abs : strbuf_detach(&sb, NULL);
	strbuf_release(&sb);
	return 0;
}

void kb_build_env_release(struct kb_build_env *env)
{
	FREE_AND_NULL(env->nvcc);
	FREE_AND_NULL(env->cxx);
	FREE_AND_NULL(env->arch);
	FREE_AND_NULL(env->cache_dir);
	FREE_AND_NULL(env->abi_header);
	strvec_clear(&env->include_flags);
}

/* --- results --- */

void kb_build_result_init(struct kb_build_result *r)
{
	memset(r, 0, sizeof(*r));
}

static void clear_kernels(struct kb_build_result *r)
{
	for (size_t i = 0; i < r->nr_kernels; i++)
		free(r->kernels[i].name);
	FREE_AND_NULL(r->kernels);
	r->nr_kernels = 0;
	r->registers = 0;
	r->shared_bytes = r->spill_stores = r->spill_loads = r->stack_bytes = 0;
}

void kb_build_result_release(struct kb_build_result *r)
{
	clear_kernels(r);
	free(r->dir);
	free(r->library);
	free(r->errors);
	memset(r, 0, sizeof(*r));
}

static struct kb_kernel_resources *find_kernel(struct kb_build_result *r, const char *name, size_t len)
{
	for (size_t i = 0; i < r->nr_kernels; i++)
		if (strlen(r->kernels[i].name) == len && !memcmp(r->kernels[i].name, name, len))
			return &r->kernels[i];
	return NULL;
}

static struct kb_kernel_resources *add_kernel(struct kb_build_result *r, const char *name, size_t len)
{
	struct kb_kernel_resources *k = find_kernel(r, name, len);

	if (k)
		return k;
	r->kernels = xrealloc(r->kernels, (r->nr_kernels + 1) * sizeof(*r->kernels));
	k = &r->kernels[r->nr_kernels++];
	memset(k, 0, sizeof(*k));
	k->name = xstrndup(name, len);
	return k;
}

static void sum_kernels(struct kb_build_result *r)
{
	r->registers = 0;
	r->shared_bytes = r->spill_stores = r->spill_loads = r->stack_bytes = 0;
	for (size_t i = 0; i < r->nr_kernels; i++) {
		const struct kb_kernel_resources *k = &r->kernels[i];

		if (k->registers > r->registers)
			r->registers = k->registers;
		if (k->shared_bytes > r->shared_bytes)
			r->shared_bytes = k->shared_bytes;
		if (k->stack_bytes > r->stack_bytes)
			r->stack_bytes = k->stack_bytes;
		r->spill_stores += k->spill_stores;
		r->spill_loads += k->spill_loads;
	}
}

/* The number just before " <unit>" in line, e.g. ("4096 bytes smem", "bytes smem"). */
static bool number_before(const char *line, const char *unit, int64_t *out)
{
	const char *p = strstr(line, unit);
	const char *q;

	if (!p || p == line)
		return false;
	q = p - 1;
	while (q > line && *q == ' ')
		q--;
	if (*q < '0' || *q > '9')
		return false;
	while (q > line && q[-1] >= '0' && q[-1] <= '9')
		q--;
	*out = strtoll(q, NULL, 10);
	return true;
}

/*
 * ptxas -v prints, per entry function:
 *   ptxas info    : Compiling entry function '_Z4reluPKfPfl' for 'sm_90'
 *   ptxas info    : Function properties for _Z4reluPKfPfl
 *       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 12 registers, used 1 barriers, 4096 bytes smem
 * (older releases: "Used 8 registers, 380 bytes cmem[0], 4096 bytes smem").
 */
void kb_build_parse_ptxas(const char *text, struct kb_build_result *res)
{
	struct kb_kernel_resources *entry = NULL, *props = NULL;
	const char *line = text;

	clear_kernels(res);
	while (line && *line) {
		const char *end = strchrnul(line, '\n');
		char *l = xstrndup(line, (size_t)(end - line));
		const char *p;
		int64_t v;

		if ((p = strstr(l, "Compiling entry function '"))) {
			const char *name = p + strlen("Compiling entry function '");
			const char *q = strchr(name, '\'');

			if (q)
				entry = add_kernel(res, name, (size_t)(q - name));
			props = NULL;
		} else if ((p = strstr(l, "Function properties for "))) {
			const char *name = p + strlen("Function properties for ");
			size_t len = strcspn(name, " \t\r:");

			/* device functions have properties too; only entries are kept */
			props = find_kernel(res, name, len);
		} else if (strstr(l, "bytes stack frame")) {
			if (props) {
				if (number_before(l, "bytes stack frame", &v))
					props->stack_bytes = v;
				if (number_before(l, "bytes spill stores", &v))
					props->spill_stores = v;
				if (number_before(l, "bytes spill loads", &v))
					props->spill_loads = v;
			}
			props = NULL;
		} else if (strstr(l, "Used ") && strstr(l, " registers")) {
			if (entry) {
				if (number_before(l, "registers", &v))
					entry->registers = (int)v;
				if (number_before(l, "bytes smem", &v))
					entry->shared_bytes = v;
			}
		}
		free(l);
		line = *end ? end + 1 : NULL;
	}
	sum_kernels(res);
}

void kb_build_trim_errors(const char *output, const char *tmpdir, struct strbuf *out)
{
	struct strbuf text = STRBUF_INIT;
	const char **lines = NULL;
	size_t nr = 0, alloc = 0, any = 0;
	bool *keep = NULL;
	size_t last = SIZE_MAX;
	char *p;

	strbuf_addstr(&text, output);
	if (tmpdir && *tmpdir) {
		struct strbuf slash = STRBUF_INIT;

		strbuf_addf(&slash, "%s/", tmpdir);
		strbuf_replace_all(&text, slash.buf, "");
		strbuf_replace_all(&text, tmpdir, ".");
		strbuf_release(&slash);
	}
	for (p = text.buf; *p; ) {
		char *end = strchrnul(p, '\n');
		bool more = *end != '\0';

		*end = '\0';
		/* ptxas's resource report is not an error message */
		if (strncmp(p, "ptxas info", 10) && strncmp(p, "    0 bytes stack", 17)) {
			if (nr == alloc) {
				alloc = alloc ? 2 * alloc : 64;
				lines = xrealloc(lines, alloc * sizeof(*lines));
			}
			lines[nr++] = p;
		}
		if (!more)
			break;
		p = end + 1;
	}
	keep = xcalloc(nr ? nr : 1, sizeof(*keep));
	for (size_t i = 0; i < nr; i++) {
		if (!strcasestr(lines[i], "error"))
			continue;
		any++;
		for (size_t j = i >= 2 ? i - 2 : 0; j <= i + 2 && j < nr; j++)
			keep[j] = true;
	}
	if (!any)
		for (size_t i = nr > 20 ? nr - 20 : 0; i < nr; i++)
			keep[i] = true;
	for (size_t i = 0; i < nr; i++) {
		size_t len;

		if (!keep[i])
			continue;
		len = strlen(lines[i]);
		if (out->len + len + 32 > ERRORS_MAX) {
			strbuf_addstr(out, "... (truncated)\n");
			break;
		}
		if (last != SIZE_MAX && i > last + 1)
			strbuf_addstr(out, "...\n");
		strbuf_add(out, lines[i], len);
		strbuf_addch(out, '\n');
		last = i;
	}
	free(keep);
	free(lines);
	strbuf_release(&text);
}

/* --- cache entries --- */

cJSON *kb_build_result_to_json(const struct kb_build_result *res)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *arr;

	cJSON_AddBoolToObject(o, "ok", res->ok);
	cJSON_AddBoolToObject(o, "cached", res->cached);
	cJSON_AddStringToObject(o, "hash", res->hash);
	cJSON_AddNumberToObject(o, "seconds", res->seconds);
	cJSON_AddNumberToObject(o, "registers", res->registers);
	cJSON_AddNumberToObject(o, "shared_bytes", (double)res->shared_bytes);
	cJSON_AddNumberToObject(o, "spill_stores", (double)res->spill_stores);
	cJSON_AddNumberToObject(o, "spill_loads", (double)res->spill_loads);
	cJSON_AddNumberToObject(o, "stack_bytes", (double)res->stack_bytes);
	arr = cJSON_AddArrayToObject(o, "kernels");
	for (size_t i = 0; i < res->nr_kernels; i++) {
		const struct kb_kernel_resources *k = &res->kernels[i];
		cJSON *ko = cJSON_CreateObject();

		cJSON_AddStringToObject(ko, "name", k->name);
		cJSON_AddNumberToObject(ko, "registers", k->registers);
		cJSON_AddNumberToObject(ko, "shared_bytes", (double)k->shared_bytes);
		cJSON_AddNumberToObject(ko, "spill_stores", (double)k->spill_stores);
		cJSON_AddNumberToObject(ko, "spill_loads", (double)k->spill_loads);
		cJSON_AddNumberToObject(ko, "stack_bytes", (double)k->stack_bytes);
		cJSON_AddItemToArray(arr, ko);
	}
	cJSON_AddStringToObject(o, "errors", res->errors ? res->errors : "");
	return o;
}

static int64_t json_i64(const cJSON *o, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(it) ? (int64_t)it->valuedouble : 0;
}

/* Fill res from <dir>/build.json. KB_ENOTFOUND when there is no usable entry. */
static int load_entry(const char *dir, struct kb_build_result *res)
{
	struct strbuf sb = STRBUF_INIT, path = STRBUF_INIT;
	cJSON *o = NULL;
	const cJSON *it, *k;
	int rc = KB_ENOTFOUND;

	strbuf_addf(&path, "%s/build.json", dir);
	if (!kb_is_file(path.buf) || strbuf_read_file(&sb, path.buf, 16u << 20) < 0)
		goto out;
	o = cJSON_Parse(sb.buf);
	if (!cJSON_IsObject(o))
		goto out;
	clear_kernels(res);
	res->ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"));
	it = cJSON_GetObjectItemCaseSensitive(o, "seconds");
	res->seconds = cJSON_IsNumber(it) ? it->valuedouble : 0;
	it = cJSON_GetObjectItemCaseSensitive(o, "errors");
	free(res->errors);
	res->errors = xstrdup(cJSON_IsString(it) ? it->valuestring : "");
	cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(o, "kernels")) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(k, "name");
		struct kb_kernel_resources *kr;

		if (!cJSON_IsString(name))
			continue;
		kr = add_kernel(res, name->valuestring, strlen(name->valuestring));
		kr->registers = (int)json_i64(k, "registers");
		kr->shared_bytes = json_i64(k, "shared_bytes");
		kr->spill_stores = json_i64(k, "spill_stores");
		kr->spill_loads = json_i64(k, "spill_loads");
		kr->stack_bytes = json_i64(k, "stack_bytes");
	}
	sum_kernels(res);
	free(res->dir);
	res->dir = xstrdup(dir);
	free(res->library);
	res->library = NULL;
	if (res->ok) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/kernel.so", dir);
		if (!kb_is_file(sb.buf))
			goto out;
		res->library = strbuf_detach(&sb, NULL);
	}
	rc = 0;
out:
	cJSON_Delete(o);
	strbuf_release(&sb);
	strbuf_release(&path);
	return rc;
}

static void hash_field(EVP_MD_CTX *ctx, const void *data, size_t len)
{
	uint64_t n = len;

	EVP_DigestUpdate(ctx, &n, sizeof(n));
	EVP_DigestUpdate(ctx, data, len);
}

static int cache_key(const struct strbuf *source, const char *compiler, const char *version,
		     const struct strvec *flags, const struct strvec *libs, const char *abi_header,
		     char hex[65])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	struct strbuf abi = STRBUF_INIT;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int rc = -1;

	if (!ctx)
		die("out of memory creating a digest context");
	if (abi_header && strbuf_read_file(&abi, abi_header, 1u << 20) < 0) {
		error("could not read the abi header '%s'", abi_header);
		goto out;
	}
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	hash_field(ctx, CACHE_KEY_VERSION, strlen(CACHE_KEY_VERSION));
	hash_field(ctx, source->buf, source->len);
	hash_field(ctx, compiler, strlen(compiler));
	hash_field(ctx, version, strlen(version));
	for (size_t i = 0; i < flags->nr; i++)
		hash_field(ctx, flags->v[i], strlen(flags->v[i]));
	for (size_t i = 0; i < libs->nr; i++)
		hash_field(ctx, libs->v[i], strlen(libs->v[i]));
	hash_field(ctx, abi.buf, abi.len);
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	for (unsigned int i = 0; i < mdlen && i < 32; i++)
		xsnprintf(hex + 2 * i, 3, "%02x", md[i]);
	hex[64] = '\0';
	rc = 0;
out:
	strbuf_release(&abi);
	EVP_MD_CTX_free(ctx);
	return rc;
}

static int write_text(const char *dir, const char *name, const char *data, size_t len)
{
	struct strbuf sb = STRBUF_INIT;
	int rc;

	strbuf_addf(&sb, "%s/%s", dir, name);
	rc = kb_write_file_atomic(sb.buf, data, len);
	strbuf_release(&sb);
	return rc;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

static int source_lang(const char *path, enum lang *lang)
{
	const char *dot = strrchr(base_name(path), '.');

	if (dot && !strcmp(dot, ".cu"))
		*lang = LANG_CUDA;
	else if (dot && (!strcmp(dot, ".cpp") || !strcmp(dot, ".cc") || !strcmp(dot, ".cxx")))
		*lang = LANG_CXX;
	else
		return error("kernel '%s' is neither .cu nor .cpp", path);
	return 0;
}

static void push_flags(const struct kb_build_env *env, enum lang lang, struct strvec *flags)
{
	if (lang == LANG_CUDA) {
		strvec_pushl(flags, "-O3", "-std=c++17", NULL);
		strvec_pushf(flags, "-arch=%s", env->arch);
		strvec_pushl(flags, "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo", NULL);
	} else {
		strvec_pushl(flags, "-O3", "-std=c++17", "-march=native", "-fopenmp",
			     "-shared", "-fPIC", NULL);
	}
	for (size_t i = 0; i < env->include_flags.nr; i++)
		strvec_push(flags, env->include_flags.v[i]);
}

/*
 * Libraries a CUDA source asks for on its first line, e.g. "// kernelbot:
 * link cublasLt" (the built-in matmul templates). Only these are honoured;
 * they go after the source on the command line.
 */
static void push_libs(const struct strbuf *src, enum lang lang, struct strvec *libs)
{
	static const char tag[] = "// kernelbot: link ";
	static const char *const linkable[] = { "cublasLt", "cublas" };
	const char *p = src->buf, *end;

	if (lang != LANG_CUDA || strncmp(p, tag, strlen(tag)))
		return;
	p += strlen(tag);
	end = strchrnul(p, '\n');
	while (p < end) {
		size_t len = strcspn(p, " ,\t\r\n");

		for (size_t i = 0; i < ARRAY_SIZE(linkable); i++)
			if (len == strlen(linkable[i]) && !strncmp(p, linkable[i], len))
				strvec_pushf(libs, "-l%s", linkable[i]);
		p += len ? len : 1;
	}
}

int kb_build_native(const struct kb_build_env *env, const char *source, struct kb_build_result *res)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf src = STRBUF_INIT, compiler = STRBUF_INIT, version = STRBUF_INIT;
	struct strbuf entry = STRBUF_INIT, tmp = STRBUF_INIT, sb = STRBUF_INIT;
	struct strvec flags = STRVEC_INIT, libs = STRVEC_INIT;
	const char *base = base_name(source);
	enum lang lang = LANG_CXX;
	cJSON *json = NULL;
	char *text = NULL;
	bool published = false;
	int64_t t0;
	int rc = -1;

	if (source_lang(source, &lang))
		goto out;
	if (strbuf_read_file(&src, source, SOURCE_MAX) < 0) {
		error("could not read kernel '%s'", source);
		goto out;
	}
	if (resolve_compiler(lang == LANG_CUDA ? env->nvcc : env->cxx, lang, &compiler) ||
	    compiler_version(compiler.buf, &version))
		goto out;
	push_flags(env, lang, &flags);
	push_libs(&src, lang, &libs);
	if (cache_key(&src, compiler.buf, version.buf, &flags, &libs, env->abi_header, res->hash))
		goto out;

	strbuf_addf(&entry, "%s/%s", env->cache_dir, res->hash);
	if (!load_entry(entry.buf, res)) {
		res->cached = true;
		log_debug("build of '%s': cache hit %s", source, res->hash);
		rc = 0;
		goto out;
	}
	/* a stale entry (build.json without its library) is rebuilt */
	if (kb_is_dir(entry.buf) && kb_rm_rf(entry.buf))
		goto out;

	strbuf_addf(&tmp, "%s/tmp-XXXXXX", env->cache_dir);
	if (!mkdtemp(tmp.buf)) {
		error_errno("could not create a build directory in '%s'", env->cache_dir);
		goto out;
	}
	if (write_text(tmp.buf, base, src.buf, src.len))
		goto out;
	strbuf_addf(&sb, "%s/work", tmp.buf);
	if (kb_mkdir_p(sb.buf, 0700))
		goto out;

	strvec_push(&cp.args, compiler.buf);
	for (size_t i = 0; i < flags.nr; i++)
		strvec_push(&cp.args, flags.v[i]);
	strvec_pushl(&cp.args, "-o", "kernel.so", base, NULL);
	for (size_t i = 0; i < libs.nr; i++)
		strvec_push(&cp.args, libs.v[i]);
	strvec_push(&cp.env, "LC_ALL=C");
	strvec_pushf(&cp.env, "TMPDIR=%s", sb.buf);
	cp.dir = tmp.buf;
	cp.err_to_out = true;
	cp.out_cap = OUTPUT_CAP;
	cp.timeout_ms = env->timeout_ms;
	t0 = kb_now_ms();
	rc = run_command(&cp);
	if (rc)
		goto out;
	res->seconds = (double)(kb_now_ms() - t0) / 1000.0;
	kb_rm_rf(sb.buf);
	res->cached = false;
	free(res->errors);
	res->errors = NULL;
	if (cp.timed_out) {
		/* the candidate's fault or a busy machine: an outcome, not cached */
		struct strbuf msg = STRBUF_INIT;

		res->ok = false;
		strbuf_addf(&msg, "%s: compile timed out after %d s\n", base,
			    (int)(env->timeout_ms / 1000));
		res->errors = strbuf_detach(&msg, NULL);
		clear_kernels(res);
		rc = 0;
		goto out;
	}
	strbuf_reset(&sb);
	strbuf_addf(&sb, "%s/kernel.so", tmp.buf);
	res->ok = !cp.exit_code && kb_is_file(sb.buf);
	if (lang == LANG_CUDA)
		kb_build_parse_ptxas(cp.out.buf, res);
	else
		clear_kernels(res);
	strbuf_reset(&sb);
	if (!res->ok) {
		kb_build_trim_errors(cp.out.buf, tmp.buf, &sb);
		if (!sb.len)
			strbuf_addf(&sb, "%s: compiler exited with %d and printed nothing\n",
				    base, cp.exit_code);
	}
	res->errors = strbuf_detach(&sb, NULL);

	json = kb_build_result_to_json(res);
	cJSON_DeleteItemFromObjectCaseSensitive(json, "cached");
	cJSON_AddStringToObject(json, "source", base);
	cJSON_AddStringToObject(json, "compiler", compiler.buf);
	{
		cJSON *arr = cJSON_AddArrayToObject(json, "flags");

		for (size_t i = 0; i < flags.nr; i++)
			cJSON_AddItemToArray(arr, cJSON_CreateString(flags.v[i]));
		for (size_t i = 0; i < libs.nr; i++)
			cJSON_AddItemToArray(arr, cJSON_CreateString(libs.v[i]));
	}
	text = cJSON_Print(json);
	rc = -1;
	if (!text)
		die("out of memory printing build.json");
	if (write_text(tmp.buf, "build.log", cp.out.buf, cp.out.len) ||
	    write_text(tmp.buf, "build.json", text, strlen(text)))
		goto out;
	if (rename(tmp.buf, entry.buf)) {
		if (errno != EEXIST && errno != ENOTEMPTY) {
			error_errno("could not rename '%s' to '%s'", tmp.buf, entry.buf);
			goto out;
		}
		/* another builder published the same key first: use theirs */
		log_debug("build of '%s': entry %s published concurrently", source, res->hash);
	} else {
		published = true;
	}
	if (load_entry(entry.buf, res)) {
		error("build cache entry '%s' is unreadable", entry.buf);
		goto out;
	}
	res->cached = false;
	log_debug("build of '%s': %s in %.2f s (%s)", source, res->ok ? "ok" : "failed",
		  res->seconds, res->hash);
	rc = 0;
out:
	if (tmp.len && !published && kb_is_dir(tmp.buf))
		kb_rm_rf(tmp.buf);
	free(text);
	cJSON_Delete(json);
	strvec_clear(&flags);
	strvec_clear(&libs);
	child_process_release(&cp);
	strbuf_release(&src);
	strbuf_release(&compiler);
	strbuf_release(&version);
	strbuf_release(&entry);
	strbuf_release(&tmp);
	strbuf_release(&sb);
	return rc;
}

/* --- parallel builds --- */

struct build_pool {
	const struct kb_build_env *env;
	const char *const *sources;
	struct kb_build_result *results;
	size_t n, next;
	int rc;
	pthread_mutex_t lock;
};

static void *build_worker(void *arg)
{
	struct build_pool *pool = arg;

	for (;;) {
		size_t i;
		int rc;

		pthread_mutex_lock(&pool->lock);
		i = pool->next++;
		pthread_mutex_unlock(&pool->lock);
		if (i >= pool->n)
			break;
		rc = kb_build_native(pool->env, pool->sources[i], &pool->results[i]);
		if (rc) {
			pthread_mutex_lock(&pool->lock);
			if (!pool->rc)
				pool->rc = rc;
			pthread_mutex_unlock(&pool->lock);
		}
	}
	return NULL;
}

int kb_build_many(const struct kb_build_env *env, const char *const *sources, size_t n,
		  struct kb_build_result *results)
{
	struct build_pool pool = { .env = env, .sources = sources, .results = results, .n = n };
	size_t nr_threads = env->jobs > 0 ? (size_t)env->jobs : 1;
	pthread_t *threads;
	size_t started = 0;

	if (nr_threads > n)
		nr_threads = n;
	if (!nr_threads)
		return 0;
	pthread_mutex_init(&pool.lock, NULL);
	threads = xcalloc(nr_threads, sizeof(*threads));
	for (size_t i = 1; i < nr_threads; i++) {
		if (pthread_create(&threads[i], NULL, build_worker, &pool))
			break;
		started++;
	}
	build_worker(&pool); /* this thread works too */
	for (size_t i = 1; i <= started; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	pthread_mutex_destroy(&pool.lock);
	return pool.rc;
}
