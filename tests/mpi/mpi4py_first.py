"""mpi4py_first.py: chorus inside a program whose MPI belongs to mpi4py.

    mpirun -np N /usr/bin/python3 mpi4py_first.py

mpi4py initializes MPI on import; chorus must use that MPI (same ranks), must not finalize it at
shutdown (mpi4py does, at exit), and must work with the native mpi backend and with chorus's
algorithms over the MPI transport. Results are checked against mpi4py's own allreduce and against
closed forms. Prints "mpi4py_first: OK on N ranks" on rank 0 only when every rank passed.
"""

import sys

import numpy as np
from mpi4py import MPI  # initializes MPI (MPI_THREAD_MULTIPLE, mpi4py's default)

import chorus
import chorus.distributed as dist

world = MPI.COMM_WORLD
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL rank {world.rank}: {what}", flush=True)


def main():
    check(MPI.Query_thread() == MPI.THREAD_MULTIPLE, "mpi4py gave MPI_THREAD_MULTIPLE")
    cfg = dist.get_config()
    check((cfg.rank, cfg.size) == (world.rank, world.size),
          f"chorus rank/size {(cfg.rank, cfg.size)} == MPI's {(world.rank, world.size)}")

    x = (np.arange(1000, dtype=np.float64) + 1) * (world.rank + 1)
    expected = (np.arange(1000, dtype=np.float64) + 1) * world.size * (world.size + 1) / 2
    reference = np.empty_like(x)
    world.Allreduce(x, reference, op=MPI.SUM)
    for backend in ["mpi", "mpi_algorithms"]:
        dist.set_default_backend(backend)
        check(dist.get_communicator().backend == backend, f"the world communicator uses {backend}")
        y = chorus.allreduce(x)
        check(np.array_equal(y, expected), f"chorus allreduce ({backend}) matches the closed form")
        check(np.array_equal(y, reference), f"chorus allreduce ({backend}) matches mpi4py's")
        halves = [list(range(world.size // 2)), list(range(world.size // 2, world.size))]
        z = chorus.allreduce(np.array([world.rank + 1], dtype=np.int64), rank_list=halves)
        group = halves[0] if world.rank in halves[0] else halves[1]
        check(int(z[0]) == sum(r + 1 for r in group), f"rank_list allreduce ({backend})")

    chorus.shutdown()
    check(not MPI.Is_finalized(), "MPI is still initialized after chorus.shutdown()")
    # MPI still works for the program after chorus is gone.
    total = world.allreduce(len(failures), op=MPI.SUM)
    if world.rank == 0:
        print(f"mpi4py_first: {'OK' if total == 0 else 'FAILED'} on {world.size} ranks",
              flush=True)
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
