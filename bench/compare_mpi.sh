#!/bin/bash
# Runs chorus-bench --compare mpi for the collectives of docs/performance.md: allreduce, allgather,
# reduce_scatter and broadcast (float32), at 2 ranks from 8 B to 256 MiB and at 4 ranks from 8 B to
# 64 MiB, three complete runs, each with --repeats 3 and --check. Writes one CSV per (run, ranks)
# into OUT (default bench-results/), for bench/plot.py.
#
#   bench/compare_mpi.sh [BUILD_DIR] [OUT]
set -euo pipefail
build=${1:-build}
out=${2:-bench-results}
mkdir -p "$out"
mpirun_flags=(--allow-run-as-root --oversubscribe --mca btl self,vader
              --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo)
ops=allreduce,allgather,reduce_scatter,broadcast
for run in 1 2 3; do
  for np in 2 4; do
    max=256M
    [ "$np" = 4 ] && max=64M
    timeout 1800 mpirun "${mpirun_flags[@]}" -np "$np" "$build/bin/chorus-bench" --compare mpi \
      --op "$ops" --dtype float32 --min 8 --max "$max" --check --repeats 3 \
      --csv "$out/np$np-run$run.csv" > "$out/np$np-run$run.txt"
  done
done
echo "compare_mpi.sh: wrote $out/np{2,4}-run{1,2,3}.csv"
