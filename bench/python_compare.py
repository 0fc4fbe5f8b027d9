"""python_compare.py: chorus.allreduce against a reference library, from Python, side by side.

Under mpirun the reference is mpi4py, on float32 NumPy arrays:

    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 bench/python_compare.py [--quick]

    mode     chorus                               mpi4py
    out      chorus.allreduce(x, out=y)           comm.Allreduce(x, y)
    fresh    y = chorus.allreduce(x)              y = np.empty_like(x); comm.Allreduce(x, y)
    inplace  chorus.allreduce(w, inplace=True)    comm.Allreduce(MPI.IN_PLACE, w)

Under chorusrun the reference is torch.distributed over gloo, on float32 torch CPU tensors
(torch has no out-of-place all_reduce, so its "out" and "fresh" copy first, as callers must):

    PYTHONPATH=build/python build/bin/chorusrun -np 2 /usr/bin/python3 bench/python_compare.py

    out      chorus.allreduce(x, out=y)           y.copy_(x); dist.all_reduce(y)
    fresh    y = chorus.allreduce(x)              y = x.clone(); dist.all_reduce(y)
    inplace  chorus.allreduce(w, inplace=True)    dist.all_reduce(w)

Both libraries run in the same processes on the same buffers. Method: each mode is warmed up
and its result checked once against the closed form (x = rank + 1 on every rank, so the sum is
size * (size + 1) / 2; a wrong result aborts). Then, for R rounds, each mode runs in turn
(interleaved): barrier, a loop of k iterations timed with time.perf_counter on every rank (k is
chosen per mode pair so a loop lasts ~30 ms, at least 3), and the per-iteration time is the MAX
over ranks (reduced after the loop, outside the timed region). Rank 0 prints the median over
rounds and reference/chorus (> 1: chorus is faster) as a markdown table; --csv PATH writes the
medians as rows of (bytes, mode, library, seconds). The chorus backend is printed; set
CHORUS_BACKEND to choose it. The inplace buffer w holds zeros while timed, so that repeated
sums neither overflow nor change.
"""

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

UNDER_MPI = "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ
if UNDER_MPI:
    from mpi4py import MPI  # first: chorus then bootstraps from (and shares) mpi4py's MPI
elif "CHORUS_RANK" not in os.environ:
    sys.exit(__doc__ + "\nerror: start this under mpirun or chorusrun (see above)")

import chorus  # noqa: E402

DEFAULT_SIZES = "8,64,512,4K,32K,256K,1M,4M,16M,64M"
QUICK_SIZES = "8,4K,256K,4M"
TARGET_LOOP_S = 0.03
MODES = ("out", "fresh", "inplace")


def parse_size(text):
    """'4K' -> 4096; suffixes K, M, G are binary."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


def human(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def max_over_ranks(value):
    return float(chorus.allreduce(np.array([value], dtype=np.float64), op="max")[0])


def agree_or_abort(ok, what):
    """Every rank learns whether any rank failed, so that all stop together (no hang)."""
    if max_over_ranks(0.0 if ok else 1.0) > 0:
        sys.exit(f"rank {chorus.distributed.get_config().rank}: WRONG RESULT: {what}")


def mpi_modes(nbytes, rank):
    """{mode: {library: op}} on NumPy arrays; each op returns what it wrote."""
    comm = MPI.COMM_WORLD
    x = np.full(nbytes // 4, rank + 1, dtype=np.float32)
    y = np.empty_like(x)
    w = np.empty_like(x)

    def mpi_fresh():
        z = np.empty_like(x)
        comm.Allreduce(x, z, op=MPI.SUM)
        return z

    def mpi_inplace():
        comm.Allreduce(MPI.IN_PLACE, w, op=MPI.SUM)
        return w

    ops = {
        "out": {"chorus": lambda: chorus.allreduce(x, out=y),
                "mpi4py": lambda: (comm.Allreduce(x, y, op=MPI.SUM), y)[1]},
        "fresh": {"chorus": lambda: chorus.allreduce(x), "mpi4py": mpi_fresh},
        "inplace": {"chorus": lambda: chorus.allreduce(w, inplace=True), "mpi4py": mpi_inplace},
    }
    return ops, y, w


def torch_modes(nbytes, rank):
    """{mode: {library: op}} on torch CPU tensors, against torch.distributed (gloo)."""
    import torch
    import torch.distributed as dist
    x = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
    y = torch.empty_like(x)
    w = torch.empty_like(x)

    def gloo_out():
        y.copy_(x)
        dist.all_reduce(y)
        return y

    def gloo_fresh():
        z = x.clone()
        dist.all_reduce(z)
        return z

    ops = {
        "out": {"chorus": lambda: chorus.allreduce(x, out=y), "torch.gloo": gloo_out},
        "fresh": {"chorus": lambda: chorus.allreduce(x), "torch.gloo": gloo_fresh},
        "inplace": {"chorus": lambda: chorus.allreduce(w, inplace=True),
                    "torch.gloo": lambda: (dist.all_reduce(w), w)[1]},
    }
    return ops, y, w


def init_torch(rank, size):
    """gloo over a TCPStore that rank 0 opens on a free port (port 0) and announces through
    chorus.broadcast: chorusrun's MASTER_PORT is its own store's, so env:// must not be used."""
    import datetime
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: keep gloo on loopback
    timeout = datetime.timedelta(seconds=120)
    store = None
    if rank == 0:  # not waiting for workers here: they learn the port only from the broadcast
        store = dist.TCPStore("127.0.0.1", 0, size, True, timeout, wait_for_workers=False)
    port = int(chorus.broadcast(np.array([store.port if store else 0], dtype=np.int64))[0])
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, size, False, timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)


def time_loop(op, k):
    chorus.barrier()
    start = time.perf_counter()
    for _ in range(k):
        op()
    return max_over_ranks((time.perf_counter() - start) / k)


def bench_size(nbytes, rank, size, rounds):
    """{(mode, library): median seconds per call} for one message size."""
    ops, y, w = (mpi_modes if UNDER_MPI else torch_modes)(nbytes, rank)
    expected = size * (size + 1) / 2
    loops = {}
    for mode in MODES:
        estimates = []
        for library, op in ops[mode].items():
            y[:], w[:] = -1, rank + 1  # so that a call that writes nothing fails the check
            result = np.asarray(op())  # first call: connections, first touch
            agree_or_abort(result.shape == (nbytes // 4,) and bool(np.all(result == expected)),
                           f"{library} {mode} allreduce of {human(nbytes)}")
            w[:] = 0
            op()
            estimates.append(time_loop(op, 3))
        k = max(3, math.ceil(TARGET_LOOP_S / statistics.mean(estimates)))
        loops.update({(mode, library): (op, k) for library, op in ops[mode].items()})
    samples = {key: [] for key in loops}
    for _ in range(rounds):
        for key, (op, k) in loops.items():  # interleaved: every mode and library each round
            samples[key].append(time_loop(op, k))
    return {key: statistics.median(times) for key, times in samples.items()}


def fmt(seconds):
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help=f"bytes, comma-separated (default {DEFAULT_SIZES})")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick 2)")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, 2 rounds")
    parser.add_argument("--csv", help="write the medians here (bytes, mode, library, seconds)")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in (args.sizes or (QUICK_SIZES if args.quick else
                                                    DEFAULT_SIZES)).split(",")]
    if any(s < 4 or s % 4 for s in sizes):
        parser.error("sizes must be positive multiples of 4 bytes (float32)")
    rounds = args.rounds or (2 if args.quick else 5)

    config = chorus.distributed.get_config()
    rank, size = config.rank, config.size
    if not UNDER_MPI:
        init_torch(rank, size)
    reference = "mpi4py" if UNDER_MPI else "torch.gloo"
    if rank == 0:
        backend = chorus.distributed.get_communicator().backend
        print(f"# chorus.allreduce ({backend} backend, CHORUS_BACKEND="
              f"{os.environ.get('CHORUS_BACKEND', 'unset')}) vs {reference}: {size} ranks, "
              f"float32 sum, median of {rounds} rounds, max over ranks per call; "
              f"ratio = {reference} / chorus (> 1: chorus is faster)\n", flush=True)
        cells = [f"{m} chorus | {m} {reference} | {m} ratio" for m in MODES]
        print("| size | " + " | ".join(cells) + " |")
        print("|---:|" + "---:|" * (3 * len(MODES)), flush=True)
    rows = []
    for nbytes in sizes:
        medians = bench_size(nbytes, rank, size, rounds)
        rows += [(nbytes, mode, lib, s) for (mode, lib), s in medians.items()]
        if rank == 0:
            cells = []
            for mode in MODES:
                mine, theirs = medians[(mode, "chorus")], medians[(mode, reference)]
                cells += [fmt(mine), fmt(theirs), f"{theirs / mine:.2f}"]
            print(f"| {human(nbytes)} | " + " | ".join(cells) + " |", flush=True)
    finish(rank, args.csv, "bytes,mode,library,seconds", rows)


def finish(rank, csv, header, rows):
    """Rank 0 writes `rows` (tuples of bytes, a label, library, seconds) to `csv` if given; then
    torch's group (under chorusrun) and chorus end."""
    if rank == 0 and csv:
        with open(csv, "w") as f:
            f.write(header + "\n")
            f.writelines(f"{n},{label},{lib},{s:.9g}\n" for n, label, lib, s in rows)
    if not UNDER_MPI:
        import torch.distributed as dist
        dist.destroy_process_group()
    chorus.shutdown()


if __name__ == "__main__":
    main()
