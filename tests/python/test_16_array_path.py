"""The short paths of blocking allreduce, broadcast and allgather of one NumPy array
(python/src/short_calls.cc), and the fronts that take them (python/src/front_calls.cc).

chorus.allreduce, broadcast, allgather and barrier are CPython functions that hand the plain case
straight to C++ (the code of `_chorus.allreduce_array`, `broadcast_array`, `allgather_array`,
`barrier_world`), which answers NotImplemented for anything it does not take, so the package's
general path handles it. These tests check both sides of that
line: the short paths give the closed-form result for every NumPy dtype, with a fresh output, out=
and (allreduce, broadcast) in place; and they decline (NotImplemented, nothing sent) every case the
general path must see, so their behaviour is the general path's.
"""

import inspect

import numpy as np
import pytest
import torch

import chorus
from chorus import _chorus, _groups

from helpers import NP_DTYPES, exact_sum, rank_size, spy_on_general_paths, summable


def _native():
    return _groups.get(None)._native


@pytest.mark.parametrize("dtype", NP_DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 70001])
def test_the_short_path_reduces_every_dtype(dtype, n):
    rank, size = rank_size()
    x = summable(dtype, rank, n)
    before = x.copy()
    fresh = _chorus.allreduce_array(_native(), x, None, "sum")
    assert fresh is not NotImplemented and type(fresh) is np.ndarray
    assert fresh.dtype == x.dtype and fresh.shape == x.shape
    np.testing.assert_array_equal(fresh, exact_sum(dtype, size, n))
    out = np.full_like(x, 1)
    assert _chorus.allreduce_array(_native(), x, out, "sum") is out
    np.testing.assert_array_equal(out, exact_sum(dtype, size, n))
    np.testing.assert_array_equal(x, before)
    assert _chorus.allreduce_array(_native(), x, x, "sum") is x  # in place
    np.testing.assert_array_equal(x, exact_sum(dtype, size, n))


def test_the_package_takes_the_short_path(monkeypatch):
    """chorus.allreduce of a plain NumPy array on the world, blocking or async, never reaches the
    general path (python/src/front_calls.cc takes it); every other call does."""
    rank, size = rank_size()
    calls = spy_on_general_paths(monkeypatch, ["_allreduce"])
    x = np.ones(5, np.float32)
    out = np.empty_like(x)
    assert chorus.allreduce(x, out=out) is out
    assert chorus.allreduce(x, inplace=True) is x
    y = chorus.allreduce(x, "max")
    z = chorus.allreduce(x=x, op="max", rank_list=None, async_op=False, inplace=False,
                         synchronize=False, out=None)
    w = chorus.allreduce(x, "max", async_op=True).wait()
    assert calls == []
    np.testing.assert_array_equal(out, np.full(5, size, np.float32))
    np.testing.assert_array_equal(y, np.full(5, size, np.float32))
    np.testing.assert_array_equal(z, np.full(5, size, np.float32))
    np.testing.assert_array_equal(w, np.full(5, size, np.float32))
    chorus.allreduce(x, synchronize=True)
    chorus.allreduce(np.ones(16, np.float32)[::2])  # declined by the short path itself
    assert calls == ["_allreduce"] * 2  # (rank_list=: test_34)


def test_the_fronts_bind_arguments_as_python_does():
    """The fronts are CPython functions with the signatures of the package's functions: the same
    parameters and defaults, and Python's own TypeErrors for calls that do not bind."""
    rank, size = rank_size()
    x = np.ones(3, np.float32)
    assert str(inspect.signature(chorus.allreduce)) == (
        "(x, op='sum', rank_list=None, async_op=False, inplace=False, synchronize=False, "
        "out=None, group=None)")
    assert str(inspect.signature(chorus.barrier)) == (
        "(rank_list=None, async_op=False, synchronize=False, group=None)")
    assert "element-wise" in chorus.allreduce.__doc__
    np.testing.assert_array_equal(chorus.allreduce(x, "sum", None, False, False, False, None),
                                  x * size)
    with pytest.raises(TypeError, match="unexpected keyword argument 'opp'"):
        chorus.allreduce(x, opp="sum")
    with pytest.raises(TypeError, match="multiple values for argument 'op'"):
        chorus.allreduce(x, "sum", op="max")
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        chorus.allreduce()
    with pytest.raises(TypeError, match="takes from 1 to 8 positional arguments"):
        chorus.allreduce(x, "sum", None, False, False, False, None, None, 9)
    with pytest.raises(chorus.InvalidArgumentError, match="either inplace=True or out=, not both"):
        chorus.allreduce(x, inplace=True, out=np.empty_like(x))
    assert chorus.barrier() is None


def test_half_precision_accumulates_in_float32_on_the_short_path():
    """2048 + 1 + 1 ... in float16 loses each 1 one step at a time; float32 accumulation keeps
    them and rounds once (2048 + size - 1, rounded to float16's step of 2 near 2048)."""
    rank, size = rank_size()
    x = np.full(9, 2048 if rank == 0 else 1, np.float16)
    result = _chorus.allreduce_array(_native(), x, None, "sum")
    assert result is not NotImplemented
    np.testing.assert_array_equal(result, np.full(9, np.float16(2048.0 + size - 1)))


def _declined_cases():
    x = np.ones(8, np.float32)
    frozen = np.ones(8, np.float32)
    frozen.flags.writeable = False
    return {
        "strided input": (np.ones(16, np.float32)[::2], None, "sum"),
        "byte-swapped input": (np.ones(8, ">f4"), None, "sum"),
        "ndarray subclass": (np.ones(8, np.float32).view(np.matrix), None, "sum"),
        "list": ([x], None, "sum"),
        "unknown op": (x, None, "mean"),
        "op not a string": (x, None, 3),
        "bitwise op on floats": (x, None, "band"),
        "long double dtype": (np.ones(8, np.clongdouble), None, "sum"),
        "max of complex numbers": (np.ones(8, np.complex64), None, "max"),
        "out of another dtype": (x, np.empty(8, np.float64), "sum"),
        "out of another size": (x, np.empty(9, np.float32), "sum"),
        "read-only out": (x, frozen, "sum"),
        "strided out": (x, np.empty(16, np.float32)[::2], "sum"),
        "torch out of a NumPy input": (x, torch.empty(8), "sum"),
    }


@pytest.mark.parametrize("case", sorted(_declined_cases()))
def test_the_short_path_declines_what_the_general_path_handles(case):
    x, out, op = _declined_cases()[case]
    assert _chorus.allreduce_array(_native(), x, out, op) is NotImplemented


def test_declined_calls_behave_as_before():
    """What the short path declines still works (or fails) through the general path."""
    rank, size = rank_size()
    strided = np.arange(16, dtype=np.float32)[::2]
    np.testing.assert_array_equal(chorus.allreduce(strided), strided * size)
    swapped = np.ones(4, ">f4")
    np.testing.assert_array_equal(chorus.allreduce(swapped), np.full(4, size, np.float32))
    frozen = np.ones(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(chorus.InvalidArgumentError, match="read-only"):
        chorus.allreduce(np.ones(4, np.float32), out=frozen)
    with pytest.raises(chorus.InvalidArgumentError, match="op must be one of"):
        chorus.allreduce(np.ones(4, np.float32), "mean")
    with pytest.raises(chorus.InvalidArgumentError, match="inplace must be True or False"):
        chorus.allreduce(np.ones(4, np.float32), inplace=1)
    np.testing.assert_array_equal(chorus.allreduce(np.ones(3, np.int32)), np.full(3, size))


def test_bad_calls_of_the_short_path_raise_python_errors():
    """CPython calls the short path directly (no pybind11 dispatch): its C++ exceptions still
    become Python exceptions, through the translators pybind11 registered."""
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        _chorus.allreduce_array(_native(), x)
    with pytest.raises(RuntimeError, match="Unable to cast"):
        _chorus.allreduce_array(object(), x, None, "sum")
    with pytest.raises(TypeError, match="takes 1 argument"):
        _chorus.barrier_world()
    with pytest.raises(RuntimeError, match="Unable to cast"):
        _chorus.barrier_world(x)
    np.testing.assert_array_equal(chorus.allreduce(x), np.full(4, rank_size()[1]))


@pytest.mark.parametrize("dtype", NP_DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 70001])
def test_the_short_path_broadcasts_every_dtype_from_every_root(dtype, n):
    rank, size = rank_size()
    for root in range(size):
        x = summable(dtype, rank, n)
        before = x.copy()
        expected = summable(dtype, root, n)
        fresh = _chorus.broadcast_array(_native(), x, None, root)
        assert fresh is not NotImplemented and type(fresh) is np.ndarray
        assert fresh.dtype == x.dtype and fresh.shape == x.shape
        np.testing.assert_array_equal(fresh, expected)
        out = np.full_like(x, 1)
        assert _chorus.broadcast_array(_native(), x, out, root) is out
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(x, before)
        assert _chorus.broadcast_array(_native(), x, x, root) is x  # in place
        np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize("dtype", NP_DTYPES)
@pytest.mark.parametrize("shape,axis", [((0,), 0), ((1,), 0), ((70001,), -1), ((3, 5), 0),
                                        ((3, 5), 1), ((2, 3, 4), -2)])
def test_the_short_path_gathers_every_dtype_along_every_axis(dtype, shape, axis):
    rank, size = rank_size()
    n = int(np.prod(shape))
    x = summable(dtype, rank, n).reshape(shape)
    before = x.copy()
    expected = np.concatenate([summable(dtype, r, n).reshape(shape) for r in range(size)], axis)
    fresh = _chorus.allgather_array(_native(), x, None, axis)
    assert fresh is not NotImplemented and type(fresh) is np.ndarray
    assert fresh.dtype == x.dtype
    np.testing.assert_array_equal(fresh, expected)  # also compares the shapes
    out = np.full_like(expected, 1)
    assert _chorus.allgather_array(_native(), x, out, axis) is out
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(x, before)


def test_a_front_is_made_only_for_a_function_it_can_bind():
    """_chorus.front refuses an operation without a short path, and a function whose parameters
    it cannot bind or that lacks one its short path reads."""

    def allreduce(x, op="sum", rank_list=None, *, async_op=False):
        pass

    def allgather(x, rank_list=None, async_op=False, synchronize=False, out=None):
        pass

    with pytest.raises(ValueError, match="no short path for 'shutdown'"):
        _chorus.front("shutdown", allreduce, "")
    with pytest.raises(ValueError, match="'allreduce' has parameters the front cannot bind"):
        _chorus.front("allreduce", allreduce, "")
    with pytest.raises(ValueError, match="'allgather' lacks a parameter of its short path"):
        _chorus.front("allgather", allgather, "")


def test_the_package_takes_the_short_paths_of_broadcast_and_allgather(monkeypatch):
    rank, size = rank_size()
    calls = spy_on_general_paths(monkeypatch, ["_broadcast", "_allgather", "_complete"])
    x = np.full(5, rank, np.float32)
    out = np.empty_like(x)
    assert chorus.broadcast(x, root=size - 1, out=out) is out
    np.testing.assert_array_equal(chorus.broadcast(x), np.zeros(5, np.float32))
    gathered = chorus.allgather(x.reshape(1, 5), axis=1)
    chorus.broadcast(x, root=size - 1, inplace=True)
    chorus.barrier()
    assert calls == []
    np.testing.assert_array_equal(out, np.full(5, size - 1, np.float32))
    np.testing.assert_array_equal(x, np.full(5, size - 1, np.float32))
    np.testing.assert_array_equal(gathered, np.repeat(np.arange(size, dtype=np.float32), 5)[None])
    chorus.barrier(synchronize=True)
    assert calls == ["_complete"]
    chorus.broadcast(x, async_op=True).wait()  # async calls take the short path too
    assert calls == ["_complete"]
    chorus.broadcast(x, async_op=True, synchronize=True).wait()
    assert calls[1:] == ["_broadcast", "_complete"]
    del calls[:]
    chorus.allgather(x, uneven=True)  # its variant (tests/python/test_35_uneven_short_paths.py)
    assert calls == []
    chorus.allgather(x.reshape(1, 5), axis=1, uneven=True)  # along another axis: general
    assert calls[0] == "_allgather"
    with pytest.raises(chorus.InvalidArgumentError, match="uneven must be True or False"):
        chorus.allgather(x, uneven=1)  # the general path's error


def _declined_rooted_and_gathered_cases():
    _, size = rank_size()
    x = np.ones(8, np.float32)
    frozen = np.ones(8, np.float32)
    frozen.flags.writeable = False
    return {  # name: (short call, x, out, root or axis)
        "broadcast of a strided input": ("broadcast_array", np.ones(16, np.float32)[::2], None, 0),
        "broadcast root a bool": ("broadcast_array", x, None, False),
        "broadcast root a NumPy int": ("broadcast_array", x, None, np.int64(0)),
        "broadcast root a float": ("broadcast_array", x, None, 0.0),
        "broadcast root too large": ("broadcast_array", x, None, size),
        "broadcast root negative": ("broadcast_array", x, None, -1),
        "broadcast root huge": ("broadcast_array", x, None, 2**70),
        "broadcast out of another dtype": ("broadcast_array", x, np.empty(8, np.float64), 0),
        "broadcast out of another size": ("broadcast_array", x, np.empty(9, np.float32), 0),
        "broadcast read-only out": ("broadcast_array", x, frozen, 0),
        "allgather of a list": ("allgather_array", [x], None, 0),
        "allgather of a byte-swapped input": ("allgather_array", np.ones(8, ">f4"), None, 0),
        "allgather of a 0-d array": ("allgather_array", np.float32(1) * np.ones(()), None, 0),
        "allgather axis a bool": ("allgather_array", x, None, False),
        "allgather axis a NumPy int": ("allgather_array", x, None, np.int64(0)),
        "allgather axis too large": ("allgather_array", x, None, 1),
        "allgather axis too negative": ("allgather_array", x, None, -2),
        "allgather out of another dtype": ("allgather_array", x, np.empty(8 * size, np.int32), 0),
        "allgather strided out": ("allgather_array", x,
                                  np.empty(16 * size, np.float32)[::2], 0),
        "allgather torch out of a NumPy input": ("allgather_array", x, torch.empty(8 * size), 0),
    }


@pytest.mark.parametrize("case", sorted(_declined_rooted_and_gathered_cases()))
def test_the_broadcast_and_allgather_short_paths_decline_what_the_general_path_handles(case):
    name, x, out, argument = _declined_rooted_and_gathered_cases()[case]
    assert getattr(_chorus, name)(_native(), x, out, argument) is NotImplemented


def test_declined_broadcasts_and_allgathers_behave_as_before():
    rank, size = rank_size()
    x = np.full(4, rank, np.float32)
    np.testing.assert_array_equal(chorus.broadcast(x, root=np.int64(size - 1)),
                                  np.full(4, size - 1, np.float32))
    with pytest.raises(chorus.InvalidArgumentError, match=f"root={size} is not a member"):
        chorus.broadcast(x, root=size)
    np.testing.assert_array_equal(chorus.allgather(x, axis=np.int64(0)),  # NumPy ints are ints
                                  np.repeat(np.arange(size, dtype=np.float32), 4))
    with pytest.raises(chorus.InvalidArgumentError, match="axis must be an int"):
        chorus.allgather(x, axis=0.0)
    with pytest.raises(chorus.InvalidArgumentError, match="axis=1 is out of range"):
        chorus.allgather(x, axis=1)
    with pytest.raises(chorus.InvalidArgumentError, match="out has dtype int32"):
        chorus.allgather(x, out=np.empty(4 * size, np.int32))
    with pytest.raises(TypeError, match="takes 4 arguments"):
        _chorus.broadcast_array(_native(), x)
    with pytest.raises(RuntimeError, match="Unable to cast"):
        _chorus.allgather_array(object(), x, None, 0)
