#!/bin/sh
# make bench-eval: the verifier's own benchmark (bench/eval/bench_eval.py).
# Backend: cuda when torch sees a GPU, else cpu (the .cpp kernels). Raw
# evidence: one tar.gz in $OUT when OUT is set, else $KB_BUILD/bench-eval/.
# Extra arguments go to bench_eval.py (--help lists them).
set -u
bench=bench-eval
. "$(dirname "$0")/../bench_env.sh"
if [ -n "${OUT:-}" ]; then
	workdir=$(mktemp -d "${TMPDIR:-/tmp}/kb-bench-eval.XXXXXX") || exit 2
	set -- --out "$OUT" "$@"
else
	workdir="$build/bench-eval"
fi
cd "$top" || exit 2
KB_TOP="$top" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
	"$py" "$top/bench/eval/bench_eval.py" --bin "$build/kernelbot" \
	--backend "$backend" --python "$py" --workdir "$workdir" "$@"
rc=$?
[ -z "${OUT:-}" ] || rm -rf "$workdir"
exit $rc
