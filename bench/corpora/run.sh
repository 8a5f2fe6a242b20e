#!/bin/sh
# make bench-corpora: external kernel corpora through the verifier
# (bench/corpora/corpora.py; --help lists its arguments). The checkouts
# come as arguments (--robust-kbench DIR --kernelbench DIR --leaderboard
# DIR); a GPU is needed for their CUDA kernels. Report and evidence go to
# $OUT when set, else $KB_BUILD/bench-corpora/.
set -u
bench=bench-corpora
. "$(dirname "$0")/../bench_env.sh"
if [ "$backend" != cuda ]; then
	echo "$bench: the corpora are CUDA kernels and torch in '$py' sees no GPU; nothing run"
	exit 0
fi
out=${OUT:-$build/bench-corpora}
workdir=$(mktemp -d "${TMPDIR:-/tmp}/kb-corpora.XXXXXX") || exit 2
cd "$top" || exit 2
KB_TOP="$top" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
	"$py" "$top/bench/corpora/corpora.py" --bin "$build/kernelbot" --python "$py" \
	--workdir "$workdir" --out "$out" "$@"
rc=$?
rm -rf "$workdir"
exit $rc
