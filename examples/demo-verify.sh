#!/bin/sh
# make demo-verify: the verifier alone: verify candidate kernels against
# PyTorch operators (a correct one and a reward hack), then time the correct
# one against torch.
# Uses the GPU when torch sees one, else the CPU backend.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
kb="$build/kernelbot"
cd "$top"

py=$(sh tests/find_python.sh --torch-only)
if [ -z "$py" ]; then
	echo "demo: no python3 with torch found; run 'make demo' as root or install python3-torch" >&2
	exit 2
fi
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	backend=cuda ext=cu
else
	backend=cpu ext=cpp
fi
state=$(mktemp -d "${TMPDIR:-/tmp}/kernelbot-demo.XXXXXX")
trap 'rm -rf "$state"' EXIT
cfg="$state/demo.ini"
printf '[core]\nstate_dir = %s\n[harness]\npython = %s\nbackend = %s\nseeds = 3\n' \
	"$state" "$py" "$backend" >"$cfg"

echo "== kernelbot demo ($backend backend, python $py)"
rc=0
for op in relu softmax; do
	echo
	echo "== verify tests/kernels/$backend/ok_$op.$ext against tests/operators/kb_$op.py"
	"$kb" verify -c "$cfg" "tests/operators/kb_$op.py" "tests/kernels/$backend/ok_$op.$ext" \
		--json "$state/ok_$op.json" || rc=1
done
echo
echo "== a reward hack: a kernel that returns an earlier call's result (must be rejected)"
if "$kb" verify -c "$cfg" --no-timing tests/operators/kb_relu.py "tests/kernels/$backend/hack_cached.$ext"; then
	echo "demo: the cached-result hack was NOT rejected" >&2
	rc=1
fi
echo
echo "== speedup table for softmax"
"$kb" bench -c "$cfg" tests/operators/kb_softmax.py "tests/kernels/$backend/ok_softmax.$ext" || rc=1
exit $rc
