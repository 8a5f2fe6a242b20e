#!/bin/sh
# make gpu-bundle: copy into BUILD/gpu-libs every shared library BUILD/kernelbot
# needs (ldd's whole closure) except the C runtime (glibc, libstdc++,
# libgcc_s), which every runner has and which must match its own loader.
# bubblewrap (the sandbox) goes to BUILD/gpu-bin with its libraries in
# gpu-libs. Symlinks are dereferenced: the files are stored under their soname.
# tests/gpu/run_on_runner.sh puts on LD_LIBRARY_PATH only those of them
# the runner lacks. Also checks BUILD/include/dlpack/dlpack.h is there.
set -eu
build=${1:-build}
bin="$build/kernelbot"
[ -x "$bin" ] || { echo "gpu-bundle: '$bin' is not built" >&2; exit 2; }
[ -f "$build/include/dlpack/dlpack.h" ] || { echo "gpu-bundle: '$build/include/dlpack/dlpack.h' is missing" >&2; exit 2; }
libs="$build/gpu-libs"
rm -rf "$libs"
mkdir -p "$libs"
if ldd "$bin" | grep -q 'not found'; then
	echo "gpu-bundle: ldd cannot resolve every library of '$bin':" >&2
	ldd "$bin" | grep 'not found' >&2
	exit 2
fi
# the sandbox's bubblewrap travels too (the runner may not have it), in gpu-bin/
bwrap=$(command -v bwrap || true)
[ -n "$bwrap" ] || { echo "gpu-bundle: bwrap is not installed (apt-get install bubblewrap)" >&2; exit 2; }
rm -rf "$build/gpu-bin"
mkdir -p "$build/gpu-bin"
cp -L "$bwrap" "$build/gpu-bin/bwrap"
n=0
for path in $( (ldd "$bin"; ldd "$bwrap") | awk '$2 == "=>" && $3 ~ /^\// { print $1 "=" $3 }' | sort -u); do
	soname=${path%%=*}
	file=${path#*=}
	case "$soname" in
	linux-vdso*|ld-linux*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|\
	libresolv.so.*|libutil.so.*|libstdc++.so.*|libgcc_s.so.*|libmvec.so.*|libanl.so.*|libnsl.so.*)
		continue ;;
	esac
	cp -L "$file" "$libs/$soname"
	n=$((n + 1))
done
echo "gpu-bundle: $n libraries in $libs:"
ls "$libs" | sed 's/^/  /'
# the binary must start with only these beside glibc
LD_LIBRARY_PATH="$libs" "$bin" --version >/dev/null
echo "gpu-bundle: '$bin --version' runs with LD_LIBRARY_PATH=$libs"
