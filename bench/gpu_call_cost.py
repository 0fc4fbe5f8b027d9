"""What one 8-byte allreduce of a CUDA tensor costs the calling Python thread: chorus against
torch.distributed over NCCL, and where chorus's time goes (cProfile).

    PYTHONPATH=build/python build/bin/chorusrun -np N python3 bench/gpu_call_cost.py [--iters 2000]

The first GPU run (docs/performance_gpu.md) saw chorus take 189 us per call to enqueue, torch 61 us,
with two ranks sharing one GPU. On one rank this isolates the host side (no peer, no host check);
on two it adds chorus's host fingerprint check and NCCL's transport. Ranks sharing a GPU each act
as an NCCL host of their own over loopback, as in bench/gpu_allreduce.py.

Each library runs 15 loops of --iters calls on the same tensor, in place. A loop is timed on the
host up to its last enqueue, and again after a device synchronize and a host barrier. Rank 0
prints the medians in microseconds per call. Then one more chorus loop runs under cProfile, and
rank 0 prints its 15 costliest functions (own time). Without a CUDA GPU or a chorus built with
NCCL it prints that it was skipped and exits 0.
"""

import argparse
import cProfile
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as tdist

import chorus
import chorus.distributed as dist
from gpu_allreduce import init_torch_distributed, use_local_gpu  # bench/, beside this file


def time_loops(call, iters):
    enqueue, done = [], []
    for _ in range(15):
        torch.cuda.synchronize()
        chorus.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            call()
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        end = time.perf_counter()
        enqueue.append((enqueued - start) / iters * 1e6)
        done.append((end - start) / iters * 1e6)
    return statistics.median(enqueue), statistics.median(done)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000, help="calls per timed loop")
    args = parser.parse_args()
    cfg = dist.get_config()
    if not (torch.cuda.is_available() and chorus._chorus.gpu_backend):
        if cfg.rank == 0:
            print("gpu_call_cost: needs a CUDA GPU and chorus built with NCCL (skipped)")
        return
    device = use_local_gpu(cfg)
    x = torch.ones(2, device=device)
    init_torch_distributed(cfg, device)
    chorus.allreduce(x, inplace=True, synchronize=True)  # NCCL communicators up, outside the timing
    tdist.all_reduce(x)
    torch.cuda.synchronize()
    rows = [("chorus", lambda: chorus.allreduce(x, inplace=True)),
            ("torch", lambda: tdist.all_reduce(x))]
    if cfg.rank == 0:
        print(f"# 8-byte allreduce of a CUDA tensor, {cfg.size} rank(s), {args.iters} calls per "
              "loop, median of 15 loops (us per call)")
        print(f"# {'library':<8} {'enqueue':>10} {'done':>10}")
    for name, call in rows:
        enqueue, done = time_loops(call, args.iters)
        if cfg.rank == 0:
            print(f"  {name:<8} {enqueue:10.2f} {done:10.2f}", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.iters):
        chorus.allreduce(x, inplace=True)
    profile.disable()
    torch.cuda.synchronize()
    if cfg.rank == 0:
        print(f"# chorus under cProfile, {args.iters} calls: the 15 costliest functions (own time)")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(15)
    chorus.barrier()
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
