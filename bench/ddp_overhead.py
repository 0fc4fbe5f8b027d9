"""The per-step host cost of chorus.torch.DistributedDataParallel over plain torch, on a model so
small that its compute hardly counts: what the hooks, the bucket reductions and the end of backward
cost the training thread.

    PYTHONPATH=build/python build/bin/chorusrun -np 1 /usr/bin/python3 bench/ddp_overhead.py \
        [--device-path] [--profile]

The model: 4 Linear(16, 16) layers (8 parameters) in 4 buckets, SGD, batch 4, one thread. Rounds
of 300 steps alternate between DDP and the same model without it; the medians of 7 rounds and
their difference are printed. --device-path sends host tensors down the path CUDA models take
(DeviceBuckets and a reduction per bucket from Python, chorus.torch._ddp._DEVICE_BUCKETS_ON_HOST),
so its cost can be measured without a GPU; without it, the C++ reducer issues the buckets.
--profile adds a cProfile of DDP's steps.
"""

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

import chorus.torch as ct
import chorus.torch._ddp as ddp_module


def make_model():
    return torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device-path", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ddp_module._DEVICE_BUCKETS_ON_HOST = args.device_path
    ddp = ct.DistributedDataParallel(make_model(), bucket_cap_mb=0.0005)
    plain = make_model()
    x = torch.randn(4, 16)
    runs = {}
    for name, model in (("ddp", ddp), ("plain", plain)):
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step(model=model, optimizer=optimizer):
            optimizer.zero_grad(set_to_none=True)
            model(x).sum().backward()
            optimizer.step()
        runs[name] = (step, [])
    for _ in range(50):
        for step, _ in runs.values():
            step()
    for _ in range(7):
        for step, times in runs.values():
            started = time.perf_counter()
            for _ in range(300):
                step()
            times.append((time.perf_counter() - started) / 300 * 1e6)
    ddp_us, plain_us = (statistics.median(runs[name][1]) for name in ("ddp", "plain"))
    path = "device path (DeviceBuckets)" if args.device_path else "host path (C++ reducer)"
    print(f"{ddp.reducer.num_buckets} buckets, {path}: DDP {ddp_us:.1f} us per step, plain torch "
          f"{plain_us:.1f} us, overhead {ddp_us - plain_us:.1f} us", flush=True)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(300):
            runs["ddp"][0]()
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
        print(out.getvalue())


if __name__ == "__main__":
    main()
