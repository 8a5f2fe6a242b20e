#include "core/common.h"
#include "verifier/harness_runner.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <sys/socket.h>

#define RUNNER_LOG_CAP (64u << 10)
#define RUNNER_STOP_GRACE_MS 2000   /* EOF from the judge: it exits at once */

void kb_harness_runner_init(struct kb_harness_runner *r)
{
	memset(r, 0, sizeof(*r));
	child_process_init(&r->cp);
}

/* kb_runner.py beside kb_harness.py */
static void runner_script(const struct kb_harness *h, struct strbuf *out)
{
	const char *slash = strrchr(h->script, '/');

	if (slash)
		strbuf_add(out, h->script, (size_t)(slash - h->script + 1));
	strbuf_addstr(out, "kb_runner.py");
}

int kb_harness_runner_start(struct kb_harness_runner *r, const struct kb_harness *h,
			    const struct strvec *paths, const char *backend,
			    struct child_process *judge)
{
	struct strbuf dir = STRBUF_INIT, script = STRBUF_INIT;
	int sv[2] = { -1, -1 };
	int rc = -1;

	if (!h->sandbox.enabled || h->argv_override.nr)
		return 0;
	kb_harness_runner_stop(r);
	if (kb_mkdir_p(h->tmp_root, 0700))
		goto out;
	strbuf_addf(&dir, "%s/kb-runner-XXXXXX", h->tmp_root);
	if (!mkdtemp(dir.buf)) {
		error_errno("could not create a runner directory in '%s'", h->tmp_root);
		goto out;
	}
	r->dir = strbuf_detach(&dir, NULL);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		error_errno("could not create the judge's socket to its runner");
		goto out;
	}
	runner_script(h, &script);
	strvec_pushl(&r->cp.args, h->python, "-I", "-B", "-u", script.buf, "--zygote", "3", NULL);
	strvec_pushf(&r->cp.env, "TMPDIR=%s", r->dir);
	/* a judge pinned to one device (harness_worker.h): its kernels run there too */
	for (size_t i = 0; i < judge->env.nr; i++)
		if (!strncmp(judge->env.v[i], "CUDA_VISIBLE_DEVICES=", 21))
			strvec_push(&r->cp.env, judge->env.v[i]);
	r->cp.dir = r->dir;
	r->cp.keep_tail = true;
	r->cp.out_cap = r->cp.err_cap = RUNNER_LOG_CAP;
	r->cp.pass_fd = sv[1];
	r->cp.pass_fd_child = 3;
	sv[1] = -1;
	if (!strcmp(backend, "cpu"))
		r->cp.rlimit_as_bytes = h->rlimit_as_bytes;
	if (kb_harness_sandbox(h, paths, r->dir, backend, &r->cp) || start_command(&r->cp))
		goto out;
	r->running = true;
	judge->pass_fd = sv[0];
	judge->pass_fd_child = KB_RUNNER_JUDGE_FD;
	sv[0] = -1;
	strvec_pushf(&judge->env, "KB_RUNNER_FD=%d", KB_RUNNER_JUDGE_FD);
	log_debug("runner zygote %d started in '%s'", (int)r->cp.pid, r->dir);
	rc = 0;
out:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	if (rc)
		kb_harness_runner_stop(r);
	strbuf_release(&dir);
	strbuf_release(&script);
	return rc;
}

void kb_harness_runner_stop(struct kb_harness_runner *r)
{
	if (r->running) {
		finish_command(&r->cp, RUNNER_STOP_GRACE_MS);
		if (r->cp.exit_code)
			log_debug("runner zygote ended with exit code %d", r->cp.exit_code);
	}
	child_process_release(&r->cp);
	child_process_init(&r->cp);
	if (r->dir && kb_rm_rf(r->dir))
		log_warn("could not remove the runner directory '%s'", r->dir);
	FREE_AND_NULL(r->dir);
	r->running = false;
}
