#!/bin/sh
# List every #include "ROOM/..." in bot/ and verifier/ that points against
# the direction of dependencies (ARCHITECTURE.md, "Rooms" and "Direction of
# dependencies"), as "FILE:LINE:#include ..."; exit 1 when there is one, so
# CI can run it as a check.
#   mk/include_direction.sh
# A room may include itself and the rooms named for it below; cli/ and
# main.c may include anything. A room missing here is reported, so a new
# one is placed on purpose.
set -eu

cd "$(dirname "$0")/.."

# the rooms a file of room $1 may include, besides its own
allowed() {
	case "$1" in
	core) echo "" ;;
	verifier) echo "core" ;;
	llm | forge | git) echo "core" ;;
	templates) echo "core verifier" ;;
	search) echo "core verifier llm templates" ;;
	report) echo "core verifier" ;;
	run) echo "core verifier llm templates search report" ;;
	jobs) echo "core forge git report run" ;;
	daemon) echo "core forge jobs" ;;
	cli) echo "*" ;;
	*) echo "?" ;;
	esac
}

bad=0
for f in $(find bot verifier -name '*.[ch]' | LC_ALL=C sort); do
	case "$f" in
	verifier/*) room=verifier ;;
	bot/*/*) room=${f#bot/}; room=${room%%/*} ;;
	*) continue ;; # bot/main.c
	esac
	ok=$(allowed "$room")
	[ "$ok" = "*" ] && continue
	if [ "$ok" = "?" ]; then
		echo "$f: room '$room' is not in mk/include_direction.sh"
		bad=1
		continue
	fi
	out=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$f" |
	      while IFS= read -r line; do
		target=$(printf '%s\n' "$line" | sed 's/.*include[[:space:]]*"\([a-z_]*\)\/.*/\1/')
		case " $room $ok " in
		*" $target "*) ;;
		*) printf '%s:%s\n' "$f" "$line" ;;
		esac
	      done)
	if [ -n "$out" ]; then
		printf '%s\n' "$out"
		bad=1
	fi
done
exit $bad
