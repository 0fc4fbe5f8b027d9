#!/usr/bin/env bash
# What recording costs (docs/observability.md, "Cost"): the 8 B allreduce latency on 2 ranks with
# the flight recorder off (CHORUS_RECORDER_SIZE=0), on (the default), and on with a timeline
# recording (chorus-bench --trace), each run REPEATS times in turns so that noise hits all three
# alike; prints each configuration's runs and median in microseconds. Each rank runs on a core of
# its own (taskset): migrations, and on a VM the host's placement of the two, otherwise vary a run
# by more than the 2% and 5% being measured.
#
#     bench/trace_cost.sh [BUILD_DIR=build] [REPEATS=3] [ITERS=20000]
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
iters=${3:-20000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
configs=(off on trace)
for ((repeat = 0; repeat < repeats; repeat++)); do
  for config in "${configs[@]}"; do
    args=(--op allreduce --min 8 --max 8 -n "$iters" -w 2000 --csv "$work/$config.$repeat.csv")
    env=()
    case $config in
      off) env=(CHORUS_RECORDER_SIZE=0) ;;
      trace) args+=(--trace "$work/trace.json") ;;
    esac
    env "${env[@]}" "$build/bin/chorusrun" -np 2 bash -c 'exec taskset -c "$CHORUS_RANK" "$@"' pin \
      "$build/bin/chorus-bench" "${args[@]}" >/dev/null
  done
done
/usr/bin/python3 - "$work" "$repeats" <<'PY'
import csv, statistics, sys
work, repeats = sys.argv[1], int(sys.argv[2])
medians = {}
for config in ("off", "on", "trace"):
    runs = []
    for repeat in range(repeats):
        with open(f"{work}/{config}.{repeat}.csv") as stream:
            runs.append(float(next(csv.DictReader(stream))["time_us"]))
    medians[config] = statistics.median(runs)
    print(f"{config:6s} runs {' '.join(f'{r:.3f}' for r in runs)} us; median {medians[config]:.3f} us"
          f"; {medians[config] / medians['off']:.3f}x recorder off")
PY
