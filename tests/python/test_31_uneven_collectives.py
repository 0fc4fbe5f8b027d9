"""The uneven forms: all_to_all with splits (Horovod's alltoall, MPI's Alltoallv) and allgather with
uneven=True (Horovod's allgather, MPI's Allgatherv).

Expected values are closed forms of (sender, receiver, row): rank q sends rank p (q + 2p) % 3 rows
(so some pairs send none), row k of them being [q, p, k]. Every rank runs every test; skips depend
on the size only.
"""

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist
import chorus.torch.nn.functional as cf
from chorus import _uneven
from helpers import CUDA, cuda_device


@pytest.fixture(params=["padded", "native"])
def rows_path(request, monkeypatch):
    """Host rows take the native all_to_all_v; CUDA rows one padded even all_to_all, which tests
    run on host arrays too: each test that uses this runs both."""
    monkeypatch.setattr(_uneven, "_PADDED_ON_HOST", request.param == "padded")
    return request.param


def rows_between(q, p):
    return (q + 2 * p) % 3


def outgoing(rank, size, kind):
    """This rank's rows for every rank, concatenated in rank order, and the splits."""
    splits = [rows_between(rank, p) for p in range(size)]
    rows = [[rank, p, k] for p in range(size) for k in range(splits[p])]
    array = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return (torch.from_numpy(array) if kind == "torch" else array), splits


def incoming(rank, size):
    """What this rank must receive, and from how many each."""
    splits = [rows_between(q, rank) for q in range(size)]
    rows = [[q, rank, k] for q in range(size) for k in range(splits[q])]
    return np.array(rows, dtype=np.int64).reshape(-1, 3), splits


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_all_to_all_with_splits_sends_each_rank_its_rows(comm, rows_path, kind):
    x, splits = outgoing(comm.rank, comm.size, kind)
    y, received = chorus.all_to_all(x, splits=splits)
    expected, expected_splits = incoming(comm.rank, comm.size)
    assert received == expected_splits
    assert isinstance(y, torch.Tensor if kind == "torch" else np.ndarray)
    np.testing.assert_array_equal(np.asarray(y), expected)


def test_all_to_all_with_splits_float_rows_and_checked_recv_splits(comm, rows_path):
    """Rows of two dimensions each, and recv_splits that agree: the same rows arrive."""
    splits = [rows_between(comm.rank, p) for p in range(comm.size)]
    x = np.concatenate([np.full((n, 2, 2), 10.0 * comm.rank + p, dtype=np.float32)
                        for p, n in enumerate(splits)] + [np.zeros((0, 2, 2), np.float32)])
    _, expected_splits = incoming(comm.rank, comm.size)
    y, received = chorus.all_to_all(x, splits=splits, recv_splits=expected_splits)
    assert received == expected_splits
    expected = np.concatenate([np.full((n, 2, 2), 10.0 * q + comm.rank, dtype=np.float32)
                               for q, n in enumerate(expected_splits)]
                              + [np.zeros((0, 2, 2), np.float32)])
    np.testing.assert_array_equal(y, expected)


def test_all_to_all_with_splits_async(comm, rows_path):
    x, splits = outgoing(comm.rank, comm.size, "torch")
    work = chorus.all_to_all(x, splits=splits, async_op=True)
    y, received = work.wait()
    expected, expected_splits = incoming(comm.rank, comm.size)
    assert received == expected_splits
    np.testing.assert_array_equal(y.numpy(), expected)


def test_the_rows_do_not_meet_the_programs_own_messages(comm, multi_rank, monkeypatch):
    """A message the program sent on the group (tag 0) before an all_to_all with splits, and
    receives after it, reaches that receive: the rows travel as a collective, apart from the
    program's messages, so the all_to_all does not take it. (A row of three int64 from the left
    neighbour has the very size of the program's message.)"""
    left, right = (comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size
    sent = chorus.send(np.array([-1, comm.rank, right], dtype=np.int64), right, async_op=True)
    x, splits = outgoing(comm.rank, comm.size, "numpy")
    y, _ = chorus.all_to_all(x, splits=splits)
    got = chorus.recv(left, shape=(3,), dtype="int64")
    sent.wait()
    np.testing.assert_array_equal(y, incoming(comm.rank, comm.size)[0])
    np.testing.assert_array_equal(got, [-1, left, comm.rank])


def test_all_to_all_with_splits_of_large_rows(comm, rows_path):
    """Rows of 5000 float64 (40 KB each: past the shared-memory backend's small slot, so they are
    read from the sender's memory), row k from q to p holding q * 1e6 + p * 1e4 + k + i / 1e4 at
    column i."""
    columns = np.arange(5000) / 1e4
    splits = [rows_between(comm.rank, p) for p in range(comm.size)]
    x = np.concatenate([comm.rank * 1e6 + p * 1e4 + k + columns
                        for p in range(comm.size) for k in range(splits[p])] or
                       [np.empty(0)]).reshape(-1, 5000)
    y, received = chorus.all_to_all(x, splits=splits)
    expected_splits = [rows_between(q, comm.rank) for q in range(comm.size)]
    assert received == expected_splits
    expected = [q * 1e6 + comm.rank * 1e4 + k + columns
                for q in range(comm.size) for k in range(expected_splits[q])]
    np.testing.assert_array_equal(y, np.array(expected).reshape(-1, 5000))


def test_all_to_all_with_splits_in_a_group(comm, rows_path, multi_rank):
    """group= : splits and the received counts go by group rank (here world rank size - 1 - g)."""
    group = dist.new_group(list(range(comm.size - 1, -1, -1)))
    x, splits = outgoing(group.rank, group.size, "numpy")
    y, received = chorus.all_to_all(x, splits=splits, group=group)
    expected, expected_splits = incoming(group.rank, group.size)
    assert received == expected_splits
    np.testing.assert_array_equal(y, expected)


def test_recv_splits_that_disagree_fail_on_every_rank(comm, multi_rank):
    """Rank 1 expects one row more from rank 0 than rank 0 sends: every rank raises, naming the
    pair; the group goes on."""
    x, splits = outgoing(comm.rank, comm.size, "numpy")
    _, expects = incoming(comm.rank, comm.size)
    if comm.rank == 1:
        expects[0] += 1
    sent = rows_between(0, 1)
    with pytest.raises(chorus.MismatchError,
                       match=f"group rank 0 sends {sent} rows to group rank 1, which expects "
                             f"{sent + 1}"):
        chorus.all_to_all(x, splits=splits, recv_splits=expects)
    chorus.barrier()


def test_recv_splits_on_one_rank_only(comm, rows_path, multi_rank):
    """Only the last rank passes recv_splits (right ones): every rank still takes the same steps."""
    x, splits = outgoing(comm.rank, comm.size, "numpy")
    expected, expected_splits = incoming(comm.rank, comm.size)
    recv_splits = expected_splits if comm.rank == comm.size - 1 else None
    y, received = chorus.all_to_all(x, splits=splits, recv_splits=recv_splits)
    assert received == expected_splits
    np.testing.assert_array_equal(y, expected)


def test_bad_splits_on_one_rank_fail_on_every_rank(comm, multi_rank):
    x, splits = outgoing(comm.rank, comm.size, "numpy")
    if comm.rank == comm.size - 1:
        with pytest.raises(chorus.InvalidArgumentError, match="splits add up to"):
            chorus.all_to_all(x, splits=[n + 1 for n in splits])
    else:
        with pytest.raises(chorus.MismatchError,
                           match=f"group rank {comm.size - 1}'s call was refused"):
            chorus.all_to_all(x, splits=splits)
    chorus.barrier()


@pytest.mark.parametrize("bad", ["dtype", "zero_dimensions", "huge_split", "recv_splits"])
def test_a_call_one_rank_refuses_fails_on_every_rank(comm, multi_rank, bad):
    """What the last rank passes is refused there (a ValueError naming it); the others raise a
    MismatchError naming that rank, instead of waiting for it until the timeout."""
    x, splits = outgoing(comm.rank, comm.size, "numpy")
    recv_splits = None
    if comm.rank == comm.size - 1:
        if bad == "dtype":
            x = x.astype(np.clongdouble)
        elif bad == "zero_dimensions":
            x = np.float32(1.0)
        elif bad == "huge_split":
            splits = [float("inf")] * comm.size
        else:
            recv_splits = [-1] * comm.size
    if comm.rank == comm.size - 1:
        with pytest.raises((chorus.InvalidArgumentError, chorus.UnsupportedError)):
            chorus.all_to_all(x, splits=splits, recv_splits=recv_splits)
    else:
        with pytest.raises(chorus.MismatchError,
                           match=f"group rank {comm.size - 1}'s call was refused"):
            chorus.all_to_all(x, splits=splits, recv_splits=recv_splits)
    chorus.barrier()


def test_the_padded_path_of_cuda_arrays_sends_the_same_rows(comm, monkeypatch):
    """CUDA rows take one even all_to_all padded to the largest pair (run here on host arrays)."""
    monkeypatch.setattr(_uneven, "_PADDED_ON_HOST", True)
    for kind in ("numpy", "torch"):
        x, splits = outgoing(comm.rank, comm.size, kind)
        y, received = chorus.all_to_all(x, splits=splits)
        expected, expected_splits = incoming(comm.rank, comm.size)
        assert received == expected_splits
        np.testing.assert_array_equal(np.asarray(y), expected)
    y, received = chorus.all_to_all(x, splits=splits, async_op=True).wait()
    np.testing.assert_array_equal(y.numpy(), expected)


def test_rows_of_different_shapes_fail_on_every_rank(comm, multi_rank):
    width = 3 if comm.rank == 0 else 4
    splits = [1] * comm.size
    with pytest.raises(chorus.MismatchError, match="different dtypes, devices or dimensions"):
        chorus.all_to_all(np.zeros((comm.size, width), np.float32), splits=splits)
    chorus.barrier()


def test_all_to_all_with_splits_refuses_what_it_cannot_do(comm):
    x = np.zeros((comm.size, 2), np.float32)
    ones = [1] * comm.size
    with pytest.raises(chorus.InvalidArgumentError, match="split_axis and concat_axis must be 0"):
        chorus.all_to_all(x, split_axis=1, splits=ones)
    with pytest.raises(chorus.InvalidArgumentError, match="does not take out="):
        chorus.all_to_all(x, splits=ones, out=np.zeros_like(x))
    with pytest.raises(chorus.InvalidArgumentError, match="recv_splits needs splits"):
        chorus.all_to_all(x, recv_splits=ones)


def test_differentiable_all_to_all_with_splits_sends_each_gradient_back(comm, rows_path):
    """chorus.torch.nn.functional.all_to_all with splits (a mixture of experts' dispatch): each
    rank's loss weighs the row k it got from rank q by 100 q + 10 (its rank) + k, so the gradient
    of every rank's loss with respect to rank q's row k for rank p is 100 q + 10 p + k."""
    x, splits = outgoing(comm.rank, comm.size, "torch")
    x = x.double().requires_grad_()
    y, received = cf.all_to_all(x, splits=splits)
    expected, expected_splits = incoming(comm.rank, comm.size)
    assert received == expected_splits
    np.testing.assert_array_equal(y.detach().numpy(), expected)
    weights = torch.tensor([[100.0 * q + 10 * comm.rank + k] * 3
                            for q in range(comm.size) for k in range(rows_between(q, comm.rank))],
                           dtype=torch.float64).reshape(-1, 3)
    (y * weights).sum().backward()
    gradient = torch.tensor([[100.0 * comm.rank + 10 * p + k] * 3
                             for p in range(comm.size) for k in range(splits[p])],
                            dtype=torch.float64).reshape(-1, 3)
    assert torch.equal(x.grad, gradient)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_uneven_allgather_concatenates_every_rank(comm, kind, rows_path):
    """Rank r gives r + 1 rows [r, k] (rank 0's first row counts from 0)."""
    mine = np.array([[comm.rank, k] for k in range(comm.rank + 1)], dtype=np.float64)
    x = torch.from_numpy(mine) if kind == "torch" else mine
    y = chorus.allgather(x, uneven=True)
    expected = np.array([[r, k] for r in range(comm.size) for k in range(r + 1)], np.float64)
    assert isinstance(y, torch.Tensor if kind == "torch" else np.ndarray)
    np.testing.assert_array_equal(np.asarray(y), expected)


def test_uneven_allgather_of_large_rows_async(comm, rows_path):
    """Rank r gives 2r rows of 5000 float64 (rank 0 none), row k holding r * 1e4 + k + i / 1e4 at
    column i: past the shared-memory backend's small slot."""
    columns = np.arange(5000) / 1e4
    mine = np.array([comm.rank * 1e4 + k + columns for k in range(2 * comm.rank)]).reshape(-1, 5000)
    y = chorus.allgather(mine, uneven=True, async_op=True).wait()
    expected = [r * 1e4 + k + columns for r in range(comm.size) for k in range(2 * r)]
    np.testing.assert_array_equal(y, np.array(expected).reshape(-1, 5000))


def test_uneven_allgather_along_axis_1_async_and_even(comm):
    mine = np.full((2, comm.rank % 2 + 1), comm.rank, dtype=np.int32)
    y = chorus.allgather(mine, axis=1, uneven=True, async_op=True).wait()
    expected = np.concatenate([np.full((2, r % 2 + 1), r, np.int32) for r in range(comm.size)], 1)
    np.testing.assert_array_equal(y, expected)
    # Equal extents take the plain allgather.
    even = chorus.allgather(np.full((2,), comm.rank, np.int32), uneven=True)
    np.testing.assert_array_equal(even, np.repeat(np.arange(comm.size, dtype=np.int32), 2))


def test_an_uneven_allgather_one_rank_refuses_fails_on_every_rank(comm, multi_rank):
    x = np.zeros((comm.rank + 1, 2), np.float32)
    if comm.rank == comm.size - 1:
        with pytest.raises(chorus.InvalidArgumentError, match="axis 5 is out of range"):
            chorus.allgather(x, axis=5, uneven=True)
    else:
        with pytest.raises(chorus.MismatchError,
                           match=f"group rank {comm.size - 1}'s call was refused"):
            chorus.allgather(x, uneven=True)
    chorus.barrier()


def test_uneven_allgather_of_arrays_that_differ_elsewhere_fails_on_every_rank(comm, multi_rank):
    x = np.zeros((comm.rank + 1, 3 if comm.rank == 0 else 2), np.float32)
    with pytest.raises(chorus.MismatchError, match="group ranks 0 and 1 have arrays of different"):
        chorus.allgather(x, uneven=True)
    chorus.barrier()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device and chorus built with NCCL")
def test_cuda_rows_gradients_and_uneven_allgather(comm):
    """CUDA tensors: the rows through the padded all_to_all on NCCL, their gradients back, the
    uneven allgather; a CUDA rank and a host rank are a MismatchError on every rank."""
    device = cuda_device()
    x, splits = outgoing(comm.rank, comm.size, "torch")
    y, received = chorus.all_to_all(x.to(device), splits=splits)
    expected, expected_splits = incoming(comm.rank, comm.size)
    assert y.is_cuda and received == expected_splits
    np.testing.assert_array_equal(y.cpu().numpy(), expected)
    leaf = x.double().to(device).requires_grad_()
    z, _ = cf.all_to_all(leaf, splits=splits)
    (z * 2).sum().backward()
    assert torch.equal(leaf.grad.cpu(), torch.full(x.shape, 2.0, dtype=torch.float64))
    mine = torch.tensor([[comm.rank, k] for k in range(comm.rank + 1)], dtype=torch.float32)
    gathered = chorus.allgather(mine.to(device), uneven=True)
    assert gathered.is_cuda
    np.testing.assert_array_equal(
        gathered.cpu().numpy(),
        np.array([[r, k] for r in range(comm.size) for k in range(r + 1)], np.float32))
    if comm.size > 1:
        mixed = x if comm.rank == 0 else x.to(device)
        with pytest.raises(chorus.MismatchError, match="devices"):
            chorus.all_to_all(mixed, splits=splits)
        chorus.barrier()
