"""uneven_compare.py: chorus's uneven all_to_all and allgather against a reference library.

Under mpirun the reference is mpi4py, on float32 NumPy arrays of shape (rows, 64):

    PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 bench/uneven_compare.py [--quick]

    all_to_all     y, received = chorus.all_to_all(x, splits=splits)
      mpi4py         comm.Alltoallv([x, sends, MPI.FLOAT], [y, recvs, MPI.FLOAT]), recvs handed in
      mpi4py+counts  comm.Alltoall(splits, received), then the same Alltoallv
    allgather      y = chorus.allgather(x, uneven=True)
      mpi4py         comm.Allgatherv([x, MPI.FLOAT], [y, counts, MPI.FLOAT]), counts handed in
      mpi4py+counts  comm.Allgather(rows, counts), then the same Allgatherv

Under chorusrun the reference is torch.distributed over gloo, on float32 torch CPU tensors:

    PYTHONPATH=build/python build/bin/chorusrun -np 2 /usr/bin/python3 bench/uneven_compare.py

    all_to_all     torch.gloo: dist.all_to_all_single(y, x, received, splits), received handed in;
                   gloo+counts: an all_to_all_single of the int64 splits first
    allgather      torch has no uneven all_gather, so this is what torch users write:
                   gloo padded: x padded to the longest rank's rows, dist.all_gather into a list,
                   torch.cat of each rank's rows, the counts handed in;
                   gloo padded+counts: a dist.all_gather of the int64 row count first

chorus learns what it receives inside the call (its exchange of counts is in its time), so the
"+counts" columns, which exchange the counts as a caller must, are the fair comparison; the others
show what that exchange costs. Every result is a new array (chorus returns one), so the references
allocate theirs on each call too.

Shapes: rank q sends rows_for(q, p) = base * (1 + (q + 2p) % 3) rows to rank p (every pair
differs from its reverse, none is empty); for allgather rank r contributes base * (r + 1) rows.
Rows are 256 B; base is picked so that the mean bytes a rank sends is near the size asked for,
and the table's size column is that mean. Row k from q to p holds q*4096 + p*64 + k % 64 in every
column (allgather: r*4096 + k % 4096), exact in float32.

Method (as bench/python_compare.py, whose helpers this imports): each library's result is checked
once against the closed form (its output buffer filled with -1 first, received counts too; a
wrong result aborts on every rank), then for R rounds each library runs in turn (interleaved):
barrier, a loop of k calls (~30 ms, at least 3) timed on every rank, the per-call time the MAX
over ranks. Rank 0 prints the median over rounds and reference / chorus (> 1: chorus is faster),
one markdown table per collective; --csv PATH writes rows of (bytes, op, library, seconds).
"""

import argparse
import math
import os
import statistics
import sys

import numpy as np

if not any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "CHORUS_RANK")):
    sys.exit(__doc__ + "\nerror: start this under mpirun or chorusrun (see above)")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_compare import (UNDER_MPI, agree_or_abort, finish, fmt, init_torch,  # noqa: E402
                            parse_size, time_loop)

if UNDER_MPI:
    from mpi4py import MPI  # noqa: E402
import chorus  # noqa: E402

DEFAULT_SIZES = "1K,8K,64K,512K,1M,8M"
QUICK_SIZES = "1K,64K,1M"
TARGET_LOOP_S = 0.03
WIDTH = 64  # float32 columns: 256 B a row
ROW_BYTES = WIDTH * 4
OPS = ("all_to_all", "allgather")
POISON = {"on": False}  # while checking, new outputs start as -1 (so writing nothing fails)


def new_output(shape, like=None):
    """np.empty (torch.empty when `like` is a tensor), or -1s while the result is checked."""
    if like is None:
        return np.full(shape, -1, np.float32) if POISON["on"] else np.empty(shape, np.float32)
    import torch
    return torch.full(shape, -1.0) if POISON["on"] else torch.empty(shape, dtype=like.dtype)


def rows_block(value0, rows, period):
    """rows x WIDTH float32: row k holds value0 + k % period."""
    col = (value0 + np.arange(rows) % period).astype(np.float32)
    return np.ascontiguousarray(np.broadcast_to(col[:, None], (rows, WIDTH)))


def approx(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= 0.9 * scale:  # 1023.6 KiB reads 1 MiB
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def all_to_all_case(nbytes, rank, size):
    """(x, splits, received, expected y, mean bytes a rank sends)."""
    def rows_for(q, p, base):
        return base * (1 + (q + 2 * p) % 3)
    mean_factor = statistics.mean(rows_for(q, p, 1) for q in range(size) for p in range(size))
    base = max(1, round(nbytes / (ROW_BYTES * size * mean_factor)))
    splits = [rows_for(rank, p, base) for p in range(size)]
    received = [rows_for(q, rank, base) for q in range(size)]
    x = np.concatenate([rows_block(rank * 4096 + p * 64, n, 64) for p, n in enumerate(splits)])
    y = np.concatenate([rows_block(q * 4096 + rank * 64, n, 64) for q, n in enumerate(received)])
    return x, splits, received, y, base * mean_factor * size * ROW_BYTES


def allgather_case(nbytes, rank, size):
    """(x, rows of every rank, expected y, mean bytes a rank sends)."""
    base = max(1, round(nbytes / (ROW_BYTES * (size + 1) / 2)))
    counts = [base * (r + 1) for r in range(size)]
    y = np.concatenate([rows_block(r * 4096, n, 4096) for r, n in enumerate(counts)])
    return rows_block(rank * 4096, counts[rank], 4096), counts, y, sum(counts) / size * ROW_BYTES


def mpi_ops(op, case):
    """{library: call} for mpi4py: the given-counts and the exchange-counts variants."""
    comm, f = MPI.COMM_WORLD, MPI.FLOAT
    if op == "all_to_all":
        x, splits, received, _, _ = case
        sends = np.array(splits, np.int64)

        def alltoallv(recv):
            y = new_output((sum(recv), WIDTH))
            comm.Alltoallv([x, [n * WIDTH for n in splits], f], [y, [n * WIDTH for n in recv], f])
            return y

        def with_counts():
            recv = np.full(len(splits), -1, np.int64)
            comm.Alltoall(sends, recv)
            return alltoallv(recv.tolist())
        return {"chorus": lambda: chorus.all_to_all(x, splits=splits),
                "mpi4py": lambda: alltoallv(received), "mpi4py+counts": with_counts}
    x, counts, _, _ = case
    mine = np.array([len(x)], np.int64)

    def allgatherv(rows):
        y = new_output((sum(rows), WIDTH))
        comm.Allgatherv([x, f], [y, [n * WIDTH for n in rows], f])
        return y

    def with_counts():
        every = np.full(comm.size, -1, np.int64)
        comm.Allgather(mine, every)
        return allgatherv(every.tolist())
    return {"chorus": lambda: chorus.allgather(x, uneven=True),
            "mpi4py": lambda: allgatherv(counts), "mpi4py+counts": with_counts}


def torch_ops(op, case):
    """{library: call} for torch.distributed over gloo, on torch CPU tensors."""
    import torch
    import torch.distributed as dist
    if op == "all_to_all":
        x, splits, received = torch.from_numpy(case[0]), case[1], case[2]
        sends = torch.tensor(splits, dtype=torch.int64)

        def alltoallv(recv):
            y = new_output((sum(recv), WIDTH), x)
            dist.all_to_all_single(y, x, output_split_sizes=recv, input_split_sizes=splits)
            return y

        def with_counts():
            recv = torch.full_like(sends, -1)
            dist.all_to_all_single(recv, sends)
            return alltoallv(recv.tolist())
        return {"chorus": lambda: chorus.all_to_all(x, splits=splits),
                "torch.gloo": lambda: alltoallv(received), "gloo+counts": with_counts}
    x, counts = torch.from_numpy(case[0]), case[1]

    def padded(rows):
        longest = max(rows)
        mine = x if len(x) == longest else torch.cat((x, x.new_zeros((longest - len(x), WIDTH))))
        parts = [new_output((longest, WIDTH), x) for _ in rows]
        dist.all_gather(parts, mine)
        return torch.cat([part[:n] for part, n in zip(parts, rows)])

    def with_counts():
        every = [torch.full((1,), -1, dtype=torch.int64) for _ in counts]
        dist.all_gather(every, torch.tensor([len(x)], dtype=torch.int64))
        return padded([int(t) for t in every])
    return {"chorus": lambda: chorus.allgather(x, uneven=True),
            "gloo padded": lambda: padded(counts), "gloo padded+counts": with_counts}


def check(op, case, result):
    """Whether `result` (chorus's all_to_all: the pair y, received) is the closed form."""
    expected = case[3] if op == "all_to_all" else case[2]
    if isinstance(result, tuple):
        result, received = result
        if list(received) != case[2]:
            return False
    y = np.asarray(result)
    return y.shape == expected.shape and bool(np.array_equal(y, expected))


def bench_case(op, case, rounds):
    """{library: median seconds per call} for one collective at one size."""
    calls = (mpi_ops if UNDER_MPI else torch_ops)(op, case)
    estimates = []
    for library, call in calls.items():
        POISON["on"] = True
        try:
            result = call()  # first call: connections, first touch
        finally:
            POISON["on"] = False
        agree_or_abort(check(op, case, result), f"{library} {op} of {approx(case[-1])}")
        call()
        estimates.append(time_loop(call, 3))
    k = max(3, math.ceil(TARGET_LOOP_S / statistics.mean(estimates)))
    samples = {library: [] for library in calls}
    for _ in range(rounds):
        for library, call in calls.items():  # interleaved: every library each round
            samples[library].append(time_loop(call, k))
    return {library: statistics.median(times) for library, times in samples.items()}


def run_op(op, sizes, rank, size, rounds):
    """Times one collective at every size; rank 0 prints its table. Returns the CSV rows."""
    rows = []
    for i, nbytes in enumerate(sizes):
        case = (all_to_all_case if op == "all_to_all" else allgather_case)(nbytes, rank, size)
        medians = bench_case(op, case, rounds)
        rows += [(round(case[-1]), op, library, s) for library, s in medians.items()]
        if rank != 0:
            continue
        refs = [library for library in medians if library != "chorus"]
        if i == 0:
            call = ("y, received = chorus.all_to_all(x, splits=splits)" if op == "all_to_all"
                    else "y = chorus.allgather(x, uneven=True)")
            print(f"\n## {call}\n\n| bytes sent per rank (mean) | chorus | "
                  + " | ".join(f"{r} | ratio" for r in refs) + " |")
            print("|---:|---:|" + "---:|---:|" * len(refs), flush=True)
        mine = medians["chorus"]
        cells = [f"{fmt(medians[r])} | {medians[r] / mine:.2f}" for r in refs]
        print(f"| {approx(case[-1])} | {fmt(mine)} | " + " | ".join(cells) + " |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help=f"mean bytes a rank sends, comma-separated (default "
                        f"{DEFAULT_SIZES}); rounded to whole 256-byte rows")
    parser.add_argument("--ops", default=",".join(OPS), help="all_to_all, allgather or both")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick 2)")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, 2 rounds")
    parser.add_argument("--csv", help="write the medians here (bytes, op, library, seconds)")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in (args.sizes or (QUICK_SIZES if args.quick else
                                                    DEFAULT_SIZES)).split(",")]
    ops = args.ops.split(",")
    if any(op not in OPS for op in ops):
        parser.error(f"--ops takes {', '.join(OPS)}")
    if any(s <= 0 for s in sizes):
        parser.error("sizes must be positive")
    rounds = args.rounds or (2 if args.quick else 5)

    config = chorus.distributed.get_config()
    rank, size = config.rank, config.size
    if not UNDER_MPI:
        init_torch(rank, size)
    if rank == 0:
        backend = chorus.distributed.get_communicator().backend
        reference = "mpi4py" if UNDER_MPI else "torch.gloo"
        print(f"# chorus uneven collectives ({backend} backend, CHORUS_BACKEND="
              f"{os.environ.get('CHORUS_BACKEND', 'unset')}) vs {reference}: {size} ranks, "
              f"float32 rows of {ROW_BYTES} B, median of {rounds} rounds, max over ranks per "
              "call; ratio = reference / chorus (> 1: chorus is faster)", flush=True)
    rows = []
    for op in ops:
        rows += run_op(op, sizes, rank, size, rounds)
    finish(rank, args.csv, "bytes,op,library,seconds", rows)


if __name__ == "__main__":
    main()
