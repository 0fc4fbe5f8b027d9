"""Bad arguments (DESIGN §4): ValueError naming the argument and the valid choices, raised on every
rank before anything is sent, input untouched; the communicator keeps working afterwards.

Files run in name order and later ones (10 and up) share the communicator, so a binding that
wrongly aborts it on a bad argument fails them too; the failure here names the cause.
"""

import decimal
import numpy as np
import pytest
import torch

import chorus
from helpers import (ALL_OPS, assert_unchanged, check_result, make, reduce_exact, snapshot,
                     values)


@pytest.fixture
def x(rank):
    return make("numpy", values(rank, (4, 6), "float32"), "float32")


def check_intact_after(x, before, rank, size):
    assert_unchanged(x, before)
    probe = make("numpy", values(rank, (3,), "int32"), "int32")
    expected = reduce_exact("sum", [values(r, (3,), "int32") for r in range(size)], "int32")
    check_result(chorus.allreduce(probe), "numpy", "int32", expected)


@pytest.mark.parametrize("call", [
    lambda x: chorus.allreduce(x, "mean"),
    lambda x: chorus.allreduce(x, op="SUMM"),
    lambda x: chorus.allreduce([x, x], "average"),
    lambda x: chorus.reduce_scatter(x, "mean"),
    lambda x: chorus.reduce(x, root=0, op="mean"),
], ids=["allreduce", "allreduce-kw", "allreduce-list", "reduce_scatter", "reduce"])
def test_unknown_op_names_valid_ones(rank, size, x, call):
    before = snapshot(x)
    with pytest.raises(ValueError) as info:
        call(x)
    message = str(info.value)
    for op in ALL_OPS:
        assert op in message, f"{op!r} not named in: {message}"
    assert isinstance(info.value, chorus.InvalidArgumentError)
    check_intact_after(x, before, rank, size)


@pytest.mark.parametrize("op,dtype", [("band", "float32"), ("bxor", "float64"),
                                      ("bor", "float16"), ("avg", "bool")])
def test_op_invalid_for_dtype(rank, size, op, dtype):
    y = make("numpy", values(rank, (5,), dtype), dtype)
    before = snapshot(y)
    with pytest.raises(ValueError):
        chorus.allreduce(y, op)
    check_intact_after(y, before, rank, size)


def test_bitwise_on_bfloat16_tensor(rank, size):
    y = make("torch", values(rank, (5,), "bfloat16"), "bfloat16")
    before = snapshot(y)
    with pytest.raises(ValueError):
        chorus.allreduce(y, "band")
    check_intact_after(y, before, rank, size)


@pytest.mark.parametrize("call", [
    lambda x: chorus.allgather(x, axis=2),
    lambda x: chorus.allgather(x, axis=-3),
    lambda x: chorus.gather(x, root=0, axis=5),
    lambda x: chorus.all_to_all(x, split_axis=2, concat_axis=0),
    lambda x: chorus.all_to_all(x, split_axis=0, concat_axis=7),
], ids=["allgather", "allgather-neg", "gather", "all_to_all-split", "all_to_all-concat"])
def test_bad_axis(rank, size, x, call):
    before = snapshot(x)
    with pytest.raises(ValueError, match="axis"):
        call(x)
    check_intact_after(x, before, rank, size)


# C++ checks these (python/chorus checks only what C++ cannot see); the messages are the ones the
# package gave when it checked them itself.
@pytest.mark.parametrize("call,message", [
    (lambda x: chorus.allreduce(x, "band"),
     "allreduce: op 'band' applies to integer and bool tensors only, not float32; valid for "
     "float32: 'sum', 'prod', 'min', 'max', 'avg'"),
    (lambda x: chorus.reduce(np.zeros(3, bool), op="avg"),
     "reduce: op 'avg' is not defined on bool tensors; valid for bool: 'sum', 'prod', 'min', "
     "'max', 'band', 'bor', 'bxor'"),
    (lambda x: chorus.reduce_scatter([x] * _world_size(), op=None),
     "op must be one of 'sum', 'prod', 'min', 'max', 'avg', 'band', 'bor', 'bxor' ('band', "
     "'bor', 'bxor' for integer and bool tensors); got 'None'"),
    (lambda x: chorus.allgather(x, axis=2), "allgather: axis=2 is out of range for a tensor of 2 "
     "dimensions"),
    (lambda x: chorus.all_to_all(x, concat_axis=-3),
     "all_to_all: concat_axis=-3 is out of range for a tensor of 2 dimensions"),
    (lambda x: chorus.gather(np.float32(1)),
     "gather: axis: the tensor is 0-dimensional; this operation needs at least one dimension"),
    (lambda x: chorus.all_to_all(np.zeros((3 * _world_size() + 1, 2), np.float32)),
     "all_to_all needs dimension 0 ({}) to be divisible by the group size ({})"),
], ids=["bitwise-float", "avg-bool", "op-not-a-name", "axis", "concat_axis", "0-d", "split"])
def test_messages_of_the_checks_cpp_makes(rank, size, x, call, message):
    if "group size" in message and size == 1:
        pytest.skip("every extent divides among one rank")
    before = snapshot(x)
    with pytest.raises(chorus.InvalidArgumentError) as info:
        call(x)
    expected = message.format(3 * size + 1, size)
    assert expected in str(info.value), str(info.value)
    assert str(info.value).startswith(f"rank {rank} (this process): ") or "op must be" in expected
    check_intact_after(x, before, rank, size)


def test_a_negative_tag_is_refused_by_cpp(multi_rank, rank, size, x):
    with pytest.raises(chorus.InvalidArgumentError,
                       match=r"send: tag must be a non-negative int, not -1$"):
        chorus.send(x, (rank + 1) % size, tag=-1)
    with pytest.raises(chorus.InvalidArgumentError, match=r"^tag must be a non-negative int"):
        chorus.recv((rank + 1) % size, out=x, tag=1.5)
    check_intact_after(x, snapshot(x), rank, size)


def _world_size():
    return chorus.distributed.get_config().size


@pytest.mark.parametrize("name", ["broadcast", "reduce", "gather", "scatter"])
@pytest.mark.parametrize("bad", ["size", "negative"])
def test_invalid_root(rank, size, name, bad):
    root = size if bad == "size" else -1
    y = make("numpy", np.zeros((size * 2, 3)), "float64")
    before = snapshot(y)
    with pytest.raises(ValueError, match="root"):
        getattr(chorus, name)(y, root=root)
    check_intact_after(y, before, rank, size)


@pytest.mark.parametrize("peer_of", [lambda size: size, lambda size: -2, lambda size: size + 5],
                         ids=["size", "negative", "far"])
def test_invalid_peer(rank, size, x, peer_of):
    peer = peer_of(size)
    before = snapshot(x)
    with pytest.raises(ValueError, match="peer"):
        chorus.send(x, peer)
    with pytest.raises(ValueError, match="peer"):
        chorus.recv(peer, (4, 6), "float32")
    with pytest.raises(ValueError, match="peer"):
        chorus.recv(peer, out=np.zeros((4, 6), dtype=np.float32))
    check_intact_after(x, before, rank, size)


def test_recv_needs_shape_or_out(rank, size):
    with pytest.raises((ValueError, TypeError)):
        chorus.recv((rank + 1) % size)


def test_recv_unknown_dtype(rank, size):
    with pytest.raises(ValueError):
        chorus.recv((rank + 1) % size, (3,), "float128x")


def test_mixed_dtypes_in_list(rank, size):
    a = make("numpy", values(rank, (3,), "float32"), "float32")
    b = make("numpy", values(rank, (3,), "float64"), "float64")
    before_a, before_b = snapshot(a), snapshot(b)
    with pytest.raises(ValueError, match="dtype"):
        chorus.allreduce([a, b])
    assert_unchanged(a, before_a)
    check_intact_after(b, before_b, rank, size)


def test_mixed_kinds_same_dtype_in_list_or_error(rank, size):
    # Mixing NumPy and torch items of one dtype is either served (each item keeps its kind) or a
    # ValueError; it is never wrong data.
    a = make("numpy", values(rank, (3,), "int32"), "int32")
    b = make("torch", values(rank, (2,), "int32"), "int32")
    try:
        ra, rb = chorus.allreduce([a, b])
    except ValueError:
        return
    check_result(ra, "numpy", "int32",
                 reduce_exact("sum", [values(r, (3,), "int32") for r in range(size)], "int32"))
    check_result(rb, "torch", "int32",
                 reduce_exact("sum", [values(r, (2,), "int32") for r in range(size)], "int32"))


def test_reduce_scatter_not_divisible(multi_rank, rank, size):
    dim0 = 10 * size + 1
    y = make("numpy", np.zeros((dim0, 2)), "float32")
    before = snapshot(y)
    with pytest.raises(ValueError) as info:
        chorus.reduce_scatter(y)
    message = str(info.value)
    assert str(dim0) in message and str(size) in message, message
    check_intact_after(y, before, rank, size)


def test_reduce_scatter_list_wrong_length(rank, size):
    ys = [np.zeros((3,), dtype=np.float32) for _ in range(size + 1)]
    with pytest.raises(ValueError):
        chorus.reduce_scatter(ys)


def test_scatter_and_all_to_all_not_divisible(multi_rank, rank, size, x):
    y = make("numpy", np.zeros((10 * size + 1, 2)), "float32")
    with pytest.raises(ValueError):
        chorus.scatter(y, root=0)
    with pytest.raises(ValueError):
        chorus.all_to_all(y, split_axis=0, concat_axis=0)
    check_intact_after(x, snapshot(x), rank, size)


@pytest.mark.parametrize("bad", ["a string", decimal.Decimal("3.5"), None, [1, 2, 3]])
def test_non_array_input(rank, size, bad):
    """(A Python bool, int, float or complex is taken: test_43_python_numbers.py.)"""
    with pytest.raises((TypeError, ValueError)):
        chorus.allreduce(bad)


@pytest.mark.skipif(not torch.cuda.is_available() or chorus._chorus.gpu_backend,
                    reason="needs a CUDA device and a chorus built without NCCL (test_14_cuda.py "
                           "covers CUDA tensors with it)")
def test_cuda_tensor_is_unsupported_without_a_gpu_backend(rank, size):
    with pytest.raises(chorus.UnsupportedError):
        chorus.allreduce(torch.ones(3, device="cuda"))


def test_all_ranks_still_agree_at_the_end(rank, size):
    chorus.barrier()
    y = make("torch", values(rank, (7,), "int64"), "int64")
    expected = reduce_exact("max", [values(r, (7,), "int64") for r in range(size)], "int64")
    check_result(chorus.allreduce(y, "max"), "torch", "int64", expected)
