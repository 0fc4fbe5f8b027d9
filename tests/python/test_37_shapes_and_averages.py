"""Calls whose element counts agree but whose shapes differ across ranks, and integer averages.

Found by an audit: an allgather of a (2, 3) array on one rank and a (3, 2) array on another, a
nest {"a": 2 elements, "b": 3} against {"a": 3, "b": 2}, and DistributedDataParallel over a
Linear(4, 2) on one rank and a Linear(2, 4) on another (which now, as torch's, checks the
parameters' shapes across ranks first) all returned wrong data without an error;
and allreduce(int8, "avg") of 127 on every rank returned -1. The shape mismatches are now a
MismatchError on every rank (the fingerprint's shape signature, Note [Shape signature]; the nest
check's shapes), and integer averages are summed in int64 (Note [Integer averages]).

A mismatch in a collective fails its communicator for good, so those tests run on a group of their
own (new_group), and the world stays usable for the tests after them.
"""

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist
import chorus.torch  # noqa: F401  (chorus.torch.DistributedDataParallel)
from helpers import rank_size


@pytest.fixture
def own_group():
    """Every rank, in reverse order: a communicator of its own (the world's order is the world),
    destroyed afterwards, so that each test's mismatch is its own (a failed communicator repeats
    its first error to every later call)."""
    _, size = rank_size()
    group = dist.new_group(list(reversed(range(size))))
    yield group
    dist.destroy_group(group)


@pytest.mark.parametrize("operation", ["allreduce", "allgather", "broadcast", "all_to_all"])
def test_same_count_different_shape_is_a_mismatch_on_every_rank(operation, own_group):
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs two ranks")
    group = own_group
    shape = (size, 4) if rank == size - 1 else (2 * size, 2)  # group rank 0 differs
    x = np.ones(shape, np.float32)
    call = {"allreduce": lambda: chorus.allreduce(x, group=group),
            "allgather": lambda: chorus.allgather(x, group=group),
            "broadcast": lambda: chorus.broadcast(x, 0, group=group),  # world rank size - 1
            "all_to_all": lambda: chorus.all_to_all(x, group=group)}[operation]
    with pytest.raises(chorus.MismatchError, match="shape is signature"):
        call()
        chorus.barrier(group=group)  # a broadcast's root may finish first: it raises here
    chorus.barrier()  # the world is untouched


def test_allgather_along_different_axes_is_a_mismatch(own_group):
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs two ranks")
    group = own_group
    with pytest.raises(chorus.MismatchError, match="shapes or the axes differ"):
        chorus.allgather(np.ones((2, 2), np.float32), axis=0 if rank == 0 else 1, group=group)


def test_nest_leaves_of_the_same_total_but_different_shapes_are_a_mismatch():
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs two ranks")
    nest = ({"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)} if rank == 0 else
            {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)})
    for call in (chorus.allreduce, lambda x: chorus.broadcast(x, 0)):
        with pytest.raises(chorus.MismatchError,
                           match=r"at leaf 0, rank 0 has x\['a'\]: float32 \(2,\) and rank 1 has "
                                 r"x\['a'\]: float32 \(3,\)"):
            call(nest)
    chorus.barrier()  # the nest check is a collective of its own: the world still works


def test_data_parallel_over_differently_shaped_parameters_is_a_mismatch():
    rank, size = rank_size()
    if size < 2:
        pytest.skip("needs two ranks")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2) if rank == 0 else torch.nn.Linear(2, 4)
    with pytest.raises(chorus.MismatchError,
                       match=r"DistributedDataParallel of a model: the parameters differ across "
                             r"ranks; at leaf 0, rank 0 has 'weight': torch\.float32 \(2, 4\) and "
                             r"rank 1 has 'weight': torch\.float32 \(4, 2\)"):
        chorus.torch.DistributedDataParallel(model)
    chorus.barrier()  # checked before anything moved: the world still works


def _truncated_mean(values):
    total = sum(values)
    quotient = abs(total) // len(values)
    return quotient if total >= 0 else -quotient


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("operation", ["allreduce", "reduce_scatter", "reduce"])
def test_integer_average_does_not_overflow(dtype, kind, operation):
    rank, size = rank_size()
    info = np.iinfo(dtype)
    # Near the top and the bottom of the type, once per rank's chunk for reduce_scatter: their
    # sums overflow the type on two ranks or more.
    values = [[int(info.max) - r, int(info.min) + r] * size for r in range(size)]
    x = np.array(values[rank], dtype)
    if kind == "torch":
        x = torch.from_numpy(x)
    expected = [_truncated_mean([v[i] for v in values]) for i in range(2 * size)]
    if operation == "allreduce":
        y = chorus.allreduce(x, "avg")
    elif operation == "reduce_scatter":
        y = chorus.reduce_scatter(x, "avg")
        expected = expected[2 * rank:2 * rank + 2]
    else:
        y = chorus.reduce(x, 0, "avg")
        if rank != 0:
            expected = values[rank]  # non-roots get their input back
    assert [int(v) for v in y] == expected
    assert str(y.dtype).endswith(dtype)
