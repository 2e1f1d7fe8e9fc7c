#!/bin/sh
# `make demo`: tracepad's main job on the bundled example, with both engines.
set -eu
build=${1:-build}
tp="$build/src/cli/tracepad"
demo="$build/examples/demo"
echo "== the example, natively"
"$demo"
echo
echo "== tracepad count --engine trapflag --start sieve --by mnemonic --top 10 -- $demo"
"$tp" count --engine trapflag --start sieve --by mnemonic --top 10 -- "$demo"
echo
echo "== tracepad count --engine ptrace --start sieve --by mnemonic --top 10 -- $demo"
"$tp" count --engine ptrace --start sieve --by mnemonic --top 10 -- "$demo"
echo
echo "== tracepad count --by function --top 8 -- /bin/true   (whole program; the start-up is stepped by ptrace)"
"$tp" count --by function --top 8 -- /bin/true
