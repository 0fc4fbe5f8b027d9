"""torch.distributed.all_reduce over chorus's backend against gloo, in the same processes: one job
of 2 ranks (chorusrun) makes the default group on chorus and a second group of the same ranks on
gloo, then times the two in turns, size by size, 8 B to 256 MiB of float32 (SUM).

    /usr/bin/python3 bench/torch_backend.py [--build build] [--ranks 2] [--repeats 5]
        [--min 8] [--max 256M]

For each size and repeat, each backend runs a burst of calls (enough for about 0.2 s, at least 3)
after 2 warm-up calls; a burst's time per call is the slowest rank's. The table shows the median
over the repeats, and chorus's speed against gloo's (>1: chorus faster). Bursts alternate
(chorus, gloo, chorus, gloo...) so that noise hits both alike. torch's DDP over chorus against DDP
over gloo and chorus's own DistributedDataParallel is in bench/train_bench.py.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def sizes(low, high):
    size = low
    while size <= high:
        yield size
        size *= 4 if size < (1 << 20) else 2


def burst(dist, tensor, group, calls):
    """Seconds per call of `calls` all_reduces, the slowest rank's."""
    import torch
    dist.barrier(group=group)
    started = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor, group=group)
    elapsed = torch.tensor([(time.perf_counter() - started) / calls], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
    return float(elapsed)


def worker(args):
    import importlib
    import torch
    import torch.distributed as dist
    importlib.import_module("chorus.torch")  # registers the "chorus" backend
    torch.set_num_threads(1)
    dist.init_process_group("chorus")  # env:// as chorusrun sets it
    groups = {"chorus": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    for size in sizes(args.min, args.max):
        tensor = torch.ones(max(1, size // 4), dtype=torch.float32)
        per_call = {name: [] for name in groups}
        for _ in range(args.repeats):
            for name, group in groups.items():
                burst(dist, tensor, group, 2)  # warm-up
                first = burst(dist, tensor, group, 3)
                calls = max(3, min(10000, int(0.2 / max(first, 1e-7))))
                per_call[name].append(burst(dist, tensor, group, calls))
        if dist.get_rank() == 0:
            chorus_us, gloo_us = (statistics.median(per_call[n]) * 1e6 for n in groups)
            print(f"ROW {size} {chorus_us:.2f} {gloo_us:.2f} {gloo_us / chorus_us:.2f} "
                  + " ".join(f"{t * 1e6:.1f}" for t in per_call["chorus"]) + " / "
                  + " ".join(f"{t * 1e6:.1f}" for t in per_call["gloo"]), flush=True)
    dist.destroy_process_group()


def size_text(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def driver(args):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.path.join(args.build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    command = [os.path.join(args.build, "bin", "chorusrun"), "-np", str(args.ranks),
               sys.executable, os.path.abspath(__file__), "--worker", "--repeats",
               str(args.repeats), "--min", str(args.min), "--max", str(args.max)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    print(f"torch.distributed.all_reduce (float32, SUM), {args.ranks} ranks, median of "
          f"{args.repeats} bursts; us per call\n")
    print("| size | chorus | gloo | chorus vs gloo | chorus bursts / gloo bursts |")
    print("|---:|---:|---:|---:|---|")
    for line in process.stdout:
        if "ROW " not in line:
            continue
        size, chorus_us, gloo_us, ratio, *bursts = line.split("ROW ", 1)[1].split()
        print(f"| {size_text(int(size))} | {chorus_us} | {gloo_us} | {ratio}x | "
              f"{' '.join(bursts)} |", flush=True)
    if process.wait() != 0:
        sys.exit(f"the benchmark job failed (exit {process.returncode})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="the build directory (chorusrun, python)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="bursts per size and backend (>= 3)")
    parser.add_argument("--min", type=parse_size, default=8, help="smallest size in bytes")
    parser.add_argument("--max", type=parse_size, default=256 << 20, help="largest size in bytes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
