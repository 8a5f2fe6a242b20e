#!/bin/sh
# The one command for a GPU runner that has the repository and a carried
# build/ (kernelbot, include/dlpack, gpu-libs/ from `make gpu-bundle`) but
# not the build's packages:
#
#   sh tests/gpu/run_on_runner.sh
#
# 1. puts on LD_LIBRARY_PATH those of build/gpu-libs the runner lacks
#    (all of them if the binary still does not start), checks
#    `kernelbot --version`, nvcc, torch and the GPU;
# 2. make test-gpu's suite (tests/run_gpu.sh), evidence kept;
# 3. make bench-eval (bench/eval/run.sh), reusing test-gpu's evidence for
#    the kernels that must be rejected (no second hang and crash), told to
#    start nothing new after 240 s;
# 4. prints test-gpu's summary and bench-eval's tables last.
# Each step has a time limit (240 s, 300 s) so the whole stays under 10 min.
# BENCH_EVAL_ARGS: extra arguments for bench/eval/bench_eval.py.
# Logs and evidence go to $OUT (default build/gpu-out): test-gpu.log,
# test-gpu-evidence.tar.gz, bench-eval.log, bench-eval-report.txt,
# bench-eval-evidence.tar.gz. Exit: 0 when both passed, else 1 (2: not runnable).
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
if ! v=$("$build/kernelbot" --version 2>&1); then
	echo "run_on_runner: '$build/kernelbot --version' failed:" >&2
	echo "$v" >&2
	ldd "$build/kernelbot" >&2
	exit 2
fi
say "$v; nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo MISSING)"
py=$(sh tests/find_python.sh --torch-only)
say "python ${py:-NONE}: $("${py:-false}" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "python", sys.version.split()[0])' 2>&1 | tail -n 1); $(nproc) cores"

# --- 2. test-gpu
ev=$(mktemp -d "${TMPDIR:-/tmp}/kb-gpu-evidence.XXXXXX")
say "test-gpu ..."
KB_GPU_EVIDENCE="$ev/test-gpu" timeout -k 10 240 sh tests/run_gpu.sh >"$OUT/test-gpu.log" 2>&1
rc_test=$?
say "test-gpu exit $rc_test"
tar czf "$OUT/test-gpu-evidence.tar.gz" -C "$ev" --exclude=state test-gpu 2>/dev/null

# --- 3. bench-eval
say "bench-eval ..."
KB_REJECT_EVIDENCE="$ev/test-gpu" timeout -k 10 300 sh bench/eval/run.sh --deadline 240 ${BENCH_EVAL_ARGS:-} >"$OUT/bench-eval.log" 2>&1
rc_bench=$?
say "bench-eval exit $rc_bench"
rm -rf "$ev"

# --- 4. the two tables, last
echo
echo "================ test-gpu (exit $rc_test) ================"
sed -n '/short test summary/,$p' "$OUT/test-gpu.log" | grep -v '^SKIPPED' | tail -n 40
grep -q 'short test summary' "$OUT/test-gpu.log" || tail -n 40 "$OUT/test-gpu.log"
echo
echo "================ bench-eval (exit $rc_bench) ================"
if [ -s "$OUT/bench-eval-report.txt" ]; then
	cat "$OUT/bench-eval-report.txt"
else
	tail -n 60 "$OUT/bench-eval.log"
fi
say "done"
[ $rc_test -eq 0 ] && [ $rc_bench -eq 0 ] && exit 0
exit 1
