#include "core/common.h"
#include "verifier/operator_hash.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"

#include <dirent.h>
#include <sys/stat.h>

/*
 * An operator's content hash (operator_hash.h): what the tuning cache, the
 * search's resume key and the baseline cache (baseline_db.h) file their
 * entries under, so that an edited operator misses them all.
 */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

#define HASH_MAX_FILES 4096
#define HASH_MAX_DEPTH 8

static int list_files(const char *root, const char *rel, int depth, struct strvec *out)
{
	struct strbuf dir = STRBUF_INIT, sb = STRBUF_INIT;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	strbuf_addf(&dir, "%s%s%s", root, *rel ? "/" : "", rel);
	d = opendir(dir.buf);
	if (!d) {
		rc = error_errno("could not read directory '%s'", dir.buf);
		goto out;
	}
	while (!rc && (de = readdir(d))) {
		struct stat st;

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "__pycache__"))
			continue;
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/%s", dir.buf, de->d_name);
		if (stat(sb.buf, &st))
			continue;
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		if (S_ISDIR(st.st_mode) && depth < HASH_MAX_DEPTH)
			rc = list_files(root, sb.buf, depth + 1, out);
		else if (S_ISREG(st.st_mode) && out->nr < HASH_MAX_FILES)
			strvec_push(out, sb.buf);
	}
	closedir(d);
out:
	strbuf_release(&dir);
	strbuf_release(&sb);
	return rc;
}

int kb_operator_hash(const char *path, char hex[65])
{
	struct strvec files = STRVEC_INIT;
	struct strbuf sb = STRBUF_INIT, data = STRBUF_INIT;
	struct kb_sha256 ctx = { NULL };
	int rc = -1;

	if (kb_is_file(path)) {
		if (kb_sha256_file(path, hex))
			return error("could not read operator '%s'", path);
		return 0;
	}
	if (!kb_is_dir(path))
		return error("operator '%s' is neither a file nor a folder", path);
	if (list_files(path, "", 0, &files))
		goto out;
	qsort(files.v, files.nr, sizeof(*files.v), cmp_str);
	kb_sha256_init(&ctx);
	for (size_t i = 0; i < files.nr; i++) {
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s/%s", path, files.v[i]);
		strbuf_reset(&data);
		if (strbuf_read_file(&data, sb.buf, 0) < 0) {
			error("could not read '%s'", sb.buf);
			goto out;
		}
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s%c%zu%c", files.v[i], 0, data.len, 0);
		kb_sha256_update(&ctx, sb.buf, sb.len);
		kb_sha256_update(&ctx, data.buf, data.len);
	}
	kb_sha256_final_hex(&ctx, hex);
	rc = 0;
out:
	kb_sha256_release(&ctx);
	strvec_clear(&files);
	strbuf_release(&sb);
	strbuf_release(&data);
	return rc;
}

