#include "core/common.h"
#include "core/json.h"
#include "verifier/python_env.h"
#include "verifier/datadir.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/subprocess.h"
#include "core/util.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <sys/stat.h>

/* Prints one JSON line; exits 3 without torch. Kept to what torch 1.13 has too. */
static const char probe_script[] =
	"import json, sys\n"
	"try:\n"
	"    import torch\n"
	"except Exception as e:\n"
	"    print(json.dumps({'error': '%s: %s' % (type(e).__name__, e)}))\n"
	"    sys.exit(3)\n"
	"d = {'python': sys.executable, 'python_version': '%d.%d.%d' % sys.version_info[:3],\n"
	"     'torch': torch.__version__, 'cuda': torch.version.cuda or '',\n"
	"     'compile': hasattr(torch, 'compile'), 'torch_file': torch.__file__}\n"
	"ok = bool(torch.cuda.is_available())\n"
	"n = torch.cuda.device_count() if ok else 0\n"
	"d['cuda_available'] = ok\n"
	"d['device_count'] = n\n"
	"d['device'] = torch.cuda.get_device_name(0) if n else ''\n"
	"d['capability'] = '%d%d' % torch.cuda.get_device_capability(0) if n else ''\n"
	"print(json.dumps(d))\n";

#define PROBE_TIMEOUT_MS (180 * 1000)

struct probe_entry {
	char *key;                   /* the interpreter as asked for */
	int rc;                      /* 0: has torch */
	char *why;                   /* why not, when rc != 0 */
	struct kb_python_probe probe;
};

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static struct probe_entry **entries; /* entries never move: callers keep probe pointers */
static size_t nr_entries, alloc_entries;
static char *disk_path; /* <state_dir>/python-probe.json, NULL: memory only */

static void probe_release(struct kb_python_probe *p)
{
	free(p->python);
	free(p->python_version);
	free(p->torch_version);
	free(p->cuda_version);
	free(p->device_name);
	free(p->capability);
	memset(p, 0, sizeof(*p));
}

void kb_python_reset(void)
{
	pthread_mutex_lock(&probe_lock);
	for (size_t i = 0; i < nr_entries; i++) {
		free(entries[i]->key);
		free(entries[i]->why);
		probe_release(&entries[i]->probe);
		free(entries[i]);
	}
	FREE_AND_NULL(entries);
	nr_entries = alloc_entries = 0;
	FREE_AND_NULL(disk_path);
	pthread_mutex_unlock(&probe_lock);
}

/* A string member as a new string; "" when absent. */
static char *json_str(const cJSON *obj, const char *key)
{
	const char *v = kb_json_str(obj, key);

	return xstrdup(v ? v : "");
}

/*
 * Probes outlive the process in <state_dir>/python-probe.json: importing
 * torch costs seconds (more with CUDA), and every `kernelbot verify`
 * would pay it. An entry is used only while its fingerprint holds: the
 * interpreter's and torch's files unchanged (an upgrade rewrites them),
 * the same host and visible devices, and for at most a day.
 */
#define DISK_MAX_AGE_S (24 * 3600)

static void fill_probe(struct probe_entry *e, const char *path, const cJSON *json)
{
	const cJSON *it;

	probe_release(&e->probe);
	e->probe.python = xstrdup(path);
	e->probe.python_version = json_str(json, "python_version");
	e->probe.torch_version = json_str(json, "torch");
	e->probe.cuda_version = json_str(json, "cuda");
	e->probe.device_name = json_str(json, "device");
	e->probe.capability = json_str(json, "capability");
	e->probe.cuda_available = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(json, "cuda_available"));
	e->probe.compile_available = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(json, "compile"));
	it = cJSON_GetObjectItemCaseSensitive(json, "device_count");
	e->probe.device_count = cJSON_IsNumber(it) ? it->valueint : 0;
}

static void stat_into(const char *path, struct strbuf *out)
{
	struct stat st;
	char *real = realpath(path, NULL);

	if (real && !stat(real, &st))
		strbuf_addf(out, "%s:%lld.%09ld:%lld;", real, (long long)st.st_mtim.tv_sec,
			    st.st_mtim.tv_nsec, (long long)st.st_size);
	else
		strbuf_addf(out, "%s:missing;", path);
	free(real);
}

static void fingerprint(const char *python, const char *torch_file, struct strbuf *out)
{
	const char *vars[] = { "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES" };
	char host[256] = "";

	stat_into(python, out);
	if (torch_file && *torch_file) {
		/* version.py is rewritten by every torch install */
		struct strbuf v = STRBUF_INIT;
		const char *slash = strrchr(torch_file, '/');

		strbuf_add(&v, torch_file, slash ? (size_t)(slash - torch_file) : 0);
		strbuf_addstr(&v, "/version.py");
		stat_into(v.buf, out);
		strbuf_release(&v);
	}
	gethostname(host, sizeof(host) - 1);
	strbuf_addf(out, "host=%s;", host);
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
		const char *val = getenv(vars[i]);

		strbuf_addf(out, "%s=%s;", vars[i], val ? val : "(unset)");
	}
}

static cJSON *disk_read(void)
{
	struct strbuf sb = STRBUF_INIT;
	cJSON *root = NULL;

	if (disk_path && kb_is_file(disk_path) && strbuf_read_file(&sb, disk_path, 1u << 20) >= 0)
		root = cJSON_Parse(sb.buf);
	strbuf_release(&sb);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		root = cJSON_CreateObject();
	}
	return root;
}

/* 0 when a valid stored probe for path filled e. */
static int disk_load(struct probe_entry *e, const char *path)
{
	cJSON *root;
	const cJSON *ent, *probe, *fp, *t, *tf;
	struct strbuf now = STRBUF_INIT;
	int rc = -1;

	if (!disk_path)
		return -1;
	root = disk_read();
	ent = cJSON_GetObjectItemCaseSensitive(root, path);
	probe = cJSON_GetObjectItemCaseSensitive(ent, "probe");
	fp = cJSON_GetObjectItemCaseSensitive(ent, "fingerprint");
	t = cJSON_GetObjectItemCaseSensitive(ent, "time");
	tf = cJSON_GetObjectItemCaseSensitive(probe, "torch_file");
	if (!cJSON_IsObject(probe) || !cJSON_IsString(fp) || !cJSON_IsNumber(t) || !cJSON_IsString(tf))
		goto out;
	if (kb_wall_s() - (int64_t)t->valuedouble > DISK_MAX_AGE_S || (int64_t)t->valuedouble > kb_wall_s())
		goto out;
	fingerprint(path, tf->valuestring, &now);
	if (strcmp(now.buf, fp->valuestring))
		goto out;
	fill_probe(e, path, probe);
	e->rc = 0;
	log_debug("python '%s': probe from '%s'", path, disk_path);
	rc = 0;
out:
	strbuf_release(&now);
	cJSON_Delete(root);
	return rc;
}

static void disk_store(struct probe_entry *e, const cJSON *probe)
{
	const cJSON *tf = cJSON_GetObjectItemCaseSensitive(probe, "torch_file");
	struct strbuf fp = STRBUF_INIT;
	cJSON *root, *ent;
	char *text;

	if (!disk_path || !cJSON_IsString(tf))
		return;
	root = disk_read();
	fingerprint(e->probe.python, tf->valuestring, &fp);
	ent = cJSON_CreateObject();
	cJSON_AddStringToObject(ent, "fingerprint", fp.buf);
	cJSON_AddNumberToObject(ent, "time", (double)kb_wall_s());
	cJSON_AddItemToObject(ent, "probe", cJSON_Duplicate(probe, true));
	cJSON_DeleteItemFromObjectCaseSensitive(root, e->probe.python);
	cJSON_AddItemToObject(root, e->probe.python, ent);
	text = cJSON_Print(root);
	/* a cache: failing to write it is not an error */
	if (text && kb_write_file_atomic(disk_path, text, strlen(text)))
		log_debug("could not store the python probe in '%s'", disk_path);
	free(text);
	cJSON_Delete(root);
	strbuf_release(&fp);
}

/* Run the probe; fills e->probe or e->why. Called with probe_lock held. */
static void run_probe(struct probe_entry *e, const char *path)
{
	struct child_process cp = CHILD_PROCESS_INIT;
	struct strbuf sb = STRBUF_INIT;
	cJSON *json = NULL;
	const cJSON *it;

	e->rc = -1;
	strvec_pushl(&cp.args, path, "-I", "-B", "-c", probe_script, NULL);
	cp.timeout_ms = PROBE_TIMEOUT_MS;
	cp.out_cap = 64 * 1024;
	cp.err_cap = 64 * 1024;
	if (run_command(&cp)) {
		strbuf_addstr(&sb, "could not be started");
		goto out;
	}
	if (cp.timed_out) {
		strbuf_addf(&sb, "probe timed out after %d s", PROBE_TIMEOUT_MS / 1000);
		goto out;
	}
	/* the last non-empty stdout line is the JSON (torch may print warnings first) */
	strbuf_trim(&cp.out);
	{
		const char *nl = strrchr(cp.out.buf, '\n');

		json = cJSON_Parse(nl ? nl + 1 : cp.out.buf);
	}
	if (cp.exit_code || !cJSON_IsObject(json) ||
	    cJSON_GetObjectItemCaseSensitive(json, "error")) {
		it = cJSON_GetObjectItemCaseSensitive(json, "error");
		if (cJSON_IsString(it))
			strbuf_addf(&sb, "cannot import torch (%s)", it->valuestring);
		else
			strbuf_addf(&sb, "probe exited with %d", cp.exit_code);
		goto out;
	}
	fill_probe(e, path, json);
	disk_store(e, json);
	e->rc = 0;
	log_debug("python '%s': torch %s, cuda %s, %d device(s)%s%s", path,
		  e->probe.torch_version, e->probe.cuda_available ? "available" : "unavailable",
		  e->probe.device_count, *e->probe.device_name ? ", " : "", e->probe.device_name);
out:
	if (e->rc)
		e->why = strbuf_detach(&sb, NULL);
	strbuf_release(&sb);
	cJSON_Delete(json);
	child_process_release(&cp);
}

/* Probe (or recall) key; the entry's why explains a failure. Called with probe_lock held. */
static struct probe_entry *probe_cached(const char *key)
{
	struct strbuf path = STRBUF_INIT;
	struct probe_entry *e;

	for (size_t i = 0; i < nr_entries; i++)
		if (!strcmp(entries[i]->key, key))
			return entries[i];
	if (nr_entries == alloc_entries) {
		alloc_entries = alloc_entries ? 2 * alloc_entries : 4;
		entries = xrealloc(entries, alloc_entries * sizeof(*entries));
	}
	e = xcalloc(1, sizeof(*e));
	entries[nr_entries++] = e;
	e->key = xstrdup(key);
	if (kb_find_program(key, &path)) {
		e->rc = -1;
		e->why = xstrdup("not found");
	} else if (disk_load(e, path.buf)) {
		run_probe(e, path.buf);
	}
	strbuf_release(&path);
	return e;
}

int kb_python_probe(const char *python, const struct kb_python_probe **out)
{
	struct probe_entry *e;
	int rc;

	pthread_mutex_lock(&probe_lock);
	e = probe_cached(python);
	rc = e->rc;
	if (!rc)
		*out = &e->probe;
	else
		error("python '%s' %s", python, e->why);
	pthread_mutex_unlock(&probe_lock);
	return rc ? -1 : 0;
}

int kb_python_find(const struct kb_config *cfg, const struct kb_python_probe **out)
{
	const char *env = getenv("KERNELBOT_PYTHON");
	const char *cands[] = { env, "python3", "/usr/bin/python3", "/usr/local/bin/python3" };
	struct strbuf tried = STRBUF_INIT;
	int rc = KB_ENOTFOUND;

	*out = NULL;
	pthread_mutex_lock(&probe_lock);
	if (!disk_path && cfg && cfg->state_dir && *cfg->state_dir && !kb_mkdir_p(cfg->state_dir, 0755)) {
		struct strbuf sb = STRBUF_INIT;

		strbuf_addf(&sb, "%s/python-probe.json", cfg->state_dir);
		disk_path = strbuf_detach(&sb, NULL);
	}
	pthread_mutex_unlock(&probe_lock);
	if (cfg && cfg->python && *cfg->python) {
		struct probe_entry *e;

		pthread_mutex_lock(&probe_lock);
		e = probe_cached(cfg->python);
		if (e->rc)
			rc = error("[harness] python '%s' %s", cfg->python, e->why);
		else
			*out = &e->probe, rc = 0;
		pthread_mutex_unlock(&probe_lock);
		return rc;
	}
	pthread_mutex_lock(&probe_lock);
	for (size_t i = 0; i < ARRAY_SIZE(cands); i++) {
		struct probe_entry *e;

		if (!cands[i] || !*cands[i])
			continue;
		e = probe_cached(cands[i]);
		if (!e->rc) {
			*out = &e->probe;
			rc = 0;
			break;
		}
		strbuf_addf(&tried, "%s'%s' (%s)", tried.len ? ", " : "", cands[i], e->why);
	}
	pthread_mutex_unlock(&probe_lock);
	if (rc)
		error("no python3 with torch found; tried: %s; set [harness] python", tried.buf);
	strbuf_release(&tried);
	return rc;
}

enum kb_backend kb_python_backend(const struct kb_python_probe *probe, enum kb_backend requested)
{
	if (requested != KB_BACKEND_AUTO)
		return requested;
	return probe && probe->cuda_available && probe->device_count > 0 ?
		KB_BACKEND_CUDA : KB_BACKEND_CPU;
}

const char *kb_backend_name(enum kb_backend b)
{
	switch (b) {
	case KB_BACKEND_CUDA: return "cuda";
	case KB_BACKEND_CPU: return "cpu";
	default: return "auto";
	}
}

int kb_backend_parse(const char *name, enum kb_backend *out)
{
	if (!strcmp(name, "cuda"))
		*out = KB_BACKEND_CUDA;
	else if (!strcmp(name, "cpu"))
		*out = KB_BACKEND_CPU;
	else if (!strcmp(name, "auto"))
		*out = KB_BACKEND_AUTO;
	else
		return -1;
	return 0;
}
