"""rank_list= on the short paths (python/src/rank_lists.h, front_calls.cc): once the package has
resolved a rank_list (its first call, through the general path, which checks it and makes its
communicator), later calls with the same rank_list, as lists or tuples, go straight to C++ on the
caller's group's communicator, roots and peers translated from world ranks to group ranks.

These tests check:
  - a rank_list's first call takes the general path, later ones never do, blocking or async;
  - every operation gives the closed-form result on groups whose order differs from the world's,
    with roots and peers given as world ranks;
  - a rank standing alone (in no group) gets its own result, as on the general path;
  - what the short path must leave to the general path still gets the general path's answer: a
    root outside the caller's group, a rank_list with a bool, group= beside rank_list=, and every
    rank_list after a reset (the package forgets its communicators).
Expected values are closed forms.
"""

import numpy as np
import pytest

import chorus
from chorus import _groups

from helpers import rank_size, spy_on_general_paths

GENERAL_PATHS = ["_allreduce", "_broadcast", "_allgather", "_reduce", "_reduce_scatter",
                 "_gather", "_scatter", "_all_to_all", "_send", "_recv", "_complete"]


def _spy(monkeypatch):
    return spy_on_general_paths(monkeypatch, GENERAL_PATHS)


def _pairs(size):
    """Groups of two in reversed order ([1, 0], [3, 2], ...), a last odd rank alone; and this
    rank's group."""
    groups = [[r + 1, r] for r in range(0, size - 1, 2)]
    if size % 2:
        groups.append([size - 1])
    return groups


@pytest.fixture(autouse=True)
def _fresh():
    """Every test starts with no rank_list resolved (the first call of each is a general one)."""
    _groups.reset()
    yield


def test_a_rank_list_takes_the_short_path_once_resolved(monkeypatch):
    rank, size = rank_size()
    calls = _spy(monkeypatch)
    rank_list = _pairs(size)
    mine = next(g for g in rank_list if rank in g)
    x = np.full(3, rank + 1.0)
    first = chorus.allreduce(x, rank_list=rank_list)
    assert "_allreduce" in calls  # resolved (and its communicator made) by the general path
    del calls[:]
    again = chorus.allreduce(x, rank_list=[list(g) for g in rank_list])  # a new, equal list
    as_tuples = chorus.allreduce(x, rank_list=tuple(tuple(g) for g in rank_list))
    work = chorus.allreduce(x, rank_list=rank_list, async_op=True)
    assert calls == []
    expected = np.full(3, float(sum(r + 1 for r in mine)))
    for result in (first, again, as_tuples, work.wait()):
        np.testing.assert_array_equal(result, expected)


def test_every_operation_on_a_rank_list_with_world_roots_and_peers(monkeypatch):
    rank, size = rank_size()
    rank_list = _pairs(size)
    mine = next(g for g in rank_list if rank in g)
    n = len(mine)
    me = mine.index(rank)  # the group rank
    root = mine[-1]  # a world rank: group rank n - 1
    chorus.barrier(rank_list=rank_list)  # resolves it
    calls = _spy(monkeypatch)
    x = np.full(2, rank + 1.0)
    reduced = chorus.reduce(x, root=root, rank_list=rank_list)
    broadcast = chorus.broadcast(x, root=root, rank_list=rank_list)
    gathered = chorus.gather(x, root=root, rank_list=rank_list)
    dealt = chorus.scatter(np.repeat(np.arange(n, dtype=np.float64), 2) + 10 * rank, root=root,
                           rank_list=rank_list)
    everyone = chorus.allgather(x, rank_list=rank_list)
    parts = chorus.reduce_scatter(np.full(2 * n, rank + 1.0), rank_list=rank_list)
    exchanged = chorus.all_to_all(np.arange(n, dtype=np.float64) + 10 * rank,
                                  rank_list=rank_list)
    if n == 2:
        partner = mine[1 - me]  # a world rank
        if me == 0:
            chorus.send(x, partner, tag=5, rank_list=rank_list)
            heard = chorus.recv(partner, (2,), "float64", tag=6, rank_list=rank_list)
        else:
            heard = chorus.recv(partner, (2,), "float64", tag=5, rank_list=rank_list)
            chorus.send(x, partner, tag=6, rank_list=rank_list)
        np.testing.assert_array_equal(heard, np.full(2, partner + 1.0))
    chorus.barrier(rank_list=rank_list)
    assert calls == []
    total = float(sum(r + 1 for r in mine))
    if rank == root:
        np.testing.assert_array_equal(reduced, np.full(2, total))
        np.testing.assert_array_equal(gathered, np.repeat([r + 1.0 for r in mine], 2))
    else:
        np.testing.assert_array_equal(reduced, x)
        assert gathered is x
    np.testing.assert_array_equal(broadcast, np.full(2, root + 1.0))
    np.testing.assert_array_equal(dealt, np.full(2, me + 10.0 * root))
    np.testing.assert_array_equal(everyone, np.repeat([r + 1.0 for r in mine], 2))
    np.testing.assert_array_equal(parts, np.full(2, total))
    np.testing.assert_array_equal(exchanged, np.array([me + 10.0 * r for r in mine]))


def test_a_rank_in_no_group_stands_alone(monkeypatch):
    rank, size = rank_size()
    rank_list = [[0]] if size == 1 else [list(range(size - 1))]  # the last rank in no group
    x = np.full(2, rank + 1.0)
    chorus.allreduce(x, rank_list=rank_list)
    calls = _spy(monkeypatch)
    total = chorus.allreduce(x, rank_list=rank_list)
    assert calls == []
    alone = size == 1 or rank == size - 1
    np.testing.assert_array_equal(
        total, x if alone else np.full(2, float(sum(range(1, size)))))


def test_what_the_short_path_leaves_gets_the_general_answer(monkeypatch):
    rank, size = rank_size()
    rank_list = _pairs(size)
    mine = next(g for g in rank_list if rank in g)
    chorus.barrier(rank_list=rank_list)
    calls = _spy(monkeypatch)
    outsider = next((r for r in range(size) if r not in mine), None)
    if outsider is not None:
        with pytest.raises(chorus.InvalidArgumentError, match="is not a member"):
            chorus.broadcast(np.ones(2), root=outsider, rank_list=rank_list)
        assert calls == ["_broadcast"]
    del calls[:]
    with pytest.raises(chorus.InvalidArgumentError, match="not both"):
        chorus.allreduce(np.ones(2), rank_list=rank_list,
                         group=chorus.distributed.new_group(list(range(size))))
    with pytest.raises(chorus.InvalidArgumentError, match="not an int"):
        chorus.allreduce(np.ones(2), rank_list=[[True] + list(range(1, size))])
    assert calls == ["_allreduce"]  # the general path refused the bool, as before
    _groups.reset()  # forgets the rank_list: its next call is a general one again,
    chorus.barrier()  # also once the world is back
    del calls[:]
    np.testing.assert_array_equal(chorus.allreduce(np.full(2, rank + 1.0), rank_list=rank_list),
                                  np.full(2, float(sum(r + 1 for r in mine))))
    assert "_allreduce" in calls


def test_other_forms_of_rank_list(monkeypatch):
    """A flat rank_list (one group), the whole world in order (the world's communicator), a
    rank_list refused by the general path (every time: it is never noted), and ANY_SOURCE (left to
    the general path)."""
    rank, size = rank_size()
    flat = list(reversed(range(size)))
    world = [list(range(size))]
    x = np.full(2, rank + 1.0)
    chorus.barrier(rank_list=flat)
    chorus.barrier(rank_list=world)
    calls = _spy(monkeypatch)
    from_last = chorus.broadcast(x, root=size - 1, rank_list=flat)
    from_first = chorus.broadcast(x, root=0, rank_list=world)
    assert calls == []
    np.testing.assert_array_equal(from_last, np.full(2, float(size)))
    np.testing.assert_array_equal(from_first, np.full(2, 1.0))
    for _ in range(2):
        with pytest.raises(chorus.InvalidArgumentError, match="appear on rank_list once"):
            chorus.allreduce(x, rank_list=[[0, 0]])
    assert calls == ["_allreduce", "_allreduce"]
    pair = [[0, 1]] if size > 1 else [[0]]
    chorus.barrier(rank_list=pair)  # every rank resolves it (collective), then ranks 0 and 1 talk
    if size > 1 and rank < 2:
        del calls[:]
        if rank == 0:
            chorus.send(x, 1, tag=8, rank_list=pair)
        else:
            status = chorus.Status()
            heard = chorus.recv(chorus.ANY_SOURCE, (2,), "float64", tag=8, rank_list=pair,
                                status=status)
            np.testing.assert_array_equal(heard, np.full(2, 1.0))
            assert status.source == 0
            assert calls[0] == "_recv"
