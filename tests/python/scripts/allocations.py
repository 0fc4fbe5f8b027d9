"""A warmed blocking allreduce, broadcast or allgather of a NumPy array allocates nothing on the
C++ heap beyond its result (issue 19, item 2): with `out=`, with a fresh result (NumPy allocates
that one with malloc, outside the count) and, for allreduce and broadcast, in place, at 8 B, 4 KiB
and 1 MiB (or the float32 element counts given as arguments); nor does a blocking barrier of the
world. Every operator new of the process counts: the
test preloads tests/harness's chorus_allocation_counter (LD_PRELOAD, set by ctest's
python_allocations_np2) and reads it through ctypes. Results are checked against closed forms.
Prints "allocations: OK" on rank 0 when every rank saw zero."""

import ctypes
import sys

import numpy as np

import chorus
import chorus.distributed as dist

rank, size = dist.get_config().rank, dist.get_config().size
try:
    counter = ctypes.CDLL(None).chorus_testing_allocation_count
except AttributeError:
    print(f"rank {rank}: FAIL: run with LD_PRELOAD=libchorus_allocation_counter.so", flush=True)
    sys.exit(1)
counter.restype = ctypes.c_uint64

WARM, COUNTED = 20, 200
failures = []
ROOT = size - 1
COUNTS = [int(a) for a in sys.argv[1:]] or [2, 1024, 262144]  # float32: 8 B, 4 KiB, 1 MiB
for count in COUNTS:
    x = np.full(count, rank + 1, np.float32)
    out = np.empty_like(x)
    y = x.copy()  # in place with max: every call leaves size in it
    z = x.copy()  # broadcast in place: every call leaves ROOT + 1 in it
    gathered = np.empty(size * count, np.float32)
    everyone = np.repeat(np.arange(1, size + 1, dtype=np.float32), count)
    calls = {  # name: (call, closed form)
        "allreduce out=": (lambda: chorus.allreduce(x, out=out), size * (size + 1) / 2),
        "allreduce fresh": (lambda: chorus.allreduce(x), size * (size + 1) / 2),
        "allreduce inplace": (lambda: chorus.allreduce(y, op="max", inplace=True), size),
        "broadcast out=": (lambda: chorus.broadcast(x, root=ROOT, out=out), ROOT + 1),
        "broadcast fresh": (lambda: chorus.broadcast(x, root=ROOT), ROOT + 1),
        "broadcast inplace": (lambda: chorus.broadcast(z, root=ROOT, inplace=True), ROOT + 1),
        "allgather out=": (lambda: chorus.allgather(x, out=gathered), everyone),
        "allgather fresh": (lambda: chorus.allgather(x), everyone),
    }
    for name, (call, expected) in calls.items():
        for _ in range(WARM):
            call()
        before = counter()
        for _ in range(COUNTED):
            result = call()
        allocated = counter() - before
        if not np.array_equal(result, np.broadcast_to(expected, result.shape)):
            failures.append(f"{name} at {4 * count} B gave a wrong result")
        if allocated:
            failures.append(f"{name} at {4 * count} B: {allocated} allocations in {COUNTED} calls")

for _ in range(WARM):
    chorus.barrier()
before = counter()
for _ in range(COUNTED):
    chorus.barrier()
if counter() - before:
    failures.append(f"barrier: {counter() - before} allocations in {COUNTED} calls")

for failure in failures:
    print(f"rank {rank}: FAIL {failure}", flush=True)
failed = chorus.allreduce(np.array([len(failures)], np.int64))[0]
if failed:
    sys.exit(1)
if rank == 0:
    print("allocations: OK", flush=True)
