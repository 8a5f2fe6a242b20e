#include "core/common.h"
#include "report/run_report.h"
#include "core/log.h"
#include "core/util.h"
#include "verifier/evidence.h"

#include <dirent.h>
#include <sys/stat.h>

void kb_operator_name(const char *operator_path, struct strbuf *out)
{
	size_t len = strlen(operator_path), start;

	while (len > 1 && operator_path[len - 1] == '/')
		len--;
	start = len;
	while (start && operator_path[start - 1] != '/')
		start--;
	if (len - start > 3 && !strncmp(operator_path + len - 3, ".py", 3))
		len -= 3;
	strbuf_add(out, operator_path + start, len - start);
	if (!out->len)
		strbuf_addstr(out, "operator");
}

static int write_text(const char *dir, const char *name, const char *text, size_t len)
{
	struct strbuf path = STRBUF_INIT;
	int rc;

	strbuf_addf(&path, "%s/%s", dir, name);
	rc = kb_write_file_atomic(path.buf, text, len);
	if (rc)
		error("could not write '%s'", path.buf);
	strbuf_release(&path);
	return rc;
}

static int write_json(const char *dir, const char *name, const cJSON *json)
{
	char *text = cJSON_Print(json);
	struct strbuf sb = STRBUF_INIT;
	int rc;

	if (!text)
		die("out of memory");
	strbuf_addstr(&sb, text);
	strbuf_addch(&sb, '\n');
	rc = write_text(dir, name, sb.buf, sb.len);
	free(text);
	strbuf_release(&sb);
	return rc;
}

static int copy_file(const char *from, const char *to)
{
	struct strbuf sb = STRBUF_INIT;
	int rc = -1;

	if (strbuf_read_file(&sb, from, 64u << 20) < 0) {
		error("could not read '%s'", from);
		goto out;
	}
	if (kb_write_file_atomic(to, sb.buf, sb.len)) {
		error("could not write '%s'", to);
		goto out;
	}
	rc = 0;
out:
	strbuf_release(&sb);
	return rc;
}

/* Copy a folder's regular files and subfolders (dot files and __pycache__ left out). */
static int copy_tree(const char *from, const char *to, int depth)
{
	struct strbuf a = STRBUF_INIT, b = STRBUF_INIT;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	if (depth > 8)
		return 0;
	if (kb_mkdir_p(to, 0755))
		return error_errno("could not create '%s'", to);
	d = opendir(from);
	if (!d)
		return error_errno("could not read directory '%s'", from);
	while (!rc && (de = readdir(d))) {
		struct stat st;

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "__pycache__"))
			continue;
		strbuf_reset(&a);
		strbuf_reset(&b);
		strbuf_addf(&a, "%s/%s", from, de->d_name);
		strbuf_addf(&b, "%s/%s", to, de->d_name);
		if (stat(a.buf, &st))
			continue;
		if (S_ISDIR(st.st_mode))
			rc = copy_tree(a.buf, b.buf, depth + 1);
		else if (S_ISREG(st.st_mode))
			rc = copy_file(a.buf, b.buf);
	}
	closedir(d);
	strbuf_release(&a);
	strbuf_release(&b);
	return rc;
}

/* reference/<name>(.py): the operator, which the binding runs for output shapes. */
static int copy_reference(const struct kb_run_output *o)
{
	struct strbuf dst = STRBUF_INIT;
	const char *op = o->report.operator_path;
	int rc;

	strbuf_addf(&dst, "%s/%s", o->dir, o->binding.reference);
	if (kb_is_dir(dst.buf) || kb_is_file(dst.buf))
		kb_rm_rf(dst.buf); /* an earlier run's copy: files removed since must go */
	if (kb_is_dir(op)) {
		rc = copy_tree(op, dst.buf, 0);
	} else {
		char *slash;

		slash = strrchr(dst.buf, '/');
		*slash = '\0';
		rc = kb_mkdir_p(dst.buf, 0755) ? error_errno("could not create '%s'", dst.buf) : 0;
		*slash = '/';
		if (!rc)
			rc = copy_file(op, dst.buf);
	}
	strbuf_release(&dst);
	return rc;
}

static int copy_headers(const struct kb_run_output *o)
{
	struct strbuf dst = STRBUF_INIT, src = STRBUF_INIT;
	static const char *const system_dirs[] = { "/usr/include", "/usr/local/include" };
	int rc = -1;

	strbuf_addf(&dst, "%s/include/dlpack", o->dir);
	if (kb_mkdir_p(dst.buf, 0755)) {
		error_errno("could not create '%s'", dst.buf);
		goto out;
	}
	strbuf_reset(&dst);
	strbuf_addf(&dst, "%s/include/kernelbot_abi.h", o->dir);
	if (copy_file(o->abi_header, dst.buf))
		goto out;
	if (o->dlpack_include) {
		strbuf_addf(&src, "%s/dlpack/dlpack.h", o->dlpack_include);
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(system_dirs) && !src.len; i++) {
			strbuf_addf(&src, "%s/dlpack/dlpack.h", system_dirs[i]);
			if (!kb_is_file(src.buf))
				strbuf_reset(&src);
		}
		if (!src.len) {
			error("could not find dlpack/dlpack.h to copy next to the kernel");
			goto out;
		}
	}
	strbuf_reset(&dst);
	strbuf_addf(&dst, "%s/include/dlpack/dlpack.h", o->dir);
	rc = copy_file(src.buf, dst.buf);
out:
	strbuf_release(&dst);
	strbuf_release(&src);
	return rc;
}

int kb_run_write_dir(const struct kb_run_output *o)
{
	struct strbuf sb = STRBUF_INIT, path = STRBUF_INIT;
	cJSON *ev = NULL, *kb, *kernel;
	int rc = -1;

	if (kb_mkdir_p(o->dir, 0755)) {
		error_errno("could not create the output directory '%s'", o->dir);
		goto out;
	}
	if (write_text(o->dir, o->report.kernel_file, o->source, o->source_len))
		goto out;
	/* kernel.json has a writer of its own (run/kernel_json.h) */

	/* the evidence names the copy it vouches for (same bytes, same sha256) */
	ev = cJSON_Duplicate(o->report.evidence, true);
	if (!ev)
		die("out of memory");
	kb_evidence_scrub(ev);
	kb = cJSON_GetObjectItemCaseSensitive(ev, "kernelbot");
	kernel = cJSON_GetObjectItemCaseSensitive(kb, "kernel");
	if (cJSON_IsObject(kernel)) {
		char *abs;

		strbuf_addf(&path, "%s/%s", o->dir, o->report.kernel_file);
		abs = realpath(path.buf, NULL);
		cJSON_DeleteItemFromObjectCaseSensitive(kernel, "path");
		cJSON_AddStringToObject(kernel, "path", abs ? abs : path.buf);
		free(abs);
	}
	if (write_json(o->dir, "evidence.json", ev))
		goto out;

	kb_run_report_markdown(&sb, &o->report);
	if (write_text(o->dir, "report.md", sb.buf, sb.len))
		goto out;
	strbuf_reset(&sb);
	kb_binding_render(&sb, &o->binding);
	if (write_text(o->dir, "binding.py", sb.buf, sb.len))
		goto out;
	if (copy_headers(o) || copy_reference(o))
		goto out;
	rc = 0;
out:
	cJSON_Delete(ev);
	strbuf_release(&sb);
	strbuf_release(&path);
	return rc;
}
