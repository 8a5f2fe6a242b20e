#!/bin/sh
# make bench-search: the LLM search's own overhead per candidate and
# candidates per GPU-hour against a robust-kbench-style pipeline
# (bench/search/bench_search.py), with the LLM simulator answering.
# Backend: cuda when torch sees a GPU, else cpu (a small run). Report and
# logs: $OUT when set, else $KB_BUILD/bench-search/. Extra arguments go to
# bench_search.py (--help lists them; --deadline S, default 220;
# --latency-ms 20000,2000: model calls in flight against the serial search).
set -u
bench=bench-search
. "$(dirname "$0")/../bench_env.sh"
workdir="$build/bench-search"
if [ -n "${OUT:-}" ]; then
	set -- --out "$OUT" "$@"
fi
cd "$top" || exit 2
KB_TOP="$top" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
	"$py" "$top/bench/search/bench_search.py" --bin "$build/kernelbot" \
	--backend "$backend" --python "$py" --workdir "$workdir" \
	--include "$build/include" "$@"
