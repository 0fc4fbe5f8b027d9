#!/bin/bash
# What the always-on mismatch check (Note [Collective fingerprint]) costs on small-message latency:
# chorus-bench allreduce, 2 ranks on the shm backend, 8 B to 4 KiB, from the normal build and from
# a build of the same tree whose shm backend skips the check (CHORUS_MEASURE_WITHOUT_MISMATCH_CHECK,
# src/backend/CMakeLists.txt), five runs of each, alternating, then the medians side by side.
#
#   bench/mismatch_cost.sh [BUILD_DIR] [MEASURE_BUILD_DIR] [LAUNCHER]
#
# LAUNCHER is "chorusrun" (default) or "mpirun" (Open MPI, one core per rank where there are two).
set -euo pipefail
build=${1:-build}
measure=${2:-build-nocheck}
launcher=${3:-chorusrun}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$measure/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$measure" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCHORUS_MEASURE_WITHOUT_MISMATCH_CHECK=ON > /dev/null
fi
cmake --build "$measure" -j"$(nproc)" --target chorus-bench chorusrun > /dev/null
cmake --build "$build" -j"$(nproc)" --target chorus-bench chorusrun > /dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # build csv
  local args=(--op allreduce --min 8 --max 4K --repeats 5 --iters 2000 --warmup 200 --csv "$2")
  if [ "$launcher" = mpirun ]; then
    mpirun --allow-run-as-root --oversubscribe --mca btl self,vader --mca oob_tcp_if_include lo \
      --mca btl_tcp_if_include lo -np 2 env CHORUS_BACKEND=shm "$1/bin/chorus-bench" "${args[@]}"
  else
    CHORUS_BACKEND=shm "$1/bin/chorusrun" -np 2 "$1/bin/chorus-bench" "${args[@]}"
  fi > /dev/null
}
for i in 1 2 3 4 5; do
  run "$build" "$out/checked-$i.csv"
  run "$measure" "$out/unchecked-$i.csv"
done
/usr/bin/python3 - "$out" <<'PY'
import csv, glob, statistics, sys
def medians(kind):
    times = {}
    for path in glob.glob(f"{sys.argv[1]}/{kind}-*.csv"):
        for row in csv.DictReader(open(path)):
            times.setdefault(int(row["size_bytes"]), []).append(float(row["time_us"]))
    return {size: statistics.median(values) for size, values in times.items()}
checked, unchecked = medians("checked"), medians("unchecked")
print(f"{'size':>6} {'checked us':>11} {'unchecked us':>13} {'cost us':>8} {'cost %':>7}")
for size in sorted(checked):
    cost = checked[size] - unchecked[size]
    print(f"{size:>6} {checked[size]:>11.3f} {unchecked[size]:>13.3f} {cost:>8.3f} "
          f"{100 * cost / unchecked[size]:>6.1f}%")
PY
