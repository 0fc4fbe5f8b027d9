"""Multi-rank checks beyond the pytest suite (torch kinds in lists, uneven reduce_scatter lists,
groups, dropped async handles, threads). Run by ctest as python_extras_np4 (chorusrun -np 4)."""

import gc
import sys
import threading

import numpy as np
import torch

import chorus
import chorus.distributed as dist

r, n = dist.get_config().rank, dist.get_config().size


def check(name, got, want):
    got = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    if got.shape != np.shape(want) or not np.array_equal(got, want):
        print(f"rank {r}: FAIL {name}: got {got!r} want {want!r}", flush=True)
        sys.exit(1)


t = torch.arange(2 * n, dtype=torch.int32).reshape(n, 2) * (r + 1)
tri = n * (n + 1) // 2
check("torch reduce_scatter", chorus.reduce_scatter(t), (np.arange(2 * n).reshape(n, 2) * tri)[r:r + 1])
items = [np.full(2, i + r, np.int64) for i in range(n)]
check("rs list", chorus.reduce_scatter(items), np.full(2, n * r + n * (n - 1) // 2))
uneven = [np.full(i + 1, 1.0) for i in range(n)]
check("rs uneven", chorus.reduce_scatter(uneven), np.full(r + 1, float(n)))
bl = chorus.broadcast([np.full(2, r), torch.full((3,), r)], root=1)
check("bcast list 0", bl[0], np.full(2, 1))
assert isinstance(bl[1], torch.Tensor)
check("bcast list 1", bl[1], np.full(3, 1))
ag = chorus.allgather([np.full((2, 1), r), torch.full((1,), float(r))], axis=-1)
check("ag list 0", ag[0], np.tile(np.arange(n), (2, 1)))
check("ag list 1", ag[1], np.arange(n, dtype=np.float32))
check("torch scatter", chorus.scatter(torch.arange(n * 2).reshape(n, 2), root=2), np.array([[2 * r, 2 * r + 1]]))
x = np.arange(n * 3).reshape(n, 3) + 100 * r
a2a = chorus.all_to_all(x, split_axis=0, concat_axis=1)
check("a2a axes", a2a, np.concatenate([np.arange(3)[None] + 3 * r + 100 * s for s in range(n)], axis=1))
v = np.full((4, 4), r + 1.0)
col = v[:, 1]
assert chorus.allreduce(col, inplace=True) is col
check("inplace noncontig", v[:, 1], np.full(4, float(tri)))
check("other cols untouched", v[:, 0], np.full(4, r + 1.0))
buf = np.zeros(3, np.float32)
if r == 0:
    chorus.send(torch.arange(3, dtype=torch.float32), peer=n - 1)
if r == n - 1:
    out = chorus.recv(0, out=buf)
    assert out is buf
    check("recv out", buf, np.arange(3, dtype=np.float32))
# groups: [[0, 2], [1, 3]] (world ranks; roots are world ranks)
g = chorus.allreduce(np.full(1, r), rank_list=[[0, 2], [1, 3]])
check("groups", g, np.full(1, 2 if r % 2 == 0 else 4))
gb = chorus.broadcast(np.full(1, r), root=2 if r % 2 == 0 else 3, rank_list=[[0, 2], [1, 3]])
check("group bcast", gb, np.full(1, 2 if r % 2 == 0 else 3))
gc_ = dist.get_communicator([[0, 2], [1, 3]])
assert (gc_.size, gc_.group_id, gc_.group_size) == (2, r % 2, 2), (gc_.size, gc_.group_id)
try:
    chorus.broadcast(np.zeros(1), root=1 if r % 2 == 0 else 0, rank_list=[[0, 2], [1, 3]])
    sys.exit("no ValueError for root outside group")
except ValueError:
    pass
try:
    chorus.allreduce(np.zeros(1), rank_list=[[0, 1], [1, 2]])
    sys.exit("no ValueError for duplicate")
except ValueError as e:
    assert "Each rank can only appear on rank_list once" in str(e)
stand = chorus.allreduce(np.full(1, r + 1), rank_list=[[0, 1, 2]])
check("standalone", stand, np.full(1, 6 if r < 3 else 4))
# async handles dropped before completion keep their buffers alive
for i in range(20):
    chorus.allreduce(np.full(1000, 1.0), async_op=True)
gc.collect()
ws = [chorus.allreduce(np.full(10, float(i)), async_op=True) for i in range(5)]
for i, w in enumerate(ws):
    check(f"async {i}", w.wait(timeout=30), np.full(10, float(i * n)))
# Several Python threads issuing at once, each on its own communicator (operations are serialized
# per communicator in call order, so only one thread may use each). Each round, every thread issues
# its collectives after a local barrier, so they are in flight together, started in whatever order
# each rank's threads get there. Were operations serialized process-wide (a global lock, the GIL
# held while waiting), a rank's one running collective would wait for a peer whose one running
# collective is another communicator's, and a round would end in a TimeoutError: over 20 rounds of
# 4 threads the ranks do not all pick the same communicator every time.
THREAD_RANK_LISTS = [None, [[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0, 3], [1, 2]]]  # for 4 ranks
THREAD_ROUNDS = 20
thread_comms = [dist.get_communicator(rl) for rl in THREAD_RANK_LISTS]  # collective: made in order
assert len({id(c._native) for c in thread_comms}) == len(thread_comms), "a shared communicator"
for c in thread_comms:
    c.timeout = 30  # a deadlock fails in 30 s, not CHORUS_TIMEOUT
round_start = threading.Barrier(len(THREAD_RANK_LISTS))
errors = []


def worker(t):
    members = thread_comms[t].members
    rl = THREAD_RANK_LISTS[t]
    try:
        for i in range(THREAD_ROUNDS):
            round_start.wait(timeout=60)
            base = 1000 * t + i
            got = chorus.allreduce(np.full(5, base + r, np.int64), rank_list=rl)
            check(f"thread {t} round {i} allreduce", got,
                  np.full(5, len(members) * base + sum(members)))
            got = chorus.allgather(np.full((1, 2), base + 10 * r, np.int64), rank_list=rl)
            check(f"thread {t} round {i} allgather", got,
                  np.array([[base + 10 * m] * 2 for m in members]))
            root = members[i % len(members)]
            got = chorus.broadcast(np.full(3, base + r, np.int64), root=root, rank_list=rl)
            check(f"thread {t} round {i} broadcast", got, np.full(3, base + root))
    except BaseException as e:  # noqa: BLE001  (check() raises SystemExit)
        errors.append(f"thread {t}: {e!r}")
        round_start.abort()


threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(THREAD_RANK_LISTS))]
for th in threads:
    th.start()
for th in threads:
    th.join()
if errors:
    print(f"rank {r}: FAIL threads: {errors}", flush=True)
    sys.exit(1)
try:
    chorus.allreduce(np.zeros(2, np.clongdouble))
    sys.exit("no error for complex256")
except ValueError as e:
    assert "complex256" in str(e), e
print(f"rank {r}: extras OK", flush=True)
