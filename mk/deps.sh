#!/bin/sh
# Make sure the packages a make target needs are installed.
#   mk/deps.sh build   compilers and the -dev packages kernelbot links against
#   mk/deps.sh test    build + cmocka, torch for the reference operators, pytest,
#                      the openssl command (GitHub App JWTs in the simulator),
#                      git and a web server for the git smart-HTTP tests
#   mk/deps.sh demo    build + what the CPU backend runs (torch)
#   mk/deps.sh fuzz    build + clang and compiler-rt (libFuzzer, the sanitizers)
#   mk/deps.sh services PKG...
#                      stop and disable the services PKG ships (what an install
#                      by this script does by itself; for hosts an older one left
#                      with lighttpd running)
# Installs what is missing with apt-get (as root, else through sudo when it
# needs no password); otherwise stops and prints the exact command to run.
# The host keeps no new service: nothing a package ships is started while
# it installs (policy-rc.d), and its units are disabled afterwards (the
# git server tests run lighttpd themselves, in the foreground, as a child).
set -eu

profile=${1:-build}

# Stop and disable the systemd units and init scripts of the packages "$@"
# (installed already). Quiet when there is nothing to do.
quiet_services() {
	for pkg in "$@"; do
		units=$(dpkg -L "$pkg" 2>/dev/null | sed -n 's|^\(/usr\)\{0,1\}/lib/systemd/system/\([^/@]*\.service\)$|\2|p' | sort -u)
		for unit in $units; do
			if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
				$SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
			elif command -v deb-systemd-helper >/dev/null 2>&1; then
				$SUDO deb-systemd-helper disable "$unit" >/dev/null 2>&1 || true
			fi
			name=${unit%.service}
			if [ -x "/etc/init.d/$name" ] && command -v update-rc.d >/dev/null 2>&1; then
				$SUDO update-rc.d "$name" disable >/dev/null 2>&1 || true
			fi
			echo "mk/deps.sh: $unit (package $pkg) left stopped and disabled" >&2
		done
	done
}

if [ "$profile" = services ]; then
	shift
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO="sudo -n"
	quiet_services "$@"
	exit 0
fi

build_pkgs="gcc g++ make pkg-config git libgit2-dev libcurl4-openssl-dev libcjson-dev
libinih-dev libssl-dev libsqlite3-dev libdlpack-dev libmicrohttpd-dev libseccomp-dev bubblewrap"
run_pkgs="python3 python3-torch python3-numpy"
test_pkgs="libcmocka-dev python3-pytest lighttpd sqlite3 openssl"
fuzz_pkgs="clang libclang-rt-dev"

case "$profile" in
build) want="$build_pkgs" ;;
demo) want="$build_pkgs $run_pkgs" ;;
test) want="$build_pkgs $run_pkgs $test_pkgs" ;;
fuzz) want="$build_pkgs $fuzz_pkgs" ;;
*) echo "mk/deps.sh: unknown profile '$profile' (build, demo, test or fuzz)" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
	# Not a Debian-like system: trust pkg-config and say what we looked for.
	for pc in libgit2 libcurl libcjson inih openssl sqlite3 libmicrohttpd libseccomp; do
		pkg-config --exists "$pc" 2>/dev/null || {
			echo "mk/deps.sh: pkg-config cannot find '$pc'; install its development package" >&2
			exit 2
		}
	done
	exit 0
fi

missing=
for p in $want; do
	st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
	case "$st" in
	ii*) ;;
	*) missing="$missing $p" ;;
	esac
done
[ -z "$missing" ] && exit 0

echo "mk/deps.sh: installing missing packages:$missing" >&2
if [ "$(id -u)" = 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	SUDO="sudo -n"
else
	echo "mk/deps.sh: missing packages; run this, then make again:" >&2
	echo "  sudo apt-get update && sudo apt-get install -y$missing" >&2
	echo "  sudo sh mk/deps.sh services$missing   # no service of theirs left enabled" >&2
	exit 2
fi
export DEBIAN_FRONTEND=noninteractive
# No service of a package starts while it installs (invoke-rc.d asks
# policy-rc.d; 101: action forbidden), unless the host has a policy of its own.
policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
	policy=/usr/sbin/policy-rc.d
	printf '#!/bin/sh\n# mk/deps.sh (kernelbot) while it installs packages\nexit 101\n' |
		$SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy" || policy=
fi
trap '[ -z "$policy" ] || $SUDO rm -f "$policy"' EXIT
# Only refresh the lists when an install fails on stale or absent lists.
if ! $SUDO apt-get install -y -q $missing >&2; then
	$SUDO apt-get update -q >&2
	$SUDO apt-get install -y -q $missing >&2 || {
		echo "mk/deps.sh: apt-get could not install:$missing" >&2
		exit 2
	}
fi
# shellcheck disable=SC2086
quiet_services $missing
