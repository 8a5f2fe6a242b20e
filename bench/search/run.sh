#!/bin/sh
# make bench-search: the LLM search's own overhead per candidate and
# candidates per GPU-hour against a robust-kbench-style pipeline
# (bench/search/bench_search.py), with the LLM simulator answering.
# Backend: cuda when torch sees a GPU, else cpu (a small run). Report and
# logs: $OUT when set, else $KB_BUILD/bench-search/. Extra arguments go to
# bench_search.py (--help lists them; --deadline S, default 220).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac

py=$(sh "$top/tests/find_python.sh" --torch-only)
if [ -z "$py" ]; then
	echo "bench-search: no python3 with torch found (set KERNELBOT_PYTHON)" >&2
	exit 2
fi
backend=cpu
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	backend=cuda
fi
workdir="$build/bench-search"
if [ -n "${OUT:-}" ]; then
	set -- --out "$OUT" "$@"
fi
cd "$top" || exit 2
KB_TOP="$top" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
	"$py" "$top/bench/search/bench_search.py" --bin "$build/kernelbot" \
	--backend "$backend" --python "$py" --workdir "$workdir" \
	--include "$build/include" "$@"
