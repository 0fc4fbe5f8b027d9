"""chorus.allreduce_loc (python/chorus/_loc.py): MPI's MINLOC and MAXLOC. Expected values and
ranks are closed forms of the ranks: a value that peaks at a known rank, ties that go to the
lowest rank, and NaNs that win."""

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist


def test_min_and_max_name_the_rank_that_holds_them(rank, size):
    # element e is smallest on rank (e % size) and largest on rank (size - 1 - e % size)
    x = np.array([abs(rank - e % size) for e in range(6)], np.float64)
    values, ranks = chorus.allreduce_loc(x, "min")
    np.testing.assert_array_equal(values, np.zeros(6))
    np.testing.assert_array_equal(ranks, [e % size for e in range(6)])
    assert values.dtype == np.float64 and ranks.dtype == np.int64
    values, ranks = chorus.allreduce_loc(-x.astype(np.int32), "max")
    np.testing.assert_array_equal(ranks, [e % size for e in range(6)])
    assert values.dtype == np.int32


def test_a_tie_goes_to_the_lowest_rank_and_a_nan_wins(rank, size):
    x = np.array([7.0, np.nan if rank >= size // 2 else 1.0, 3.0 - (rank > 0)], np.float32)
    values, ranks = chorus.allreduce_loc(x, "min")
    np.testing.assert_array_equal(ranks, [0, size // 2, 1 if size > 1 else 0])
    assert np.isnan(values[1]) and values[0] == 7.0
    values, ranks = chorus.allreduce_loc(x, "max")
    assert ranks[0] == 0 and ranks[1] == size // 2


def test_torch_tensors_and_a_group(rank, size):
    group = dist.new_group(list(reversed(range(size))))
    me = size - 1 - rank  # group rank
    values, ranks = chorus.allreduce_loc(torch.tensor([float(me), -float(me)]), "max",
                                         group=group)
    assert isinstance(values, torch.Tensor) and values.tolist() == [size - 1.0, 0.0]
    assert ranks.tolist() == [size - 1, 0]  # group ranks


@pytest.mark.parametrize("call, why", [
    (lambda: chorus.allreduce_loc(np.ones(2), "sum"), "op must be 'min' or 'max'"),
    (lambda: chorus.allreduce_loc(np.ones(2, np.complex64)), "has no order"),
    (lambda: chorus.allreduce_loc(torch.ones(2, dtype=torch.bool)), "has no order"),
    (lambda: chorus.allreduce_loc(3.5), "x must be a NumPy array or a torch tensor, not float"),
])
def test_bad_arguments_are_refused_before_anything_travels(call, why, size):
    with pytest.raises(chorus.InvalidArgumentError, match=why):
        call()
    assert chorus.allreduce(np.ones(1))[0] == size
