#!/bin/sh
# Runs every test suite and ends with one line "N passed, N failed, N skipped"
# summing all of them; exits non-zero when anything failed.
#   KB_BUILD      build directory holding kernelbot and tests/ (default build)
#   KB_SANITIZE   set for the ASan/UBSan run (pytest then drives the asan binary)
#   KB_TEST_FILTER  only suites whose name contains this string
# Each suite's line comes as it finishes, with the suites done so far; the
# Python suites report each test file the same way (tests/python/kb_progress.py),
# and every skipped test is listed with its reason. What the tests write
# goes to one temporary directory (TMPDIR, pytest's basetemp, the XDG state
# dir of commands run without a config), removed at the end.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
filter=${KB_TEST_FILTER:-}
logdir="$build/test-logs"
mkdir -p "$logdir"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kb-test.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT
trap 'rm -rf "$scratch"; exit 130' INT TERM
export TMPDIR="$scratch" XDG_STATE_HOME="$scratch/state"
t0=$(date +%s)

passed=0 failed=0 skipped=0 done_suites=0
failed_suites=

# the C suites to run, and one more for pytest when it runs
suites=0
for bin in "$build"/tests/test_*; do
	[ -x "$bin" ] || continue
	case "$(basename "$bin")" in *"$filter"*) suites=$((suites + 1)) ;; esac
done

add() { # suite passed failed skipped (its name was printed when it started)
	passed=$((passed + $2)); failed=$((failed + $3)); skipped=$((skipped + $4))
	done_suites=$((done_suites + 1))
	[ "$3" -eq 0 ] || failed_suites="$failed_suites $1"
	printf '%4d passed, %d failed, %d skipped  [%d/%d suites, %d s]\n' "$2" "$3" "$4" \
		"$done_suites" "$total_suites" $(($(date +%s) - t0))
}

started() { # suite: its name now, its counts when it ends
	printf '%-28s ' "$1"
}

# "  skipped NAME: REASON" for each cmocka skip; the reason is the test's
# "kb-skip: ..." line (tests/unit/skip.h) just before it
skip_reasons() { # log
	awk '/^\[==========\] .* test\(s\) run/ { exit }   # the summary lists them again
	     /^kb-skip: / { r = substr($0, 10); next }
	     /^\[  SKIPPED \] / { n = $0; sub(/^\[  SKIPPED \] /, "", n)
	                           print "  skipped " n ": " (r != "" ? r : "no reason given"); r = "" }' "$1"
}

# --- Python suites: do they run? ---
case "pytest" in *"$filter"*) run_py=1 ;; *) run_py=0 ;; esac
if [ -n "$filter" ] && [ -n "$(ls "$top"/tests/python/*"$filter"* 2>/dev/null)" ]; then run_py=1; fi
[ -d "$top/tests/python" ] || run_py=0
total_suites=$((suites + run_py))

# --- C unit suites (cmocka) ---
for bin in "$build"/tests/test_*; do
	[ -x "$bin" ] || continue
	name=$(basename "$bin")
	case "$name" in *"$filter"*) ;; *) continue ;; esac
	log="$logdir/$name.log"
	started "$name"
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
	[ "$s" -eq 0 ] || skip_reasons "$log"
	[ "$f" -eq 0 ] || { echo "---- $name (log $log) ----"; tail -n 40 "$log"; }
done

# --- Python suites (pytest, with an interpreter that has torch) ---
if [ $run_py -eq 1 ]; then
	py=$(sh "$top/tests/find_python.sh")
	log="$logdir/pytest.log"
	if [ -z "$py" ]; then
		echo "pytest: no python3 with torch and pytest found (set KERNELBOT_PYTHON)" >"$log"
		started pytest
		add pytest 0 1 0
		cat "$log"
	else
		sel="$top/tests/python"
		case "$filter" in ""|pytest) ;; *) sel=$(ls "$top"/tests/python/*"$filter"*) ;; esac
		# a line per test file on our stdout (descriptor 3), the rest to the log
		( cd "$top" && KB_TOP="$top" KB_BIN="$build/kernelbot" KERNELBOT_PYTHON="$py" \
		  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$top/tests/python${PYTHONPATH:+:$PYTHONPATH}" \
		  KB_PROGRESS_FD=3 "$py" -m pytest -q -rs -p no:cacheprovider -p kb_progress \
		  --basetemp="$scratch/pytest" $sel ) 3>&1 >"$log" 2>&1
		rc=$?
		started pytest
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
