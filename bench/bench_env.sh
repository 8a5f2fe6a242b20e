# Sourced by bench/*/run.sh, with $bench set to the target's name: sets top
# (the checkout), build ($KB_BUILD, made absolute), py (a python3 with
# torch, else exit 2) and backend (cuda when torch sees a GPU, else cpu).
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac

py=$(sh "$top/tests/find_python.sh" --torch-only)
if [ -z "$py" ]; then
	echo "$bench: no python3 with torch found (set KERNELBOT_PYTHON)" >&2
	exit 2
fi
backend=cpu
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	backend=cuda
fi
