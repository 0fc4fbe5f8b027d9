"""The short path of a blocking allreduce of one NumPy array (python/src/short_calls.cc).

chorus.allreduce hands the plain case straight to C++ (`_chorus.allreduce_array`), which answers
NotImplemented for anything it does not take, so the general path handles it. These tests check
both sides of that line: the short path gives the closed-form result for every NumPy dtype, with a
fresh output, out= and inplace=True; and it declines (NotImplemented, nothing sent) every case the
general path must see, so their behaviour is the general path's.
"""

import numpy as np
import pytest
import torch

import chorus
from chorus import _chorus, _groups

from helpers import NP_DTYPES, rank_size


def _native():
    return _groups.world_native()


def _values(dtype, rank, n):
    """Rank r's input: small values whose sum over ranks is exact in every dtype."""
    if dtype == "bool":
        return (np.arange(n) + rank) % 3 == 0
    return ((np.arange(n) % 3) + rank % 2).astype(dtype)


def _expected(dtype, size, n):
    total = sum(_values(dtype, r, n).astype(np.float64) for r in range(size))
    return (total > 0) if dtype == "bool" else total.astype(dtype)


@pytest.mark.parametrize("dtype", NP_DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 70001])
def test_the_short_path_reduces_every_dtype(dtype, n):
    rank, size = rank_size()
    x = _values(dtype, rank, n)
    before = x.copy()
    fresh = _chorus.allreduce_array(_native(), x, None, "sum")
    assert fresh is not NotImplemented and type(fresh) is np.ndarray
    assert fresh.dtype == x.dtype and fresh.shape == x.shape
    np.testing.assert_array_equal(fresh, _expected(dtype, size, n))
    out = np.full_like(x, 1)
    assert _chorus.allreduce_array(_native(), x, out, "sum") is out
    np.testing.assert_array_equal(out, _expected(dtype, size, n))
    np.testing.assert_array_equal(x, before)
    assert _chorus.allreduce_array(_native(), x, x, "sum") is x  # in place
    np.testing.assert_array_equal(x, _expected(dtype, size, n))


def test_the_package_takes_the_short_path(monkeypatch):
    """chorus.allreduce of a plain NumPy array calls allreduce_array and returns its result."""
    rank, size = rank_size()
    calls = []
    real = _chorus.allreduce_array

    def spy(*args):
        result = real(*args)
        calls.append(result is not NotImplemented)
        return result

    monkeypatch.setattr(_chorus, "allreduce_array", spy)
    x = np.ones(5, np.float32)
    out = np.empty_like(x)
    assert chorus.allreduce(x, out=out) is out
    chorus.allreduce(x, inplace=True)
    y = chorus.allreduce(x, "max")
    assert calls == [True, True, True]
    np.testing.assert_array_equal(out, np.full(5, size, np.float32))
    np.testing.assert_array_equal(y, np.full(5, size, np.float32))


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
        "torch tensor": (torch.ones(8), None, "sum"),
        "strided input": (np.ones(16, np.float32)[::2], None, "sum"),
        "byte-swapped input": (np.ones(8, ">f4"), None, "sum"),
        "ndarray subclass": (np.ones(8, np.float32).view(np.matrix), None, "sum"),
        "list": ([x], None, "sum"),
        "unknown op": (x, None, "mean"),
        "op not a string": (x, None, 3),
        "bitwise op on floats": (x, None, "band"),
        "complex dtype": (np.ones(8, np.complex64), None, "sum"),
        "out of another dtype": (x, np.empty(8, np.float64), "sum"),
        "out of another size": (x, np.empty(9, np.float32), "sum"),
        "read-only out": (x, frozen, "sum"),
        "strided out": (x, np.empty(16, np.float32)[::2], "sum"),
        "torch out": (x, torch.empty(8), "sum"),
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
