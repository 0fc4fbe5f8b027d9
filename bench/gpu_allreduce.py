"""Compares chorus.allreduce with torch.distributed.all_reduce (NCCL) on CUDA tensors.

    PYTHONPATH=build/python build/bin/chorusrun -np 2 python3 bench/gpu_allreduce.py \
        [--min 8] [--max 256M] [--iters 20] [--warmup 5] [--repeats 5] [--dtype float32] \
        [--csv out.csv]

Both run in the same processes on the same buffer, in place (chorus.allreduce(x, inplace=True)
against dist.all_reduce(x)), for message sizes doubling from --min to --max bytes. Each size is
first checked for correctness (every rank fills x with rank+1; the sum must be n(n+1)/2), then
warmed up, then timed: --repeats rounds, each running a chorus loop and then a torch loop of
--iters back-to-back calls. A loop starts after a device synchronize and a host barrier and is
timed with CUDA events recorded on torch's current stream, which both libraries order their work
with; a loop's time per call is the slowest rank's elapsed / iters. The table gives the median
over the rounds and torch/chorus (> 1: chorus is faster). At the smallest size the host time of
the enqueue calls alone (time.perf_counter, no synchronize) is reported too.

Ranks sharing a GPU (more local ranks than devices) each act as an NCCL host of their own over
loopback (NCCL_HOSTID, NCCL_SOCKET_IFNAME=lo), for chorus's NCCL and torch's alike. Without a CUDA
GPU or a chorus built with NCCL the benchmark prints that it was skipped and exits 0.
"""

import argparse
import csv
import os
import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as tdist

import chorus
import chorus.distributed as dist

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text):
    """'8', '64K', '256M', '1G' (binary multiples) -> a positive number of bytes."""
    scale = SUFFIXES.get(text.strip()[-1:].upper(), 1)
    digits = text.strip()[:-1] if scale > 1 else text.strip()
    try:
        value = int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (e.g. 8, 64K, 256M, 1G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--min", type=parse_bytes, default=8, help="smallest message (bytes)")
    parser.add_argument("--max", type=parse_bytes, default=256 << 20,
                        help="largest message (bytes; K/M/G suffixes)")
    parser.add_argument("--iters", type=positive_int, default=20, help="calls per timed loop")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per size and library")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="alternating chorus/torch rounds per size")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--csv", help="also write the table to this CSV file (rank 0)")
    args = parser.parse_args()
    if args.min > args.max:
        parser.error(f"--min ({args.min}) is larger than --max ({args.max})")
    return args


def message_sizes(low, high, element_size):
    """Element counts for byte sizes low, 2*low, ... <= high (at least one element each)."""
    counts, nbytes = [], low
    while nbytes <= high:
        count = max(1, nbytes // element_size)
        if not counts or counts[-1] != count:
            counts.append(count)
        nbytes *= 2
    return counts


def use_local_gpu(cfg):
    """This rank's GPU, made current; ranks sharing a GPU each become an NCCL host of their own,
    over loopback (before NCCL starts)."""
    gpus = torch.cuda.device_count()
    if gpus < cfg.local_size:
        os.environ.setdefault("NCCL_HOSTID", f"bench-rank-{cfg.rank}")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    device = torch.device("cuda", cfg.local_rank % gpus)
    torch.cuda.set_device(device)
    return device


def init_torch_distributed(cfg, device):
    """Starts torch's NCCL process group on a port that rank 0 picks and shares through chorus."""
    port = np.zeros(1, dtype=np.int64)
    if cfg.rank == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port[0] = probe.getsockname()[1]
    port = int(chorus.broadcast(port, root=0)[0])
    tdist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=cfg.rank,
                             world_size=cfg.size, device_id=device)


def chorus_call(x):
    chorus.allreduce(x, inplace=True)


def torch_call(x):
    tdist.all_reduce(x)


IMPLEMENTATIONS = (("chorus", chorus_call), ("torch", torch_call))


def check_correct(x, size, rank):
    """Fills x with rank+1 and checks both allreduces give n(n+1)/2; every rank exits 1 if any
    rank saw a wrong result."""
    expected = size * (size + 1) / 2
    errors = []
    for name, call in IMPLEMENTATIONS:
        x.fill_(rank + 1)
        call(x)
        torch.cuda.synchronize()
        wrong = int((x.float() != expected).sum())
        if wrong:
            errors.append(f"{name}: {wrong} of {x.numel()} elements differ from {expected:g} "
                          f"(first {x[0].item():g})")
    bad = chorus.allreduce(np.array([len(errors)], dtype=np.int64), op="max")[0]
    if bad:
        for error in errors:
            print(f"gpu_allreduce: rank {rank}: WRONG RESULT at {x.numel() * x.element_size()} "
                  f"bytes, {error}", file=sys.stderr, flush=True)
        sys.exit(1)  # main() still destroys torch's process group on the way out


def time_loop(call, x, iters):
    """One timed loop: (device us per call from CUDA events, host us per enqueue call)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    chorus.barrier()
    start.record()
    host_start = time.perf_counter()
    for _ in range(iters):
        call(x)
    host_seconds = time.perf_counter() - host_start
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / iters, host_seconds * 1e6 / iters


def measure(x, args):
    """Median over the rounds of the slowest rank's per-call times, per implementation:
    {name: (device us, host us)}."""
    x.zero_()  # sums of zeros stay finite however often the buffer is reduced in place
    for _, call in IMPLEMENTATIONS:
        for _ in range(args.warmup):
            call(x)
    torch.cuda.synchronize()
    samples = np.zeros((len(IMPLEMENTATIONS), args.repeats, 2))
    for round_index in range(args.repeats):
        for index, (_, call) in enumerate(IMPLEMENTATIONS):
            samples[index, round_index] = time_loop(call, x, args.iters)
    slowest = chorus.allreduce(samples, op="max")
    return {name: tuple(statistics.median(slowest[index, :, column]) for column in range(2))
            for index, (name, _) in enumerate(IMPLEMENTATIONS)}


def header(cfg, args):
    nccl = torch.cuda.nccl.version()
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return (f"# gpu_allreduce: {torch.cuda.get_device_name()}, CUDA {torch.version.cuda}, "
            f"NCCL {nccl}, torch {torch.__version__}, {cfg.size} ranks, {args.dtype}, "
            f"iters {args.iters}, warmup {args.warmup}, repeats {args.repeats} "
            f"(median of the slowest rank; ratio = torch/chorus, > 1: chorus faster)")


def run_sweep(cfg, device, args):
    """Checks and times every size; prints the table on rank 0 and returns its rows."""
    dtype = DTYPES[args.dtype]
    element_size = torch.tensor([], dtype=dtype).element_size()
    rows, host = [], None
    if cfg.rank == 0:
        print(header(cfg, args))
        print(f"{'bytes':>12} {'chorus us':>12} {'torch us':>12} {'ratio':>8}", flush=True)
    for count in message_sizes(args.min, args.max, element_size):
        x = torch.empty(count, dtype=dtype, device=device)
        check_correct(x, cfg.size, cfg.rank)
        times = measure(x, args)
        (chorus_us, chorus_host), (torch_us, torch_host) = times["chorus"], times["torch"]
        if host is None:
            host = (count * element_size, chorus_host, torch_host)
        rows.append((count * element_size, chorus_us, torch_us, torch_us / chorus_us))
        if cfg.rank == 0:
            print(f"{rows[-1][0]:>12} {chorus_us:>12.2f} {torch_us:>12.2f} {rows[-1][3]:>8.2f}",
                  flush=True)
        del x
    if cfg.rank == 0:
        print(f"# host enqueue time per call at {host[0]} bytes: chorus {host[1]:.2f} us, "
              f"torch {host[2]:.2f} us", flush=True)
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["bytes", "chorus_us", "torch_us", "ratio_torch_over_chorus"])
        for nbytes, chorus_us, torch_us, ratio in rows:
            writer.writerow([nbytes, f"{chorus_us:.3f}", f"{torch_us:.3f}", f"{ratio:.4f}"])


def main():
    args = parse_args()
    cfg = dist.get_config()
    if not (torch.cuda.is_available() and chorus._chorus.gpu_backend):
        if cfg.rank == 0:
            print("gpu_allreduce: needs a CUDA GPU and chorus built with NCCL (skipped)",
                  flush=True)
        return 0
    device = use_local_gpu(cfg)
    init_torch_distributed(cfg, device)
    try:
        rows = run_sweep(cfg, device, args)
    finally:
        tdist.destroy_process_group()
    if cfg.rank == 0 and args.csv:
        write_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
