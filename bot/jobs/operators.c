#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/strvec.h"
#include "core/util.h"
#include "git/git.h"
#include "jobs/jobs_priv.h"

#include <inttypes.h>

/*
 * Which operators a pull request asks about. The two task formats:
 *  - KernelBench: one .py with `class Model` and `get_inputs`;
 *  - robust-kbench: a folder with func_forward.py and config_forward.json
 *    (a change to any file of the folder's task counts).
 * Files are read from the pinned head sha in the cached clone, never from
 * a work tree, and only as text: nothing of the repository runs here.
 * The repository's own modules, named by [operator NAME] sections of
 * .kernelbot.ini, are found by modops.c.
 */

#define MAX_OPERATOR_FILE (1024 * 1024)
#define MAX_REPO_CONFIG (64 * 1024)

static bool ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && !strcmp(s + ls - lx, suffix);
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static bool file_exists(struct kb_git_repo *git, const char *sha, const char *path)
{
	struct strbuf sb = STRBUF_INIT;
	int rc = kb_git_read_file(git, sha, path, &sb, MAX_OPERATOR_FILE);

	strbuf_release(&sb);
	return rc == 0 || rc == KB_ETOOBIG;
}

/* True when text has `word` at the start of a line (after blanks). */
static bool has_line_start(const char *text, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = text; p && *p;) {
		const char *q = p;

		while (*q == ' ' || *q == '\t')
			q++;
		if (!strncmp(q, word, n))
			return true;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return false;
}

static bool is_kernelbench(struct kb_git_repo *git, const char *sha, const char *path)
{
	struct strbuf sb = STRBUF_INIT;
	bool yes = false;

	if (!ends_with(path, ".py"))
		return false;
	if (!kb_git_read_file(git, sha, path, &sb, MAX_OPERATOR_FILE))
		yes = has_line_start(sb.buf, "class Model") &&
		      has_line_start(sb.buf, "def get_inputs");
	strbuf_release(&sb);
	return yes;
}

/* The folder (without '/') when path belongs to a robust-kbench task; else empty. */
static void rk_folder(struct strbuf *out, struct kb_git_repo *git, const char *sha,
		      const char *path)
{
	static const char *const task_files[] = { "func_forward.py", "config_forward.json",
						  "func_backward.py", "config_backward.json" };
	const char *base = base_name(path);
	struct strbuf probe = STRBUF_INIT;
	bool is_task_file = false;

	strbuf_reset(out);
	for (size_t i = 0; i < ARRAY_SIZE(task_files); i++)
		if (!strcmp(base, task_files[i]))
			is_task_file = true;
	if (!is_task_file)
		return;
	strbuf_add(out, path, (size_t)(base - path));
	if (out->len)
		strbuf_setlen(out, out->len - 1);
	strbuf_addf(&probe, "%s%sfunc_forward.py", out->buf, out->len ? "/" : "");
	if (!file_exists(git, sha, probe.buf))
		goto no;
	strbuf_reset(&probe);
	strbuf_addf(&probe, "%s%sconfig_forward.json", out->buf, out->len ? "/" : "");
	if (!file_exists(git, sha, probe.buf))
		goto no;
	strbuf_release(&probe);
	if (!out->len) /* the repository root itself is the task */
		strbuf_addch(out, '.');
	return;
no:
	strbuf_reset(out);
	strbuf_release(&probe);
}

static bool listed(const struct strvec *ops, const char *p)
{
	for (size_t i = 0; i < ops->nr; i++)
		if (!strcmp(ops->v[i], p))
			return true;
	return false;
}

/* Classify one path: a KernelBench file or a robust-kbench folder; else nothing. */
static void classify(struct kb_git_repo *git, const char *sha, const char *path,
		     struct strvec *ops, bool folder_too)
{
	struct strbuf folder = STRBUF_INIT;

	rk_folder(&folder, git, sha, path);
	if (folder.len) {
		if (!listed(ops, folder.buf))
			strvec_push(ops, folder.buf);
	} else if (is_kernelbench(git, sha, path)) {
		if (!listed(ops, path))
			strvec_push(ops, path);
	} else if (folder_too) {
		struct strbuf probe = STRBUF_INIT;

		/* a listed folder: is it a robust-kbench task? */
		strbuf_addf(&probe, "%s/func_forward.py", path);
		rk_folder(&folder, git, sha, probe.buf);
		if (folder.len && !listed(ops, folder.buf))
			strvec_push(ops, folder.buf);
		strbuf_release(&probe);
	}
	strbuf_release(&folder);
}

int jops_find(struct kb_jobs *j, struct kb_git_repo *git, const char *repo, int64_t pr,
	      const char *head_sha, struct strvec *ops, struct strbuf *notes, struct strbuf *hints)
{
	struct strvec changed = STRVEC_INIT;
	struct strbuf ini = STRBUF_INIT, why = STRBUF_INIT;
	struct kb_repo_config rc;
	size_t max = (size_t)j->cfg->bot_max_operators;
	int ret;

	memset(&rc, 0, sizeof(rc));
	ret = kb_git_read_file(git, head_sha, ".kernelbot.ini", &ini, MAX_REPO_CONFIG);
	if (ret == KB_ETOOBIG)
		strbuf_addstr(notes, "`.kernelbot.ini` is larger than 64 KiB and was ignored.\n");
	else if (ret && ret != KB_ENOTFOUND)
		goto fail;
	if (!ret && !kb_repo_config_parse(&rc, ini.buf, j->cfg, &why) && why.len) {
		struct strbuf line = STRBUF_INIT;

		for (const char *p = why.buf; *p;) {
			const char *nl = strchrnul(p, '\n');

			strbuf_addf(&line, "`.kernelbot.ini`: %.*s\n", (int)(nl - p), p);
			p = *nl ? nl + 1 : nl;
		}
		strbuf_addstr(notes, line.buf);
		strbuf_release(&line);
	}

	for (size_t i = 0; i < rc.nr_paths; i++) {
		size_t before = ops->nr;

		classify(git, head_sha, rc.paths[i], ops, true);
		if (ops->nr == before)
			strbuf_addf(notes, "`.kernelbot.ini` lists `%s`, which is not an operator "
				    "in either task format at this commit.\n", rc.paths[i]);
	}
	/* the changed files: task formats unless [operators] paths chose, and the modules */
	if (!rc.nr_paths || rc.nr_ops) {
		ret = kb_forge_pr_files(j->forge, &changed, repo, pr);
		if (ret)
			goto fail;
	}
	for (size_t i = 0; !rc.nr_paths && i < changed.nr; i++)
		classify(git, head_sha, changed.v[i], ops, false);
	jmodops_find(git, head_sha, &rc, &changed, !rc.nr_paths, ops, hints);
	if (ops->nr > max) {
		strbuf_addf(notes, "%zu operators found; the first %zu are optimised "
			    "(`max_operators` of the bot).\n", ops->nr, max);
		while (ops->nr > max) {
			free((char *)ops->v[--ops->nr]);
			ops->v[ops->nr] = NULL;
		}
	}
	ret = 0;
	goto out;
fail:
	ret = -1;
out:
	kb_repo_config_release(&rc);
	strvec_clear(&changed);
	strbuf_release(&ini);
	strbuf_release(&why);
	return ret;
}

void kb_jobs_operator_slug(struct strbuf *out, const char *path)
{
	size_t len = strlen(path), start;
	const char *base, *colon = strrchr(path, ':');

	strbuf_reset(out);
	/* a module or function of the repository: its name ("models/mlp.py:FusedMLP" -> "fusedmlp") */
	if (colon && colon - path > 3 && !strncmp(colon - 3, ".py", 3))
		path = colon + 1, len = strlen(path);
	while (len && path[len - 1] == '/')
		len--;
	start = len;
	while (start && path[start - 1] != '/')
		start--;
	base = path + start;
	len -= start;
	if (len > 3 && !strncmp(base + len - 3, ".py", 3))
		len -= 3;
	for (size_t i = 0; i < len && out->len < 48; i++) {
		char c = base[i];

		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')
			strbuf_addch(out, c);
		else if (out->len && out->buf[out->len - 1] != '-')
			strbuf_addch(out, '-');
	}
	while (out->len && (out->buf[out->len - 1] == '-' || out->buf[out->len - 1] == '.'))
		strbuf_setlen(out, out->len - 1);
	if (!out->len)
		strbuf_addstr(out, "op");
}
