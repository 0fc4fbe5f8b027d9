"""chorus.scan (python/chorus/_scan.py): MPI's Scan and Exscan. Expected values are closed forms
of the ranks (sums of arithmetic series, products of ranks, extremes), or a NumPy reduction of the
rows every rank can compute for itself."""

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist


def test_sum_inclusive_and_exclusive(rank, size):
    x = np.array([rank + 1, 2 * (rank + 1)], np.int64)
    np.testing.assert_array_equal(chorus.scan(x), [(rank + 1) * (rank + 2) // 2,
                                                   (rank + 1) * (rank + 2)])
    got = chorus.scan(x, exclusive=True)
    np.testing.assert_array_equal(got, [rank * (rank + 1) // 2, rank * (rank + 1)])
    assert got.dtype == np.int64 and got.shape == (2,)


def test_offsets_of_uneven_counts(rank, size):
    """The usual use: where this rank's rows start in a file every rank writes to."""
    counts = [3 * r + 1 for r in range(size)]
    start = chorus.scan(np.array([counts[rank]]), exclusive=True)[0]
    assert start == sum(counts[:rank])


@pytest.mark.parametrize("op, dtype, value, expected", [
    ("prod", np.float64, lambda r: r + 1.0, lambda r: float(np.prod(np.arange(1, r + 2)))),
    ("min", np.int32, lambda r: 10 - r, lambda r: 10 - r),
    ("max", np.float32, lambda r: (r % 2) * 5.0, lambda r: 5.0 if r >= 1 else 0.0),
    ("bxor", np.uint8, lambda r: 1 << r, lambda r: (1 << (r + 1)) - 1),
    ("bor", np.int16, lambda r: 1 << r, lambda r: (1 << (r + 1)) - 1),
    ("band", np.int64, lambda r: -1 ^ (1 << r), lambda r: -1 ^ ((1 << (r + 1)) - 1)),
    ("sum", np.int8, lambda r: 100, lambda r: np.int8(np.int64(100 * (r + 1)).astype(np.int8))),
])
def test_each_op(rank, op, dtype, value, expected):
    x = np.full((2, 3), value(rank), dtype)
    got = chorus.scan(x, op)
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3)
    np.testing.assert_array_equal(got, np.full((2, 3), expected(rank), dtype))


@pytest.mark.parametrize("op, dtype, identity", [
    ("sum", np.float32, 0), ("prod", np.int32, 1), ("min", np.float64, np.inf),
    ("max", np.int16, -32768), ("band", np.uint8, 255), ("bor", np.bool_, False),
    ("min", np.bool_, True), ("max", np.uint64, 0),
])
def test_exclusive_gives_rank_zero_the_identity(rank, op, dtype, identity):
    x = np.ones(4, dtype)
    got = chorus.scan(x, op, exclusive=True)
    if rank == 0:
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, np.full(4, identity, dtype))


def test_torch_tensors_and_half_types(rank, size):
    x = torch.full((3,), float(rank + 1), dtype=torch.bfloat16)
    got = chorus.scan(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    assert torch.equal(got, torch.full((3,), float((rank + 1) * (rank + 2) // 2),
                                       dtype=torch.bfloat16))
    ints = chorus.scan(torch.tensor([rank], dtype=torch.int64), "max", exclusive=True)
    assert ints.tolist() == [rank - 1 if rank else torch.iinfo(torch.int64).min]


def test_group_ranks_order_the_prefix(rank, size):
    """With a group, the prefix runs in group-rank order (here, the world's ranks reversed)."""
    group = dist.new_group(list(reversed(range(size))))
    me = size - 1 - rank
    got = chorus.scan(np.array([rank], np.int64), group=group)
    assert got[0] == sum(size - 1 - g for g in range(me + 1))


@pytest.mark.parametrize("call, why", [
    (lambda: chorus.scan(np.ones(2), "avg"), "op must be one of"),
    (lambda: chorus.scan(np.ones(2), "band"), "needs integer or bool data"),
    (lambda: chorus.scan(np.ones(2, np.complex64), "min"), "no order"),
    (lambda: chorus.scan([1, 2]), "x must be a NumPy array or a torch tensor, not list"),
    (lambda: chorus.scan(np.ones(2), exclusive=1), "exclusive must be a bool"),
])
def test_bad_arguments_are_refused_before_anything_travels(call, why, size):
    with pytest.raises(chorus.InvalidArgumentError, match=why):
        call()
    assert chorus.allreduce(np.ones(1))[0] == size


def test_shapes_that_differ_across_ranks_are_a_mismatch_on_every_rank(rank, size, multi_rank):
    group = dist.new_group(list(reversed(range(size))))
    try:
        with pytest.raises(chorus.MismatchError):
            chorus.scan(np.ones(2 if rank == 0 else 3), group=group)
    finally:
        dist.destroy_group(group)
