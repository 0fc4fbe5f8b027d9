"""async_op=True on the short paths (python/src/front_calls.cc, short_calls.cc): the common async
call (one NumPy array or torch CPU tensor, the world or a Group, async_op=True) goes straight to
C++, which issues the operation and returns a chorus.Work at once; its wait() returns the result
the blocking call would have returned.

These tests check:
  - every operation's async call takes the short path (the general paths are never entered),
    returns a chorus.Work, and its wait() gives the closed-form result, in the caller's `out` when
    it passed one, for NumPy arrays and torch tensors;
  - the Work behaves as the general path's: wait() again returns the same object, is_completed(),
    wait(timeout) that expires leaves it running; its arrays live while the operation runs;
  - several async operations complete in issue order whatever order they are waited in;
  - what the short path leaves to the general path (reduce's copy of x on the other ranks,
    synchronize=True) still gives the general path's result.
Expected values are closed forms.
"""

import gc

import numpy as np
import pytest
import torch

import chorus

from helpers import rank_size, spy_on_general_paths

GENERAL_PATHS = ["_allreduce", "_broadcast", "_allgather", "_reduce", "_reduce_scatter",
                 "_gather", "_scatter", "_all_to_all", "_send", "_recv", "_complete"]


def _spy(monkeypatch):
    return spy_on_general_paths(monkeypatch, GENERAL_PATHS)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_every_async_call_takes_the_short_path(monkeypatch, kind):
    rank, size = rank_size()
    root = size - 1
    wrap = (lambda a: torch.from_numpy(np.ascontiguousarray(a))) if kind == "torch" else \
        (lambda a: a)
    calls = _spy(monkeypatch)
    x = wrap(np.full((2, 3), rank + 1, np.float32))
    whole = wrap(np.full((2 * size, 3), rank + 1, np.float32))
    out = wrap(np.full((2, 3), -1, np.float32))
    works = {
        "allreduce": chorus.allreduce(x, async_op=True),
        "allreduce out": chorus.allreduce(x, out=out, async_op=True),
        "broadcast": chorus.broadcast(x, root, async_op=True),
        "allgather": chorus.allgather(x, axis=1, async_op=True),
        "reduce_scatter": chorus.reduce_scatter(whole, async_op=True),
        "gather": chorus.gather(x, root=root, async_op=True),
        "scatter": chorus.scatter(wrap(np.repeat(np.arange(size, dtype=np.float32), 2)), root,
                                  async_op=True),
        "all_to_all": chorus.all_to_all(wrap(np.arange(size, dtype=np.float32) + 10 * rank),
                                        async_op=True),
        "barrier": chorus.barrier(async_op=True),
    }
    if rank == root:
        works["reduce"] = chorus.reduce(x, root, async_op=True)
    else:  # in place: nothing to copy after the operation, so the short path takes it
        mine = wrap(np.full((2, 3), rank + 1, np.float32))
        works["reduce"] = chorus.reduce(mine, root, inplace=True, async_op=True)
    assert calls == []
    for name, work in works.items():
        assert isinstance(work, chorus.Work), name
    results = {name: work.wait() for name, work in works.items()}
    total = size * (size + 1) / 2
    np.testing.assert_array_equal(np.asarray(results["allreduce"]), np.full((2, 3), total))
    assert results["allreduce out"] is out
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), total))
    np.testing.assert_array_equal(np.asarray(results["broadcast"]), np.full((2, 3), size))
    np.testing.assert_array_equal(np.asarray(results["allgather"]),
                                  np.repeat(np.arange(1, size + 1), 3)[None].repeat(2, 0))
    np.testing.assert_array_equal(np.asarray(results["reduce_scatter"]), np.full((2, 3), total))
    np.testing.assert_array_equal(np.asarray(results["scatter"]), np.full(2, rank))
    np.testing.assert_array_equal(np.asarray(results["all_to_all"]), 10 * np.arange(size) + rank)
    assert results["barrier"] is None
    if rank == root:
        np.testing.assert_array_equal(np.asarray(results["gather"]),
                                      np.repeat(np.arange(1, size + 1), 2)[:, None].repeat(3, 1))
        np.testing.assert_array_equal(np.asarray(results["reduce"]), np.full((2, 3), total))
    else:
        assert results["gather"] is x
        assert results["reduce"] is mine
        np.testing.assert_array_equal(np.asarray(mine), np.full((2, 3), rank + 1))
    for name, work in works.items():
        assert work.is_completed(), name
        assert work.wait() is results[name], name  # waiting again returns the same result
    assert calls == []


def test_async_send_and_recv_take_the_short_path(monkeypatch):
    rank, size = rank_size()
    if size == 1:
        pytest.skip("send and recv need a peer")
    partner = rank ^ 1
    if partner >= size:
        return  # the odd rank out of an odd world sits this one out
    calls = _spy(monkeypatch)
    x = np.arange(6, dtype=np.int32) + 100 * rank
    out = np.full(6, -1, np.int32)
    if rank % 2 == 0:
        sent = chorus.send(x, partner, tag=3, async_op=True)
        fresh = chorus.recv(partner, (2, 3), "int32", tag=4, async_op=True)
        into = chorus.recv(partner, out=out, tag=5, async_op=True)
    else:
        fresh = chorus.recv(partner, (2, 3), "int32", tag=3, async_op=True)
        sent = chorus.send(x, partner, tag=4, async_op=True)
        chorus.send(x, partner, tag=5)
        into = None
    assert calls == []
    assert sent.wait() is None
    heard = fresh.wait()
    assert heard.shape == (2, 3) and heard.dtype == np.int32
    np.testing.assert_array_equal(heard.ravel(), np.arange(6) + 100 * partner)
    if into is not None:
        assert into.wait() is out
        np.testing.assert_array_equal(out, np.arange(6) + 100 * partner)


def test_an_expired_wait_leaves_the_operation_running(monkeypatch):
    """wait(timeout) raises chorus.TimeoutError while the peer has not sent; the recv goes on and
    a later wait() returns its message."""
    rank, size = rank_size()
    if size == 1:
        pytest.skip("a recv needs a peer")
    partner = rank ^ 1
    if partner >= size:
        return
    if rank % 2 == 0:
        calls = _spy(monkeypatch)
        pending = chorus.recv(partner, (3,), "float64", tag=9, async_op=True)
        assert calls == []
        with pytest.raises(chorus.TimeoutError, match="did not complete within"):
            pending.wait(timeout=0.05)
        assert not pending.is_completed()
        chorus.send(np.ones(1), partner, tag=10)  # now the partner sends
        np.testing.assert_array_equal(pending.wait(), [1.0, 2.0, 3.0])
    else:
        chorus.recv(partner, (1,), "float64", tag=10)
        chorus.send(np.array([1.0, 2.0, 3.0]), partner, tag=9)


def test_the_arrays_of_an_async_call_live_until_it_completes(monkeypatch):
    """The caller may drop every reference to the input, and to the Work itself, at once: chorus
    keeps the arrays alive while the operation may touch them."""
    rank, size = rank_size()
    calls = _spy(monkeypatch)
    work = chorus.allreduce(np.full(1 << 16, rank + 1.0), async_op=True)  # x: a temporary
    for _ in range(size):  # unwaited, unreferenced Works in between
        chorus.allgather(np.full(1 << 12, float(rank)), async_op=True)
    gc.collect()
    np.testing.assert_array_equal(work.wait(), np.full(1 << 16, size * (size + 1) / 2))
    np.testing.assert_array_equal(chorus.allreduce(np.ones(2)), np.full(2, size))
    assert calls == []


def test_async_operations_complete_in_issue_order_whatever_the_waits_order():
    rank, size = rank_size()
    xs = [np.full(4, (rank + 1) * (k + 1), np.int64) for k in range(6)]
    works = [chorus.allreduce(x, async_op=True) for x in xs]
    total = size * (size + 1) // 2
    for k in reversed(range(6)):
        np.testing.assert_array_equal(works[k].wait(), np.full(4, total * (k + 1)))
    # and a blocking call after unwaited async ones runs after them
    late = [chorus.allreduce(np.full(2, rank + k, np.float64), op="max", async_op=True)
            for k in range(3)]
    np.testing.assert_array_equal(chorus.allreduce(np.full(2, rank, np.float64)),
                                  np.full(2, size * (size - 1) / 2))
    for k, work in enumerate(late):
        np.testing.assert_array_equal(work.wait(), np.full(2, size - 1 + k))


def test_a_group_async_call_takes_the_short_path(monkeypatch):
    rank, size = rank_size()
    g = chorus.distributed.new_group(list(reversed(range(size))))
    calls = _spy(monkeypatch)
    work = chorus.broadcast(np.full(3, g.rank, np.float32), root=0, group=g, async_op=True)
    assert calls == []
    np.testing.assert_array_equal(work.wait(), np.zeros(3))


def test_what_the_short_path_leaves_async_still_gives_the_general_result(monkeypatch):
    rank, size = rank_size()
    root = 0
    calls = _spy(monkeypatch)
    x = np.full(3, rank + 1.0)
    out = np.full(3, -1.0)
    work = chorus.reduce(x, root, out=out, async_op=True)
    assert isinstance(work, chorus.Work)
    assert work.wait() is out
    np.testing.assert_array_equal(out, np.full(3, size * (size + 1) / 2) if rank == root else x)
    assert ("_reduce" in calls) == (rank != root)  # the other ranks' copy follows the operation
    synchronized = chorus.allreduce(x, async_op=True, synchronize=True)
    assert isinstance(synchronized, chorus.Work)
    np.testing.assert_array_equal(synchronized.wait(), np.full(3, size * (size + 1) / 2))
    assert "_allreduce" in calls
