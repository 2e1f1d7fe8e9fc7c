#!/bin/sh
# What `make bench` runs: every benchmark of bench/, each printing its ratios to its peers.
# Usage: sh bench/run.sh BUILDDIR
set -eu
build=${1:-build}
dir=$(dirname "$0")
status=0
python3 "$dir/count.py" "$build" || status=1
python3 "$dir/trace/trace.py" "$build" || status=1
python3 "$dir/markers/markers.py" "$build" || status=1
python3 "$dir/tracepoints/tracepoints.py" "$build" || status=1
python3 "$dir/calls/calls.py" "$build" || status=1
python3 "$dir/calls/memory.py" "$build" || status=1
python3 "$dir/dbt/dbt.py" "$build" || status=1
exit $status
