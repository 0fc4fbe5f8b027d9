"""Input kinds beyond plain contiguous arrays (DESIGN §4): objects that only speak __dlpack__,
read-only and non-contiguous inputs (copied, never read wrong; inplace writes back), torch's lazy
conjugate and negative views, and dtypes chorus does not move."""

import numpy as np
import pytest
import torch

import chorus
from helpers import (DlpackOnly, check_result, make, reduce_exact, snapshot, assert_unchanged,
                     values)


def test_dlpack_only_object(rank, size):
    inner = make("numpy", values(rank, (2, 5), "float32"), "float32")
    before = snapshot(inner)
    result = chorus.allreduce(DlpackOnly(inner), "sum")
    expected = reduce_exact("sum", [values(r, (2, 5), "float32") for r in range(size)], "float32")
    # chorus/_arrays.py documents that such objects give NumPy results.
    check_result(result, "numpy", "float32", expected)
    assert_unchanged(inner, before)


def test_read_only_numpy_input(rank, size):
    x = make("numpy", values(rank, (9,), "int64"), "int64")
    x.flags.writeable = False
    expected = reduce_exact("min", [values(r, (9,), "int64") for r in range(size)], "int64")
    check_result(chorus.allreduce(x, "min"), "numpy", "int64", expected)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_inplace_on_non_contiguous_view_writes_back(rank, size, kind):
    base = make(kind, values(rank, (4, 6), "float64"), "float64")
    view = base[:, ::2]
    result = chorus.allreduce(view, "sum", inplace=True)
    full = values(rank, (4, 6), "float64")
    full[:, ::2] = reduce_exact("sum", [values(r, (4, 6), "float64")[:, ::2] for r in range(size)],
                                "float64")
    check_result(base, kind, "float64", full)  # odd columns untouched, even ones reduced
    check_result(result, kind, "float64", full[:, ::2])


@pytest.mark.parametrize("mode", ["inplace", "out"])
def test_contiguous_torch_tensors_are_written_directly_not_copied_back(rank, size, monkeypatch,
                                                                     mode):
    # A contiguous tensor's detached view is its own memory: C++ writes the result there, and no
    # copy back (a torch op of several microseconds) may follow. Non-contiguous ones still copy
    # back (test above).
    def no_copy_back(self, result):
        raise AssertionError("a contiguous tensor was copied back")

    monkeypatch.setattr(chorus._arrays.Buffer, "write_back", no_copy_back)
    x = make("torch", values(rank, (5,), "float32"), "float32")
    target = x if mode == "inplace" else torch.empty(5)
    kwargs = {"inplace": True} if mode == "inplace" else {"out": target}
    result = chorus.allreduce(x, "sum", **kwargs)
    assert result is target
    expected = reduce_exact("sum", [values(r, (5,), "float32") for r in range(size)], "float32")
    check_result(target, "torch", "float32", expected)


def test_torch_tensor_requiring_grad(rank, size):
    x = make("torch", values(rank, (3,), "float32"), "float32").requires_grad_(True)
    result = chorus.allreduce(x, "sum")
    expected = reduce_exact("sum", [values(r, (3,), "float32") for r in range(size)], "float32")
    check_result(result, "torch", "float32", expected)


def _lazy_views(rank):
    """A lazily conjugated complex tensor and a lazily negated float one (torch's conjugate and
    negative bits), over memory that holds other values than they read as."""
    real = torch.arange(4, dtype=torch.float32) + rank
    conjugated = torch.complex(real, real + 1).conj()
    negated = conjugated.imag
    assert conjugated.is_conj() and negated.is_neg()
    return conjugated, negated


def test_lazily_conjugated_and_negated_tensors_read_as_their_values(rank, size):
    conjugated, negated = _lazy_views(rank)
    ranks = [torch.arange(4, dtype=torch.float64) + r for r in range(size)]
    expected_conj = sum(torch.complex(r, -(r + 1)) for r in ranks)
    expected_neg = sum(-(r + 1) for r in ranks)
    assert torch.equal(chorus.allreduce(conjugated), expected_conj.to(torch.complex64))
    assert torch.equal(chorus.allreduce(negated), expected_neg.to(torch.float32))
    assert torch.equal(chorus.allgather(negated), torch.cat([-(r + 1) for r in ranks]).float())
    result = chorus.allreduce(conjugated, inplace=True)  # written back through the lazy view
    assert result is conjugated and torch.equal(conjugated, expected_conj.to(torch.complex64))


@pytest.mark.parametrize("make_bad", [
    lambda: np.zeros((3,), dtype=np.clongdouble),
    lambda: np.zeros((3,), dtype=np.longdouble),
    lambda: np.zeros((3,), dtype="datetime64[s]"),
    lambda: torch.zeros(3, dtype=torch.complex32),
], ids=["np-clongdouble", "np-longdouble", "np-datetime64", "torch-complex32"])
def test_unsupported_dtype_is_rejected(rank, size, make_bad):
    with pytest.raises((ValueError, chorus.UnsupportedError)) as info:
        chorus.allreduce(make_bad())
    assert "dtype" in str(info.value) or "type" in str(info.value)
