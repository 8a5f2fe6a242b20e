#include "core/common.h"
#include "core/nvidia.h"
#include "core/util.h"

#include <ctype.h>
#include <dirent.h>

/*
 * The driver's procfs listing (core/nvidia.h). Read quietly: a machine
 * without the driver is no error here, the callers say what they do
 * without it.
 */

#define GPUS_DIR "driver/nvidia/gpus"

/* The value of "Key:\t value" lines, blanks trimmed, into out. */
static bool field(const char *line, const char *key, char *out, size_t size)
{
	size_t n = strlen(key), len;

	if (strncmp(line, key, n) || line[n] != ':')
		return false;
	line += n + 1;
	while (*line == ' ' || *line == '\t')
		line++;
	len = strcspn(line, "\r\n");
	while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	if (len >= size)
		len = size - 1;
	memcpy(out, line, len);
	out[len] = '\0';
	return true;
}

/* One GPU's information file into g. 0, or -1 with why. */
static int read_gpu(const char *dir, const char *bus_id, struct kb_nvidia_gpu *g, struct strbuf *why)
{
	char path[4096], minor[32] = "", excluded[16] = "";
	char *line = NULL;
	size_t cap = 0;
	int64_t m;
	FILE *fp;

	memset(g, 0, sizeof(*g));
	g->minor = -1;
	for (size_t i = 0; bus_id[i] && i < sizeof(g->bus_id) - 1; i++)
		g->bus_id[i] = (char)tolower((unsigned char)bus_id[i]);
	xsnprintf(path, sizeof(path), "%s/%s/information", dir, bus_id);
	fp = fopen(path, "re");
	if (!fp) {
		strbuf_addf(why, "cannot read '%s': %s", path, strerror(errno));
		return -1;
	}
	while (getline(&line, &cap, fp) > 0) {
		field(line, "GPU UUID", g->uuid, sizeof(g->uuid));
		field(line, "Device Minor", minor, sizeof(minor));
		field(line, "GPU Excluded", excluded, sizeof(excluded));
	}
	free(line);
	fclose(fp);
	g->excluded = !strcasecmp(excluded, "yes");
	if (kb_parse_i64(minor, &m) || m < 0 || m > 65535) {
		strbuf_addf(why, "'%s' names no device minor", path);
		return -1;
	}
	g->minor = (int)m;
	return 0;
}

static int by_bus_id(const void *a, const void *b)
{
	return strcmp(((const struct kb_nvidia_gpu *)a)->bus_id, ((const struct kb_nvidia_gpu *)b)->bus_id);
}

int kb_nvidia_gpus(const char *proc, struct kb_nvidia_gpu **out, size_t *nr, struct strbuf *why)
{
	char dir[4096];
	struct dirent *de;
	size_t alloc = 0;
	DIR *d;
	int rc = 0;

	*out = NULL;
	*nr = 0;
	xsnprintf(dir, sizeof(dir), "%s/%s", proc, GPUS_DIR);
	d = opendir(dir);
	if (!d) {
		strbuf_addf(why, "no NVIDIA driver listing ('%s': %s)", dir, strerror(errno));
		return -1;
	}
	while (!rc && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (*nr == alloc) {
			alloc = alloc ? 2 * alloc : 8;
			*out = xrealloc(*out, alloc * sizeof(**out));
		}
		rc = read_gpu(dir, de->d_name, &(*out)[*nr], why);
		if (!rc)
			(*nr)++;
	}
	closedir(d);
	if (rc) {
		FREE_AND_NULL(*out);
		*nr = 0;
		return -1;
	}
	if (*nr)
		qsort(*out, *nr, sizeof(**out), by_bus_id);
	return 0;
}

bool kb_nvidia_has_mig(const char *proc)
{
	char dir[4096];
	struct dirent *de;
	bool found = false;
	DIR *d;

	xsnprintf(dir, sizeof(dir), "%s/driver/nvidia/capabilities", proc);
	d = opendir(dir);
	if (!d)
		return false;
	while (!found && (de = readdir(d))) {
		char mig[4096 + 300];
		struct dirent *ge;
		DIR *gd;

		if (strncmp(de->d_name, "gpu", 3))
			continue;
		xsnprintf(mig, sizeof(mig), "%s/%s/mig", dir, de->d_name);
		gd = opendir(mig);
		if (!gd)
			continue;
		while (!found && (ge = readdir(gd)))
			found = !strncmp(ge->d_name, "gi", 2) && isdigit((unsigned char)ge->d_name[2]);
		closedir(gd);
	}
	closedir(d);
	return found;
}
