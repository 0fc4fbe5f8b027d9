"""python_compare.py: chorus against a reference library, from Python, side by side.

By default it times chorus.allreduce; --ops (below) adds the other operations.

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

--ops OP,OP,... (or --ops all) times other operations too, in one mode each, "out": the blocking
call a user writes, into a preallocated output where the library takes one. x is float32 of SIZE
bytes on every rank (for scatter, the whole array the root splits), s is the number of ranks:

    op             chorus                      mpi4py (comm.)              torch.gloo (dist.)
    allreduce      the three modes above
    broadcast      broadcast(x, 0, out=y)      Bcast(x or y, root=0)       broadcast(x or y, 0)
    reduce         reduce(x, 0, out=y)         Reduce(x, y, root=0)        y.copy_(x); reduce(y, 0)
    allgather      allgather(x, out=g)         Allgather(x, g)             all_gather(g's views, x)
    reduce_scatter reduce_scatter(x, out=p)    Reduce_scatter_block(x, p)  (see below)
    gather         gather(x, 0, out=g)         Gather(x, g, root=0)        gather(x, g's views, 0)
    scatter        scatter(x, 0, out=p)        Scatter(x, p, root=0)       scatter(p, x's views, 0)
    all_to_all     all_to_all(x, out=y)        Alltoall(x, y)              all_to_all_single(y, x)
    sendrecv       send(x, q); recv(q, out=y)  Send(x, q); Recv(y, q)      send(x, q); recv(y, q)
    barrier        barrier()                   Barrier()                   barrier()
    allreduce_async allreduce(x, out=y,        Iallreduce(x, y).Wait()     y.copy_(x); all_reduce(y,
                   async_op=True).wait()                                   async_op=True).wait()

g is s times x's length, p x's length / s (a size whose elements do not split over the ranks is
skipped for reduce_scatter, scatter and all_to_all), q the peer. "x or y": mpi4py and torch
broadcast in place, so the root passes x and the others y (chorus's root also copies x into y).
On a reduce's non-roots chorus copies x into y (its documented result there), mpi4py ignores y,
and torch needs the copy first, as its reduce works in place. torch's all_gather_into_tensor
and reduce_scatter_tensor are used where this torch's gloo takes them, and reduce_scatter's list
form where it takes that; torch 1.13's takes none of them, so all_gather gets views of the
preallocated g and the reduce_scatter rows say n/a. sendrecv is a ping-pong between ranks 2k
and 2k+1 (2k sends first; a last odd rank idles): one round trip per call. barrier runs once
(size "-", 0 bytes in the CSV).

Closed forms (checked once per library, outputs filled with -1 first): x = rank + 1 for
broadcast (y = 1), reduce (root: s(s+1)/2), allgather and gather (chunk r of g: r + 1) and
sendrecv (y = q + 1); chunk i of x is (rank + 1)(i + 1) for reduce_scatter (p = (rank + 1)
s(s+1)/2), 1 + i + 10 rank for scatter (p = 1 + rank) and 1 + s rank + i for all_to_all (chunk j
of y: 1 + s j + rank). Ranks an op leaves no result on (reduce's and gather's non-roots) check
nothing. The calls run back to back in each loop, as allreduce's do, so a rooted op's non-roots
may run ahead of the root as far as the transport buffers. With --ops, rank 0 prints one row per
(op, size); the CSV's second column is the mode for allreduce (as without --ops, so that
plot_python_compare.py reads it) and OP/out for the others ("barrier" for barrier).
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


class Case:
    """One operation in one mode at one size. calls: {library: a call, returning the buffer that
    holds this rank's result}; expected: what that result must equal (None: this rank has none to
    check); prepare(): run before each library's check (fills the outputs with -1, so that a call
    that writes nothing fails it); settle(): run after it."""

    def __init__(self, label, calls, expected=None, outputs=(), prepare=None, settle=None):
        self.label, self.calls, self.expected = label, calls, expected
        self.outputs, self.prepare_more, self.settle = outputs, prepare, settle or (lambda: None)

    def prepare(self):
        for buf in self.outputs:
            buf[:] = -1
        if self.prepare_more:
            self.prepare_more()


def allreduce_cases(nbytes, rank, size):
    ops, y, w = (mpi_modes if UNDER_MPI else torch_modes)(nbytes, rank)
    expected = np.full(nbytes // 4, size * (size + 1) / 2, dtype=np.float32)

    def inputs():
        w[:] = rank + 1

    def zeros():
        w[:] = 0

    return [Case(mode, ops[mode], expected, (y,), inputs, zeros) for mode in MODES]


def bench_cases(cases, what, rounds):
    """{(label, library): median seconds per call} of interleaved rounds over `cases`."""
    loops = {}
    for case in cases:
        estimates = []
        for library, op in case.calls.items():
            case.prepare()
            result = op()  # first call: connections, first touch
            expected = case.expected
            ok = expected is None or (
                result is not None and np.asarray(result).shape == expected.shape
                and bool(np.all(np.asarray(result) == expected)))
            agree_or_abort(ok, f"{library} {case.label} {what}")
            case.settle()
            op()
            estimates.append(time_loop(op, 3))
        k = max(3, math.ceil(TARGET_LOOP_S / statistics.mean(estimates)))
        loops.update({(case.label, library): (op, k) for library, op in case.calls.items()})
    samples = {key: [] for key in loops}
    for _ in range(rounds):
        for key, (op, k) in loops.items():  # interleaved: every case and library each round
            samples[key].append(time_loop(op, k))
    return {key: statistics.median(times) for key, times in samples.items()}


def bench_size(nbytes, rank, size, rounds):
    """{(mode, library): median seconds per call} of allreduce for one message size."""
    return bench_cases(allreduce_cases(nbytes, rank, size), f"allreduce of {human(nbytes)}",
                       rounds)


# --------------------------------------------------------------------------- other operations

OPS = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "gather", "scatter",
       "all_to_all", "sendrecv", "barrier", "allreduce_async")
SPLIT_OPS = ("reduce_scatter", "scatter", "all_to_all")  # x's elements split over the ranks


def gloo_support():
    """{name: whether this torch's gloo takes it} for the tensor forms of all_gather and
    reduce_scatter and the list form of reduce_scatter, tried once on tiny tensors (a refusal
    comes on every rank alike, before any message; the answers are agreed across ranks)."""
    import torch
    import torch.distributed as dist
    size = dist.get_world_size()
    x = torch.ones(size)
    tries = {"all_gather_into_tensor":
             lambda: dist.all_gather_into_tensor(torch.empty(size * size), x),
             "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(torch.empty(1), x),
             "reduce_scatter": lambda: dist.reduce_scatter(torch.empty(1), list(x.chunk(size)))}
    support = {}
    for name, call in tries.items():
        try:
            call()
            ok = True
        except (AttributeError, RuntimeError, NotImplementedError):  # missing, or refused
            ok = False
        support[name] = max_over_ranks(0.0 if ok else 1.0) == 0
    return support


def op_case(op, nbytes, rank, size, gloo):
    """The Case of `op` (not allreduce) with SIZE = nbytes of x per rank, in mode "out" (the
    table in this file's docstring), or None where x's elements do not split over the ranks."""
    n, s = nbytes // 4, size
    if op in SPLIT_OPS and n % s:
        return None
    c = max(n // s, 1)  # elements per chunk
    chunk = np.arange(n) // c  # each element's chunk of x
    peer = rank ^ 1  # sendrecv's partner; none for a last odd rank
    values = {"reduce_scatter": (rank + 1) * (1 + chunk), "scatter": 1 + chunk + 10 * rank,
              "all_to_all": 1 + s * rank + chunk}.get(op, np.full(n, rank + 1))
    out_len = {"allgather": n * s, "gather": n * s, "reduce_scatter": n // s, "scatter": n // s,
               "barrier": 0}.get(op, n)
    gathered = np.repeat(np.arange(1, s + 1), n)
    expected = {"broadcast": np.full(n, 1), "reduce": np.full(n, s * (s + 1) // 2),
                "allreduce_async": np.full(n, s * (s + 1) // 2),
                "allgather": gathered, "gather": gathered,
                "reduce_scatter": np.full(n // s, (rank + 1) * s * (s + 1) // 2),
                "scatter": np.full(n // s, 1 + rank),
                "all_to_all": 1 + s * np.repeat(np.arange(s), c) + rank,
                "sendrecv": np.full(n, peer + 1)}.get(op)
    if (op in ("reduce", "gather") and rank != 0) or (op == "sendrecv" and peer >= s):
        expected = None
    if UNDER_MPI:
        x = values.astype(np.float32)
        y = np.empty(out_len, dtype=np.float32)
    else:
        import torch
        x = torch.from_numpy(values.astype(np.float32))
        y = torch.empty(out_len, dtype=torch.float32)
    root_buf = x if rank == 0 else y  # a broadcast in place: the root sends x, the others fill y

    def chorus_sendrecv():
        if peer >= s:
            return None
        if rank % 2 == 0:
            chorus.send(x, peer)
            chorus.recv(peer, out=y)
        else:
            chorus.recv(peer, out=y)
            chorus.send(x, peer)
        return y

    mine = {"broadcast": lambda: chorus.broadcast(x, root=0, out=y),
            "reduce": lambda: chorus.reduce(x, root=0, out=y),
            "allgather": lambda: chorus.allgather(x, out=y),
            "reduce_scatter": lambda: chorus.reduce_scatter(x, out=y),
            "gather": lambda: chorus.gather(x, 0, out=y),
            "scatter": lambda: chorus.scatter(x, 0, out=y),
            "all_to_all": lambda: chorus.all_to_all(x, out=y),
            "sendrecv": chorus_sendrecv,
            "barrier": chorus.barrier,
            "allreduce_async": lambda: chorus.allreduce(x, out=y, async_op=True).wait()}[op]
    theirs = (mpi_op if UNDER_MPI else gloo_op)(op, x, y, root_buf, rank, peer, s, gloo)
    expected = None if expected is None else expected.astype(np.float32)
    outputs = () if op == "barrier" else (y,)
    label = "barrier" if op == "barrier" else f"{op}/out"
    calls = {"chorus": mine}
    if theirs is not None:
        calls["mpi4py" if UNDER_MPI else "torch.gloo"] = theirs
    return Case(label, calls, expected, outputs)


def mpi_op(op, x, y, root_buf, rank, peer, s, gloo):
    """mpi4py's call of `op` (op_case's buffers), returning the buffer its result is in."""
    comm = MPI.COMM_WORLD

    def sendrecv():
        if peer >= s:
            return None
        if rank % 2 == 0:
            comm.Send(x, dest=peer)
            comm.Recv(y, source=peer)
        else:
            comm.Recv(y, source=peer)
            comm.Send(x, dest=peer)
        return y

    calls = {"broadcast": lambda: comm.Bcast(root_buf, root=0),
             "reduce": lambda: comm.Reduce(x, y, op=MPI.SUM, root=0),
             "allgather": lambda: comm.Allgather(x, y),
             "reduce_scatter": lambda: comm.Reduce_scatter_block(x, y, op=MPI.SUM),
             "gather": lambda: comm.Gather(x, y, root=0),
             "scatter": lambda: comm.Scatter(x, y, root=0),
             "all_to_all": lambda: comm.Alltoall(x, y),
             "barrier": comm.Barrier,
             "allreduce_async": lambda: comm.Iallreduce(x, y, op=MPI.SUM).Wait()}
    if op == "sendrecv":
        return sendrecv
    call, result = calls[op], root_buf if op == "broadcast" else y
    return lambda: (call(), result)[1]


def gloo_op(op, x, y, root_buf, rank, peer, s, gloo):
    """torch.distributed's call of `op` over gloo (op_case's tensors), returning the tensor its
    result is in; None where this torch's gloo has no such operation."""
    import torch.distributed as dist
    y_views, x_views = list(y.chunk(s)), list(x.chunk(s))  # made once: the output is preallocated

    def sendrecv():
        if peer >= s:
            return None
        if rank % 2 == 0:
            dist.send(x, peer)
            dist.recv(y, peer)
        else:
            dist.recv(y, peer)
            dist.send(x, peer)
        return y

    def reduce():
        y.copy_(x)
        dist.reduce(y, 0)

    def allreduce_async():
        y.copy_(x)
        dist.all_reduce(y, async_op=True).wait()

    if gloo["all_gather_into_tensor"]:
        allgather = lambda: dist.all_gather_into_tensor(y, x)  # noqa: E731
    else:
        allgather = lambda: dist.all_gather(y_views, x)  # noqa: E731
    reduce_scatter = None
    if gloo["reduce_scatter_tensor"]:
        reduce_scatter = lambda: dist.reduce_scatter_tensor(y, x)  # noqa: E731
    elif gloo["reduce_scatter"]:
        reduce_scatter = lambda: dist.reduce_scatter(y, x_views)  # noqa: E731
    calls = {"broadcast": lambda: dist.broadcast(root_buf, 0),
             "reduce": reduce,
             "allgather": allgather,
             "reduce_scatter": reduce_scatter,
             "gather": lambda: dist.gather(x, y_views if rank == 0 else None, dst=0),
             "scatter": lambda: dist.scatter(y, x_views if rank == 0 else None, src=0),
             "all_to_all": lambda: dist.all_to_all_single(y, x),
             "barrier": dist.barrier,
             "allreduce_async": allreduce_async}
    if op == "sendrecv":
        return sendrecv
    call, result = calls[op], root_buf if op == "broadcast" else y
    return None if call is None else lambda: (call(), result)[1]


def fmt(seconds):
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def parse_ops(text):
    ops = list(OPS) if text == "all" else [o.strip() for o in text.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown or not ops:
        raise argparse.ArgumentTypeError(f"unknown op(s) {unknown}; choose from {', '.join(OPS)} "
                                         "or all")
    return [o for o in OPS if o in ops]  # in OPS's order, once each


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help=f"bytes, comma-separated (default {DEFAULT_SIZES})")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick 2)")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, 2 rounds")
    parser.add_argument("--csv", help="write the medians here (bytes, mode, library, seconds)")
    parser.add_argument("--ops", type=parse_ops, default=["allreduce"],
                        help=f"operations, comma-separated, or all ({', '.join(OPS)}); "
                             "default allreduce")
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
    if args.ops != ["allreduce"]:
        rows = bench_ops(args.ops, sizes, rank, size, rounds, reference)
        finish(rank, args.csv, "bytes,mode,library,seconds", rows)
        return
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


def bench_ops(ops, sizes, rank, size, rounds, reference):
    """--ops: one table row per (op, mode, size), printed by rank 0 as it is measured; returns the
    CSV rows. Each op's sizes run in turn, its cases and libraries interleaved at each size."""
    gloo = None if UNDER_MPI else gloo_support()
    if rank == 0:
        backend = chorus.distributed.get_communicator().backend
        print(f"# chorus ({backend} backend, CHORUS_BACKEND="
              f"{os.environ.get('CHORUS_BACKEND', 'unset')}) vs {reference}: {size} ranks, "
              f"float32, size = bytes of x per rank, median of {rounds} rounds, max over ranks "
              f"per call; ratio = {reference} / chorus (> 1: chorus is faster)\n", flush=True)
        print(f"| op | size | chorus | {reference} | ratio |")
        print("|:---|---:|---:|---:|---:|", flush=True)
    rows = []
    for op in ops:
        for nbytes in sizes[:1] if op == "barrier" else sizes:
            if op == "allreduce":
                cases = allreduce_cases(nbytes, rank, size)
            else:
                case = op_case(op, nbytes, rank, size, gloo)
                if case is None:
                    if rank == 0:
                        print(f"| {op} out | {human(nbytes)} | skipped: {nbytes // 4} float32 do "
                              f"not split over {size} ranks | | |", flush=True)
                    continue
                cases = [case]
            nbytes = 0 if op == "barrier" else nbytes
            what = f"{'allreduce ' if op == 'allreduce' else ''}of {human(nbytes)}"
            medians = bench_cases(cases, what, rounds)
            rows += [(nbytes, label, lib, s) for (label, lib), s in medians.items()]
            if rank != 0:
                continue
            for case in cases:
                name = case.label.replace("/", " ") if op != "allreduce" else f"{op} {case.label}"
                mine = medians[(case.label, "chorus")]
                theirs = medians.get((case.label, reference))
                cells = [fmt(mine), fmt(theirs) if theirs else f"n/a ({reference} lacks it)",
                         f"{theirs / mine:.2f}" if theirs else "-"]
                print(f"| {name} | {'-' if op == 'barrier' else human(nbytes)} | "
                      + " | ".join(cells) + " |", flush=True)
    return rows


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
