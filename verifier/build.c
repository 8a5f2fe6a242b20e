#include "core/common.h"
#include "core/redact.h"
#include "verifier/build.h"
#include "verifier/datadir.h"
#include "verifier/elf_symbols.h"
#include "core/hash.h"
#include "verifier/python_env.h"
#include "verifier/sandbox.h"
#include "verifier/symbol_allowlist.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/subprocess.h"
#include "core/util.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

#define BUILD_TIMEOUT_MS (300 * 1000)
#define SOURCE_MAX (4u << 20)
#define OUTPUT_CAP (1u << 20)
#define ERRORS_MAX 4096
#define LIBRARY_MAX (512u << 20)     /* kernel.so / kernel.o read back from scratch */
#define PREPROCESSED_MAX (64u << 20) /* kernel.ii (nvcc's is about 1.3 MB) */
#define MAX_IMPORT_FINDINGS 64
#define CACHE_KEY_VERSION "kernelbot-build-2"

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

static const char *state_dir(const struct kb_config *cfg)
{
	return cfg->state_dir && *cfg->state_dir ? cfg->state_dir : ".kernelbot";
}

/* <parent>/<name>, created, as an absolute path: compiles run in a scratch dir. */
static int make_dir(const char *parent, const char *name, mode_t mode, char **out)
{
	struct strbuf sb = STRBUF_INIT;
	char *abs;

	strbuf_addf(&sb, "%s/%s", parent, name);
	if (kb_mkdir_p(sb.buf, mode)) {
		strbuf_release(&sb);
		return -1;
	}
	abs = realpath(sb.buf, NULL);
	*out = abs ? abs : strbuf_detach(&sb, NULL);
	strbuf_release(&sb);
	return 0;
}

int kb_build_env_init(struct kb_build_env *env, const struct kb_config *cfg,
		      const struct kb_datadir *dd, const struct kb_python_probe *probe)
{
	struct strbuf sb = STRBUF_INIT;
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
	if (make_dir(state_dir(cfg), "build-cache", 0755, &env->cache_dir) ||
	    make_dir(state_dir(cfg), "build-tmp", 0700, &env->tmp_root)) {
		kb_build_env_release(env);
		return -1;
	}
	return 0;
}

void kb_build_env_release(struct kb_build_env *env)
{
	FREE_AND_NULL(env->nvcc);
	FREE_AND_NULL(env->cxx);
	FREE_AND_NULL(env->arch);
	FREE_AND_NULL(env->cache_dir);
	FREE_AND_NULL(env->tmp_root);
	FREE_AND_NULL(env->abi_header);
	env->sandbox = NULL;
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
	kb_findings_release(&r->findings);
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
	cJSON_AddBoolToObject(o, "compiled", res->compiled);
	cJSON_AddBoolToObject(o, "cached", res->cached);
	cJSON_AddStringToObject(o, "hash", res->hash);
	cJSON_AddStringToObject(o, "library_sha256", res->library_sha256);
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
	cJSON_AddItemToObject(o, "static", kb_findings_to_json(&res->findings));
	return o;
}

static int64_t json_i64(const cJSON *o, const char *key)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(it) ? (int64_t)it->valuedouble : 0;
}

static void push_finding(struct kb_findings *f, int line, const char *rule, char *message)
{
	if (f->nr == f->alloc) {
		f->alloc = f->alloc ? 2 * f->alloc : 8;
		f->v = xrealloc(f->v, f->alloc * sizeof(*f->v));
	}
	f->v[f->nr].line = line;
	f->v[f->nr].rule = rule;
	f->v[f->nr].message = message;
	f->nr++;
}

/*
 * The checks of a compiled library, run on every load so that a changed
 * rule applies to old entries too: the kernel's preprocessed lines (own)
 * and the symbols its code imports. Sets ok, findings, errors, library.
 */
static void run_checks(const char *dir, const char *base, const struct strbuf *src,
		       const struct strbuf *own, const struct strvec *imports,
		       struct kb_build_result *res)
{
	struct strbuf sb = STRBUF_INIT;

	kb_findings_release(&res->findings);
	kb_static_check_expanded(src->buf, src->len, own->buf, own->len, &res->findings);
	for (size_t i = 0; i < imports->nr && res->findings.nr < MAX_IMPORT_FINDINGS; i++) {
		const char *why = kb_import_refusal(imports->v[i]);

		strbuf_reset(&sb);
		if (!why)
			continue;
		strbuf_addf(&sb, "kernel library imports '%s' (%s): not allowed", imports->v[i], why);
		push_finding(&res->findings, 0, "imports", strbuf_detach(&sb, NULL));
	}
	strbuf_reset(&sb);
	for (size_t i = 0; i < res->findings.nr && sb.len < ERRORS_MAX; i++) {
		const struct kb_finding *f = &res->findings.v[i];

		if (f->line > 0)
			strbuf_addf(&sb, "%s:%d: %s: %s\n", base, f->line, f->rule, f->message);
		else
			strbuf_addf(&sb, "%s\n", f->message);
	}
	free(res->errors);
	res->errors = strbuf_detach(&sb, NULL);
	free(res->library);
	res->library = NULL;
	res->ok = !res->findings.nr;
	if (res->ok) {
		strbuf_addf(&sb, "%s/kernel.so", dir);
		res->library = strbuf_detach(&sb, NULL);
	}
}

/* Kernels, seconds and errors from build.json. */
static void load_resources(const cJSON *o, struct kb_build_result *res)
{
	const cJSON *it, *k;

	clear_kernels(res);
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
}

/*
 * A compiled entry's library: kernel.so must hash to what build.json
 * recorded (another process, a bug or a disk may have changed it; the
 * harness would load whatever is there). imports and own are filled from
 * the entry for the checks.
 */
static int verify_library(const char *dir, const cJSON *o, struct kb_build_result *res,
			  struct strvec *imports, struct strbuf *own, struct strbuf *why)
{
	const cJSON *sha = cJSON_GetObjectItemCaseSensitive(o, "library_sha256");
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "imports"), *it;
	struct strbuf path = STRBUF_INIT, so = STRBUF_INIT;
	char hex[65];
	int rc = -1;

	if (!cJSON_IsString(sha) || strlen(sha->valuestring) != 64 || !cJSON_IsArray(list)) {
		strbuf_addstr(why, "build.json lacks the library's hash or imports");
		goto out;
	}
	strbuf_addf(&path, "%s/kernel.so", dir);
	if (strbuf_read_file(&so, path.buf, LIBRARY_MAX) < 0) {
		strbuf_addstr(why, "kernel.so is missing or unreadable");
		goto out;
	}
	kb_sha256_hex(so.buf, so.len, hex);
	if (strcmp(hex, sha->valuestring)) {
		strbuf_addf(why, "kernel.so has SHA-256 %.12s..., build.json records %.12s...",
			    hex, sha->valuestring);
		goto out;
	}
	cJSON_ArrayForEach(it, list) {
		if (!cJSON_IsString(it)) {
			strbuf_addstr(why, "build.json has a malformed imports list");
			goto out;
		}
		strvec_push(imports, it->valuestring);
	}
	strbuf_reset(&path);
	strbuf_addf(&path, "%s/preprocessed.ii", dir);
	if (strbuf_read_file(own, path.buf, PREPROCESSED_MAX) < 0) {
		strbuf_addstr(why, "preprocessed.ii is missing or unreadable");
		goto out;
	}
	kb_strlcpy(res->library_sha256, hex, sizeof(res->library_sha256));
	rc = 0;
out:
	strbuf_release(&path);
	strbuf_release(&so);
	return rc;
}

/*
 * Fill res from the entry dir (the key of src, compiled as base): the
 * record, the library checked against its hash, the checks run again.
 * -1 with why when the entry cannot be trusted.
 */
static int load_entry(const char *dir, const char *base, const struct strbuf *src,
		      struct kb_build_result *res, struct strbuf *why)
{
	struct strbuf sb = STRBUF_INIT, path = STRBUF_INIT, own = STRBUF_INIT;
	struct strvec imports = STRVEC_INIT;
	const cJSON *compiled;
	cJSON *o = NULL;
	int rc = -1;

	strbuf_addf(&path, "%s/build.json", dir);
	if (!kb_is_file(path.buf) || strbuf_read_file(&sb, path.buf, 16u << 20) < 0) {
		strbuf_addstr(why, "no readable build.json");
		goto out;
	}
	o = cJSON_Parse(sb.buf);
	compiled = cJSON_GetObjectItemCaseSensitive(o, "compiled");
	if (!cJSON_IsObject(o) || !cJSON_IsBool(compiled)) {
		strbuf_addstr(why, "build.json is garbled");
		goto out;
	}
	load_resources(o, res);
	kb_findings_release(&res->findings);
	res->library_sha256[0] = '\0';
	res->compiled = cJSON_IsTrue(compiled);
	res->ok = false;
	FREE_AND_NULL(res->library);
	free(res->dir);
	res->dir = xstrdup(dir);
	if (res->compiled) {
		if (verify_library(dir, o, res, &imports, &own, why))
			goto out;
		run_checks(dir, base, src, &own, &imports, res);
	}
	rc = 0;
out:
	cJSON_Delete(o);
	strvec_clear(&imports);
	strbuf_release(&own);
	strbuf_release(&sb);
	strbuf_release(&path);
	return rc;
}

static void hash_field(struct kb_sha256 *ctx, const void *data, size_t len)
{
	uint64_t n = len;

	kb_sha256_update(ctx, &n, sizeof(n));
	kb_sha256_update(ctx, data, len);
}

static void hash_strvec(struct kb_sha256 *ctx, const struct strvec *sv)
{
	for (size_t i = 0; i < sv->nr; i++)
		hash_field(ctx, sv->v[i], strlen(sv->v[i]));
	hash_field(ctx, "", 0); /* the end of the list */
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

/*
 * Flags every step shares (preprocess, compile), and those of the compile
 * step alone; both are part of the key.
 */
static void push_flags(const struct kb_build_env *env, enum lang lang, struct strvec *cflags,
		       struct strvec *compile_only)
{
	if (lang == LANG_CUDA) {
		strvec_pushl(cflags, "-O3", "-std=c++17", NULL);
		strvec_pushf(cflags, "-arch=%s", env->arch);
		strvec_pushl(cflags, "-Xcompiler", "-fPIC", NULL);
		strvec_pushl(compile_only, "-Xptxas", "-v", "-lineinfo", "-c", NULL);
	} else {
		strvec_pushl(cflags, "-O3", "-std=c++17", "-march=native", "-fopenmp", "-fPIC", NULL);
		strvec_push(compile_only, "-shared");
	}
	for (size_t i = 0; i < env->include_flags.nr; i++)
		strvec_push(cflags, env->include_flags.v[i]);
}

/*
 * Libraries a CUDA source asks for on its first line, e.g. "// kernelbot:
 * link cublasLt" (the built-in matmul templates). Only these are honoured;
 * they go after the object on the link's command line.
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

/* --- one build --- */

/* One kb_build_native call on its way. */
struct job {
	const struct kb_build_env *env;
	const char *source;          /* as the caller named it */
	const char *base;            /* its base name: what the compiler sees */
	enum lang lang;
	struct strbuf src;           /* the source's bytes */
	struct strbuf compiler;      /* resolved path */
	struct strbuf version;       /* its --version output */
	struct strvec cflags;        /* flags of every step (key) */
	struct strvec compile_only;  /* flags of the compile step (key) */
	struct strvec libs;          /* -l flags of the link (key) */
	struct strbuf entry;         /* <cache_dir>/<key> */
	struct strbuf scratch;       /* <tmp_root>/b-XXXXXX: the compiler's one writable dir */
	struct strbuf log;           /* what the compiler printed, step after step */
	struct strbuf so;            /* kernel.so's bytes */
	struct strbuf own;           /* the kernel's own preprocessed lines */
	struct strvec imports;       /* undefined symbols of the kernel's code */
	struct strbuf failure;       /* why it did not compile, when not the compiler's words */
	bool compiled, timed_out;
	int exit_code;               /* of the step that failed */
	double seconds;
};

static void job_init(struct job *job, const struct kb_build_env *env, const char *source)
{
	memset(job, 0, sizeof(*job));
	job->env = env;
	job->source = source;
	job->base = base_name(source);
	strbuf_init(&job->src, 0);
	strbuf_init(&job->compiler, 0);
	strbuf_init(&job->version, 0);
	strvec_init(&job->cflags);
	strvec_init(&job->compile_only);
	strvec_init(&job->libs);
	strbuf_init(&job->entry, 0);
	strbuf_init(&job->scratch, 0);
	strbuf_init(&job->log, 0);
	strbuf_init(&job->so, 0);
	strbuf_init(&job->own, 0);
	strvec_init(&job->imports);
	strbuf_init(&job->failure, 0);
}

static void job_release(struct job *job)
{
	/* nothing runs in scratch any more: every step was waited for */
	if (job->scratch.len && kb_is_dir(job->scratch.buf))
		kb_rm_rf(job->scratch.buf);
	strbuf_release(&job->src);
	strbuf_release(&job->compiler);
	strbuf_release(&job->version);
	strvec_clear(&job->cflags);
	strvec_clear(&job->compile_only);
	strvec_clear(&job->libs);
	strbuf_release(&job->entry);
	strbuf_release(&job->scratch);
	strbuf_release(&job->log);
	strbuf_release(&job->so);
	strbuf_release(&job->own);
	strvec_clear(&job->imports);
	strbuf_release(&job->failure);
}

static int cache_key(const struct job *job, char hex[65])
{
	struct kb_sha256 h = { NULL };
	struct kb_sha256 *ctx = &h;
	struct strbuf abi = STRBUF_INIT;
	const char *abi_header = job->env->abi_header;
	const struct kb_sandbox *sb = job->env->sandbox;
	const char *sandboxed = sb && sb->enabled ? "sandboxed" : "unsandboxed";
	int rc = -1;

	if (abi_header && strbuf_read_file(&abi, abi_header, 1u << 20) < 0) {
		error("could not read the abi header '%s'", abi_header);
		goto out;
	}
	kb_sha256_init(ctx);
	hash_field(ctx, CACHE_KEY_VERSION, strlen(CACHE_KEY_VERSION));
	hash_field(ctx, job->src.buf, job->src.len);
	hash_field(ctx, job->compiler.buf, job->compiler.len);
	hash_field(ctx, job->version.buf, job->version.len);
	hash_strvec(ctx, &job->cflags);
	hash_strvec(ctx, &job->compile_only);
	hash_strvec(ctx, &job->libs);
	hash_field(ctx, abi.buf, abi.len);
	/* outside the sandbox a compile may read files it never could inside */
	hash_field(ctx, sandboxed, strlen(sandboxed));
	kb_sha256_final_hex(ctx, hex);
	rc = 0;
out:
	strbuf_release(&abi);
	kb_sha256_release(ctx);
	return rc;
}

/* Read the source, find the compiler, make the flags and the key. 0 or -1. */
static int job_prepare(struct job *job, struct kb_build_result *res)
{
	const struct kb_build_env *env = job->env;

	if (source_lang(job->source, &job->lang))
		return -1;
	if (strbuf_read_file(&job->src, job->source, SOURCE_MAX) < 0)
		return error("could not read kernel '%s'", job->source);
	if (resolve_compiler(job->lang == LANG_CUDA ? env->nvcc : env->cxx, job->lang, &job->compiler) ||
	    compiler_version(job->compiler.buf, &job->version))
		return -1;
	push_flags(env, job->lang, &job->cflags, &job->compile_only);
	push_libs(&job->src, job->lang, &job->libs);
	if (cache_key(job, res->hash))
		return -1;
	strbuf_addf(&job->entry, "%s/%s", env->cache_dir, res->hash);
	return 0;
}

/*
 * The entry of this key, when there is one to trust: 0 (res filled),
 * KB_ENOTFOUND (build it), -1. An entry that fails its checks is
 * removed with a warning naming it, then built again.
 */
static int try_cache(struct job *job, struct kb_build_result *res)
{
	struct strbuf why = STRBUF_INIT;
	int rc = KB_ENOTFOUND;

	if (!kb_is_dir(job->entry.buf))
		goto out;
	if (!load_entry(job->entry.buf, job->base, &job->src, res, &why)) {
		res->cached = true;
		log_debug("build of '%s': cache hit %s", job->source, res->hash);
		rc = 0;
		goto out;
	}
	log_warn("build cache entry '%s' failed its check (%s): removed, building again",
		 job->entry.buf, why.buf);
	if (kb_rm_rf(job->entry.buf))
		rc = -1;
out:
	strbuf_release(&why);
	return rc;
}

/* A fresh scratch dir holding the source (and tmp/ for the compiler's temp files). */
static int make_scratch(struct job *job)
{
	struct strbuf sb = STRBUF_INIT;
	int rc = -1;

	strbuf_addf(&job->scratch, "%s/b-XXXXXX", job->env->tmp_root);
	if (!mkdtemp(job->scratch.buf)) {
		error_errno("could not create a build directory in '%s'", job->env->tmp_root);
		strbuf_reset(&job->scratch);
		goto out;
	}
	if (write_text(job->scratch.buf, job->base, job->src.buf, job->src.len))
		goto out;
	strbuf_addf(&sb, "%s/tmp", job->scratch.buf);
	if (kb_mkdir_p(sb.buf, 0700))
		goto out;
	rc = 0;
out:
	strbuf_release(&sb);
	return rc;
}

/*
 * One compiler run in scratch (inside the sandbox when there is one):
 * 0 with its output added to the log, exit_code and timed_out set; -1
 * (could not start: logged) or KB_ECANCELLED.
 */
static int run_step(struct job *job, struct child_process *cp)
{
	const struct kb_build_env *env = job->env;
	struct kb_sandbox_view view = KB_SANDBOX_VIEW_INIT;
	int64_t left = env->timeout_ms - (int64_t)(job->seconds * 1000.0), t0;
	int rc = -1;

	strvec_push(&cp->env, "LC_ALL=C");
	strvec_pushf(&cp->env, "TMPDIR=%s/tmp", job->scratch.buf);
	cp->dir = job->scratch.buf;
	cp->err_to_out = true;
	cp->out_cap = OUTPUT_CAP;
	cp->timeout_ms = left > 1000 ? left : 1000;
	view.scratch = job->scratch.buf;
	for (size_t i = 0; i < env->include_flags.nr; i++)
		if (!strncmp(env->include_flags.v[i], "-I", 2))
			strvec_push(&view.ro, env->include_flags.v[i] + 2);
	/* -arch=native asks the GPU which it is */
	view.gpu = job->lang == LANG_CUDA && !strcmp(env->arch, "native");
	if (kb_sandbox_wrap(env->sandbox, &view, cp))
		goto out;
	t0 = kb_now_ms();
	rc = run_command(cp);
	job->seconds += (double)(kb_now_ms() - t0) / 1000.0;
	if (rc)
		goto out;
	strbuf_add(&job->log, cp->out.buf, cp->out.len);
	job->exit_code = cp->exit_code;
	job->timed_out = cp->timed_out;
out:
	kb_sandbox_view_release(&view);
	return rc;
}

/* compiler CFLAGS [extra...] -o out in: the words of one step. */
static void step_args(const struct job *job, struct child_process *cp, const struct strvec *extra,
		      const char *out, const char *in)
{
	strvec_push(&cp->args, job->compiler.buf);
	for (size_t i = 0; i < job->cflags.nr; i++)
		strvec_push(&cp->args, job->cflags.v[i]);
	for (size_t i = 0; extra && i < extra->nr; i++)
		strvec_push(&cp->args, extra->v[i]);
	strvec_pushl(&cp->args, "-o", out, in, NULL);
}

/*
 * Preprocess, compile and (nvcc) link in scratch. 0 with job->exit_code
 * and timed_out telling how far it got (kernel.ii, then kernel.so, are
 * there when they are 0); -1 or KB_ECANCELLED. CUDA fills res's kernels
 * from ptxas -v.
 */
static int compile(struct job *job, struct kb_build_result *res)
{
	struct child_process pre = CHILD_PROCESS_INIT, cc = CHILD_PROCESS_INIT, ld = CHILD_PROCESS_INIT;
	struct strvec e = STRVEC_INIT;
	bool cuda = job->lang == LANG_CUDA;
	int rc;

	strvec_push(&e, "-E");
	step_args(job, &pre, &e, "kernel.ii", job->base);
	rc = run_step(job, &pre);
	if (rc || job->exit_code || job->timed_out)
		goto out;
	step_args(job, &cc, &job->compile_only, cuda ? "kernel.o" : "kernel.so", job->base);
	rc = run_step(job, &cc);
	if (rc || job->exit_code || job->timed_out || !cuda)
		goto out;
	kb_build_parse_ptxas(cc.out.buf, res);
	strvec_pushl(&ld.args, job->compiler.buf, "-shared", NULL);
	strvec_pushf(&ld.args, "-arch=%s", job->env->arch);
	strvec_pushl(&ld.args, "-o", "kernel.so", "kernel.o", NULL);
	for (size_t i = 0; i < job->libs.nr; i++)
		strvec_push(&ld.args, job->libs.v[i]);
	rc = run_step(job, &ld);
out:
	strvec_clear(&e);
	child_process_release(&pre);
	child_process_release(&cc);
	child_process_release(&ld);
	return rc;
}

/*
 * A compiler output in scratch, read as the bot (outside the sandbox):
 * a regular file only (no link followed, no fifo waited on), at most max
 * bytes. 0, or -1 with why.
 */
static int read_output(const struct job *job, const char *name, size_t max, struct strbuf *out,
		       struct strbuf *why)
{
	struct strbuf path = STRBUF_INIT;
	size_t cap = out->cap;
	struct stat st;
	int fd, rc = -1;

	strbuf_addf(&path, "%s/%s", job->scratch.buf, name);
	fd = open(path.buf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		strbuf_addf(why, "the compiler left no %s", name);
		goto out;
	}
	if ((uint64_t)st.st_size > max) {
		strbuf_addf(why, "%s is larger than %zu MiB", name, max >> 20);
		goto out;
	}
	strbuf_reset(out);
	out->cap = max;
	rc = strbuf_read_fd(out, fd);
	out->cap = cap;
	if (rc) {
		strbuf_addf(why, "could not read %s", name);
		rc = -1;
	}
out:
	if (fd >= 0)
		close(fd);
	strbuf_release(&path);
	return rc;
}

static size_t count_lines(const struct strbuf *sb)
{
	size_t n = 1;

	for (size_t i = 0; i < sb->len; i++)
		n += sb->buf[i] == '\n';
	return n;
}

/*
 * After a clean compile: kernel.so's bytes, the imports of the kernel's
 * code (kernel.so for g++, kernel.o for nvcc: see build.h) and its own
 * preprocessed lines. A library the bot cannot read as expected is a
 * failed build (job->failure says why), not a trusted one.
 */
static void collect_outputs(struct job *job)
{
	struct strbuf obj = STRBUF_INIT, pp = STRBUF_INIT, why = STRBUF_INIT;
	const struct strbuf *elf = &job->so;

	if (read_output(job, "kernel.so", LIBRARY_MAX, &job->so, &why) ||
	    read_output(job, "kernel.ii", PREPROCESSED_MAX, &pp, &why))
		goto fail;
	if (job->lang == LANG_CUDA) {
		if (read_output(job, "kernel.o", LIBRARY_MAX, &obj, &why))
			goto fail;
		elf = &obj;
	}
	if (kb_elf_undefined_symbols(elf->buf, elf->len, &job->imports, &why))
		goto fail;
	kb_preprocessed_own_text(pp.buf, pp.len, job->scratch.buf, count_lines(&job->src), &job->own);
	job->compiled = true;
	goto out;
fail:
	strbuf_addf(&job->failure, "%s: %s\n", job->base, why.buf);
out:
	strbuf_release(&obj);
	strbuf_release(&pp);
	strbuf_release(&why);
}

/* build.json: the result, and what it was made from. */
static char *entry_json(const struct job *job, const struct kb_build_result *res)
{
	cJSON *json = kb_build_result_to_json(res), *arr;
	char *text;

	cJSON_DeleteItemFromObjectCaseSensitive(json, "cached");
	cJSON_AddStringToObject(json, "source", job->base);
	cJSON_AddStringToObject(json, "compiler", job->compiler.buf);
	arr = cJSON_AddArrayToObject(json, "flags");
	for (size_t i = 0; i < job->cflags.nr; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(job->cflags.v[i]));
	for (size_t i = 0; i < job->compile_only.nr; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(job->compile_only.v[i]));
	for (size_t i = 0; i < job->libs.nr; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(job->libs.v[i]));
	arr = cJSON_AddArrayToObject(json, "imports");
	for (size_t i = 0; i < job->imports.nr; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(job->imports.v[i]));
	text = cJSON_Print(json);
	cJSON_Delete(json);
	if (!text)
		die("out of memory printing build.json");
	return text;
}

/* res from a finished compile, before it is written down. */
static void fill_outcome(struct job *job, struct kb_build_result *res)
{
	struct strbuf sb = STRBUF_INIT;

	/* the compiler's words about untrusted source: redacted before the
	 * errors and build.log reach the cache (a long-lived store) or an LLM */
	kb_redact(&job->log, 0);
	res->cached = false;
	res->seconds = job->seconds;
	res->compiled = job->compiled;
	res->library_sha256[0] = '\0';
	kb_findings_release(&res->findings);
	if (job->compiled) {
		kb_sha256_hex(job->so.buf, job->so.len, res->library_sha256);
		run_checks(job->scratch.buf, job->base, &job->src, &job->own, &job->imports, res);
		strbuf_release(&sb);
		return;
	}
	res->ok = false;
	clear_kernels(res);
	if (job->failure.len) {
		strbuf_add(&sb, job->failure.buf, job->failure.len);
	} else {
		kb_build_trim_errors(job->log.buf, job->scratch.buf, &sb);
		if (!sb.len)
			strbuf_addf(&sb, "%s: compiler exited with %d and printed nothing\n",
				    job->base, job->exit_code);
	}
	free(res->errors);
	res->errors = strbuf_detach(&sb, NULL);
}

/*
 * Write the entry in a temp dir inside cache_dir (never seen by a
 * sandbox) and rename it into place, then load it as any reader would.
 */
static int publish(struct job *job, struct kb_build_result *res)
{
	struct strbuf stage = STRBUF_INIT, why = STRBUF_INIT;
	char *text = entry_json(job, res);
	bool published = false;
	int rc = -1;

	strbuf_addf(&stage, "%s/tmp-XXXXXX", job->env->cache_dir);
	if (!mkdtemp(stage.buf)) {
		error_errno("could not create a build directory in '%s'", job->env->cache_dir);
		strbuf_reset(&stage);
		goto out;
	}
	if (write_text(stage.buf, job->base, job->src.buf, job->src.len) ||
	    write_text(stage.buf, "build.log", job->log.buf, job->log.len) ||
	    (job->compiled &&
	     (write_text(stage.buf, "kernel.so", job->so.buf, job->so.len) ||
	      write_text(stage.buf, "preprocessed.ii", job->own.buf, job->own.len))) ||
	    write_text(stage.buf, "build.json", text, strlen(text)))
		goto out;
	if (!rename(stage.buf, job->entry.buf)) {
		published = true;
	} else if (errno == EEXIST || errno == ENOTEMPTY) {
		/* another builder published the same key first: use theirs */
		log_debug("build of '%s': entry %s published concurrently", job->source, res->hash);
	} else {
		error_errno("could not rename '%s' to '%s'", stage.buf, job->entry.buf);
		goto out;
	}
	if (load_entry(job->entry.buf, job->base, &job->src, res, &why)) {
		error("build cache entry '%s' is unusable: %s", job->entry.buf, why.buf);
		goto out;
	}
	res->cached = false;
	rc = 0;
out:
	if (stage.len && !published && kb_is_dir(stage.buf))
		kb_rm_rf(stage.buf);
	free(text);
	strbuf_release(&stage);
	strbuf_release(&why);
	return rc;
}

int kb_build_native(const struct kb_build_env *env, const char *source, struct kb_build_result *res)
{
	struct job job;
	int rc;

	job_init(&job, env, source);
	rc = job_prepare(&job, res);
	if (rc)
		goto out;
	rc = try_cache(&job, res);
	if (rc != KB_ENOTFOUND)
		goto out;
	rc = make_scratch(&job);
	if (rc)
		goto out;
	rc = compile(&job, res);
	if (rc)
		goto out;
	if (job.timed_out) {
		/* the candidate's fault or a busy machine: an outcome, not cached */
		struct strbuf msg = STRBUF_INIT;

		res->ok = res->compiled = res->cached = false;
		strbuf_addf(&msg, "%s: compile timed out after %d s\n", job.base,
			    (int)(env->timeout_ms / 1000));
		free(res->errors);
		res->errors = strbuf_detach(&msg, NULL);
		clear_kernels(res);
		goto out;
	}
	if (!job.exit_code)
		collect_outputs(&job);
	fill_outcome(&job, res);
	rc = publish(&job, res);
	if (rc) {
		/* nothing decided: never a path into the scratch dir */
		res->ok = false;
		FREE_AND_NULL(res->library);
	} else {
		log_debug("build of '%s': %s in %.2f s (%s)", source, res->ok ? "ok" : "failed",
			  res->seconds, res->hash);
	}
out:
	job_release(&job);
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
