#!/bin/sh
# `make demo`: tracepad's main jobs on the bundled example: count with its three engines, calls.
set -eu
build=${1:-build}
tp="$build/src/cli/tracepad"
demo="$build/examples/demo"
echo "== the example, natively"
"$demo"
echo
echo "== tracepad count --start sieve --by mnemonic --top 10 -- $demo   (the dbt engine: a code cache)"
"$tp" count --start sieve --by mnemonic --top 10 -- "$demo"
echo
echo "== tracepad count --engine trapflag --start sieve --by mnemonic --top 10 -- $demo"
"$tp" count --engine trapflag --start sieve --by mnemonic --top 10 -- "$demo"
echo
echo "== tracepad count --engine ptrace --start sieve --by mnemonic --top 10 -- $demo"
"$tp" count --engine ptrace --start sieve --by mnemonic --top 10 -- "$demo"
echo
echo "== tracepad count --by function --top 8 -- python3 -c pass   (whole program, from the loader's first instruction)"
"$tp" count --by function --top 8 -- /usr/bin/python3 -c pass
echo
echo "== tracepad calls -T -- $demo   (its functions and the library calls it makes)"
"$tp" calls -T -- "$demo"
echo
echo "== tracepad calls -c -e 'libc:malloc,libc:free,libc:strlen' -- gzip -9 -c $demo   (summary)"
"$tp" calls -c -e 'libc:malloc,libc:free,libc:strlen' -- gzip -9 -c "$demo" > /dev/null
echo
echo "== tracepad calls -c -e '!*' --plugin memory:depth=4 -- ls -l /   (blocks left at exit)"
"$tp" calls -c -e '!*' --plugin memory:depth=4 -- ls -l / > /dev/null
