#!/bin/sh
# GPU suites (tests/gpu, pytest): run only where an NVIDIA GPU and a torch
# that sees it exist. Without one, say so and exit 0 having run nothing.
# Output ends with pytest's summary line. KB_GPU_EVIDENCE=DIR keeps every
# evidence JSON and call log there. KB_GPU_SELECT=PATHS runs those suites
# (pytest paths or node ids) instead of all of tests/gpu.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac

py=$(sh "$top/tests/find_python.sh" --torch-only)
if [ -z "$py" ] || ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "make test-gpu: no CUDA GPU visible to torch here; nothing run"
	echo "0 passed, 0 failed, 0 skipped"
	exit 0
fi
if [ ! -d "$top/tests/gpu" ]; then
	echo "make test-gpu: no GPU suites in tests/gpu"
	echo "0 passed, 0 failed, 0 skipped"
	exit 0
fi
# pytest may be missing on a runner image; the suites then run as plain scripts
cd "$top"
if "$py" -c 'import pytest' 2>/dev/null; then
	KB_TOP="$top" KB_BIN="$build/kernelbot" KERNELBOT_PYTHON="$py" \
		PYTHONDONTWRITEBYTECODE=1 \
		"$py" -m pytest -q -rfEs -p no:cacheprovider ${KB_GPU_SELECT:-tests/gpu}
	exit $?
fi
echo "make test-gpu: pytest is not installed for $py"
exit 2
