"""Multi-rank smoke test of the binding (run under chorusrun -np N, N >= 2). Expected values are
closed forms. The real suite lives in tests/python/."""

import sys
import threading
import time

import numpy as np

import chorus
import chorus.distributed as dist

cfg = dist.get_config()
r, n = cfg.rank, cfg.size
comm = dist.get_communicator()
assert (comm.rank, comm.size, comm.world_rank, comm.world_size) == (r, n, r, n)


def check(name, got, want):
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    if got.shape != np.shape(want) or not np.array_equal(got, want):
        print(f"rank {r}: FAIL {name}: got {got!r} want {want!r}", flush=True)
        sys.exit(1)


tri = n * (n + 1) / 2
x = np.full((3, 2), r + 1, np.float32)
check("allreduce", chorus.allreduce(x), np.full((3, 2), tri, np.float32))
check("input untouched", x, np.full((3, 2), r + 1, np.float32))
check("allreduce max", chorus.allreduce(x, "max"), np.full((3, 2), n, np.float32))
ys = chorus.allreduce([np.full(2, r + 1, np.int64), np.full((2, 2), 2 * r, np.int64)])
check("fused list 0", ys[0], np.full(2, tri, np.int64))
check("fused list 1", ys[1], np.full((2, 2), n * (n - 1), np.int64))
xi = x.copy()
assert chorus.allreduce(xi, inplace=True) is xi
check("inplace", xi, np.full((3, 2), tri, np.float32))
nc = np.full((4, 4), r + 1.0)[:, ::2]
check("noncontig", chorus.allreduce(nc), np.full((4, 2), tri))
check("bool bor", chorus.allreduce(np.array([r == 0, False]), "bor"), np.array([True, False]))
w = chorus.allreduce(x, async_op=True)
check("async", w.wait(), np.full((3, 2), tri, np.float32))
assert w.is_completed()
check("broadcast", chorus.broadcast(np.full(3, r, np.int32), root=n - 1), np.full(3, n - 1))
check("allgather", chorus.allgather(np.full((1, 2), r, np.int32), axis=0),
      np.repeat(np.arange(n, dtype=np.int32), 2).reshape(n, 2))
rs = chorus.reduce_scatter(np.tile(np.arange(n, dtype=np.float64), (2, 1)).T.copy())
check("reduce_scatter", rs, np.full((1, 2), r * n, np.float64))
red = chorus.reduce(np.full(2, r + 1.0), root=0)
check("reduce", red, np.full(2, tri if r == 0 else r + 1.0))
g = chorus.gather(np.full(1, r, np.int64), root=0)
check("gather", g, np.arange(n) if r == 0 else np.full(1, r))
sc = chorus.scatter(np.arange(2 * n, dtype=np.int32) * (r == 1), root=1)
check("scatter", sc, np.array([2 * r, 2 * r + 1], np.int32))
a2a = chorus.all_to_all(np.arange(n, dtype=np.int64) + 10 * r)
check("all_to_all", a2a, np.arange(n) * 10 + r)
if r == 0:
    chorus.send(np.arange(5, dtype=np.float32), peer=1, tag=3)
elif r == 1:
    check("recv", chorus.recv(0, (5,), "float32", tag=3), np.arange(5, dtype=np.float32))
chorus.barrier()
f = chorus.pmap(lambda a: a * 2)
check("pmap", f(np.arange(2 * n)), np.arange(2 * n) * 2)

# torch, if present
import torch  # noqa: E402

t = torch.full((2,), float(r + 1), dtype=torch.bfloat16)
tr = chorus.allreduce(t)
assert isinstance(tr, torch.Tensor) and tr.dtype == torch.bfloat16, tr
check("torch bf16", tr.float(), np.full(2, tri, np.float32))
tb = chorus.allreduce(torch.tensor([r == 0, True]), "band")
check("torch bool", tb, np.array([n == 1, True]))
tg = torch.ones(3, requires_grad=True)
check("torch grad", chorus.allreduce(tg), np.full(3, n, np.float32))

# errors
try:
    chorus.allreduce(x, op="mean")
    raise SystemExit("no ValueError")
except ValueError as e:
    assert "sum" in str(e) and isinstance(e, chorus.InvalidArgumentError)
try:
    chorus.reduce_scatter(np.zeros(n + 1))
    raise SystemExit("no ValueError")
except ValueError as e:
    assert str(n + 1) in str(e) and str(n) in str(e), e

# groups
if n >= 3:
    gy = chorus.allreduce(np.full(1, r + 1), rank_list=[[0, 1]])
    check("group", gy, np.full(1, 3 if r < 2 else r + 1))
    gc = dist.get_communicator([[0, 1]])
    assert gc.size == (2 if r < 2 else 1), gc

# GIL released: another thread makes progress during a blocked barrier (rank 0 waits for rank 1)
ticks = [0]
stop = threading.Event()


def spin():
    while not stop.is_set():
        ticks[0] += 1
        time.sleep(0.001)


th = threading.Thread(target=spin)
th.start()
if r == 1:
    time.sleep(0.3)
chorus.barrier()
stop.set()
th.join()
if r == 0:
    assert ticks[0] > 50, ticks

# mismatch: different dtypes on different ranks raise MismatchError, never hang
try:
    chorus.allreduce(np.zeros(4, np.float32 if r == 0 else np.float64))
    print(f"rank {r}: FAIL no mismatch error", flush=True)
    sys.exit(1)
except chorus.MismatchError as e:
    print(f"rank {r}: mismatch ok ({e.field})", flush=True)
except chorus.Error as e:
    print(f"rank {r}: mismatch gave {type(e).__name__}: {e}", flush=True)
print(f"rank {r}: smoke OK", flush=True)
