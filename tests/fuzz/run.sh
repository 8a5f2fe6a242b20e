#!/bin/sh
# Runs the libFuzzer targets `make fuzz` built, each for FUZZ_SECONDS, and
# ends with one line "N targets, N executions, N crashed"; exits non-zero
# when any target crashed (or could not run).
#   run.sh DIR NAME...   DIR holds fuzz_NAME (the build's fuzz folder)
#   FUZZ_SECONDS  per target (default 30)
#   FUZZ_JOBS     targets run at once (default 1)
# Each target starts from DIR/work/NAME (what earlier runs found) with a
# copy of tests/fuzz/corpus/NAME and the folders tests/fuzz/seed_dirs names
# (seeds) and tests/fuzz/regressions/NAME (inputs that once failed) added; crashes go to DIR/crashes/NAME-*, its
# output to DIR/logs/NAME.log.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${1:-}" = --one ]; then
	dir=$2 name=$3
	secs=${FUZZ_SECONDS:-30}
	log=$dir/logs/$name.log
	mkdir -p "$dir/work/$name" "$dir/crashes" "$dir/tmp" "$dir/logs" "$dir/results"
	rm -f "$dir/crashes/$name-"*
	# libFuzzer writes into the corpus it is given: it gets a copy
	cp "$top/tests/fuzz/corpus/$name/"* "$dir/work/$name/"
	if [ -d "$top/tests/fuzz/regressions/$name" ]; then
		cp "$top/tests/fuzz/regressions/$name/"* "$dir/work/$name/"
	fi
	awk -v t="$name" '$1 == t { print $2 }' "$top/tests/fuzz/seed_dirs" | while read -r d; do
		for f in "$top/$d"/*; do
			[ -f "$f" ] && cp "$f" "$dir/work/$name/$(echo "$d" | tr / _)__$(basename "$f")"
		done
	done
	dict=
	[ -f "$top/tests/fuzz/dict/$name.dict" ] && dict="-dict=$top/tests/fuzz/dict/$name.dict"
	start=$(date +%s)
	( cd "$top" && TMPDIR="$dir/tmp" \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:symbolize=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  "$dir/fuzz_$name" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$dir/crashes/$name-" $dict "$dir/work/$name" ) \
		>"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	corpus=$(ls "$dir/work/$name" | wc -l)
	crash=$(ls "$dir/crashes/$name-"* 2>/dev/null | head -n 1)
	echo "$name ${execs:-0} $corpus $rc $(( $(date +%s) - start )) ${crash:--}" >"$dir/results/$name"
	exit 0
fi

dir=$1
shift
case "$dir" in /*) ;; *) dir="$top/$dir" ;; esac
rm -rf "$dir/results"
mkdir -p "$dir/results"
printf '%s\n' "$@" | xargs -P "${FUZZ_JOBS:-1}" -n 1 sh "$0" --one "$dir"

targets=0 total=0 crashed=0
echo
printf '%-20s %12s %8s %6s  %s\n' target executions corpus secs result
for name in "$@"; do
	targets=$((targets + 1))
	if [ ! -f "$dir/results/$name" ]; then
		crashed=$((crashed + 1))
		printf '%-20s %12s %8s %6s  %s\n' "$name" - - - "did not run"
		continue
	fi
	read -r n execs corpus rc secs crash <"$dir/results/$name"
	total=$((total + execs))
	if [ "$rc" -eq 0 ]; then
		result=ok
	else
		crashed=$((crashed + 1))
		result="FAILED (exit $rc): $crash, log $dir/logs/$name.log"
	fi
	printf '%-20s %12s %8s %6s  %s\n' "$name" "$execs" "$corpus" "$secs" "$result"
done
for name in "$@"; do
	[ -f "$dir/results/$name" ] || continue
	read -r n execs corpus rc secs crash <"$dir/results/$name"
	[ "$rc" -eq 0 ] && continue
	echo "---- $name (log $dir/logs/$name.log) ----"
	grep -E 'ERROR:|SUMMARY:|invariant broken|runtime error|Test unit written|^    #[0-9] ' \
		"$dir/logs/$name.log" | grep -v -E '^    #[0-9] .* (in (__sanitizer|fuzzer::|__pthread_kill|raise|abort)|\(/lib)' |
		head -n 16
done
echo
echo "$targets targets, $total executions, $crashed crashed"
[ "$crashed" -eq 0 ]
