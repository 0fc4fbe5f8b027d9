"""Data-parallel training of a CUDA model: chorus.torch.DistributedDataParallel against torch's
DistributedDataParallel over NCCL, in the same processes, on the same model (issue 21); with --zero
also chorus's ZeroOptimizer at those stages, with --fsdp torch's FullyShardedDataParallel.

    PYTHONPATH=build/python build/bin/chorusrun -np 2 python3 bench/gpu_train_bench.py \
        [--layers 4] [--width 2048] [--batch 256] [--steps 20] [--repeats 5] [--bucket-mb 25] \
        [--zero 1 2 3] [--zero-fused] [--fsdp]

The model: --layers Linear layers of --width units with ReLU between them, MSE loss, SGD, a batch of
--batch rows per rank. Each configuration has its own copy of the model (the same initial values)
and optimizer. Rounds alternate between the configurations (A B C, A B C, ...); in each a
configuration runs --steps steps after a device synchronize and a host barrier, timed with CUDA
events on torch's current stream (the slowest rank's time counts). The table gives the median step
time over the rounds, the ratio torch DDP / it (> 1: it is faster than torch DDP), and each
configuration's peak device memory, measured first with that configuration alone on the device:
torch.cuda.max_memory_allocated over its warm-up steps, less what was allocated before it was
built (this counts chorus's buckets: torch allocates them; cuBLAS's workspaces are allocated
before, by an untimed run). At one rank "plain torch" (no data
parallel at all) is timed too.

Ranks sharing a GPU each act as an NCCL host of their own over loopback (see gpu_allreduce.py):
their times say little in absolute terms, compare the ratios. Without a CUDA GPU or a chorus built
with NCCL the benchmark says it was skipped and exits 0.
"""

import argparse
import cProfile
import gc
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as tdist

import chorus
import chorus.distributed as dist
import chorus.torch as chorus_torch
from gpu_allreduce import init_torch_distributed, use_local_gpu


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256, help="rows per rank")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per configuration")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per configuration")
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="both DDPs' bucket size")
    parser.add_argument("--zero", type=int, nargs="*", choices=(1, 2, 3), default=[],
                        help="also chorus.torch.ZeroOptimizer at these stages (SGD)")
    parser.add_argument("--zero-fused", action="store_true",
                        help="also the --zero stages with torch.optim's fused update kernels")
    parser.add_argument("--fsdp", action="store_true",
                        help="also torch's FullyShardedDataParallel (full shard: ZeRO-3)")
    parser.add_argument("--profile", action="store_true",
                        help="then time each configuration's host side per step, and profile "
                             "chorus DP's steps (cProfile, rank 0 prints the costliest functions)")
    return parser.parse_args()


def make_model(args, device):
    torch.manual_seed(0)
    layers = []
    for i in range(args.layers):
        layers.append(torch.nn.Linear(args.width, args.width))
        if i < args.layers - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device)


LR = 1e-4


class Config:
    """One way of training the model: its wrapper and optimizer, step times and peak memory."""

    def __init__(self, name, wrap, args, device):
        self.name, self.step_ms, self.peak_bytes = name, [], 0
        self.model, self.optimizer = wrap(make_model(args, device))

    def step(self, x, y):
        self.optimizer.zero_grad()
        torch.nn.functional.mse_loss(self.model(x), y).backward()
        self.optimizer.step()


def with_sgd(model):
    return model, torch.optim.SGD(model.parameters(), lr=LR)


def wrappers(args, cfg, device):
    """(name, wrap) of every configuration: wrap(model) gives (what is trained, its optimizer)."""
    made = [("plain torch", with_sgd)] if cfg.size == 1 else []
    made.append(("chorus DP", lambda m: with_sgd(chorus_torch.DistributedDataParallel(
        m, bucket_cap_mb=args.bucket_mb))))
    made.append(("torch DDP (NCCL)", lambda m: with_sgd(torch.nn.parallel.DistributedDataParallel(
        m, device_ids=[device], bucket_cap_mb=args.bucket_mb))))
    for stage in args.zero:
        made.append((f"chorus ZeRO-{stage}", lambda m, stage=stage: (m, chorus_torch.ZeroOptimizer(
            m, optim="sgd", stage=stage, lr=LR, bucket_cap_mb=args.bucket_mb))))
    if args.zero_fused:  # the same stages with torch.optim's fused kernels for the update
        for stage in args.zero:
            made.append((f"chorus ZeRO-{stage} fused", lambda m, stage=stage: fused_zero(
                m, stage, args)))
    if args.fsdp:  # FSDP's full shard is ZeRO-3
        from torch.distributed.fsdp import FullyShardedDataParallel
        made.append(("torch FSDP (NCCL)", lambda m: with_sgd(FullyShardedDataParallel(
            m, device_id=device))))
    return made


def fused_zero(model, stage, args):
    """ZeroOptimizer (SGD) whose update runs torch.optim's fused kernel (made with it set)."""
    import chorus.torch._zero_device as engine
    engine.OPTIMIZER_KERNELS = "fused"
    try:
        return model, chorus_torch.ZeroOptimizer(model, optim="sgd", stage=stage, lr=LR,
                                                 bucket_cap_mb=args.bucket_mb)
    finally:
        engine.OPTIMIZER_KERNELS = None


def peak_memory(name, wrap, args, device, x, y):
    """The configuration's own peak device bytes over its warm-up steps, alone on the device."""
    torch.cuda.synchronize(device)
    gc.collect()  # a DDP is a reference cycle (its hooks): free the previous one's memory now
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    config = Config(name, wrap, args, device)
    for _ in range(args.warmup):
        config.step(x, y)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def timed_round(config, args, x, y, device):
    """The slowest rank's milliseconds per step over --steps steps."""
    torch.cuda.synchronize(device)
    chorus.barrier()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(args.steps):
        config.step(x, y)
    end.record()
    end.synchronize()
    mine = torch.tensor([begin.elapsed_time(end) / args.steps], dtype=torch.float64)
    return float(chorus.allreduce(mine, "max")[0])


def main():
    args = parse_args()
    cfg = dist.get_config()
    if not (torch.cuda.is_available() and chorus._chorus.gpu_backend):
        if cfg.rank == 0:
            print("gpu_train_bench: needs a CUDA GPU and chorus built with NCCL (skipped)")
        return
    device = use_local_gpu(cfg)
    init_torch_distributed(cfg, device)
    generator = torch.Generator(device=device).manual_seed(1 + cfg.rank)
    x = torch.randn(args.batch, args.width, device=device, generator=generator)
    y = torch.randn(args.batch, args.width, device=device, generator=generator)
    named = wrappers(args, cfg, device)
    # Once untimed first: torch allocates cuBLAS's workspaces (one per stream and thread, backward
    # has its own) at their first use, which would count against the first configuration.
    peak_memory(*named[0], args, device, x, y)
    peaks = [peak_memory(name, wrap, args, device, x, y) for name, wrap in named]
    configs = [Config(name, wrap, args, device) for name, wrap in named]
    for config, peak in zip(configs, peaks):
        config.peak_bytes = peak
    for config in configs:
        for _ in range(args.warmup):
            config.step(x, y)
    for _ in range(args.repeats):
        for config in configs:
            config.step_ms.append(timed_round(config, args, x, y, device))
    if cfg.rank == 0:
        report(args, cfg, configs, device)
    if args.profile:
        profile(args, cfg, configs, x, y)
    tdist.destroy_process_group()


def profile(args, cfg, configs, x, y):
    """Host microseconds per step of each configuration (up to its last enqueue, no device
    synchronize), then chorus DP's steps under cProfile."""
    for config in configs:
        torch.cuda.synchronize()
        chorus.barrier()
        started = time.perf_counter()
        for _ in range(args.steps):
            config.step(x, y)
        host_us = (time.perf_counter() - started) / args.steps * 1e6
        torch.cuda.synchronize()
        if cfg.rank == 0:
            print(f"# host time per step, {config.name}: {host_us:.0f} us", flush=True)
    chorus_dp = next(c for c in configs if c.name == "chorus DP")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.steps):
        chorus_dp.step(x, y)
    profiler.disable()
    torch.cuda.synchronize()
    if cfg.rank == 0:
        print(f"# chorus DP under cProfile, {args.steps} steps: the 25 costliest functions (own "
              "time)")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)


def report(args, cfg, configs, device):
    params = sum(p.numel() for p in configs[0].model.parameters())
    print(f"# gpu_train_bench: {cfg.size} rank(s), {torch.cuda.get_device_name(device)}, "
          f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    print(f"# model {args.layers} x Linear({args.width}) ({params / 1e6:.1f} M parameters), batch "
          f"{args.batch} per rank, SGD, buckets {args.bucket_mb} MB; {args.steps} steps per round, "
          f"median of {args.repeats} rounds")
    torch_ms = statistics.median(next(c for c in configs if c.name.startswith("torch")).step_ms)
    print(f"{'configuration':<20} {'step (ms)':>10} {'torch DDP / it':>15} {'peak memory (MiB)':>18}")
    for config in configs:
        ms = statistics.median(config.step_ms)
        print(f"{config.name:<20} {ms:>10.2f} {torch_ms / ms:>15.2f} "
              f"{config.peak_bytes / 2**20:>18.1f}", flush=True)


if __name__ == "__main__":
    main()
