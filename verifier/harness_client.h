#ifndef KB_HARNESS_CLIENT_H
#define KB_HARNESS_CLIENT_H
/*
 * The bot's side of the harness protocol (verifier/PROTOCOL.md), and the
 * whole evaluation of one candidate built on it.
 *
 * kb_harness_call runs one evaluation in a fresh child:
 *   PYTHON -I -B -u kb_harness.py --request <tmp>/request.json
 * with a scrubbed environment, TMPDIR and the request's workdir set to a
 * fresh directory under tmp_root (removed afterwards), the nonce on stdin,
 * the result channel on descriptor 3, a wall-clock limit that kills the
 * process group, RLIMIT_AS on the cpu backend (never on cuda: the driver
 * maps huge virtual ranges) and stdout/stderr captured up to a cap.
 *
 * The verdict is the last "result" record carrying the nonce; records
 * with another nonce or that are not JSON are ignored. Without one the
 * evaluation is rejected: "timeout" when the limit killed it, "crash" when
 * it died by a signal or exited non-zero (the message has the signal or
 * exit code and the stage, the reason the config and seed of the last
 * progress record), "harness: no verdict" when it exited 0 silently. A
 * verdict followed by a crash or a timeout is rejected too. Either way the
 * caller gets evidence and the next call starts a fresh child.
 *
 * The evidence holds only what the judge produced, every string redacted
 * (core/redact.h): the child's stdout and stderr, untrusted, go to the
 * runner operator's log (harness_log.h) and nowhere else.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "verifier/sandbox.h"
#include "verifier/build.h"
#include "verifier/datadir.h"
#include "verifier/python_env.h"
#include "verifier/static_check.h"

#include <cjson/cJSON.h>

struct kb_harness {
	char *python;           /* the interpreter */
	char *script;           /* kb_harness.py */
	char *tmp_root;         /* per-evaluation dirs are made here */
	int64_t timeout_ms;     /* 0: none */
	/* [harness] baseline_timeout_s: how much longer the bot waits for a
	 * judge that measures baselines (PROTOCOL.md "Timeouts") */
	int64_t baseline_timeout_ms;
	uint64_t rlimit_as_bytes; /* cpu backend only; 0: none */
	size_t log_cap;         /* stdout and stderr each; 0: 1 MiB */
	char *log_dir;          /* <state_dir>/logs/harness (harness_log.h); NULL: output not kept */
	/* Test hook: when not empty, run these argv words instead of
	 * "PYTHON -I -B -u SCRIPT" (the client still appends --request FILE). */
	struct strvec argv_override;
	/* Where the harness runs (verifier/sandbox.h), and what it always
	 * sees read-only besides the request's own files: the harness and
	 * timing code, the ABI headers, the build cache, the peaks cache. */
	struct kb_sandbox sandbox;
	struct strvec view_ro;
	/* <state_dir>/peaks.json (NULL: none), and the backends whose peaks a
	 * trusted process measured into it in this process's life */
	char *peaks_path;
	bool peaks_done_cpu, peaks_done_cuda;
};

void kb_harness_init(struct kb_harness *h);
/*
 * The paths one request needs to see read-only: the operator (a file's
 * folder, or the task folder), the kernel's library and source folders.
 */
void kb_harness_request_paths(const cJSON *request, struct strvec *paths);
/*
 * With the sandbox on, a harness cannot write peaks.json (the copy and
 * matrix peaks the shares in a report are measured against): a sandboxed
 * process that loads no operator and no candidate measures them
 * (verifier/harness/kb_peaks.py --measure) when peaks.json has no entry for
 * backend, and the bot writes the file; every harness then sees it
 * read-only. Once per process and backend; failures are logged and cost
 * only a measurement inside each harness. Not const: it records that it ran.
 */
void kb_harness_trusted_peaks(struct kb_harness *h, const char *backend);
/*
 * Put cp (the harness, args and env complete) into h's sandbox: scratch
 * writable, h->view_ro plus paths read-only, the GPU when backend is
 * "cuda". A disabled sandbox leaves cp alone. 0 or -1 (logged).
 */
int kb_harness_sandbox(const struct kb_harness *h, const struct strvec *paths,
		       const char *scratch, const char *backend, struct child_process *cp);
/*
 * From the config: timeout_s, memory_limit_mb, tmp_root <state_dir>/tmp
 * (else $TMPDIR, else /tmp), the [sandbox] and its view (the script's
 * folder (the harness package with its timing code), <state_dir>/build-cache and peaks.json).
 * Returns 0 or -1 (a sandbox that cannot be set up, logged).
 */
int kb_harness_setup(struct kb_harness *h, const struct kb_config *cfg,
		     const char *python, const char *script);
void kb_harness_release(struct kb_harness *h);

/* What happened to the child (for callers that want more than the verdict). */
struct kb_harness_run {
	int exit_code;          /* or 128 + signal */
	bool timed_out;
	int64_t elapsed_ms;
	size_t out_bytes, err_bytes; /* captured */
	bool out_truncated, err_truncated;
	int records;            /* records accepted (right nonce) */
	int ignored;            /* lines ignored (wrong nonce, not JSON) */
	bool worker_started;    /* a worker (harness_worker.h) was started for this call */
};

/*
 * Run one evaluation of request (the client sets "workdir"). Returns 0 with
 * *evidence (the caller frees it) whatever the verdict, -1 when the child
 * could not be started or the temp dir made (logged), KB_ECANCELLED on a
 * stop request. info may be NULL.
 */
int kb_harness_call(const struct kb_harness *h, const cJSON *request, cJSON **evidence,
		    struct kb_harness_run *info);

/*
 * A request with everything the config decides: protocol, mode, operator
 * (made absolute), pass, backend, seeds, max_configs, tolerances, timing
 * (enabled as given, warm-up, min_time_ms, max_reps, l2_flush, baselines),
 * suspicious_speedup, baseline_drift, peaks_cache <state_dir>/peaks.json.
 * The caller adds "kernel". NULL when operator_path cannot be resolved (logged).
 */
cJSON *kb_harness_request(const struct kb_config *cfg, const char *mode, const char *operator_path,
			  const char *pass, enum kb_backend backend, bool timing);

/* --- pieces shared by kb_harness_call and the worker (harness_worker.h) --- */

/* 32 random hex characters and a NUL. 0 or -1 (logged). */
int kb_harness_nonce(char hex[33]);
/* The request's "backend" string, "" when it has none. */
const char *kb_harness_request_backend(const cJSON *request);
/* Write a copy of request with "workdir" set to workdir as <workdir>/request.json; path gets its name. 0 or -1. */
int kb_harness_write_request(const cJSON *request, const char *workdir, struct strbuf *path);
/*
 * "harness died by signal 11 (SIGSEGV) during trial" or "harness exited
 * with code N ...", appended to msg; stage may be NULL. Nothing the child
 * printed: that is untrusted and goes to the operator's log only.
 */
void kb_harness_exit_message(int exit_code, const char *stage, struct strbuf *msg);
/* "evaluation exceeded N s (last stage: S)" and what to change for that
 * stage (timing: min_time_ms, max_reps, l2_flush, --no-timing; the
 * correctness run: seeds, max_configs; always timeout_s). */
void kb_harness_timeout_message(int64_t timeout_ms, const char *stage, struct strbuf *msg);
/*
 * The evidence: result (taken; NULL when none came) without its nonce,
 * rejected with why_check/msg when that is set (a verdict followed by a
 * crash or a hang still fails), "harness: no verdict" when neither is,
 * every string redacted (kb_redact_json; reasons' messages cut to
 * KB_REDACT_MESSAGE_MAX, other strings to KB_REDACT_FIELD_MAX), and
 * without "log_tail" or "operator_log" should the result carry them.
 */
cJSON *kb_harness_settle(cJSON *result, const char *why_check, const char *msg, int config, int seed);
/*
 * The last result record on a channel's captured bytes (data) that carries
 * nonce, raw and untrusted (the caller frees it), or NULL; *ignored (may be
 * NULL) counts the lines without the nonce. For scripts spoken to like the
 * harness (verifier/wiring.h).
 */
cJSON *kb_harness_channel_result(const struct strbuf *data, const char *nonce, int *ignored);
/*
 * environment.worker_pid as the bot sees the harness process (its pid
 * namespace's own numbers mean nothing outside the sandbox): pid.
 */
void kb_harness_host_pid(cJSON *evidence, pid_t pid);

/* --- one candidate, start to finish --- */

struct kb_harness_worker;
struct kb_harness_pool;
struct kb_progress;
struct kb_state;

/* What a process sets up once to evaluate candidates. */
struct kb_verifier {
	const struct kb_config *cfg;
	struct kb_datadir dd;
	const struct kb_python_probe *probe;  /* owned by python_env */
	struct kb_build_env build;
	struct kb_harness harness;
	/* NULL: a fresh harness process per evaluation (kb_harness_call);
	 * else evaluations go to the long-lived workers of pool, one set per
	 * device (kb_verifier_use_worker), and worker is the first of them */
	struct kb_harness_worker *worker;
	struct kb_harness_pool *pool;
	/* NULL, or the caller's progress (core/progress.h): evaluations show
	 * what they are doing (peaks, builds, the harness's config and seed)
	 * as the activity of the caller's current stage, never a stage of
	 * their own */
	struct kb_progress *progress;
	const char *current;          /* the kernel being evaluated (for the activity) */
	/* the state store of the baseline cache (baseline_cache.h), opened at
	 * the first timed evaluation; NULL when it could not be (st_tried) */
	struct kb_state *st;
	bool st_tried;
};

/* Find the data dir and the python with torch, prepare build and harness. 0 or -1 (logged). */
int kb_verifier_init(struct kb_verifier *vf, const struct kb_config *cfg);
/* Stops and frees the workers too. */
void kb_verifier_release(struct kb_verifier *vf);

/*
 * From now on evaluate candidates in long-lived harness workers
 * (harness_worker.h): [harness] workers_per_device of them for each of
 * [harness] devices (harness_pool.h: auto is CUDA_VISIBLE_DEVICES, else
 * every GPU torch sees), each started when first needed, restarted after
 * a crash, a lost CUDA context or a timeout, stopped by
 * kb_verifier_release. Saves python's, torch's and CUDA's start-up
 * (seconds) and the operator's loading and torch.compile baselines on
 * every candidate after the first.
 */
void kb_verifier_use_worker(struct kb_verifier *vf);

/* The least time a build or a harness call gets under kb_eval_opts.deadline_ms. */
#define KB_EVAL_MIN_MS 1000

struct kb_eval_opts {
	const char *operator_path;  /* KernelBench .py or robust-kbench folder */
	const char *kernel_path;    /* .cu or .cpp, native or torch-ext */
	const char *mode;           /* "verify" or "bench" */
	const char *pass;           /* "forward" or "backward" */
	enum kb_backend backend;    /* auto: the kernel's (.cpp: cpu, .cu: cuda) when that is possible */
	int64_t seeds;              /* 0: config */
	int64_t max_configs;        /* 0: config */
	int64_t timeout_s;          /* the candidate's stages (baselines not counted); 0: config */
	/* kb_now_ms()'s clock, 0: none. A build or harness call starting
	 * later gets only the time left (at least KB_EVAL_MIN_MS): a run's
	 * time budget bounds each one, however many a batch holds. */
	int64_t deadline_ms;
	bool timing;
	/*
	 * NULL or "strict": the kernel runs on a non-blocking stream of the
	 * harness's and must keep to it (the bot's only mode). "kernelbench":
	 * KernelBench's and robust-kbench's semantics, the legacy default
	 * stream and a device-wide sync after every call, stream checks off
	 * (`kernelbot verify|bench --stream-mode kernelbench`).
	 */
	const char *stream_mode;
	/*
	 * Called on the caller's thread about every 100 ms while harness
	 * workers judge a batch (kb_verifier_evaluate_many; not while it
	 * builds, nor for fresh processes): the search takes the model replies
	 * that came meanwhile, so none waits for a batch. It must not call
	 * into this verifier. May be NULL.
	 */
	void (*idle)(void *idle_arg);
	void *idle_arg;
};

/*
 * Static check, build (native) and harness run for one candidate; the
 * evidence is annotated (evidence.h) either way. Returns 0 with *evidence,
 * -1 for usage or environment errors (unreadable kernel, unknown format,
 * a backend that cannot run the kernel, a compiler missing; logged),
 * KB_ECANCELLED on a stop request.
 *
 * The evidence's "stages" (wall seconds) hold the harness's load_s,
 * correctness_s, timing_s, baseline_s and total_s (PROTOCOL.md), and the bot's
 * static_s, build_s (this candidate's share of the build step: the whole
 * parallel build divided by the kernels built together; 0 when the
 * harness builds it, as for torch extensions) and harness_s (the harness
 * call as the bot saw it: a process or worker start-up included).
 * baseline_s is the part the judge spent on the baselines, which the
 * candidate's timeout does not count; timed evaluations use and fill the
 * baseline cache (baseline_cache.h).
 */
int kb_verifier_evaluate(struct kb_verifier *vf, const struct kb_eval_opts *o, cJSON **evidence);

/* Called by kb_verifier_evaluate_many after each kernel's evidence is made. */
typedef void (*kb_eval_done_fn)(size_t i, const char *kernel_path, const cJSON *evidence,
				void *payload);

/*
 * kb_verifier_evaluate for n kernels of one operator (o->kernel_path is
 * not used): all statically checked, the native ones that pass built in
 * parallel (kb_build_many; the workers, if vf uses them, start
 * meanwhile), then judged: spread over the workers, as many at once as
 * there are workers for their backend (harness_pool.h; the evidence's
 * kernelbot.placement says which device and worker, and what shared the
 * device meanwhile), else one after another in fresh processes.
 * evidence[i] (n slots, set to NULL first) receives kernel i's, and done
 * (may be NULL) hears of it on the caller's thread: first the kernels the
 * static checks or the build rejected, then the others in the order the
 * harness finishes them. Returns 0 when every kernel has evidence; -1 on
 * the first usage or environment error (logged; the evidence made so far
 * stays for the caller to free), KB_ECANCELLED on a stop request.
 */
int kb_verifier_evaluate_many(struct kb_verifier *vf, const struct kb_eval_opts *o,
			      const char *const *kernels, size_t n, cJSON **evidence,
			      kb_eval_done_fn done, void *payload);

/*
 * Usage checks that need no python: the operator is a .py file or a
 * folder, the kernel a readable .cu/.cpp that defines kb_forward or
 * PYBIND11_MODULE. 0, or -1 with the message in why.
 */
int kb_verifier_check_paths(const char *operator_path, const char *kernel_path, struct strbuf *why);

/*
 * The operator's part of that, for commands without a kernel (run): it
 * exists, and is a .py file that names Model and get_inputs, or a folder
 * with func_forward.py. Refused at once with a message that names both
 * formats, instead of after the seconds a harness takes to start. 0, or
 * -1 with the message in why.
 */
int kb_operator_check_path(const char *operator_path, struct strbuf *why);

/* The backend o->backend resolves to for kernel_path, or -1 with a message in why. */
int kb_verifier_backend(const struct kb_verifier *vf, const char *kernel_path,
			enum kb_backend requested, enum kb_backend *out, struct strbuf *why);

#endif
