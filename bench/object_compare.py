"""Object collectives: chorus's broadcast_object, allgather_object, gather_object, scatter_object
and all_to_all_object against mpi4py's lowercase bcast, allgather, gather, scatter and alltoall
(which pickle), on the same objects in the same run.

Run under mpirun (mpi4py needs it; chorus then runs on its default backend there):

    M="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader \
       --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -np 2"
    PYTHONPATH=build/python $M /usr/bin/python3 bench/object_compare.py [--rounds 5]

Each (operation, object) is timed as a loop of calls, both libraries in turn in every round; rank
0 prints the median over rounds of the slowest rank's time per call, and the ratio (mpi4py's time
over chorus's: above 1 chorus is faster). Every call's result is checked against the closed form
it must equal before timing starts.
"""

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

import chorus


def objects(rank):
    """name -> a function of the sending rank that makes its object."""
    return {
        "int": lambda r: r,
        "small dict": lambda r: {"epoch": r, "lr": 1e-3, "names": ["a", "b"], "ok": True},
        "list of 100 ints": lambda r: list(range(r, r + 100)),
        "20 nested records": lambda r: [{"k": i, "v": float(i + r), "t": (i, str(i))}
                                        for i in range(20)],
        "1 MiB array": lambda r: np.full(1 << 17, float(r)),
    }


def calls(comm, rank, size, make):
    """operation -> (chorus call, mpi4py call, expected result)."""
    mine = make(rank)
    everyone = [make(r) for r in range(size)]
    sent_to = [make(rank * size + g) for g in range(size)]
    received = [make(r * size + rank) for r in range(size)]
    return {
        "broadcast": (lambda: chorus.broadcast_object(mine, root=0),
                      lambda: comm.bcast(mine, root=0), everyone[0]),
        "allgather": (lambda: chorus.allgather_object(mine),
                      lambda: comm.allgather(mine), everyone),
        "gather": (lambda: chorus.gather_object(mine, root=0),
                   lambda: comm.gather(mine, root=0), everyone if rank == 0 else None),
        "scatter": (lambda: chorus.scatter_object(everyone, root=0),
                    lambda: comm.scatter(everyone, root=0), everyone[rank]),
        "all_to_all": (lambda: chorus.all_to_all_object(sent_to),
                       lambda: comm.alltoall(sent_to), received),
    }


def equal(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(equal, a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return a == b


def per_call(comm, call, count):
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(count):
        call()
    return comm.allreduce(time.perf_counter() - start, op=MPI.MAX) / count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.05, help="per loop, about")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        backend = chorus.distributed.get_config().backend
        print(f"{size} ranks, backend {backend}; medians of {args.rounds} rounds, slowest rank")
        print(f"{'operation':<11} {'object':<19} {'chorus':>10} {'mpi4py':>10} {'ratio':>7}")
    for name, make in objects(rank).items():
        for operation, (ours, theirs, expected) in calls(comm, rank, size, make).items():
            for call in (ours, theirs):
                if not equal(call(), expected):
                    raise SystemExit(f"{operation} of {name}: wrong result")
            count = max(1, int(args.seconds / max(per_call(comm, ours, 3), 1e-7)))
            count = comm.bcast(count, root=0)
            times = {"chorus": [], "mpi4py": []}
            for _ in range(args.rounds):
                times["chorus"].append(per_call(comm, ours, count))
                times["mpi4py"].append(per_call(comm, theirs, count))
            c, m = (statistics.median(times[k]) for k in ("chorus", "mpi4py"))
            if rank == 0:
                print(f"{operation:<11} {name:<19} {c * 1e6:8.2f}us {m * 1e6:8.2f}us "
                      f"{m / c:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
