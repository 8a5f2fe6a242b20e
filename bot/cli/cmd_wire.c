#include "core/common.h"
#include "core/util.h"
#include "cli/cli.h"
#include "cli/cli_verifier.h"
#include "report/wire.h"
#include "run/kernel_json.h"

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: kernelbot wire RUN_DIR --repo DIR --module FILE:CLASS [options]\n"
		"\n"
		"Wire the kernel a `kernelbot run` left in RUN_DIR into a repository's module:\n"
		"write RUN_DIR/ops.py (the kernel as a PyTorch custom operator; binding.py is\n"
		"rendered again beside it) and patch FILE (relative to DIR) so that CLASS.forward\n"
		"calls the operator on the arguments the kernel was verified for and runs its\n"
		"original code everywhere else: one import, two lines at the top of forward.\n"
		"A setup.py with torch extensions gets the kernel as one more extension.\n"
		"\n"
		"  --repo DIR            the repository (read only unless --write)\n"
		"  --module FILE:CLASS   the module's file and class\n"
		"  --line N              the line of `def forward` (or a decorator of it)\n"
		"  --op-dir PATH         where RUN_DIR goes in DIR (default: inside the module's\n"
		"                        top-level package, <pkg>/_kernelbot/<operator>, when the\n"
		"                        module is in a package under a --sys-path root; else\n"
		"                        kernelbot/<operator>)\n"
		"  --init JSON           the module's arguments: {\"args\": [...], \"kwargs\": {...}}\n"
		"  --sys-path P          an import root relative to DIR (repeatable; default .)\n"
		"  --tests SEL           a pytest selection relative to DIR, run on the patched\n"
		"                        tree by --check (repeatable)\n"
		"  --check               run the wiring check in the sandbox: the module with and\n"
		"                        without the kernel on the verified shapes, forward and\n"
		"                        backward, and the tests; recorded in RUN_DIR/evidence.json\n"
		"  --write               write the patched FILE (and setup.py) into DIR\n"
		"  --print               print the patched FILE on standard output\n"
		"  --min-speedup X       call the kernel only on the sizes and dtypes where the\n"
		"                        evidence timed it at >= X x the module's own code; none:\n"
		"                        not wired (default 1.0; 0: wherever it was verified)\n"
		"  -c, --config FILE     configuration (the sandbox, [harness] timeout_s)\n"
		"  -h, --help            this text\n"
		"\n"
		"exit: 0 wired (and the check passed), 1 the module cannot be wired or the check\n"
		"      failed (the reason is printed), 2 usage or environment error\n");
}

struct wire_args {
	const char *run_dir, *repo, *module, *op_dir, *init, *config;
	int line;
	double min_speedup;
	bool check, write, print;
	const char *sys_path[16], *tests[32];
	char run_dir_abs[PATH_MAX], repo_abs[PATH_MAX];
	size_t nr_sys_path, nr_tests;
};

static int parse(struct wire_args *a, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "repo", required_argument, NULL, 'r' }, { "module", required_argument, NULL, 'm' },
		{ "line", required_argument, NULL, 'l' }, { "op-dir", required_argument, NULL, 'o' },
		{ "init", required_argument, NULL, 'i' }, { "sys-path", required_argument, NULL, 'p' },
		{ "tests", required_argument, NULL, 't' }, { "check", no_argument, NULL, 'k' },
		{ "write", no_argument, NULL, 'w' }, { "print", no_argument, NULL, 'P' },
		{ "config", required_argument, NULL, 'c' }, { "help", no_argument, NULL, 'h' },
		{ "min-speedup", required_argument, NULL, 's' }, { NULL },
	};
	int64_t n;
	int opt;

	a->min_speedup = 1.0;
	while ((opt = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'r': a->repo = optarg; break;
		case 'm': a->module = optarg; break;
		case 'o': a->op_dir = optarg; break;
		case 'i': a->init = optarg; break;
		case 'c': a->config = optarg; break;
		case 'k': a->check = true; break;
		case 'w': a->write = true; break;
		case 'P': a->print = true; break;
		case 'l':
			if (kb_parse_i64(optarg, &n) || n < 1 || n > 10000000)
				return cli_usage_error("wire", "--line takes a line number, not '%s'", optarg);
			a->line = (int)n;
			break;
		case 'p':
			if (a->nr_sys_path == ARRAY_SIZE(a->sys_path))
				return cli_usage_error("wire", "too many --sys-path");
			a->sys_path[a->nr_sys_path++] = optarg;
			break;
		case 't':
			if (a->nr_tests == ARRAY_SIZE(a->tests))
				return cli_usage_error("wire", "too many --tests");
			a->tests[a->nr_tests++] = optarg;
			break;
		case 's':
			if (kb_parse_double(optarg, &a->min_speedup) || !(a->min_speedup >= 0) ||
			    a->min_speedup > 1e6)
				return cli_usage_error("wire", "--min-speedup takes a ratio from 0 to 1000000, "
						       "not '%s'", optarg);
			break;
		case 'h': usage(stdout); return -1;
		default: return cli_usage_error("wire", "unknown option");
		}
	}
	if (optind + 1 != argc || !a->repo || !a->module || !strchr(a->module, ':'))
		return cli_usage_error("wire", "RUN_DIR, --repo DIR and --module FILE:CLASS are needed");
	/* the sandbox sees absolute paths only */
	if (!realpath(argv[optind], a->run_dir_abs) || !realpath(a->repo, a->repo_abs))
		return cli_usage_error("wire", "'%s' or '%s' does not exist", argv[optind], a->repo);
	a->run_dir = a->run_dir_abs;
	a->repo = a->repo_abs;
	return 0;
}

/* "speed gate: >= 1.00x: float32 of 0 to 16384 elements" */
static void print_gate(const struct kb_torch_op *op)
{
	if (!(op->min_speedup > 0)) {
		printf("speed gate: none (--min-speedup 0): the kernel runs wherever it was verified\n");
		return;
	}
	printf("speed gate: the kernel runs where it measured >= %.2fx the module's own code:", op->min_speedup);
	for (size_t i = 0; i < op->nr_speed; i++) {
		printf("%s %s of", i ? ";" : "", op->speed[i].dtype);
		for (size_t k = 0; k < op->speed[i].nr_ranges; k++) {
			const struct kb_op_range *r = &op->speed[i].ranges[k];

			printf("%s %" PRId64 " to ", k ? " or" : "", r->lo);
			if (r->hi < 0)
				printf("any");
			else
				printf("%" PRId64, r->hi);
		}
		printf(" elements");
	}
	printf("\n");
}

/* "the module is wired" lines, the check's figures */
static void print_result(const struct kb_wire *w, const struct wire_args *a)
{
	const cJSON *c, *p = w->proof, *t = cJSON_GetObjectItemCaseSensitive(p, "tests");

	printf("wired %s: import at line %d, the kernel's call at line %d (%s)\n", a->module,
	       w->patch.import_line, w->patch.guard_line, w->patch.args.buf);
	printf("build: %s\n", w->build_note.buf);
	if (w->build_add.len)
		printf("add to %s:\n%s", w->build_add_file, w->build_add.buf);
	print_gate(&w->op);
	if (!p)
		return;
	printf("check: %s (%s)\n", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "verdict")),
	       cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "implementation")) ?: "?");
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(p, "configs"))
		printf("  %s seed %d: %d kernel calls, outputs %.3g, gradients %.3g: %s%s\n",
		       cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "config")),
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(c, "seed")),
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(c, "kernel_calls")),
		       cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(c, "outputs_max_abs")),
		       cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(c, "grads_max_abs")),
		       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "ok")) ? "ok" : "MISMATCH",
		       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "used")) ? ""
										: " (not used here: slower)");
	c = cJSON_GetObjectItemCaseSensitive(p, "fallback");
	printf("  fallback %s: %s\n", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "dtype")) ?: "?",
	       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "ok")) ? "the original code ran" : "FAILED");
	if (t)
		printf("  tests: %d passed, %d failed, %d skipped, %d errors; %d kernel calls\n",
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "passed")),
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "failed")),
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "skipped")),
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "errors")),
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "kernel_calls")));
	c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(p, "reasons"), 0);
	if (c)
		printf("  reason: %s\n", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "message")));
}

/* spec's binding and evidence from the run's folder; *ev owned by the caller. */
static int read_run(const char *dir, struct kb_kernel_info *ki, struct kb_binding_spec *b, cJSON **ev)
{
	struct strbuf path = STRBUF_INIT, text = STRBUF_INIT;
	int rc = -1;

	kb_kernel_json_read(dir, ki);
	strbuf_addf(&path, "%s/evidence.json", dir);
	if (strbuf_read_file(&text, path.buf, 64u << 20) || !(*ev = cJSON_Parse(text.buf))) {
		error("could not read '%s'", path.buf);
		goto out;
	}
	memset(b, 0, sizeof(*b));
	if (ki->binding.operator_name && ki->source) {
		b->operator_name = ki->binding.operator_name;
		b->kernel_file = ki->source;
		b->backend = ki->backend;
		b->format = ki->binding.format;
		b->reference = ki->binding.reference;
		b->input_names = (const char *const *)ki->binding.input_names.v;
		b->nr_inputs = ki->binding.input_names.nr;
		b->has_backward = ki->binding.has_backward;
	}
	rc = 0;
out:
	strbuf_release(&path);
	strbuf_release(&text);
	return rc;
}

int cmd_wire(int argc, char **argv)
{
	struct wire_args a = { 0 };
	struct cli_verifier v = CLI_VERIFIER_INIT("wire");
	struct kb_kernel_info ki;
	struct kb_binding_spec b;
	struct kb_wire w;
	struct kb_wire_spec s = { 0 };
	struct strbuf file = STRBUF_INIT, op_dir = STRBUF_INIT, why = STRBUF_INIT;
	cJSON *ev = NULL, *init = NULL;
	int rc;

	kb_kernel_info_init(&ki);
	kb_wire_init(&w);
	if ((rc = parse(&a, argc, argv)))
		return rc < 0 ? KB_EXIT_OK : rc;
	strbuf_add(&file, a.module, (size_t)(strrchr(a.module, ':') - a.module));
	if (a.init && !(init = cJSON_Parse(a.init))) {
		rc = cli_usage_error("wire", "--init is no JSON: '%s'", a.init);
		goto out;
	}
	if (read_run(a.run_dir, &ki, &b, &ev)) {
		rc = KB_EXIT_USAGE;
		goto out;
	}
	if (a.op_dir)
		strbuf_addstr(&op_dir, a.op_dir);
	else
		kb_wire_op_dir(&op_dir, a.repo, file.buf, a.sys_path, a.nr_sys_path,
			       b.operator_name ? b.operator_name : "op");
	s.run_dir = a.run_dir;
	s.binding = b.operator_name ? &b : NULL;
	s.evidence = ev;
	s.repo_dir = a.repo;
	s.module_path = file.buf;
	s.class_name = strrchr(a.module, ':') + 1;
	s.forward_line = a.line;
	s.op_dir = op_dir.buf;
	s.init = init;
	s.sys_path = a.sys_path;
	s.nr_sys_path = a.nr_sys_path;
	s.tests = a.tests;
	s.nr_tests = a.nr_tests;
	s.min_speedup = a.min_speedup;
	rc = kb_wire_prepare(&w, &s, &why);
	if (rc == KB_ENOTSUPPORTED) {
		fprintf(stderr, "kernelbot wire: cannot wire %s: %s\n", a.module, why.buf);
		/* --check and --write speak for the run's folder: its evidence says why */
		rc = (a.check || a.write) && kb_wire_record_refusal(&s, why.buf) ? KB_EXIT_USAGE : KB_EXIT_NO;
		goto out;
	}
	if (rc || kb_wire_write_run(&w, &s) || (a.write && kb_wire_write_files(&w, &s, a.repo))) {
		rc = KB_EXIT_USAGE;
		goto out;
	}
	if (a.check) {
		v.config_path = a.config;
		if ((rc = cli_verifier_start(&v)))
			goto out;
		if (kb_wire_prove(&w, &s, &v.vf.harness) || kb_wire_record(&w, &s)) {
			rc = KB_EXIT_USAGE;
			goto out;
		}
	}
	if (a.print)
		fwrite(w.patch.text.buf, 1, w.patch.text.len, stdout);
	else
		print_result(&w, &a);
	rc = !w.proof || !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w.proof, "verdict")), "wired")
		     ? KB_EXIT_OK : KB_EXIT_NO;
out:
	cli_verifier_release(&v);
	kb_wire_release(&w);
	kb_kernel_info_release(&ki);
	cJSON_Delete(ev);
	cJSON_Delete(init);
	strbuf_release(&file);
	strbuf_release(&op_dir);
	strbuf_release(&why);
	return rc;
}
