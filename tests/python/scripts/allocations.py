"""A warmed blocking allreduce, broadcast or allgather of a NumPy array allocates nothing on the
C++ heap beyond its result (issue 19, item 2): with `out=`, with a fresh result (NumPy allocates
that one with malloc, outside the count) and, for allreduce and broadcast, in place, at 8 B, 4 KiB
and 1 MiB (or the float32 element counts given as arguments); nor does a blocking barrier of the
world. Every operator new of the process counts: the
test preloads tests/harness's chorus_allocation_counter (LD_PRELOAD, set by ctest's
python_allocations_np2) and reads it through ctypes. Results are checked against closed forms.
Prints "allocations: OK" on rank 0 when every rank saw zero.

A window of calls that allocated on some rank is measured once more on every rank (they decide
together, so that they keep calling the same collectives), and only a second window that allocates
too fails: a call that allocates does so in every window (COUNTED times), while a one-off does not
recur. The one-off seen: a blocking call's Work comes from a per-thread cache of blocks
(core/thread_cached_allocator.h), and when the worker thread happens to drop a Work's last
reference, that block joins the worker's cache; the caller's cache, once empty, takes one block from
the heap (1 allocation in 200 calls, once in a CI run)."""

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


def windows_of(call):
    """The allocations in one window of COUNTED calls, and in a second one when any rank's first
    allocated (a collective decision); with the last result."""
    windows = []
    while True:
        before = counter()
        for _ in range(COUNTED):
            result = call()
        windows.append(counter() - before)
        anywhere = chorus.allreduce(np.array([windows[-1]], np.int64), "max")[0]
        if len(windows) == 2 or not anywhere:
            return windows, result


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
        windows, result = windows_of(call)
        if not np.array_equal(result, np.broadcast_to(expected, result.shape)):
            failures.append(f"{name} at {4 * count} B gave a wrong result")
        if all(windows):
            failures.append(f"{name} at {4 * count} B: {windows} allocations in windows of "
                            f"{COUNTED} calls")

for _ in range(WARM):
    chorus.barrier()
windows, _ = windows_of(chorus.barrier)
if all(windows):
    failures.append(f"barrier: {windows} allocations in windows of {COUNTED} calls")

for failure in failures:
    print(f"rank {rank}: FAIL {failure}", flush=True)
failed = chorus.allreduce(np.array([len(failures)], np.int64))[0]
if failed:
    sys.exit(1)
if rank == 0:
    print("allocations: OK", flush=True)
