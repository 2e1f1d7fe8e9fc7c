#!/bin/sh
# Installs the Debian packages tracepad needs when they are missing (as root), or prints the
# exact apt-get line and fails (as another user).  Usage: scripts/deps.sh [build|bench]
set -eu
pkgs="meson ninja-build pkg-config gcc g++ clang libzydis-dev libelf-dev libdw-dev libunwind-dev
babeltrace2 python3 coreutils gzip valgrind libc6-dbg sqlite3 pigz strace ltrace uftrace
libpython3.11-testsuite gdb"
# valgrind is in the test suite too: the memory plugin's totals are compared with memcheck's,
# also on sqlite3 and pigz (strace, ltrace, uftrace: the calls tests compare process events
# and the peers' options with them);
# libpython3.11-testsuite: CPython's own tests run under the dbt engine (tests/e2e);
# libc6-dbg: count names ld.so's and libc's functions from their debug files (tests/cli);
# gdb: tracepad debug's sessions are compared with native gdb's (tests/debug);
# bench only: LTTng-UST, gdbserver (tracepoints) and qemu-user (bench/dbt's qemu-x86_64 rows)
if [ "${1:-build}" = bench ]; then
	pkgs="$pkgs liblttng-ust-dev lttng-tools gdbserver qemu-user"
fi
missing=""
for p in $pkgs; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$st" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "tracepad: missing Debian packages; run as root:" >&2
	echo "  apt-get install -y$missing" >&2
	exit 1
fi
echo "tracepad: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends $missing >/dev/null
