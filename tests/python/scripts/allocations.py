"""A warmed blocking operation of a NumPy array (allreduce, broadcast, reduce, allgather,
reduce_scatter, gather, scatter, all_to_all, and a send and recv in turn) allocates nothing on the
C++ heap beyond its result (issue 19, item 2): with `out=`, with a fresh result (NumPy allocates
that one with malloc, outside the count) and, for allreduce, broadcast and reduce, in place, at 8
B, 4 KiB and 1 MiB (or the float32 element counts given as arguments); nor does a blocking barrier
of the world, nor an allreduce or broadcast with a rank_list the package has noted. Every operator new of the process counts: the
test preloads tests/harness's chorus_allocation_counter (LD_PRELOAD, set by ctest's
python_allocations_np2) and reads it through ctypes. Results are checked against closed forms.
Prints "allocations: OK" on rank 0 when every rank saw zero.

A window of calls that allocated on some rank is measured once more on every rank (they decide
together, so that they keep calling the same collectives), and only a second window that allocates
too fails: a call that allocates does so in every window (COUNTED times), while a one-off does not
recur. The one-off seen: a blocking call's Work comes from a per-thread cache of blocks
(core/thread_cached_allocator.h), and when the worker thread happens to drop a Work's last
reference, that block joins the worker's cache; the caller's cache, once empty, takes one block from
the heap (1 allocation in 200 calls, once in a CI run). A send and a recv in turn, on a loaded
machine, met it in two windows running (1 allocation in each): so a call fails only when both
windows allocated at least RECURRING times, which a call that allocates (COUNTED times or more in
each) always does and those one-offs never came near."""

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
RECURRING = 4
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


def _other_operations(count, x, out):
    """{name: (call, closed form)} of reduce, reduce_scatter, gather, scatter, all_to_all and
    send/recv between ranks 2k and 2k + 1 (closed forms: rank r's x holds r + 1)."""
    w = x.copy()  # reduce in place with max: ROOT keeps size there, the others r + 1
    whole = np.full(size * count, rank + 1, np.float32)
    parts = np.empty(count, np.float32)
    everyone = np.repeat(np.arange(1, size + 1, dtype=np.float32), count)
    gathered = np.empty(size * count, np.float32)
    # scatter: only ROOT's content is read, chunk r holding r + 1; elsewhere zeros
    dealt = everyone if rank == ROOT else np.zeros(size * count, np.float32)
    # all_to_all: rank q's block p holds q * size + p, so rank r receives q * size + r from q
    blocks = np.repeat(rank * size + np.arange(size, dtype=np.float32), count)
    exchanged = np.empty_like(blocks)
    received = np.repeat(np.arange(size, dtype=np.float32) * size + rank, count)
    partner = rank ^ 1
    got = np.empty_like(x)

    def send_recv():
        if partner >= size:
            return x
        if rank % 2 == 0:
            chorus.send(x, partner, tag=3)
            return chorus.recv(partner, tag=3, out=got)
        chorus.recv(partner, tag=3, out=got)
        chorus.send(x, partner, tag=3)
        return got

    def recv_send():  # recv into a fresh array of a shape and dtype name
        if partner >= size:
            return x
        if rank % 2 == 1:
            chorus.send(x, partner, tag=4)
            return chorus.recv(partner, (count,), "float32", tag=4)
        fresh = chorus.recv(partner, (count,), "float32", tag=4)
        chorus.send(x, partner, tag=4)
        return fresh

    mine = size * (size + 1) / 2 if rank == ROOT else rank + 1
    return {
        "reduce out=": (lambda: chorus.reduce(x, root=ROOT, out=out), mine),
        "reduce fresh": (lambda: chorus.reduce(x, root=ROOT), mine),
        "reduce inplace": (lambda: chorus.reduce(w, ROOT, "max", inplace=True),
                           size if rank == ROOT else rank + 1),
        "reduce_scatter out=": (lambda: chorus.reduce_scatter(whole, out=parts),
                                size * (size + 1) / 2),
        "reduce_scatter fresh": (lambda: chorus.reduce_scatter(whole), size * (size + 1) / 2),
        "gather out=": (lambda: chorus.gather(x, ROOT, out=gathered),
                        everyone if rank == ROOT else rank + 1),
        "gather fresh": (lambda: chorus.gather(x, ROOT), everyone if rank == ROOT else rank + 1),
        "scatter out=": (lambda: chorus.scatter(dealt, ROOT, out=parts), rank + 1),
        "scatter fresh": (lambda: chorus.scatter(dealt, ROOT), rank + 1),
        "all_to_all out=": (lambda: chorus.all_to_all(blocks, out=exchanged), received),
        "all_to_all fresh": (lambda: chorus.all_to_all(blocks), received),
        "send and recv out=": (send_recv, (partner + 1) if partner < size else rank + 1),
        "send and recv fresh": (recv_send, (partner + 1) if partner < size else rank + 1),
    }


COUNTS = [int(a) for a in sys.argv[1:]] or [2, 1024, 262144]  # float32: 8 B, 4 KiB, 1 MiB
reverse = list(reversed(range(size)))
for count in COUNTS:
    x = np.full(count, rank + 1, np.float32)
    out = np.empty_like(x)
    y = x.copy()  # in place with max: every call leaves size in it
    z = x.copy()  # broadcast in place: every call leaves ROOT + 1 in it
    gathered = np.empty(size * count, np.float32)
    everyone = np.repeat(np.arange(1, size + 1, dtype=np.float32), count)
    calls = {  # name: (call, closed form)
        **_other_operations(count, x, out),
        "allreduce out=": (lambda: chorus.allreduce(x, out=out), size * (size + 1) / 2),
        "allreduce fresh": (lambda: chorus.allreduce(x), size * (size + 1) / 2),
        "allreduce inplace": (lambda: chorus.allreduce(y, op="max", inplace=True), size),
        "broadcast out=": (lambda: chorus.broadcast(x, root=ROOT, out=out), ROOT + 1),
        "broadcast fresh": (lambda: chorus.broadcast(x, root=ROOT), ROOT + 1),
        "broadcast inplace": (lambda: chorus.broadcast(z, root=ROOT, inplace=True), ROOT + 1),
        "allgather out=": (lambda: chorus.allgather(x, out=gathered), everyone),
        "allgather fresh": (lambda: chorus.allgather(x), everyone),
        # rank_list= (the world in reverse: its own communicator), found in C++'s table
        "allreduce rank_list out=": (lambda: chorus.allreduce(x, out=out, rank_list=[reverse]),
                                     size * (size + 1) / 2),
        "broadcast rank_list out=": (lambda: chorus.broadcast(x, ROOT, out=out,
                                                              rank_list=[reverse]), ROOT + 1),
    }
    for name, (call, expected) in calls.items():
        for _ in range(WARM):
            call()
        windows, result = windows_of(call)
        if not np.array_equal(result, np.broadcast_to(expected, result.shape)):
            failures.append(f"{name} at {4 * count} B gave a wrong result")
        if min(windows) >= RECURRING:
            failures.append(f"{name} at {4 * count} B: {windows} allocations in windows of "
                            f"{COUNTED} calls")

for _ in range(WARM):
    chorus.barrier()
windows, _ = windows_of(chorus.barrier)
if min(windows) >= RECURRING:
    failures.append(f"barrier: {windows} allocations in windows of {COUNTED} calls")

for failure in failures:
    print(f"rank {rank}: FAIL {failure}", flush=True)
failed = chorus.allreduce(np.array([len(failures)], np.int64))[0]
if failed:
    sys.exit(1)
if rank == 0:
    print("allocations: OK", flush=True)
