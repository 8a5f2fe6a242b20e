#!/bin/sh
# make bench-templates: the built-in templates against torch eager and
# torch.compile per family and size (bench/templates/bench_templates.py).
# Backend: cuda when torch sees a GPU, else cpu (small sizes). With OUT set,
# the report, the raw JSON and a tar.gz of the evidence go to $OUT and the
# workdir is a temporary one; else everything stays in $KB_BUILD/bench-templates/.
# Extra arguments go to bench_templates.py (--help lists them), e.g.
# --deadline 280 on a device call with a time limit.
set -u
bench=bench-templates
. "$(dirname "$0")/../bench_env.sh"
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
