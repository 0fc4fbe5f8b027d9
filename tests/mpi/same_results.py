"""same_results.py: one script, the same results under chorusrun and under mpirun.

    same_results.py --run                    (under a launcher: chorusrun or mpirun, any backend)
    same_results.py --compare CHORUSRUN N    (runs the above under chorusrun and under mpirun with
                                              each MPI backend, and compares what they printed)

--run calls every collective (with and without rank_list groups, in several dtypes and ops, the
fallback cases of the native mpi backend included), checks each result against a NumPy closed
form, and has rank 0 print one line per result, "result <name> <sha256 of the bytes>", followed by
the config attributes. Inputs are small integers, so every reduction order gives the same bits and
the digests must agree whichever launcher and backend ran them. --compare prints
"same_results: OK" only when every run passed and printed the same lines.
"""

import hashlib
import os
import subprocess
import sys

import numpy as np

MPI_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader", "--mca",
             "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"]


def digest(array):
    array = np.ascontiguousarray(array)
    return hashlib.sha256(array.dtype.str.encode() + array.tobytes()).hexdigest()[:16]


def contribution(rank, n, dtype):
    """Rank `rank`'s input: small integers, exact in every dtype used here."""
    return ((np.arange(n) * 3 + rank * 5) % 7 + 1).astype(dtype)


def run():
    import torch

    import chorus
    import chorus.distributed as dist

    cfg = dist.get_config()
    rank, size = cfg.rank, cfg.size
    lines, failures = [], []

    def record(name, got, expected):
        got_np = got.float().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
        same = np.array_equal(got_np, expected, equal_nan=got_np.dtype.kind in "fc")
        if got_np.shape != np.shape(expected) or not same:
            failures.append(f"rank {rank}: {name}: got {got_np.ravel()[:8]}, "
                            f"expected {np.asarray(expected).ravel()[:8]}")
        lines.append(f"result {name} {digest(got_np)}")

    everyone = [contribution(r, 12 * size, np.float64) for r in range(size)]
    total = np.sum(everyone, axis=0)
    for dtype in ["float32", "float64", "int32", "int64", "float16", "int16", "uint16", "uint32",
                  "uint64"]:
        x = contribution(rank, 12 * size, dtype)
        record(f"allreduce_sum_{dtype}", chorus.allreduce(x), total.astype(dtype))
        record(f"allreduce_max_{dtype}", chorus.allreduce(x, "max"),
               np.max(everyone, axis=0).astype(dtype))
    # Sums that wrap around (Open MPI 4.1's op/avx saturates 8- and 16-bit ones instead: Note
    # [Saturating sums in Open MPI]).
    for dtype in ["int8", "uint8", "int16", "uint16"]:
        top = np.iinfo(dtype).max
        wrapped = (np.full(16, top, np.int64) * size) % (1 << (8 * np.dtype(dtype).itemsize))
        record(f"allreduce_wrapping_sum_{dtype}", chorus.allreduce(np.full(16, top, dtype)),
               wrapped.astype(np.uint64).astype(dtype))
    # A NaN on one rank is the min and the max wherever it stands (MPI_MIN and MPI_MAX return the
    # other operand: Note [Where MPI's reductions differ from chorus's]).
    spotted = [contribution(r, 8, np.float32) for r in range(size)]
    for r in range(size):
        spotted[r][r % 8] = np.nan
    for op in ("min", "max"):
        record(f"allreduce_{op}_nan", chorus.allreduce(spotted[rank], op),
               getattr(np, op)(spotted, axis=0))
    # Complex numbers (sum and prod only: they have no order). Gaussian integers this small
    # multiply exactly in complex64 too.
    gaussian = [contribution(r, 8, np.float64) + 1j * contribution(r + 1, 8, np.float64)
                for r in range(size)]
    for dtype in ["complex64", "complex128"]:
        x = gaussian[rank].astype(dtype)
        record(f"allreduce_sum_{dtype}", chorus.allreduce(x),
               np.sum(gaussian, axis=0).astype(dtype))
        record(f"allreduce_prod_{dtype}", chorus.allreduce(x, "prod"),
               np.prod(gaussian, axis=0).astype(dtype))
    # avg and bfloat16 are where the native mpi backend falls back to chorus's algorithms.
    x = contribution(rank, 12 * size, np.float32) * size
    record("allreduce_avg_float32", chorus.allreduce(x, "avg"), total.astype(np.float32))
    xb = torch.from_numpy(contribution(rank, 12 * size, np.float32)).to(torch.bfloat16)
    record("allreduce_sum_bfloat16", chorus.allreduce(xb), total.astype(np.float32))

    x = contribution(rank, 6, np.int32)
    record("allgather", chorus.allgather(x), np.concatenate(
        [contribution(r, 6, np.int32) for r in range(size)]))
    record("reduce_scatter", chorus.reduce_scatter(contribution(rank, 4 * size, np.int64)),
           np.sum([contribution(r, 4 * size, np.int64) for r in range(size)],
                  axis=0)[4 * rank:4 * rank + 4])
    root = size - 1
    record("broadcast", chorus.broadcast(x, root=root), contribution(root, 6, np.int32))
    reduced = chorus.reduce(x, root=root, op="sum")
    record("reduce", reduced, np.sum([contribution(r, 6, np.int32) for r in range(size)], axis=0)
           if rank == root else x)
    gathered = chorus.gather(x, root=0)
    if rank == 0:
        record("gather", gathered, np.concatenate([contribution(r, 6, np.int32)
                                                   for r in range(size)]))
    record("scatter", chorus.scatter(contribution(1, 3 * size, np.float32), root=1),
           contribution(1, 3 * size, np.float32)[3 * rank:3 * rank + 3])
    table = np.arange(size * 2, dtype=np.int64) + 100 * rank
    record("all_to_all", chorus.all_to_all(table),
           np.concatenate([np.arange(2 * rank, 2 * rank + 2) + 100 * r for r in range(size)]))

    halves = [list(range(size // 2)), list(range(size // 2, size))]
    group = halves[0] if rank in halves[0] else halves[1]
    x = contribution(rank, 5, np.float32)
    record("allreduce_rank_list", chorus.allreduce(x, rank_list=halves),
           np.sum([contribution(r, 5, np.float64) for r in group], axis=0).astype(np.float32))
    record("allgather_rank_list", chorus.allgather(x, rank_list=halves),
           np.concatenate([contribution(r, 5, np.float32) for r in group]))
    chorus.barrier()

    comm = dist.get_communicator()
    attributes = (cfg.rank, cfg.size, cfg.local_rank, cfg.local_size, comm.rank, comm.size)
    gathered = chorus.allgather(np.array(attributes, dtype=np.int64))
    if rank == 0:
        lines.append(f"attributes {gathered.tolist()}")
    failed = int(chorus.allreduce(np.array([len(failures)], dtype=np.int64))[0])
    for failure in failures:
        print(f"FAIL {failure}", flush=True)
    if rank == 0:
        for line in lines:
            print(line, flush=True)
        print("same_results: PASSED" if failed == 0 else f"same_results: FAILED ({failed})",
              flush=True)
    return 0 if failed == 0 else 1


def launch(command, env_extra):
    env = dict(os.environ, CHORUS_TIMEOUT="60", PYTHONUNBUFFERED="1", **env_extra)
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    text = done.stdout
    results = [line.split(" ", 1)[1] if line.startswith("[") else line
               for line in text.splitlines()]
    results = [line for line in results if line.startswith(("result ", "attributes "))]
    passed = done.returncode == 0 and "same_results: PASSED" in text
    return passed, results, text


def compare(chorusrun, n):
    script = os.path.abspath(__file__)
    python = "/usr/bin/python3"
    runs = [("chorusrun", [chorusrun, "-np", str(n), python, script, "--run"], {})]
    for backend in ["mpi", "mpi_algorithms"]:
        runs.append((f"mpirun (CHORUS_BACKEND={backend})",
                     ["mpirun", *MPI_FLAGS, "-np", str(n), python, script, "--run"],
                     {"CHORUS_BACKEND": backend}))
    reference, ok = None, True
    for name, command, env_extra in runs:
        passed, results, text = launch(command, env_extra)
        print(f"{name}: {'passed' if passed else 'FAILED'}, {len(results)} results", flush=True)
        if not passed or not results:
            print(text, flush=True)
            ok = False
        elif reference is None:
            reference = (name, results)
        elif results != reference[1]:
            ok = False
            for mine, theirs in zip(results, reference[1]):
                if mine != theirs:
                    print(f"DIFFERENT under {name}: {mine} vs {theirs} under {reference[0]}")
    print(f"same_results: {'OK' if ok else 'FAILED'} on {n} ranks", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        sys.exit(run())
    if sys.argv[1:2] == ["--compare"] and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], int(sys.argv[3])))
    sys.exit(__doc__)
