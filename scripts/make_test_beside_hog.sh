#!/usr/bin/env bash
# Runs a clean clone's `make test` (through .ci/run, as CI does) RUNS times in a row, each beside a
# CPU hog (one busy-looping process), and stops at the first failure. Issue 16's "done when" asks
# for 10 passes in a row; each run takes 25-40 min on a 2-core machine.
#
#   scripts/make_test_beside_hog.sh [RUNS] [COMMIT]     (defaults: 1, HEAD)
#
# Each run clones this repository into a fresh temporary folder and logs to FOLDER.log; a line
# per run says the commit, the exit status and the minutes it took. Exits non-zero on a failure.
set -u
runs=${1:-1}
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse "${2:-HEAD}")
for ((i = 1; i <= runs; i++)); do
  dir=$(mktemp -d /tmp/chorus-hog-run.XXXXXX)
  git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$commit" || exit 1
  /usr/bin/python3 -c "while True: pass" &
  hog=$!
  start=$(date +%s)
  (cd "$dir" && CI=true bash .ci/run >"$dir.log" 2>&1)
  status=$?
  kill "$hog"
  echo "run $i of $runs: commit ${commit:0:7}, exit $status, $((($(date +%s) - start) / 60)) min," \
    "log $dir.log"
  if [ "$status" -ne 0 ]; then
    exit 1
  fi
  rm -rf "$dir"
done
