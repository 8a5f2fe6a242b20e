#!/bin/sh
# The bot end to end without GitHub, on the local forge: a demo git
# repository made from examples/ (shrunk on the CPU backend), a pull request
# adding operators in both task formats, labelled optimize-kernel by a
# maintainer; then the daemon runs until the job ends, and this prints where
# the bot's pull request and its body are.
#
#   KB_BUILD=build sh examples/demo-bot.sh
#
#   KB_DEMO_DIR   keep everything there (default: a new temp dir, kept so
#                 the result can be read; its path is printed)
#   KB_DEMO_OPS   example names (default: fused_pointwise, as a KernelBench
#                 file, and softmax, as a robust-kbench folder)
#   KB_DEMO_FAST  1: the smallest tuning (tests)
#   KB_DEMO_REPO  an example repository of examples/repos/ (`make demo`:
#                 tinymlp): its pull request (examples/repos/scenario.sh)
#                 instead of the operators; the bot's branch then also
#                 wires the kernel into the module
# Uses the GPU when torch sees one, else the CPU backend.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${KB_BUILD:-build}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
kb="$build/kernelbot"
ops=${KB_DEMO_OPS:-"fused_pointwise softmax"}
fast=${KB_DEMO_FAST:-0}
demo_repo=${KB_DEMO_REPO:-}
head=add-operators
repo=demo/kernels

die() {
	echo "demo-bot: $*" >&2
	exit 2
}
[ -x "$kb" ] || die "no kernelbot binary at '$kb' (run make first)"
command -v git >/dev/null || die "git is missing"
py=$(sh "$top/tests/find_python.sh" --torch-only)
[ -n "$py" ] || die "no python3 with torch found; install python3-torch"
if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	backend=cuda
else
	backend=cpu
fi

work=${KB_DEMO_DIR:-}
if [ -z "$work" ]; then
	work=$(mktemp -d "${TMPDIR:-/tmp}/kernelbot-demo-bot.XXXXXX") || exit 2
fi
mkdir -p "$work" || exit 2
work=$(cd "$work" && pwd)
rm -rf "$work/state" "$work/repo" "$work/demo.git" "$work/examples"

# --- the operators: shrunk copies on the CPU (GPU sizes take minutes there) ---
src="$top/examples"
echo "== kernelbot demo: preparing a demo repository in $work ($backend backend)"
if [ $backend = cpu ] && [ -z "$demo_repo" ]; then
	# shellcheck disable=SC2086
	"$py" "$top/examples/shrink.py" --factor 64 "$work/examples" $ops >/dev/null ||
		die "could not shrink the examples"
	src="$work/examples"
fi

# --- the demo repository: main, and a branch that adds the operators ---
export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=maintainer GIT_AUTHOR_EMAIL=maintainer@example.com
export GIT_COMMITTER_NAME=maintainer GIT_COMMITTER_EMAIL=maintainer@example.com
g() { git -C "$work/repo" -c init.defaultBranch=main -c commit.gpgsign=false "$@"; }
if [ -n "$demo_repo" ]; then
	sh "$top/examples/repos/scenario.sh" "$demo_repo" "$work/repo" >/dev/null ||
		die "could not make the example repository '$demo_repo'"
	head=pr ops="examples/repos/$demo_repo"
else
mkdir -p "$work/repo" && g init -q || die "git init failed"
printf '# demo kernels\n\nOperators kernelbot optimises.\n' >"$work/repo/README.md"
g add README.md && g commit -q -m "start" || die "git commit failed"
g checkout -q -b add-operators
first=1
for op in $ops; do
	if [ $first = 1 ] && [ -f "$src/kernelbench/$op.py" ]; then
		mkdir -p "$work/repo/ops"
		cp "$src/kernelbench/$op.py" "$work/repo/ops/$op.py"
	elif [ -d "$src/robust-kbench/$op" ]; then
		mkdir -p "$work/repo/tasks"
		cp -R "$src/robust-kbench/$op" "$work/repo/tasks/$op"
	else
		die "no example '$op'"
	fi
	first=0
done
g add -A && g commit -q -m "add operators: $ops" || die "git commit failed"
g checkout -q main
fi
# the "remote" the forge serves is bare (the bot pushes its branch there)
git init -q --bare "$work/demo.git" && g push -q "$work/demo.git" main "$head" ||
	die "could not make the bare repository"

# --- the bot's config ---
if [ "$fast" = 1 ]; then
	tune="max_points = 2\nexhaustive_limit = 2\nrefine_rounds = 0\n"
	bench="warmup = 1\nmin_time_ms = 5\nmax_reps = 20\nbaselines = eager\n"
	harness="seeds = 1\nmax_configs = 2\n"
elif [ $backend = cpu ]; then
	tune="max_points = 8\nexhaustive_limit = 8\nrefine_rounds = 1\n"
	bench="warmup = 2\nmin_time_ms = 20\nmax_reps = 100\n"
	harness="seeds = 2\nmax_configs = 4\n"
else
	tune="" bench="" harness=""
fi
cfg="$work/bot.ini"
printf '[core]\nstate_dir = %s\n[harness]\npython = %s\nbackend = %s\n%b[bench]\n%b[templates]\n%b[bot]\nforge = local\nrepositories = %s\npoll_interval_s = 1\nprogress_interval_s = 2\n' \
	"$work/state" "$py" "$backend" "$harness" "$bench" "$tune" "$repo" >"$cfg"
# a tiny kernel on a small CPU can be slower than torch: open the pull
# request all the same, so the demo shows one
[ $backend = cpu ] && printf 'min_speedup = 0\n' >>"$cfg"
# a shared CPU's timings move more than 3% between processes: the band the
# pull request states (and its Reproduce command is held to) says so
[ $backend = cpu ] && printf '[report]\nnoise_band = 0.10\n' >>"$cfg"

# --- the maintainer: a pull request, labelled ---
lk() { "$kb" local -c "$cfg" "$@"; }
lk add-repo "$repo" "$work/demo.git" || die "could not register the repository"
lk permit "$repo" maintainer write || exit 2
pr=$(lk --as maintainer open-pr "$repo" "$head" main "Add operators") || die "could not open the pull request"
lk --as maintainer label "$repo" "$pr" optimize-kernel || die "could not label the pull request"

echo "== kernelbot demo: the bot on the local forge ($backend backend)"
echo "   repository $work/demo.git, pull request #$pr labelled optimize-kernel by maintainer"
echo "== kernelbot daemon (until the job ends; the log is $work/daemon.log)"

# Print what FILE gained since the last call: its lines that match PATTERN,
# each prefixed. The daemon's log and every job's run log (the progress of
# its `kernelbot run`) are followed this way, so the demo is never silent.
follow() { # file prefix pattern
	[ -f "$1" ] || return 0
	mark="$work/.shown-$(printf '%s' "$1" | cksum | cut -d' ' -f1)"
	shown=$(cat "$mark" 2>/dev/null || echo 0)
	now=$(wc -l <"$1")
	[ "$now" -gt "$shown" ] || return 0
	sed -n "$((shown + 1)),${now}p" "$1" | grep -E "$3" | sed "s|^|$2|"
	echo "$now" >"$mark"
}
follow_all() {
	follow "$work/daemon.log" "   " ' (info|warn|error) .*(job|labelled|error|warn)'
	for log in "$work"/state/jobs/*/run.log; do
		n=$(basename "$(dirname "$log")")
		# each stage as it starts, what the tuner decides, heartbeats, the end
		follow "$log" "      job $n " \
			'^(\[[a-z ]+( 0/[0-9]+)?\]|\[final check\] |\.\.\. |family |space: |refine round |cached: |verified kernel|kernelbot run: )'
	done
}
"$kb" daemon -c "$cfg" --until-idle 2>"$work/daemon.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null' INT TERM
while kill -0 $daemon 2>/dev/null; do
	follow_all
	sleep 1
done
wait $daemon
rc=$?
trap - INT TERM
follow_all
rm -f "$work"/.shown-*
[ $rc -eq 0 ] || { echo "demo-bot: the daemon failed (exit $rc)" >&2; exit 1; }
echo
"$kb" status -c "$cfg"

echo
labelled=$(lk show "$repo" "$pr")
echo "== the labelled pull request (progress comment, checks, labels): $labelled"
found=0
for md in "$work/state/local-forge/$repo/pulls/"*.md; do
	[ "$md" = "$labelled" ] && continue
	[ -f "$md" ] || continue
	found=$((found + 1))
	echo "== the bot's pull request: $md"
	sed -n '1p' "$md" | sed 's/^/   /'
	echo "   branch: $(grep -m1 '^| head |' "$md" | sed 's/^| head | //; s/ |$//')"
	# wired into the module, or why not (a kernel slower than the module's own code is not)
	grep -A2 -E "^### (Not wired|Wired) into the model" "$md" | grep -v '^$' | head -n 2 | cut -c1-300 | sed 's/^/   /'
done
if [ $found -eq 0 ]; then
	echo "demo-bot: the bot opened no pull request (see $work/daemon.log and $labelled)" >&2
	exit 1
fi
echo "== files of the bot's branch: git -C $work/demo.git ls-tree -r --name-only kernelbot/pr-$pr/<operator>"
exit 0
