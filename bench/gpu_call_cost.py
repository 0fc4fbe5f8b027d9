"""What one 8-byte allreduce of a CUDA tensor costs the calling Python thread: chorus against
torch.distributed over NCCL, on one rank, and where chorus's time goes (cProfile).

    PYTHONPATH=build/python build/bin/chorusrun -np 1 python3 bench/gpu_call_cost.py [--iters 2000]

The first GPU run (docs/performance_gpu.md) saw chorus take 189 us per call to enqueue, torch 61 us,
with two ranks sharing one GPU. This isolates the host side: one rank, no peer. Each library runs
15 loops of --iters calls on the same tensor, in place. A loop is timed on the host up to its last
enqueue, and again after a device synchronize. The medians are in microseconds per call. Then one
more chorus loop runs under cProfile, which prints its 15 costliest functions (own time). Without a
CUDA GPU or a chorus built with NCCL it prints that it was skipped and exits 0.
"""

import argparse
import cProfile
import pstats
import socket
import statistics
import sys
import time

import torch
import torch.distributed as tdist

import chorus
import chorus.distributed as dist


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_loops(call, iters):
    enqueue, done = [], []
    for _ in range(15):
        torch.cuda.synchronize()
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
    if dist.get_config().size != 1:
        sys.exit("gpu_call_cost: run it on one rank (chorusrun -np 1)")
    if not (torch.cuda.is_available() and chorus._chorus.gpu_backend):
        print("gpu_call_cost: needs a CUDA GPU and chorus built with NCCL (skipped)")
        return
    x = torch.ones(2, device="cuda:0")
    tdist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                             world_size=1, device_id=x.device)
    chorus.allreduce(x, inplace=True, synchronize=True)  # NCCL communicators up, outside the timing
    tdist.all_reduce(x)
    torch.cuda.synchronize()
    rows = [("chorus", lambda: chorus.allreduce(x, inplace=True)),
            ("torch", lambda: tdist.all_reduce(x))]
    print(f"# 8-byte allreduce of a CUDA tensor, 1 rank, {args.iters} calls per loop, median of 15"
          " loops (us per call)")
    print(f"# {'library':<8} {'enqueue':>10} {'done':>10}")
    for name, call in rows:
        enqueue, done = time_loops(call, args.iters)
        print(f"  {name:<8} {enqueue:10.2f} {done:10.2f}")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.iters):
        chorus.allreduce(x, inplace=True)
    profile.disable()
    torch.cuda.synchronize()
    print(f"# chorus under cProfile, {args.iters} calls: the 15 costliest functions (own time)")
    pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(15)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
