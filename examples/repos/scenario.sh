#!/bin/sh
# An example repository as a pull request: a git repository at DEST whose
# main branch is the example without the files of its pr-files.txt (the
# base), and a branch `pr` that adds them (the head).
#
#   sh examples/repos/scenario.sh tinymlp /tmp/tinymlp-repo
set -eu
here=$(cd "$(dirname "$0")" && pwd)
name=${1:?usage: scenario.sh EXAMPLE DEST}
dest=${2:?usage: scenario.sh EXAMPLE DEST}
src="$here/$name"
[ -f "$src/pr-files.txt" ] || { echo "scenario.sh: no example '$name' in $here" >&2; exit 2; }
[ ! -e "$dest" ] || { echo "scenario.sh: '$dest' exists" >&2; exit 2; }
export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=maintainer GIT_AUTHOR_EMAIL=maintainer@example.com
export GIT_COMMITTER_NAME=maintainer GIT_COMMITTER_EMAIL=maintainer@example.com
g() { git -C "$dest" -c init.defaultBranch=main -c commit.gpgsign=false "$@"; }
mkdir -p "$dest"
(cd "$src" && find . -type f ! -name pr-files.txt ! -path '*__pycache__*' | while read -r f; do
	mkdir -p "$dest/$(dirname "$f")" && cp "$f" "$dest/$f"
done)
g init -q
# the base: everything but the pull request's files
while read -r f; do rm "$dest/$f"; done <"$src/pr-files.txt"
g add -A && g commit -q -m "base"
g checkout -q -b pr
while read -r f; do mkdir -p "$dest/$(dirname "$f")" && cp "$src/$f" "$dest/$f"; done <"$src/pr-files.txt"
g add -A && g commit -q -m "$name: the pull request"
g checkout -q main
echo "$dest: main is the base, branch pr the pull request ($(wc -l <"$src/pr-files.txt") files)"
