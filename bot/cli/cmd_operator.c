#include "core/common.h"
#include "cli/cli.h"
#include "cli/cli_record.h"
#include "cli/cli_verifier.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "jobs/jobs.h"
#include "jobs/modop.h"
#include "jobs/pymodules.h"
#include "jobs/repo_operators.h"

#include <getopt.h>
#include <inttypes.h>

/*
 * `kernelbot operator`: one [operator NAME] section of a repository's
 * .kernelbot.ini as the KernelBench file the verifier runs (jobs/modop.h).
 * The job loop runs it as a child in the job's checkout before `kernelbot
 * run`; a maintainer runs it to try a section (then `kernelbot run` or
 * `verify` on the file it prints).
 */

#define MAX_INI (64 * 1024)
#define MAX_SOURCE (1024 * 1024)
#define DEFAULT_TIMEOUT_S 300

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot operator [options] NAME\n"
		"\n"
		"Write the operator of .kernelbot.ini's [operator NAME] section (NAME, or the\n"
		"section's PATH.py:CLASS) as a KernelBench file the verifier runs, into the\n"
		"repository's root as kernelbot_op_NAME.py, and print its path. The class (or\n"
		"function) is found by reading its file; nothing of the repository runs but\n"
		"its tests, in the sandbox, when the section gives no inputs but tests: their\n"
		"calls are recorded and the most frequent become the shape sets.\n"
		"\n"
		"  -c, --config FILE   configuration (default ./config.ini, ...): the sandbox,\n"
		"                      the harness's python, [harness] max_configs\n"
		"      --repo DIR      the repository's root (default .)\n"
		"      --shapes FILE   keep what the tests recorded in FILE (and their output in\n"
		"                      FILE.log); a FILE that exists is used instead of running\n"
		"                      the tests again\n"
		"      --timeout S     the tests' limit (default %d)\n"
		"      --head SHA      the commit DIR holds, named in the file (the verifier's\n"
		"                      cached baselines are per file: a new commit measures again)\n"
		"  -h, --help          this text\n"
		"\n"
		"exit: 0 written, 1 the section or its module cannot be made an operator (the\n"
		"message says why; a section without shapes gets the lines to add), 2 usage\n",
		DEFAULT_TIMEOUT_S);
}

struct opts {
	const char *config_path, *repo, *shapes, *name, *head;
	int64_t timeout_s;
};

/* The section named name (or whose job path is name). */
static const struct kb_repo_operator *section(const struct kb_repo_config *rc, const char *name)
{
	struct strbuf jp = STRBUF_INIT;
	const struct kb_repo_operator *found = NULL;

	for (size_t i = 0; i < rc->nr_ops && !found; i++) {
		if (!strcmp(rc->ops[i].name, name))
			found = &rc->ops[i];
		else if (rc->ops[i].path) {
			kb_repo_operator_job_path(&jp, &rc->ops[i]);
			if (!strcmp(jp.buf, name))
				found = &rc->ops[i];
		}
	}
	strbuf_release(&jp);
	return found;
}

/* A file of the repository, by a path that must stay inside it. */
static int read_repo_file(const char *root, const char *rel, struct strbuf *out, size_t max)
{
	struct strbuf path = STRBUF_INIT;
	char *real_root = realpath(root, NULL), *real = NULL;
	int rc = -1;

	strbuf_addf(&path, "%s/%s", root, rel);
	real = realpath(path.buf, NULL);
	if (real && real_root && kb_path_under(real, real_root) && kb_is_file(real))
		rc = strbuf_read_file(out, real, max) ? -1 : 0;
	free(real_root);
	free(real);
	strbuf_release(&path);
	return rc;
}

static void print_lines(const char *prefix, const char *text)
{
	for (const char *p = text; *p;) {
		const char *nl = strchrnul(p, '\n');

		fprintf(stderr, "%s%.*s\n", prefix, (int)(nl - p), p);
		p = *nl ? nl + 1 : nl;
	}
}

/* The shapes of op: its inputs, its recorded tests, or the lines to add. */
static int shapes(struct opts *o, struct kb_config *cfg, const struct kb_repo_operator *op,
		  const struct kb_pyop *found, struct kb_modop *m)
{
	struct cli_verifier v = CLI_VERIFIER_INIT("operator");
	struct strbuf json = STRBUF_INIT, why = STRBUF_INIT, log = STRBUF_INIT;
	int rc = KB_EXIT_NO;

	if (op->nr_forms)
		return kb_modop_from_section(m, op) ? KB_EXIT_NO : 0;
	if (!op->tests.nr) {
		struct strbuf hint = STRBUF_INIT;

		kb_modop_hint(&hint, op->name, op->path, found);
		fprintf(stderr, "kernelbot operator: [operator %s] gives no inputs and no tests; add, for "
			"example:\n\n%s\n", op->name, hint.buf);
		strbuf_release(&hint);
		return KB_EXIT_NO;
	}
	if (o->shapes && kb_is_file(o->shapes)) {
		if (strbuf_read_file(&json, o->shapes, KB_MODOP_MAX_RECORD)) {
			fprintf(stderr, "kernelbot operator: could not read '%s'\n", o->shapes);
			goto out;
		}
	} else {
		v.config_path = o->config_path;
		if ((rc = cli_verifier_start(&v)))
			goto out;
		rc = KB_EXIT_NO;
		if (o->shapes)
			strbuf_addf(&log, "%s.log", o->shapes);
		if (cli_record_shapes(&v.vf.harness, kb_backend_name(kb_python_backend(v.vf.probe, v.backend)),
				      o->repo, op, o->timeout_s * 1000, log.len ? log.buf : NULL, &json, &why)) {
			print_lines("kernelbot operator: ", why.buf);
			goto out;
		}
		if (o->shapes && kb_write_file_atomic(o->shapes, json.buf, json.len))
			fprintf(stderr, "kernelbot operator: could not keep the recorded shapes in '%s'\n", o->shapes);
	}
	if (kb_modop_from_record(m, json.buf, json.len, (size_t)cfg->max_configs, op, &why)) {
		/* why's last line says what went wrong: the line a job's failure quotes */
		fprintf(stderr, "kernelbot operator: no shapes for [operator %s] from its tests:\n", op->name);
		print_lines("kernelbot operator: ", why.buf);
		goto out;
	}
	print_lines("kernelbot operator: ", why.buf);
	rc = 0;
out:
	cli_verifier_release(&v);
	strbuf_release(&json);
	strbuf_release(&why);
	strbuf_release(&log);
	return rc;
}

/* Write text as root/kernelbot_op_NAME.py, never over a file kernelbot did not write. */
static int write_operator(const char *root, const char *name, const struct strbuf *text, struct strbuf *path)
{
	struct strbuf file = STRBUF_INIT, old = STRBUF_INIT;
	int rc = KB_EXIT_NO;

	kb_modop_file_name(&file, name);
	strbuf_addf(path, "%s/%s", root, file.buf);
	if (kb_is_file(path->buf) && (strbuf_read_file(&old, path->buf, 4096) ||
				       strncmp(old.buf, KB_MODOP_HEADER, strlen(KB_MODOP_HEADER)))) {
		fprintf(stderr, "kernelbot operator: '%s' is the repository's own file, not one kernelbot "
			"wrote; rename the section [operator %s]\n", file.buf, name);
		goto out;
	}
	if (kb_write_file_atomic(path->buf, text->buf, text->len)) {
		fprintf(stderr, "kernelbot operator: could not write '%s'\n", path->buf);
		goto out;
	}
	rc = 0;
out:
	strbuf_release(&file);
	strbuf_release(&old);
	return rc;
}

/* The class or function of op in its file, read statically; NULL with a message. */
static const struct kb_pyop *find_target(const char *root, const struct kb_repo_operator *op,
					 struct strbuf *src, struct kb_pyops *ops)
{
	const struct kb_pyop *found;

	if (read_repo_file(root, op->path, src, MAX_SOURCE)) {
		fprintf(stderr, "kernelbot operator: [operator %s]: no readable file '%s' in '%s' (at most "
			"1 MiB)\n", op->name, op->path, root);
		return NULL;
	}
	kb_pyops_scan(ops, src->buf, src->len);
	found = kb_pyops_find(ops, op->target);
	if (!found || found->is_function != op->is_function) {
		fprintf(stderr, "kernelbot operator: [operator %s]: %s has no %s %s (read as text: a "
			"%s at its top level%s)\n", op->name, op->path, op->is_function ? "function" : "class",
			op->target, op->is_function ? "def" : "class statement",
			op->is_function ? "" : ", or nested in classes as Outer.Inner");
		return NULL;
	}
	return found;
}

static int make(struct opts *o, struct kb_config *cfg)
{
	struct kb_repo_config rc = { 0 };
	struct strbuf ini = STRBUF_INIT, why = STRBUF_INIT, src = STRBUF_INIT, text = STRBUF_INIT;
	struct strbuf path = STRBUF_INIT;
	struct kb_pyops ops = KB_PYOPS_INIT;
	struct kb_modop m = KB_MODOP_INIT;
	const struct kb_repo_operator *op;
	const struct kb_pyop *found;
	struct kb_modop_origin origin;
	int ret = KB_EXIT_NO;

	if (read_repo_file(o->repo, ".kernelbot.ini", &ini, MAX_INI) ||
	    kb_repo_config_parse(&rc, ini.buf, cfg, &why)) {
		fprintf(stderr, "kernelbot operator: no readable .kernelbot.ini (at most 64 KiB) in '%s'\n", o->repo);
		goto out;
	}
	print_lines("warning: .kernelbot.ini: ", why.buf);
	if (!(op = section(&rc, o->name))) {
		fprintf(stderr, "kernelbot operator: no [operator %s] section in %s/.kernelbot.ini\n", o->name, o->repo);
		goto out;
	}
	if (op->bad) {
		fprintf(stderr, "kernelbot operator: [operator %s] has errors (above); nothing written\n", op->name);
		goto out;
	}
	if (!(found = find_target(o->repo, op, &src, &ops)) || (ret = shapes(o, cfg, op, found, &m)))
		goto out;
	ret = KB_EXIT_NO;
	kb_modop_symbolize(&m, op->is_function ? NULL : found);
	origin = (struct kb_modop_origin){ .op = op, .head = o->head ? o->head : "", .source = src.buf,
					   .found = found };
	kb_modop_render(&text, &m, &origin);
	if ((ret = write_operator(o->repo, op->name, &text, &path)))
		goto out;
	fprintf(stderr, "kernelbot operator: [operator %s]: %s:%s with %zu shape set%s\n", op->name,
		op->path, op->target, m.nr_sets, m.nr_sets == 1 ? "" : "s");
	printf("%s\n", path.buf);
	ret = 0;
out:
	kb_repo_config_release(&rc);
	kb_pyops_release(&ops);
	kb_modop_release(&m);
	strbuf_release(&ini);
	strbuf_release(&why);
	strbuf_release(&src);
	strbuf_release(&text);
	strbuf_release(&path);
	return ret;
}

int cmd_operator(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "repo", required_argument, NULL, 'r' },
		{ "shapes", required_argument, NULL, 's' },
		{ "timeout", required_argument, NULL, 't' },
		{ "head", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct opts o = { .repo = ".", .timeout_s = DEFAULT_TIMEOUT_S };
	struct kb_config cfg;
	int c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': o.config_path = optarg; break;
		case 'r': o.repo = optarg; break;
		case 's': o.shapes = optarg; break;
		case 't':
			if (kb_parse_i64(optarg, &o.timeout_s) || o.timeout_s < 1 || o.timeout_s > 86400)
				return cli_usage_error("operator", "--timeout '%s' is not 1 to 86400 seconds", optarg);
			break;
		case 'H':
			if (strlen(optarg) < 7 || strlen(optarg) > 64 ||
			    strspn(optarg, "0123456789abcdefABCDEF") != strlen(optarg))
				return cli_usage_error("operator", "--head '%s' is not a commit sha", optarg);
			o.head = optarg;
			break;
		case 'h': usage(stdout); return KB_EXIT_OK;
		default: return cli_usage_error("operator", "unknown option");
		}
	}
	if (optind != argc - 1)
		return cli_usage_error("operator", "one section NAME is needed");
	o.name = argv[optind];
	if ((rc = cli_load_config(o.config_path, &cfg)))
		return rc;
	rc = make(&o, &cfg);
	kb_config_release(&cfg);
	return rc;
}
