#!/bin/sh
# Regenerates the LTTng-UST 2.13 fixture trace in tests/readers/lttng/trace (needs
# liblttng-ust-dev and lttng-tools; run as root, it starts a session daemon if none runs).
#   sh tests/readers/lttng/make-trace.sh [EVENTS_PER_THREAD]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'lttng destroy tpfix >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
cc -O1 -I"$here" -o "$tmp/prog" "$here/prog.c" "$here/tp.c" $(pkg-config --cflags --libs lttng-ust) -ldl -lpthread
pgrep -x lttng-sessiond >/dev/null || lttng-sessiond --daemonize --no-kernel
lttng create tpfix --output="$tmp/out" >/dev/null
lttng enable-channel -u -s tpfix --subbuf-size=4096 --num-subbuf=4 ch >/dev/null
lttng enable-event -u -s tpfix -c ch 'tpfix:*' >/dev/null
lttng add-context -u -s tpfix -c ch -t vpid -t vtid >/dev/null
lttng start tpfix >/dev/null
"$tmp/prog" "${1:-100}"
lttng stop tpfix >/dev/null
lttng destroy tpfix >/dev/null
rm -rf "$here/trace"
mkdir "$here/trace"
# one UID buffer directory: ust/uid/UID/64-bit holds metadata, index/ and the streams
src=$(dirname "$(find "$tmp/out" -name metadata | head -n 1)")
cp "$src"/metadata "$src"/ch_* "$here/trace/"
ls -l "$here/trace"
