#!/bin/sh
# Print the path of a python3 that can import torch (and pytest when asked
# with --pytest, the default), or nothing. Debian's python3-torch installs
# for /usr/bin/python3, which need not be the python3 first on PATH.
want="import torch, pytest"
[ "${1:-}" = "--torch-only" ] && want="import torch"
for py in "${KERNELBOT_PYTHON:-}" python3 /usr/bin/python3 /usr/local/bin/python3 python; do
	[ -n "$py" ] || continue
	path=$(command -v "$py" 2>/dev/null) || continue
	if "$path" -c "$want" >/dev/null 2>&1; then
		echo "$path"
		exit 0
	fi
done
exit 0
