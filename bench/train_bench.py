"""Data-parallel training throughput: 1 process, 2 independent processes, chorus DP and torch DDP
over gloo and over chorus (the torch.distributed backend), all in one session, every configuration started by chorusrun. With --zero, chorus DP
against ZeRO stages (chorus.torch.ZeroOptimizer, SGD like the others) instead, with each rank's
memory.

    /usr/bin/python3 bench/train_bench.py [--build build] [--repeats 5] [--steps 40] [--csv F]
    /usr/bin/python3 bench/train_bench.py --zero 1 2 3 [--zero-bf16]

The model (the issue's): 4 Linear layers of 1024 units (4.2 M parameters, 16.8 MB of float32
gradients), batch 64 per rank, MSE loss, SGD, one intra-op thread per rank. Every configuration
gets the same environment: OPENBLAS_NUM_THREADS=1 (and torch.set_num_threads(1)) and
GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 (glibc would
otherwise unmap freed large blocks, and a fresh page's first touch costs ~10 us on these VMs).
Runs are interleaved (A B C D, A B C D, ...) so that noise hits every configuration alike; the
table shows medians.

Samples/s counts every rank's samples. Each step's phases (zero_grad, forward, backward, optimizer
step) are timed too, and shown as medians. For chorus DP the worker also reports the communication of
one step alone (the same buckets, no compute), the part of it left exposed after backward (the
wait at the end of backward), and so the overlap: hidden / alone.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {  # name: (ranks, worker mode)
    "1 process": (1, "single"),
    "2 independent processes": (2, "independent"),
    "chorus DP, 2 ranks": (2, "chorus"),
    "chorus DP bf16 hook, 2 ranks": (2, "chorus_bf16"),
    "torch DDP (gloo), 2 ranks": (2, "gloo"),
    "torch DDP (chorus), 2 ranks": (2, "torch_chorus"),
}
ENVIRONMENT = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
}
LAYERS, WIDTH, BATCH = 4, 1024, 64
PHASES = ("zero_grad", "forward", "backward", "optimizer_step")  # timed separately, medians per rank
MEMORY = ("parameters", "gradients", "optimizer_state", "peak_buffers")  # bytes, the largest rank
ZERO_CONFIGS = {f"chorus ZeRO-{stage}{wire}, 2 ranks": (2, f"zero{stage}{wire.replace(' ', '_')}")
                for stage in (1, 2, 3) for wire in ("", " bf16")}


# ---- worker: one configuration, under chorusrun -------------------------------------------------

def make_model(torch):
    layers = []
    for i in range(LAYERS):
        layers.append(torch.nn.Linear(WIDTH, WIDTH))
        if i < LAYERS - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def torch_ddp_wrap(torch, chorus, model, backend):
    """torch DDP over `backend` (gloo, or chorus's torch.distributed backend): rank 0 picks a free
    loopback port and chorus broadcasts it."""
    import socket
    import numpy as np
    import torch.distributed as torch_dist
    port = np.zeros(1, dtype=np.int64)
    if chorus.distributed.get_config().rank == 0:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port[0] = probe.getsockname()[1]
    port = int(chorus.broadcast(port, root=0)[0])
    config = chorus.distributed.get_config()
    if backend == "chorus":
        import chorus.torch  # noqa: F401  registers the backend
    torch_dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}",
                                  rank=config.rank, world_size=config.size)
    return torch.nn.parallel.DistributedDataParallel(model)


def chorus_wrap(chorus_torch, model, bucket_mb, exposed):
    """chorus DP, timing the wait at the end of backward (the communication left exposed)."""

    class TimedDataParallel(chorus_torch.DistributedDataParallel):
        def _finalize(self):
            started = time.perf_counter()
            super()._finalize()
            exposed.append(time.perf_counter() - started)

    return TimedDataParallel(model, bucket_cap_mb=bucket_mb)


def communication_alone(ddp, repeats=10):
    """One step's bucket allreduces with no compute around them (seconds, median)."""
    reducer, times = ddp.reducer, []
    order = [i for b in range(reducer.num_buckets) for i in reducer.bucket_gradients(b)]
    for _ in range(repeats):
        started = time.perf_counter()
        for index in order:
            reducer.mark_ready(index)
        reducer.finalize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def worker(args):
    import torch
    import chorus
    import chorus.torch as chorus_torch
    torch.set_num_threads(1)
    config = chorus.distributed.get_config()
    torch.manual_seed(0)
    model = make_model(torch)
    exposed = []
    if args.worker in ("chorus", "chorus_bf16"):
        model = chorus_wrap(chorus_torch, model, args.bucket_mb, exposed)
        if args.worker == "chorus_bf16":  # issue 24: half the bytes on the wire
            import chorus.torch.hooks as hooks
            model.register_comm_hook(None, hooks.bf16_compress_hook)
    elif args.worker in ("gloo", "torch_chorus"):
        model = torch_ddp_wrap(torch, chorus, model, args.worker.replace("torch_", ""))
    if args.worker.startswith("zero"):
        optimizer = chorus_torch.ZeroOptimizer(
            model, optim="sgd", lr=1e-4, stage=int(args.worker[4]), bucket_cap_mb=args.bucket_mb,
            comm_dtype="bf16" if args.worker.endswith("_bf16") else None)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)

    phases = {name: [] for name in PHASES}

    def step():
        t0 = time.perf_counter()
        optimizer.zero_grad()
        t1 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        t2 = time.perf_counter()
        loss.backward()  # chorus DP and torch DDP: including the wait for the gradients
        t3 = time.perf_counter()
        optimizer.step()
        t4 = time.perf_counter()
        for name, begin, end in zip(PHASES, (t0, t1, t2, t3), (t1, t2, t3, t4)):
            phases[name].append(end - begin)

    for _ in range(args.warmup):
        step()
    chorus.barrier()  # every rank starts timing together (also the independent ones)
    exposed.clear()
    for times in phases.values():
        times.clear()
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = time.perf_counter() - started
    result = {"elapsed": elapsed}
    if args.worker == "chorus":
        result["exposed"] = sum(exposed) / len(exposed)
        result["alone"] = communication_alone(model)
    result.update({name: statistics.median(times) for name, times in phases.items()})
    result.update(model_state_bytes(args.worker, model, optimizer))
    keys = ("elapsed", "exposed", "alone") + PHASES + MEMORY
    every = chorus.allgather(torch.tensor([[result.get(k, 0.0) for k in keys]],
                                          dtype=torch.float64))
    if config.rank == 0:
        slowest = float(every[:, 0].max())
        print("RESULT " + json.dumps({
            "samples_per_s": config.size * BATCH * args.steps / slowest,
            "step_ms": slowest / args.steps * 1e3,
            "exposed_ms": float(every[:, 1].mean()) * 1e3,
            "alone_ms": float(every[:, 2].mean()) * 1e3,
            **{name + "_ms": float(every[:, 3 + i].mean()) * 1e3
               for i, name in enumerate(PHASES)},
            **{name + "_mb": float(every[:, 3 + len(PHASES) + i].max()) / 2**20
               for i, name in enumerate(MEMORY)},
        }), flush=True)


def model_state_bytes(mode, model, optimizer):
    """This rank's parameter, gradient and optimizer-state bytes and its peak communication
    buffers: ZeroOptimizer's memory_report(), or the parameters' and gradients' own sizes."""
    if mode.startswith("zero"):
        report = optimizer.memory_report()
        return {**report["measured"], "peak_buffers": report["peak_buffers"]}
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()
                if p.grad is not None)
    return {"parameters": params, "gradients": grads, "optimizer_state": 0, "peak_buffers": 0}


# ---- driver: every configuration, interleaved, then the table -----------------------------------

def run_config(args, ranks, mode):
    env = dict(os.environ, **ENVIRONMENT)
    env["PYTHONPATH"] = os.path.join(args.build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    command = [os.path.join(args.build, "bin", "chorusrun"), "-np", str(ranks), sys.executable,
               os.path.abspath(__file__), "--worker", mode, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--bucket-mb", str(args.bucket_mb)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    for line in done.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError(f"{mode} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")


def blas_name():
    """The library behind Debian's libblas.so.3 alternative, which torch loads."""
    return os.path.realpath("/etc/alternatives/libblas.so.3-x86_64-linux-gnu")


def print_table(results, baselines):
    base = {name: statistics.median(r["samples_per_s"] for r in results[name]) for name in baselines}
    print("| configuration | samples/s (median) | runs | step ms | "
          + " | ".join(f"vs {name}" for name in baselines) + " |")
    print("|---" * (4 + len(baselines)) + "|")
    for name, runs in results.items():
        rate = statistics.median(r["samples_per_s"] for r in runs)
        step = statistics.median(r["step_ms"] for r in runs)
        spread = ", ".join(f"{r['samples_per_s']:.0f}" for r in runs)
        print(f"| {name} | {rate:.0f} | {spread} | {step:.1f} | "
              + " | ".join(f"{rate / base[b]:.2f}x" for b in baselines) + " |")
    chorus_runs = results["chorus DP, 2 ranks"]
    alone = statistics.median(r["alone_ms"] for r in chorus_runs)
    exposed = statistics.median(r["exposed_ms"] for r in chorus_runs)
    hidden = max(0.0, alone - exposed)
    print(f"\nchorus DP communication per step: {alone:.2f} ms alone, {exposed:.2f} ms exposed "
          f"after backward: {hidden:.2f} ms hidden ({hidden / alone:.0%} overlap)")
    print("\n| phase, ms (median) | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for name in PHASES:
        cells = [statistics.median(r[name + "_ms"] for r in runs) for runs in results.values()]
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    print("\n| MB per rank | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    for name in MEMORY:
        cells = [runs[0][name + "_mb"] for runs in results.values()]
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    print(f"BLAS: {blas_name()}; environment: "
          + " ".join(f"{k}={v}" for k, v in ENVIRONMENT.items()))


def plot_phases(results, path):
    """One horizontal bar per configuration: its median phases stacked (ms), and the measured
    step (the slowest rank's) as a tick; the gap between the two is time outside the phases'
    medians (slow steps, the slower rank)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    figure, axes = plt.subplots(figsize=(9, 0.6 * len(names) + 2.2))
    left = [0.0] * len(names)
    for phase in PHASES:
        widths = [statistics.median(r[phase + "_ms"] for r in results[n]) for n in names]
        axes.barh(names, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    steps = [statistics.median(r["step_ms"] for r in results[n]) for n in names]
    axes.scatter(steps, names, marker="|", s=400, color="black", label="step (slowest rank)")
    axes.invert_yaxis()
    axes.set_xlabel("ms per step (medians over runs)")
    axes.set_title("Where a training step goes: bench/train_bench.py")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5, fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    print(f"plot written to {path}", file=sys.stderr)


def driver(args):
    if args.zero:
        wires = ("", " bf16") if args.zero_bf16 else ("",)
        configs = {"chorus DP, 2 ranks": CONFIGS["chorus DP, 2 ranks"],
                   **{f"chorus ZeRO-{k}{w}, 2 ranks": ZERO_CONFIGS[f"chorus ZeRO-{k}{w}, 2 ranks"]
                      for k in args.zero for w in wires}}
        baselines = ["chorus DP, 2 ranks"]
    else:
        configs = CONFIGS
        baselines = ["1 process", "torch DDP (gloo), 2 ranks", "chorus DP, 2 ranks"]
    results = {name: [] for name in configs}
    for repeat in range(args.repeats):
        for name, (ranks, mode) in configs.items():
            result = run_config(args, ranks, mode)
            results[name].append(result)
            print(f"run {repeat + 1}/{args.repeats} {name}: {result['samples_per_s']:.0f} "
                  f"samples/s", file=sys.stderr, flush=True)
    if args.csv:
        with open(args.csv, "w") as out:
            columns = list(next(iter(results.values()))[0])
            out.write("configuration,run," + ",".join(columns) + "\n")
            for name, runs in results.items():
                for i, r in enumerate(runs):
                    out.write(f"{name},{i}," + ",".join(f"{r[c]:.3f}" for c in columns) + "\n")
    print_table(results, baselines)
    if args.plot:
        plot_phases(results, args.plot)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="the build directory (chorusrun, python)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per configuration (>= 3)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="chorus DP bucket size")
    parser.add_argument("--csv", help="also write every run here")
    parser.add_argument("--plot", help="also draw the phases per configuration into this PNG")
    parser.add_argument("--zero", type=int, nargs="+", choices=(1, 2, 3),
                        help="compare chorus DP with these ZeRO stages instead")
    parser.add_argument("--zero-bf16", action="store_true",
                        help="with --zero: also each stage with comm_dtype='bf16'")
    parser.add_argument("--worker", choices=sorted(mode for _, mode in
                                                   {**CONFIGS, **ZERO_CONFIGS}.values()),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
