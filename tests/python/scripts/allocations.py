"""A warmed blocking allreduce of a NumPy array allocates nothing on the C++ heap beyond its result
(issue 19, item 2): with `out=`, in place, and with a fresh result (NumPy allocates that one with
malloc, outside the count), at 8 B, 4 KiB and 1 MiB; nor does a blocking barrier of the world. Every operator new of the process counts: the
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
for count in (2, 1024, 262144):  # float32: 8 B, 4 KiB, 1 MiB
    x = np.full(count, rank + 1, np.float32)
    out = np.empty_like(x)
    y = x.copy()  # in place with max: every call leaves size in it
    calls = {  # name: (call, closed form)
        "out=": (lambda: chorus.allreduce(x, out=out), size * (size + 1) / 2),
        "fresh": (lambda: chorus.allreduce(x), size * (size + 1) / 2),
        "inplace": (lambda: chorus.allreduce(y, op="max", inplace=True), size),
    }
    for name, (call, expected) in calls.items():
        for _ in range(WARM):
            call()
        before = counter()
        for _ in range(COUNTED):
            result = call()
        allocated = counter() - before
        if not np.array_equal(result, np.full(count, expected, np.float32)):
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
