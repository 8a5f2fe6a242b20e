#!/bin/sh
# Runs every test suite and ends with one line "N passed, N failed, N skipped"
# summing all of them; exits non-zero when anything failed.
#   KB_BUILD      build directory holding kernelbot and tests/ (default build)
#   KB_SANITIZE   set for the ASan/UBSan run (pytest then drives the asan binary)
#   KB_TEST_FILTER  only suites whose name contains this string
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
filter=${KB_TEST_FILTER:-}
logdir="$build/test-logs"
mkdir -p "$logdir"

passed=0 failed=0 skipped=0
failed_suites=

add() { # suite passed failed skipped
	passed=$((passed + $2)); failed=$((failed + $3)); skipped=$((skipped + $4))
	[ "$3" -eq 0 ] || failed_suites="$failed_suites $1"
	printf '%-28s %4d passed, %d failed, %d skipped\n' "$1" "$2" "$3" "$4"
}

# --- C unit suites (cmocka) ---
for bin in "$build"/tests/test_*; do
	[ -x "$bin" ] || continue
	name=$(basename "$bin")
	case "$name" in *"$filter"*) ;; *) continue ;; esac
	log="$logdir/$name.log"
	( cd "$top" && KB_TOP="$top" KB_BIN="$build/kernelbot" "$bin" ) >"$log" 2>&1
	rc=$?
	p=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test.*/\1/p' "$log" | tail -n 1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | tail -n 1)
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) test.*/\1/p' "$log" | tail -n 1)
	p=${p:-0} f=${f:-0} s=${s:-0}
	# a crash, a sanitizer report or a summary-less exit is a failure of its own
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	if [ -z "$(sed -n '/^\[==========\] .* test(s) run/p' "$log")" ] && [ "$f" -eq 0 ]; then f=1; fi
	add "$name" "$p" "$f" "$s"
	[ "$f" -eq 0 ] || { echo "---- $name (log $log) ----"; tail -n 40 "$log"; }
done

# --- Python suites (pytest, with an interpreter that has torch) ---
case "pytest" in *"$filter"*) run_py=1 ;; *) run_py=0 ;; esac
if [ -n "$filter" ] && [ -n "$(ls "$top"/tests/python/*"$filter"* 2>/dev/null)" ]; then run_py=1; fi
if [ $run_py -eq 1 ] && [ -d "$top/tests/python" ]; then
	py=$(sh "$top/tests/find_python.sh")
	log="$logdir/pytest.log"
	if [ -z "$py" ]; then
		echo "pytest: no python3 with torch and pytest found (set KERNELBOT_PYTHON)" >"$log"
		add pytest 0 1 0
		cat "$log"
	else
		sel="$top/tests/python"
		case "$filter" in ""|pytest) ;; *) sel=$(ls "$top"/tests/python/*"$filter"*) ;; esac
		( cd "$top" && KB_TOP="$top" KB_BIN="$build/kernelbot" KERNELBOT_PYTHON="$py" \
		  PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -q -p no:cacheprovider $sel ) >"$log" 2>&1
		rc=$?
		last=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$log" | tail -n 1)
		p=$(echo "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
		f=$(echo "$last" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
		e=$(echo "$last" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+')
		s=$(echo "$last" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+')
		p=${p:-0} f=$(( ${f:-0} + ${e:-0} )) s=${s:-0}
		# exit 5: nothing collected; anything else non-zero without counts is a failure
		if [ $rc -ne 0 ] && [ $rc -ne 5 ] && [ "$f" -eq 0 ]; then f=1; fi
		add pytest "$p" "$f" "$s"
		[ "$f" -eq 0 ] || { echo "---- pytest (log $log) ----"; tail -n 60 "$log"; }
	fi
fi

echo
[ -z "$failed_suites" ] || echo "failing suites:$failed_suites"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
