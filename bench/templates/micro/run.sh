#!/bin/sh
# Micro benchmarks of built-in template points, outside the harness: a
# kernel per point, built with plain nvcc as a native-ABI library, timed
# by a small CUDA driver (events, L2 flushed before each call).
#
#   sh bench/templates/micro/run.sh BUILD_DIR OUT_DIR [build|time]
#
# build (here, no GPU needed): renders cross_entropy points (real_cross_
#   entropy.json at 4096 x 16384 shapes; shapes come from the tensors) and
#   gelu-chain points, and compiles them and the two drivers into OUT_DIR.
# time (on the GPU; carry OUT_DIR): runs the drivers over those libraries
#   at three sizes each (cross_entropy with a written and a read L2 flush),
#   and layer_norm points (row_layernorm.json, weight and bias).
# Results of the 2026-12-02 run: bench/results/micro-rowwise-flush-h200-*.txt
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:?build dir}
out=${2:?output dir}
what=${3:-build}
here="$top/bench/templates/micro"
if [ "$what" = time ]; then
	cd "$out"
	for sz in "4096 16384" "1024 16384" "256 4096"; do
		./drv ce $sz ./ce_*.so
		RFLUSH=1 ./drv ce $sz ./ce_*.so
	done
	for sz in "4096 4096" "8192 8192" "1024 1024"; do ./drv pw $sz ./pw_*.so; done
	for sz in "8192 8192" "4096 4096" "1024 1024"; do ./drv ln $sz ./ln_*.so; done
	exit 0
fi
mkdir -p "$out"
cc -std=c11 -D_GNU_SOURCE -I"$top/bot" -I"$top" -I"$top/verifier/include" \
	$(pkg-config --cflags libcjson) -o "$out/render" "$here/render.c" "$build/libkernelbot.a" \
	$(pkg-config --libs libgit2 libcurl libcjson inih openssl sqlite3 libmicrohttpd) -lm -lpthread
nv() { nvcc -arch=sm_90 -O3 -std=c++17 -I"$top/verifier/include" "$@"; }
nv -o "$out/drv" "$here/drv.cu" -ldl
ce="$top/tests/templates/real_cross_entropy.json"
pw="$top/tests/templates/real_fused_pointwise.json"
ln="$top/tests/templates/row_layernorm.json"
for p in "64 256 8" "128 256 8" "128 256 4" "64 256 4" "32 256 4" "128 128 2"; do
	set -- $p
	KB_DATA_DIR="$top" "$out/render" "$ce" threads_per_row=$1 threads=$2 ept=$3 > "$out/ce_$1_$2_$3.cu"
done
for p in "128 1" "256 1" "512 1" "256 2"; do
	set -- $p
	KB_DATA_DIR="$top" "$out/render" "$pw" threads=$1 ept=$2 > "$out/pw_$1_$2.cu"
done
for p in "128 128 2" "256 256 1" "256 256 2" "128 256 2"; do
	set -- $p
	KB_DATA_DIR="$top" "$out/render" "$ln" threads_per_row=$1 threads=$2 ept=$3 > "$out/ln_$1_$2_$3.cu"
done
for f in "$out"/ce_*.cu "$out"/pw_*.cu "$out"/ln_*.cu; do
	nv -shared -Xcompiler -fPIC -o "${f%.cu}.so" "$f"
done
echo "built in $out: carry it to the GPU and run: sh $0 $build $out time"
