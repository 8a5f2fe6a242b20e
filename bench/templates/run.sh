#!/bin/sh
# make bench-templates: the built-in templates against torch eager and
# torch.compile per family and size (bench/templates/bench_templates.py).
# Backend: cuda when torch sees a GPU, else cpu (small sizes). With OUT set,
# the report, the raw JSON and a tar.gz of the evidence go to $OUT and the
# workdir is a temporary one; else everything stays in $KB_BUILD/bench-templates/.
# Extra arguments go to bench_templates.py (--help lists them), e.g.
# --deadline 280 on a device call with a time limit.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac

py=$(sh "$top/tests/find_python.sh" --torch-only)
if [ -z "$py" ]; then
	echo "bench-templates: no python3 with torch found (set KERNELBOT_PYTHON)" >&2
	exit 2
fi
backend=cpu
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	backend=cuda
fi
if [ -n "${OUT:-}" ]; then
	workdir=$(mktemp -d "${TMPDIR:-/tmp}/kb-bench-templates.XXXXXX") || exit 2
	set -- --out "$OUT" "$@"
else
	workdir="$build/bench-templates"
fi
cd "$top" || exit 2
KB_TOP="$top" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
	"$py" "$top/bench/templates/bench_templates.py" --bin "$build/kernelbot" \
	--backend "$backend" --python "$py" --workdir "$workdir" "$@"
rc=$?
[ -z "${OUT:-}" ] || rm -rf "$workdir"
exit $rc
