#!/bin/sh
# The one command for a GPU runner that has the repository and a carried
# build/ (kernelbot, include/dlpack, gpu-libs/ from `make gpu-bundle`) but
# not the build's packages:
#
#   sh tests/gpu/run_on_runner.sh [STEP ...]
#
# STEPs, in the order given (default: test-gpu bench-eval): test-gpu,
# bench-eval, bench-templates, bench-search, bench-corpora. One device call holds at most
# 10 minutes, so a session splits them over calls.
#
# 1. puts on LD_LIBRARY_PATH those of build/gpu-libs the runner lacks
#    (all of them if the binary still does not start), checks
#    `kernelbot --version`, nvcc, torch and the GPU;
# 2. each step with its own time limit (STEP_LIMIT_<step> seconds, with
#    defaults below), its log in $OUT/<step>.log;
# 3. prints every step's summary last.
# BENCH_EVAL_ARGS, BENCH_TEMPLATES_ARGS, BENCH_SEARCH_ARGS, BENCH_CORPORA_ARGS:
# extra arguments.
# Logs, reports and evidence go to $OUT (default build/gpu-out).
# Exit: 0 when every step passed, else 1 (2: not runnable).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 2
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
OUT=${OUT:-$build/gpu-out}
mkdir -p "$OUT" || exit 2
export OUT KB_BUILD="$build"
t0=$(date +%s)
say() { echo "[run_on_runner $(( $(date +%s) - t0 ))s] $*"; }

# --- 1. libraries, binary, toolchain
libs="$build/gpu-libs"
if [ -d "$libs" ]; then
	need=$(mktemp -d "${TMPDIR:-/tmp}/kb-libs.XXXXXX")
	for f in "$libs"/*; do
		[ -e "$f" ] || continue
		so=$(basename "$f")
		if ! ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$so "; then
			ln -s "$f" "$need/$so"
		fi
	done
	export LD_LIBRARY_PATH="$need${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	say "libraries the runner lacks, from $libs: $(ls "$need" | tr '\n' ' ')"
	if ! "$build/kernelbot" --version >/dev/null 2>&1; then
		export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		say "binary does not start with those alone: all of $libs on LD_LIBRARY_PATH"
	fi
fi
# the sandbox's bubblewrap, carried, where the runner has none
if ! command -v bwrap >/dev/null 2>&1 && [ -x "$build/gpu-bin/bwrap" ]; then
	export PATH="$build/gpu-bin:$PATH"
	say "bwrap from $build/gpu-bin"
fi
if ! v=$("$build/kernelbot" --version 2>&1); then
	echo "run_on_runner: '$build/kernelbot --version' failed:" >&2
	echo "$v" >&2
	ldd "$build/kernelbot" >&2
	exit 2
fi
# the sandbox must work here; where it does not, say why in full and run
# the suites unsandboxed (KB_TEST_SANDBOX=off), so the rest is still measured
if sbx=$("$build/kernelbot" config check 2>&1); then
	say "sandbox: $(echo "$sbx" | grep '^# sandbox')"
else
	say "SANDBOX DOES NOT WORK ON THIS RUNNER: $(echo "$sbx" | grep -i sandbox | tail -n 3)"
	say "'kernelbot config check' said: $(echo "$sbx" | tail -n 12)"
	say "bwrap: $(command -v bwrap) $(bwrap --version 2>&1); uid $(id -u); userns max $(cat /proc/sys/user/max_user_namespaces 2>&1)"
	for t in "--unshare-user" "--unshare-pid" "--unshare-net" "--unshare-ipc"; do
		bwrap $t --ro-bind / / true >/dev/null 2>&1; say "  bwrap $t: exit $?: $(bwrap $t --ro-bind / / true 2>&1 | head -n 1)"
	done
	export KB_TEST_SANDBOX=off
	say "GPU suites run UNSANDBOXED ([sandbox] enabled = false in their configs)"
fi
say "$v; nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo MISSING)"
py=$(sh tests/find_python.sh --torch-only)
say "python ${py:-NONE}: $("${py:-false}" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "python", sys.version.split()[0])' 2>&1 | tail -n 1); $(nproc) cores"

# --- 2. the steps
[ $# -gt 0 ] || set -- test-gpu bench-eval
ev=$(mktemp -d "${TMPDIR:-/tmp}/kb-gpu-evidence.XXXXXX")
failed=0
summaries=""
run_step() {
	step=$1 limit=$2
	shift 2
	say "$step (limit ${limit}s) ..."
	timeout -k 10 "$limit" "$@" >"$OUT/$step.log" 2>&1
	rc=$?
	say "$step exit $rc"
	[ $rc -eq 0 ] || failed=1
	summaries="$summaries $step:$rc"
}
for step in "$@"; do
	case "$step" in
	test-gpu)
		KB_GPU_EVIDENCE="$ev/test-gpu" run_step test-gpu "${STEP_LIMIT_test_gpu:-300}" sh tests/run_gpu.sh
		tar czf "$OUT/test-gpu-evidence.tar.gz" -C "$ev" --exclude=state test-gpu 2>/dev/null ;;
	bench-eval)
		KB_REJECT_EVIDENCE="$ev/test-gpu" run_step bench-eval "${STEP_LIMIT_bench_eval:-300}" \
			sh bench/eval/run.sh --deadline 240 ${BENCH_EVAL_ARGS:-} ;;
	bench-templates)
		run_step bench-templates "${STEP_LIMIT_bench_templates:-330}" \
			sh bench/templates/run.sh --deadline 280 ${BENCH_TEMPLATES_ARGS:-} ;;
	bench-corpora)
		run_step bench-corpora "${STEP_LIMIT_bench_corpora:-590}" \
			sh bench/corpora/run.sh --deadline 560 ${BENCH_CORPORA_ARGS:-} ;;
	bench-search)
		run_step bench-search "${STEP_LIMIT_bench_search:-300}" \
			sh bench/search/run.sh --deadline 240 ${BENCH_SEARCH_ARGS:-} ;;
	*)
		echo "run_on_runner: unknown step '$step'" >&2
		failed=1 ;;
	esac
done
rm -rf "$ev"

# --- 3. summaries, last
for s in $summaries; do
	step=${s%%:*}
	echo
	echo "================ $step (exit ${s#*:}) ================"
	case "$step" in
	test-gpu)
		sed -n '/short test summary/,$p' "$OUT/test-gpu.log" | grep -v '^SKIPPED' | tail -n 40
		grep -q 'short test summary' "$OUT/test-gpu.log" || tail -n 40 "$OUT/test-gpu.log" ;;
	*)
		if [ -s "$OUT/$step-report.txt" ]; then
			cat "$OUT/$step-report.txt"
		else
			tail -n 80 "$OUT/$step.log"
		fi ;;
	esac
done
say "done"
exit $failed
