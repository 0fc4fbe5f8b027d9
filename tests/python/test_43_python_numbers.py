"""Python numbers in allreduce, reduce and broadcast (chorus/_scalars.py): `chorus.allreduce(n)`
returns a Python number of n's type, as mpi4py's lowercase `comm.allreduce(n)` does. Expected
values are closed forms of the ranks."""

import numpy as np
import pytest

import chorus
import chorus.distributed as dist


def exactly(got, expected):
    assert type(got) is type(expected) and got == expected, (got, expected)


def test_allreduce_of_each_kind(rank, size):
    exactly(chorus.allreduce(rank + 1), size * (size + 1) // 2)
    exactly(chorus.allreduce(0.25 * (rank + 1), "max"), 0.25 * size)
    exactly(chorus.allreduce(complex(rank, 1)), complex(size * (size - 1) // 2, size))
    exactly(chorus.allreduce(rank % 2 == 0, "band"), size == 1)
    exactly(chorus.allreduce(rank % 2 == 0, "bor"), True)
    exactly(chorus.allreduce(-rank, op="min"), -(size - 1))
    exactly(chorus.allreduce(2 * rank, "avg"), size - 1)
    exactly(chorus.allreduce(1 << 62, "bxor"), (1 << 62) if size % 2 else 0)


def test_reduce_to_every_root(rank, size):
    for root in range(size):
        got = chorus.reduce(float(rank), root=root)
        exactly(got, float(size * (size - 1) // 2) if rank == root else float(rank))


def test_broadcast_from_every_root(rank, size):
    for root in range(size):
        exactly(chorus.broadcast(rank * 1.5 - 7, root=root), root * 1.5 - 7)
        exactly(chorus.broadcast(rank, root, group=dist.new_group(list(range(size)))),
                root)


def test_types_that_differ_across_ranks_are_a_mismatch_on_every_rank(rank, size, multi_rank):
    group = dist.new_group(list(reversed(range(size))))
    try:
        with pytest.raises(chorus.MismatchError, match="dtype"):
            chorus.allreduce(1.0 if rank == 0 else 1, group=group)
    finally:
        dist.destroy_group(group)
    exactly(chorus.allreduce(1), size)


@pytest.mark.parametrize("call, why", [
    (lambda: chorus.allreduce(1.0, async_op=True), "async_op needs an array"),
    (lambda: chorus.allreduce(1, inplace=True, out=np.zeros(1)), "inplace and out= need an array"),
    (lambda: chorus.reduce(True, 0, "bor", None, True), "async_op needs an array"),
    (lambda: chorus.allreduce(1 << 63), "a Python int past int64"),
    (lambda: chorus.broadcast(-(1 << 63) - 1), "a Python int past int64"),
])
def test_what_needs_an_array_is_refused_before_anything_travels(call, why, size):
    with pytest.raises(chorus.InvalidArgumentError, match=why):
        call()
    exactly(chorus.allreduce(2), 2 * size)
