"""Groups with their own ranks (dist.new_group, group=), nests of arrays, and pmap's in_axes /
out_axes (issue 23, parts 3-5). Run at 1 to 4 ranks under chorusrun; skips depend on the world
size only. Expected values are closed forms of the ranks.
"""

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist
from helpers import rank_size


def reversed_group():
    """Every rank but rank 0 (when there are at least 2), in reverse order: group rank g is world
    rank size - 1 - g, so group ranks and world ranks differ."""
    rank, size = rank_size()
    members = list(range(size - 1, 0, -1)) if size > 1 else [0]
    return dist.new_group(members), members


def test_a_group_knows_its_ranks():
    rank, size = rank_size()
    group, members = reversed_group()
    assert group.ranks == tuple(members) and group.size == len(members)
    assert group.rank == (members.index(rank) if rank in members else -1)
    for g, w in enumerate(members):
        assert group.world_rank(g) == w and group.group_rank(w) == g
    if size > 1:
        assert group.group_rank(0) == -1
    with pytest.raises(ValueError, match="is not a rank of the group"):
        group.world_rank(len(members))


def test_group_operations_take_group_ranks():
    rank, size = rank_size()
    group, members = reversed_group()
    if group.rank < 0:
        return
    total = chorus.allreduce(np.full(3, rank + 1, np.int64), group=group)
    assert np.all(total == sum(m + 1 for m in members))
    # root=0 is group rank 0: world rank members[0].
    got = chorus.broadcast(np.full(2, rank, np.float64), root=0, group=group)
    assert np.all(got == members[0])
    gathered = chorus.allgather(np.array([rank], np.int32), group=group)
    assert list(gathered) == members  # group-rank order
    reduced = chorus.reduce(np.array([rank], np.int64), root=group.size - 1, group=group)
    if group.rank == group.size - 1:
        assert reduced[0] == sum(members)
    if group.size >= 2:
        if group.rank == 0:
            chorus.send(np.arange(4, dtype=np.float32), 1, group=group)
        elif group.rank == 1:
            assert list(chorus.recv(0, (4,), group=group)) == [0, 1, 2, 3]
    chorus.barrier(group=group)


def test_a_non_member_calling_a_group_operation_is_a_value_error():
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs a rank outside the group")
    group, _ = reversed_group()
    if group.rank >= 0:
        return
    with pytest.raises(ValueError, match=r"rank 0 \(this process\) called allreduce on the group"):
        chorus.allreduce(np.ones(2), group=group)


def test_group_arguments_are_checked():
    rank, size = rank_size()
    group, _ = reversed_group()
    if group.rank < 0:
        return
    with pytest.raises(ValueError, match="not both"):
        chorus.allreduce(np.ones(2), rank_list=[0], group=group)
    with pytest.raises(ValueError, match="root=.* is not a rank of the group"):
        chorus.broadcast(np.ones(2), root=group.size, group=group)
    with pytest.raises(ValueError, match="group must be a chorus Group"):
        chorus.allreduce(np.ones(2), group=[0])


def test_new_group_refuses_bad_ranks():
    rank, size = rank_size()
    with pytest.raises(ValueError, match="not a rank of this job"):
        dist.new_group([size])
    with pytest.raises(ValueError, match="non-empty list"):
        dist.new_group([])


def test_destroy_group_ends_a_failed_group_and_new_group_makes_a_new_one():
    """A mismatch ends a group's communicator for good (each later call repeats that error);
    destroy_group forgets it, operations on the old Group are refused, and new_group of the same
    ranks makes a working one (torch.distributed's destroy_process_group(group))."""
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs two ranks")
    members = list(reversed(range(size)))
    group = dist.new_group(members)
    twin = dist.new_group(members)  # another Group of the same ranks, made before the failure
    with pytest.raises(chorus.MismatchError, match="count"):
        chorus.allreduce(np.ones(3 + (rank == 0)), group=group)
    with pytest.raises(chorus.MismatchError, match="count"):  # the first error, again
        chorus.allreduce(np.ones(3), group=group)
    dist.destroy_group(group)
    with pytest.raises(ValueError, match=r"was destroyed \(destroy_group\)"):
        chorus.allreduce(np.ones(3), group=group)
    again = dist.new_group(members)
    assert chorus.allreduce(np.full(3, rank), group=again).tolist() == [size * (size - 1) // 2] * 3
    assert chorus.allreduce(np.ones(1), rank_list=[members])[0] == size  # the same communicator
    assert chorus.allreduce(np.ones(1), group=twin)[0] == size  # the twin takes the new one too
    dist.destroy_group(again)
    everyone = dist.new_group(list(range(size)))  # the world in order: destroying it keeps it
    dist.destroy_group(everyone)
    assert chorus.allreduce(np.ones(1))[0] == size
    with pytest.raises(ValueError, match="takes a chorus Group"):
        dist.destroy_group([0, 1])


def test_allreduce_of_a_nest_returns_the_nest():
    rank, size = rank_size()
    nest = {"w": np.full((2, 3), rank, np.float32),
            "b": [torch.full((4,), float(rank + 1), dtype=torch.float64),
                  np.full(1, rank, np.int64)],
            "t": (np.full(2, 2 * rank, np.float32),)}
    out = chorus.allreduce(nest)
    ranks_sum = size * (size - 1) // 2
    assert list(out) == ["w", "b", "t"] and isinstance(out["t"], tuple)
    assert out["w"].shape == (2, 3) and np.all(out["w"] == ranks_sum)
    assert isinstance(out["b"][0], torch.Tensor) and torch.all(out["b"][0] == ranks_sum + size)
    assert np.all(out["b"][1] == ranks_sum) and np.all(out["t"][0] == 2 * ranks_sum)
    assert np.all(nest["w"] == rank)  # the input is untouched


def test_other_collectives_take_nests():
    rank, size = rank_size()
    got = chorus.allgather({"a": [np.array([rank]), np.full(2, rank)]})
    assert list(got["a"][0]) == list(range(size))
    assert list(got["a"][1]) == [r for r in range(size) for _ in range(2)]
    b = chorus.broadcast({"k": (np.full(3, rank),)}, root=size - 1)
    assert np.all(b["k"][0] == size - 1)
    rs = chorus.reduce_scatter({"r": np.arange(2 * size, dtype=np.int64)}, "sum")
    assert list(rs["r"]) == [size * (2 * rank), size * (2 * rank + 1)]
    work = chorus.allreduce({"x": [np.ones(2)]}, async_op=True)
    assert np.all(work.wait()["x"][0] == size)


def test_fused_broadcast_reduce_and_allgather_of_mixed_nests():
    """broadcast, reduce and allgather send one message per (framework, dtype): the leaves come
    back where they were, with their shapes, whatever the mix."""
    rank, size = rank_size()
    nest = {"a": np.full((2, 3), rank, np.float32), "b": [torch.full((4,), rank, dtype=torch.int64),
                                                          np.arange(5, dtype=np.float32) + rank],
            "c": (torch.full((1, 2), float(rank)),)}
    got = chorus.broadcast(nest, root=size - 1)
    assert got["a"].shape == (2, 3) and np.all(got["a"] == size - 1)
    assert torch.all(got["b"][0] == size - 1) and list(got["b"][1]) == list(range(size - 1, size + 4))
    assert isinstance(got["c"], tuple) and torch.all(got["c"][0] == size - 1)
    reduced = chorus.reduce(nest, root=0)
    ranks_sum = size * (size - 1) // 2
    if rank == 0:
        assert np.all(reduced["a"] == ranks_sum) and torch.all(reduced["b"][0] == ranks_sum)
        assert list(reduced["b"][1]) == [size * i + ranks_sum for i in range(5)]
    else:
        assert np.all(reduced["a"] == rank)  # the input back
    gathered = chorus.allgather({"m": np.full((2, 1), rank, np.int32), "t": torch.full((3,), rank)},
                                axis=0)
    assert gathered["m"].shape == (2 * size, 1)
    assert list(gathered["m"][:, 0]) == [r for r in range(size) for _ in range(2)]
    wide = chorus.allgather({"w": [np.full((2, 2), rank, np.float64)]}, axis=1)
    assert wide["w"][0].shape == (2, 2 * size)
    assert list(wide["w"][0][0]) == [r for r in range(size) for _ in range(2)]
    kept = {"k": [np.full(3, rank, np.float32)]}
    same = chorus.broadcast(kept, root=0, inplace=True)
    assert same["k"][0] is kept["k"][0] and np.all(kept["k"][0] == 0)


def test_fused_split_collectives_of_nests():
    """scatter, reduce_scatter, all_to_all and gather of nests: one message per dtype, each leaf
    with its own shape and split, against closed forms."""
    rank, size = rank_size()
    n = 2 * size
    nest = {"v": np.arange(n, dtype=np.float32) + 100 * rank,
            "m": [torch.arange(n * 3, dtype=torch.float64).reshape(n, 3) + rank]}
    rs = chorus.reduce_scatter(nest)
    ranks_sum = size * (size - 1) // 2
    assert list(rs["v"]) == [size * i + 100 * ranks_sum for i in (2 * rank, 2 * rank + 1)]
    assert rs["m"][0].shape == (2, 3)
    assert torch.equal(rs["m"][0], size * torch.arange(n * 3, dtype=torch.float64).reshape(n, 3)
                       [2 * rank:2 * rank + 2] + ranks_sum)
    sc = chorus.scatter(nest, root=size - 1)
    assert list(sc["v"]) == [i + 100 * (size - 1) for i in (2 * rank, 2 * rank + 1)]
    assert torch.equal(sc["m"][0], torch.arange(n * 3, dtype=torch.float64).reshape(n, 3)
                       [2 * rank:2 * rank + 2] + size - 1)
    a2a = chorus.all_to_all({"t": (np.full((size, 2), rank, np.int64),)}, split_axis=0,
                            concat_axis=1)
    assert a2a["t"][0].shape == (1, 2 * size)
    assert list(a2a["t"][0][0]) == [r for r in range(size) for _ in range(2)]
    g = chorus.gather({"x": [np.full((1, 2), rank, np.int32)]}, root=0, axis=0)
    if rank == 0:
        assert g["x"][0].shape == (size, 2) and list(g["x"][0][:, 0]) == list(range(size))
    else:
        assert g["x"][0].shape == (1, 2)  # non-roots: the input back
    if size > 1:
        bad = size + 1  # never divisible by the group size
        with pytest.raises(ValueError, match=rf"x\['v'\] has shape \[{bad}\]: its dimension 0 "
                                             r"must be divisible by the group size"):
            chorus.reduce_scatter({"v": np.ones(bad, np.float32)})


def test_nests_that_differ_across_ranks_are_a_mismatch_error():
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs two ranks")
    nest = {"w": np.ones(2, np.float32)} if rank != 1 else {"v": np.ones(2, np.float32)}
    with pytest.raises(chorus.MismatchError,
                       match=r"at leaf 0, rank 0 has x\['w'\]: float32 \(2,\) and rank 1 has "
                             r"x\['v'\]"):
        chorus.allreduce(nest)
    chorus.barrier()  # the group still works


def test_pmap_with_in_axes_and_out_axes():
    rank, size = rank_size()
    x = np.arange(4 * size * 3, dtype=np.float64).reshape(4 * size, 3).T.copy()  # 3 x 4*size
    twice = chorus.pmap(lambda a, k: a * k, in_axes=(1, None), out_axes=1)(x, 2.0)
    assert np.array_equal(twice, x * 2)
    nested = chorus.pmap(lambda d: {"s": d["a"] + 1, "l": [d["a"][:0]]})({"a": x.T.copy()})
    assert np.array_equal(nested["s"], x.T + 1) and nested["l"][0].shape == (0, 3)
    total, mine = chorus.pmap(lambda a: (a.sum(axis=0, keepdims=True), a),
                              out_axes=[0, None])(x.T.copy())
    assert total.shape == (size, 3) and mine.shape == (4, 3)
    np.testing.assert_allclose(total.sum(axis=0), x.T.sum(axis=0))
    if size > 1:
        with pytest.raises(ValueError, match="must be divisible by the group size"):
            chorus.pmap(lambda a: a)(np.ones(size + 1))
