"""rank_list groups (DESIGN §4): a list of lists of world ranks, or a flat list (one group); ranks in
no group run standalone and get their input back; roots are world ranks of the caller's group."""

import numpy as np
import pytest

import chorus
import chorus.distributed as dist
from helpers import check_result, make, reduce_exact, values


def parity_groups(size):
    groups = [list(range(0, size, 2)), list(range(1, size, 2))]
    return [g for g in groups if g]


def my_group(groups, rank):
    return next(g for g in groups if rank in g)


def test_whole_world_rank_list(rank, size):
    x = make("numpy", values(rank, (5,), "int32"), "int32")
    expected = reduce_exact("sum", [values(r, (5,), "int32") for r in range(size)], "int32")
    check_result(chorus.allreduce(x, rank_list=[list(range(size))]), "numpy", "int32", expected)
    check_result(chorus.allreduce(x, rank_list=list(range(size))), "numpy", "int32", expected)


def test_parity_groups_allreduce_and_communicator(rank, size):
    groups = parity_groups(size)
    group = my_group(groups, rank)
    comm = dist.get_communicator(rank_list=groups)
    assert comm.size == len(group)
    assert comm.rank == group.index(rank)
    assert comm.world_rank == rank and comm.world_size == size
    assert comm.group_id == groups.index(group)
    assert comm.group_size == len(groups)
    assert comm.root_rank == group[0]
    x = make("torch", values(rank, (3, 2), "float32"), "float32")
    expected = reduce_exact("sum", [values(r, (3, 2), "float32") for r in group], "float32")
    check_result(chorus.allreduce(x, "sum", rank_list=groups), "torch", "float32", expected)


def test_parity_groups_broadcast_allgather(rank, size):
    groups = parity_groups(size)
    group = my_group(groups, rank)
    root = group[-1]  # a world rank of the caller's own group
    x = make("numpy", values(rank, (4,), "int64"), "int64")
    check_result(chorus.broadcast(x, root=root, rank_list=groups), "numpy", "int64",
                 values(root, (4,), "int64"))
    expected = np.concatenate([values(r, (4,), "int64") for r in group])
    check_result(chorus.allgather(x, rank_list=groups), "numpy", "int64", expected)


def test_rank_outside_every_group_runs_standalone(rank, size):
    group = list(range(size - 1)) if size > 1 else [0]
    x = make("numpy", values(rank, (6,), "float64"), "float64")
    result = chorus.allreduce(x, "sum", rank_list=[group])
    if rank in group:
        expected = reduce_exact("sum", [values(r, (6,), "float64") for r in group], "float64")
    else:
        expected = values(rank, (6,), "float64")
    check_result(result, "numpy", "float64", expected)


def test_rank_twice_is_value_error(rank, size):
    x = np.ones((2,), dtype=np.float32)
    with pytest.raises(ValueError, match="once"):
        chorus.allreduce(x, rank_list=[[0], [0]])


def test_a_rank_list_seen_before_is_checked_as_written(rank, size):
    """The cache keyed on the rank_list as written (python/chorus/_groups.py) serves a list seen
    before, and the same list mutated since, by its current content; a bool never passes for the
    int it hashes as, and a bad list is refused every time, not only the first."""
    from chorus import _groups
    groups = [[r] for r in range(size)]
    assert _groups.get(groups) is _groups.get([[r] for r in range(size)])
    assert _groups.get(groups).size == 1
    groups[:] = [list(range(size))]  # now the whole world
    assert _groups.get(groups).size == size
    x = np.ones((2,), dtype=np.float32)
    chorus.allreduce(x, rank_list=[list(range(size))])  # cached as (0, 1, ...)
    for _ in range(2):
        with pytest.raises(chorus.InvalidArgumentError, match="not an int"):
            chorus.allreduce(x, rank_list=[[False] + list(range(1, size))])  # False == 0
        with pytest.raises(ValueError, match="once"):
            chorus.allreduce(x, rank_list=[[0], [0]])
