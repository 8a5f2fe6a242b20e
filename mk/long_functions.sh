#!/bin/sh
# List every C function longer than a limit (default 120 lines) in bot/ and
# verifier/, longest first, as "LINES FILE:LINE NAME"; exit 1 when there is
# one, so CI can run it as a check.
#   mk/long_functions.sh [--max N] [FILE_OR_DIR...]
# A function's length runs from the first line of its declaration (return
# type included) to its closing brace. The scan counts braces outside
# comments, strings, character literals and preprocessor lines; a body is a
# "{" at file level that follows ")", so initialised tables ("= {") and
# struct definitions do not count. Files listed in mk/long_functions.skip
# (generated tables, one path a line, "#" comments) are left out.
set -eu

max=120
if [ "${1:-}" = "--max" ]; then
	max=$2
	shift 2
fi
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- bot verifier

skip=mk/long_functions.skip
files=$(find "$@" -name '*.c' -type f | LC_ALL=C sort)
if [ -f "$skip" ]; then
	files=$(printf '%s\n' "$files" | awk '
		NR == FNR { sub(/#.*/, ""); gsub(/[ \t]/, ""); if ($0 != "") skip[$0] = 1; next }
		!($0 in skip)' "$skip" -)
fi
[ -n "$files" ] || exit 0

# shellcheck disable=SC2086
out=$(awk -v max="$max" '
function reset_decl() { decl_line = 0; name = ""; pdepth = 0; lastsig = "" }
FNR == 1 { depth = 0; incomment = 0; inpp = 0; reset_decl() }
{
	line = $0
	n = length(line)
	# a preprocessor line (and its continuations) at file level
	if (!incomment && (inpp || line ~ /^[ \t]*#/)) {
		inpp = (line ~ /\\$/)
		next
	}
	ident = ""
	for (i = 1; i <= n; i++) {
		c = substr(line, i, 1)
		if (incomment) {
			if (c == "*" && substr(line, i + 1, 1) == "/") { incomment = 0; i++ }
			continue
		}
		if (c == "/" && substr(line, i + 1, 1) == "*") { incomment = 1; i++; continue }
		if (c == "/" && substr(line, i + 1, 1) == "/") break
		if (c == "\"" || c == "\047") {
			q = c
			for (i++; i <= n; i++) {
				d = substr(line, i, 1)
				if (d == "\\") { i++; continue }
				if (d == q) break
			}
			lastsig = q
			ident = ""
			continue
		}
		if (c ~ /[A-Za-z0-9_]/) {
			ident = ident c
			if (depth == 0 && !decl_line) decl_line = FNR
			lastsig = "w"
			continue
		}
		if (c ~ /[ \t]/) { if (ident != "") { lastident = ident; ident = "" } continue }
		if (ident != "") { lastident = ident; ident = "" }
		if (depth == 0) {
			if (!decl_line) decl_line = FNR
			if (c == "(") { if (pdepth == 0 && name == "") name = lastident; pdepth++ }
			else if (c == ")") pdepth--
			else if (c == ";") { reset_decl(); continue }
			else if (c == "{") {
				if (lastsig == ")" && name != "") { fstart = decl_line; fname = name; isfn = 1 }
				else isfn = 0
				depth = 1
				continue
			}
			lastsig = c
			continue
		}
		if (c == "{") depth++
		else if (c == "}") {
			depth--
			if (depth == 0) {
				if (isfn && FNR - fstart + 1 > max)
					printf "%d %s:%d %s\n", FNR - fstart + 1, FILENAME, fstart, fname
				isfn = 0
				reset_decl()
			}
		}
		lastsig = c
	}
	if (ident != "") { lastident = ident; ident = "" }
}
' $files | sort -k1,1nr -k2,2)

[ -z "$out" ] && exit 0
printf '%s\n' "$out"
exit 1
