#!/bin/sh
# A real git smart-HTTP server for tests: lighttpd running git-http-backend
# (Debian's packages), on 127.0.0.1 and a free port, with HTTP basic auth
# where the user is x-access-token and the password must be the token.
#
#   git-http-server.sh -r ROOT -t TOKEN [-d CONFDIR] [-p] [-f FD]
#
#   -r ROOT     GIT_PROJECT_ROOT: bare repositories ROOT/NAME.git are served
#               as URL/NAME.git
#   -t TOKEN    the token (at least 4 characters, no ':' or newline)
#   -d CONFDIR  where config, user file and logs go (created; default: a
#               temp dir removed on exit). Give one when the caller kills
#               the whole process group with SIGKILL and cleans up itself.
#   -p          private: every request needs the token (as a private GitHub
#               repository). Default: anonymous read, authenticated push.
#   -f FD       write the URL line to descriptor FD instead of stdout
#
# Prints one line, the base URL (http://127.0.0.1:PORT/git), once the server
# accepts connections, then runs until killed or its parent exits; TERM/INT
# stop lighttpd too.
# Exit status: 2 bad usage, 3 the server did not start (its log is printed
# to stderr), 77 lighttpd or git-http-backend is missing (tests skip).
set -u

root= token= confdir= private=0 fd=1 parent=$PPID
fail() { # status message
	echo "git-http-server: $2" >&2
	exit "$1"
}
while getopts r:t:d:pf: opt; do
	case $opt in
	r) root=$OPTARG ;;
	t) token=$OPTARG ;;
	d) confdir=$OPTARG ;;
	p) private=1 ;;
	f) fd=$OPTARG ;;
	*) fail 2 "usage: $0 -r ROOT -t TOKEN [-d CONFDIR] [-p] [-f FD]" ;;
	esac
done
[ -n "$root" ] && [ -d "$root" ] || fail 2 "no such directory '$root'"
case "$token" in
????*) ;;
*) fail 2 "token too short" ;;
esac
case "$token" in
*:* | *'
'* | *'"'* | *'\'*) fail 2 "token has a character the user file cannot hold" ;;
esac
case "$fd" in
[0-9] | [0-9][0-9]) ;;
*) fail 2 "bad descriptor '$fd'" ;;
esac

lighttpd=${LIGHTTPD:-/usr/sbin/lighttpd}
backend=${GIT_HTTP_BACKEND:-$(git --exec-path 2>/dev/null)/git-http-backend}
moddir=${LIGHTTPD_MODULES:-/usr/lib/lighttpd} # only checked: lighttpd knows its own
[ -x "$lighttpd" ] || fail 77 "'$lighttpd' is missing (apt-get install lighttpd)"
[ -x "$backend" ] || fail 77 "git-http-backend is missing (apt-get install git)"
[ -f "$moddir/mod_authn_file.so" ] || fail 77 "lighttpd module mod_authn_file is missing"

root=$(cd "$root" && pwd)
own_confdir=0
if [ -z "$confdir" ]; then
	confdir=$(mktemp -d "${TMPDIR:-/tmp}/kb-gitserver-XXXXXX") || exit 3
	own_confdir=1
fi
mkdir -p "$confdir/htdocs" || exit 3
confdir=$(cd "$confdir" && pwd)

pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[ $own_confdir -eq 1 ] && rm -rf "$confdir"
}
trap 'cleanup; exit 0' TERM INT HUP
trap cleanup EXIT

umask 077
printf 'x-access-token:%s\n' "$token" >"$confdir/users"

# auth.require block, included where authentication is needed
cat >"$confdir/auth.conf" <<EOF
auth.require = ( "/" => ( "method" => "basic", "realm" => "kernelbot test git",
                          "require" => "valid-user" ) )
EOF

if [ $private -eq 1 ]; then
	auth_rules='$HTTP["url"] =~ "^/git/" { include "auth.conf" }'
else
	# as git-http-backend(1) shows: anonymous fetch, authenticated push
	auth_rules='$HTTP["querystring"] =~ "service=git-receive-pack" { include "auth.conf" }
$HTTP["url"] =~ "^/git/.*/git-receive-pack$" { include "auth.conf" }'
fi

port_listening() { # port (decimal): a LISTEN socket on 127.0.0.1:port
	hex=$(printf '%04X' "$1")
	grep -q "^ *[0-9]*: 0100007F:$hex 00000000:0000 0A " /proc/net/tcp 2>/dev/null
}

tries=0
while :; do
	tries=$((tries + 1))
	if [ $tries -gt 20 ]; then
		echo "git-http-server: lighttpd did not start" >&2
		cat "$confdir/error.log" >&2 2>/dev/null
		exit 3
	fi
	n=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
	port=$((20000 + n % 40000))
	port_listening $port && continue
	cat >"$confdir/lighttpd.conf" <<EOF
server.modules = ( "mod_auth", "mod_authn_file", "mod_alias", "mod_setenv", "mod_cgi" )
server.bind = "127.0.0.1"
server.port = $port
server.document-root = "$confdir/htdocs"
server.errorlog = "$confdir/error.log"
server.max-request-size = 65536
auth.backend = "plain"
auth.backend.plain.userfile = "$confdir/users"
alias.url = ( "/git" => "$backend" )
\$HTTP["url"] =~ "^/git" {
	cgi.assign = ( "" => "" )
	setenv.set-environment = ( "GIT_PROJECT_ROOT" => "$root",
	                           "GIT_HTTP_EXPORT_ALL" => "",
	                           "PATH" => "/usr/local/bin:/usr/bin:/bin" )
}
$auth_rules
EOF
	conf=$confdir/lighttpd.conf log=$confdir/error.log
	if [ "$fd" -gt 2 ]; then
		# the server and its CGI children must not hold the URL pipe open
		eval '"$lighttpd" -D -f "$conf" </dev/null >>"$log" 2>&1 '"$fd"'>&- &'
	else
		"$lighttpd" -D -f "$conf" </dev/null >>"$log" 2>&1 &
	fi
	pid=$!
	# up when the port listens while our lighttpd lives; gone means the
	# port was taken between the check and the bind: try another
	i=0
	while [ $i -lt 100 ]; do
		kill -0 $pid 2>/dev/null || break
		port_listening $port && break
		sleep 0.05
		i=$((i + 1))
	done
	if kill -0 $pid 2>/dev/null && port_listening $port; then
		break
	fi
	kill $pid 2>/dev/null
	wait $pid 2>/dev/null
	pid=
done

url="http://127.0.0.1:$port/git"
if [ "$fd" = 1 ]; then
	echo "$url"
else
	eval "echo \"\$url\" >&$fd"
fi
# run until killed, lighttpd dies, or whoever started us is gone (a test
# that crashed must not leave a server behind)
while kill -0 "$pid" 2>/dev/null && kill -0 "$parent" 2>/dev/null; do
	sleep 0.2
done
exit 0
