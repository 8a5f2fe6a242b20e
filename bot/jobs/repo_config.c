#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "jobs/jobs.h"
#include "jobs/repo_operators.h"

#include <inttypes.h>

#include <ini.h>

/*
 * A repository's .kernelbot.ini: which operators, and what it asks of the
 * search. The repository is untrusted and its file is read at the pinned
 * head sha, so everything it asks is bounded by the daemon's own config,
 * and a mistake in it is a warning in the progress comment, not a failed
 * job.
 *
 *   [operators]
 *   paths = ops/relu.py, tasks/softmax
 *   [kernelbot]
 *   budget_s = 600     ; at most [bot] max_time_budget_s
 *   atol = 1e-5        ; fp32 tolerances, never looser than [harness]
 *   rtol = 1e-5
 *   max_configs = 8    ; at most [harness] max_configs
 *   error_factor = 4   ; the error bound, at most [harness] error_factor (0: off)
 *   passes = forward,backward  ; or forward; unset: both when the task ships a backward
 *   [operator mlp]     ; an nn.Module (or a function) of the repository itself
 *   module = models/mlp.py:FusedMLP   ; or function = pkg/ops.py:fused_gelu
 *   init = H, eps=1e-6                ; the class's arguments: Python literals, sizes
 *   inputs = float32[B,H]             ; forward's arguments; more sets: inputs.2 ... inputs.16
 *   sizes = B=8|32, H=4096            ; symbolic sizes, '|' for alternatives
 *   dtypes = float32, bfloat16        ; every shape set again in each dtype
 *   requires_grad = true              ; used with autograd: the backward is searched too
 *   tests = tests/test_mlp.py::test_forward  ; no inputs: recorded from these tests
 *
 * [operator NAME] sections are parsed and checked in repo_operators.c
 * (repo_operators.h has the grammar); a job of one is a KernelBench file
 * the job makes from it (modop.c), in the checkout's root so that the
 * sandbox sees the repository's files beside it.
 */

#define MAX_REPO_PATHS 100

struct parse_ctx {
	struct kb_repo_config *out;
	const struct kb_config *cfg;
	struct strbuf *why;
};

static void add_path(struct kb_repo_config *rc, const char *p, size_t len)
{
	while (len && (*p == ' ' || *p == '\t'))
		p++, len--;
	while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
		len--;
	while (len > 1 && p[len - 1] == '/')
		len--;
	if (!len || rc->nr_paths >= MAX_REPO_PATHS)
		return;
	rc->paths = xrealloc(rc->paths, (rc->nr_paths + 2) * sizeof(*rc->paths));
	rc->paths[rc->nr_paths++] = xstrndup(p, len);
	rc->paths[rc->nr_paths] = NULL;
}

bool kb_repo_path_ok(const char *p)
{
	const char *seg = p;

	if (!*p || *p == '/')
		return false;
	for (const char *q = p;; q++) {
		if (*q == '/' || !*q) {
			size_t n = (size_t)(q - seg);

			if ((n == 2 && !strncmp(seg, "..", 2)) || (n == 1 && *seg == '.'))
				return false;
			if (!*q)
				return true;
			seg = q + 1;
		} else if ((unsigned char)*q < 0x20 || *q == 0x7f || *q == '\\') {
			return false;
		}
	}
}

/*
 * [kernelbot] passes: "forward", or "forward,backward" (either order,
 * blanks around the comma): the job searches a backward kernel too, for an
 * operator used with autograd. A backward alone is no choice: its kernel
 * ships the forward it was checked with, but the pull request is about
 * the forward first.
 */
static int parse_passes(struct parse_ctx *ctx, const char *value)
{
	bool fwd = false, bwd = false, bad = false;

	for (const char *p = value; *p;) {
		const char *end = strchrnul(p, ',');
		const char *a = p, *b = end;

		while (a < b && (*a == ' ' || *a == '\t'))
			a++;
		while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
			b--;
		if (b - a == 7 && !strncmp(a, "forward", 7))
			fwd = true;
		else if (b - a == 8 && !strncmp(a, "backward", 8))
			bwd = true;
		else
			bad = true;
		p = *end ? end + 1 : end;
	}
	if (bad || !fwd) {
		strbuf_addf(ctx->why, "[kernelbot] passes: '%s' is not 'forward' or 'forward,backward'; "
			    "ignored\n", value);
		return 1;
	}
	ctx->out->passes = bwd ? KB_PASSES_BOTH : KB_PASSES_FORWARD;
	return 1;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
	struct parse_ctx *ctx = user;
	struct kb_repo_config *rc = ctx->out;
	const struct kb_config *cfg = ctx->cfg;
	int64_t i;
	double d;

	if (!strcmp(section, "operators") && !strcmp(name, "paths")) {
		const char *p = value;

		for (;;) {
			const char *end = strchr(p, ',');
			size_t len = end ? (size_t)(end - p) : strlen(p);
			size_t before = rc->nr_paths;

			add_path(rc, p, len);
			if (rc->nr_paths > before && !kb_repo_path_ok(rc->paths[rc->nr_paths - 1])) {
				strbuf_addf(ctx->why, "[operators] paths: '%s' is not a path in the repository; ignored\n",
					    rc->paths[rc->nr_paths - 1]);
				free(rc->paths[--rc->nr_paths]);
				rc->paths[rc->nr_paths] = NULL;
			}
			if (!end)
				break;
			p = end + 1;
		}
		return 1;
	}
	if (!strcmp(section, "kernelbot") && !strcmp(name, "budget_s")) {
		if (kb_parse_i64(value, &i) || i < 1) {
			strbuf_addf(ctx->why, "[kernelbot] budget_s: '%s' is not a positive integer; ignored\n", value);
			return 1;
		}
		if (i > cfg->bot_max_time_budget_s) {
			strbuf_addf(ctx->why, "[kernelbot] budget_s: %" PRId64 " is above the bot's limit; %" PRId64 " used\n",
				    i, cfg->bot_max_time_budget_s);
			i = cfg->bot_max_time_budget_s;
		}
		rc->budget_s = i;
		return 1;
	}
	if (!strcmp(section, "kernelbot") && (!strcmp(name, "atol") || !strcmp(name, "rtol"))) {
		double limit = !strcmp(name, "atol") ? cfg->atol_fp32 : cfg->rtol_fp32;

		if (kb_parse_double(value, &d) || !(d > 0) || d > 1) {
			strbuf_addf(ctx->why, "[kernelbot] %s: '%s' is not a number in (0, 1]; ignored\n", name, value);
			return 1;
		}
		if (d > limit) {
			strbuf_addf(ctx->why, "[kernelbot] %s: %g is looser than the bot allows; %g used\n",
				    name, d, limit);
			d = limit;
		}
		*(!strcmp(name, "atol") ? &rc->atol : &rc->rtol) = d;
		return 1;
	}
	if (!strcmp(section, "kernelbot") && !strcmp(name, "error_factor")) {
		if (kb_parse_double(value, &d) || !(d >= 0) || d > 1e6) {
			strbuf_addf(ctx->why, "[kernelbot] error_factor: '%s' is not a number from 0 to 1e6; ignored\n",
				    value);
			return 1;
		}
		if (d > cfg->error_factor) {
			strbuf_addf(ctx->why, "[kernelbot] error_factor: %g is looser than the bot allows; %g used\n",
				    d, cfg->error_factor);
			d = cfg->error_factor;
		}
		rc->error_factor = d;
		rc->error_factor_set = true;
		return 1;
	}
	if (!strcmp(section, "kernelbot") && !strcmp(name, "max_configs")) {
		if (kb_parse_i64(value, &i) || i < 1) {
			strbuf_addf(ctx->why, "[kernelbot] max_configs: '%s' is not a positive integer; ignored\n", value);
			return 1;
		}
		if (i > cfg->max_configs)
			i = cfg->max_configs;
		rc->max_configs = i;
		return 1;
	}
	if (!strcmp(section, "kernelbot") && !strcmp(name, "passes"))
		return parse_passes(ctx, value);
	if (!strncmp(section, "operator", 8) && (section[8] == ' ' || !section[8])) {
		const char *op = section + 8;

		while (*op == ' ' || *op == '\t')
			op++;
		if (*op)
			kb_repo_operator_key(rc, op, name, value, ctx->why);
		else if (!strstr(ctx->why->buf, "[operator] has no name"))
			strbuf_addstr(ctx->why, "[operator] has no name: a section is [operator NAME]; ignored\n");
		return 1;
	}
	strbuf_addf(ctx->why, "unknown key '%s' in section [%s]; ignored\n", name, section);
	return 1;
}

void kb_repo_config_release(struct kb_repo_config *rc)
{
	for (size_t i = 0; i < rc->nr_paths; i++)
		free(rc->paths[i]);
	free(rc->paths);
	kb_repo_operators_release(rc);
	memset(rc, 0, sizeof(*rc));
}

int kb_repo_config_parse(struct kb_repo_config *out, const char *text,
			 const struct kb_config *cfg, struct strbuf *why)
{
	struct parse_ctx ctx = { out, cfg, why };
	int rc;

	memset(out, 0, sizeof(*out));
	rc = ini_parse_string(text, handler, &ctx);
	if (rc < 0)
		return error("could not parse '.kernelbot.ini'");
	if (rc > 0)
		strbuf_addf(why, ".kernelbot.ini:%d: not 'key = value' or '[section]'; ignored\n", rc);
	kb_repo_operators_finish(out, why);
	return 0;
}
