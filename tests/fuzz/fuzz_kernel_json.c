/*
 * A finished job's output read back by the job loop (jobs/render.c):
 * kernel.json (the pipeline's result: tuning or search figures, the
 * kernel's file name), evidence.json, the runner's history.json and the
 * child's last progress JSON, turned into the bot's pull request and its
 * check run. Input: kernel.json %% evidence.json %% history.json %% progress.
 *
 * Invariants: the kernel's path is a file in the job's folder of the branch;
 * the body ends with its pr marker.
 */
#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "jobs/jobs_priv.h"
#include "report/pr_body.h"
#include "fuzz.h"

#include <sys/stat.h>

static void runner_init(struct runner *r, const char *top)
{
	memset(r, 0, sizeof(*r));
	strbuf_init(&r->slug, 0);
	strbuf_init(&r->branch, 0);
	strbuf_init(&r->dir, 0);
	strbuf_init(&r->out, 0);
	strbuf_init(&r->stage, 0);
	strbuf_init(&r->error, 0);
	strbuf_init(&r->pr_url, 0);
	strbuf_init(&r->progress, 0);
	strbuf_addstr(&r->slug, "relu");
	strbuf_addstr(&r->branch, "kernelbot/pr-7/relu");
	strbuf_addf(&r->dir, "%s/job", top);
	strbuf_addf(&r->out, "%s/job/out", top);
	r->job.id = 12;
	r->job.pr_number = 7;
	r->job.head_sha = "0123456789abcdef0123456789abcdef01234567";
	r->job.operator_path = "ops/relu.py";
	r->job.state = KB_JOB_DONE;
	r->trig.repo = "acme/ops";
	r->budget_s = 600;
	r->best = 1.5;
}

static void runner_release(struct runner *r)
{
	strbuf_release(&r->slug);
	strbuf_release(&r->branch);
	strbuf_release(&r->dir);
	strbuf_release(&r->out);
	strbuf_release(&r->stage);
	strbuf_release(&r->error);
	strbuf_release(&r->pr_url);
	strbuf_release(&r->progress);
}

int kb_fuzz_kernel_json(const uint8_t *data, size_t size)
{
	static struct strbuf top = STRBUF_INIT;
	struct kb_fuzz_parts p;
	struct strbuf path = STRBUF_INIT, title = STRBUF_INIT, body = STRBUF_INIT;
	struct strbuf kpath = STRBUF_INIT;
	struct runner r;
	struct kb_marker m;
	bool faster;

	kb_fuzz_init();
	if (!top.len) {
		strbuf_addf(&top, "%s/kj", kb_fuzz_dir());
		strbuf_addf(&path, "%s/job/out", top.buf);
		if (kb_mkdir_p(path.buf, 0700))
			die("could not create '%s'", path.buf);
	}
	kb_fuzz_split(&p, data, size, 4);
	runner_init(&r, top.buf);
	kb_fuzz_write(&path, r.out.buf, "kernel.json", p.v[0], p.len[0]);
	kb_fuzz_write(&path, r.out.buf, "evidence.json", p.v[1], p.len[1]);
	kb_fuzz_write(&path, r.dir.buf, "history.json", p.v[2], p.len[2]);
	strbuf_add(&r.progress, p.v[3], p.len[3]);
	strbuf_addstr(&r.stage, "search");

	if (!jrender_pr(NULL, &r, &title, &body, &kpath)) {
		FUZZ_CHECK(!strncmp(kpath.buf, "kernelbot/relu/", 15));
		FUZZ_CHECK(!strchr(kpath.buf + 15, '/'));
		FUZZ_CHECK(kpath.buf[15] && strcmp(kpath.buf + 15, ".") && strcmp(kpath.buf + 15, ".."));
		FUZZ_CHECK(!kb_marker_find(body.buf, "pr", &m));
	}
	strbuf_reset(&title);
	strbuf_reset(&body);
	jrender_check(NULL, &r, &title, &body, &faster);
	r.job.state = KB_JOB_RUNNING;
	jrender_check(NULL, &r, &title, &body, &faster);

	runner_release(&r);
	strbuf_release(&path);
	strbuf_release(&title);
	strbuf_release(&body);
	strbuf_release(&kpath);
	kb_fuzz_parts_release(&p);
	return 0;
}

KB_FUZZ_ENTRY(kernel_json)
