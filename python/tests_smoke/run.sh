#!/bin/sh
# Quick multi-rank smoke run of the Python binding: python/tests_smoke/run.sh [build-dir]
# (the real suite is tests/python/). Fails on the first failing run.
set -e
build=${1:-build}
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
here=$(dirname "$0")
for n in 2 3 4; do
  timeout 120 "$build/bin/chorusrun" -np $n /usr/bin/python3 "$here/smoke.py"
done
timeout 120 "$build/bin/chorusrun" -np 4 /usr/bin/python3 "$here/extras.py"
timeout 60 "$build/bin/chorusrun" -np 3 /usr/bin/python3 "$here/../../examples/python/allreduce.py"
echo "python smoke: all passed"
