"""The short paths of blocking allreduce, broadcast and allgather for torch CPU tensors
(python/src/torch_view.cc, short_calls.cc): torch tensors are read through torch's Python API, as
NumPy arrays are read through NumPy's structs, with no DLPack capsule and no Python frame.

Both sides of the line, as test_16 for NumPy: every chorus dtype gives the closed-form result with
a fresh output, out= and in place; the package's fronts take the short path for plain tensors;
and every tensor the general path must see (a subclass, a strided, sparse or negative-bit view, an
unsupported dtype, an output of another framework or dtype) is declined, with NotImplemented.
"""

import pytest
import torch

import chorus
from chorus import _chorus, _groups, _ops

from helpers import rank_size

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]


def _native():
    return _groups.get(None)._native


def _values(dtype, rank, shape):
    """Rank r's input: small values whose sums over ranks are exact in every dtype."""
    n = 1
    for extent in shape:
        n *= extent
    base = torch.arange(n, dtype=torch.int64).reshape(shape)
    if dtype == torch.bool:
        return (base + rank) % 3 == 0
    return ((base % 3) + rank % 2).to(dtype)


def _sum(dtype, size, shape):
    total = sum(_values(dtype, r, shape).to(torch.float64) for r in range(size))
    return (total > 0) if dtype == torch.bool else total.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [0, 1, 7, 70001])
def test_allreduce_of_every_dtype(dtype, n):
    rank, size = rank_size()
    x = _values(dtype, rank, (n,))
    before = x.clone()
    fresh = _chorus.allreduce_array(_native(), x, None, "sum")
    assert fresh is not NotImplemented and type(fresh) is torch.Tensor
    assert fresh.dtype == dtype and fresh.shape == x.shape
    assert torch.equal(fresh, _sum(dtype, size, (n,)))
    out = torch.ones_like(x)
    assert _chorus.allreduce_array(_native(), x, out, "sum") is out
    assert torch.equal(out, _sum(dtype, size, (n,)))
    assert torch.equal(x, before)
    assert _chorus.allreduce_array(_native(), x, x, "sum") is x  # in place
    assert torch.equal(x, _sum(dtype, size, (n,)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcast_of_every_dtype_from_every_root(dtype):
    rank, size = rank_size()
    for root in range(size):
        x = _values(dtype, rank, (3, 5))
        fresh = _chorus.broadcast_array(_native(), x, None, root)
        assert fresh is not NotImplemented and fresh.shape == (3, 5)
        assert torch.equal(fresh, _values(dtype, root, (3, 5)))
        assert _chorus.broadcast_array(_native(), x, x, root) is x
        assert torch.equal(x, _values(dtype, root, (3, 5)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("shape,axis", [((0,), 0), ((70001,), -1), ((3, 5), 0), ((3, 5), 1),
                                        ((2, 3, 4), -2)])
def test_allgather_along_every_axis(dtype, shape, axis):
    rank, size = rank_size()
    x = _values(dtype, rank, shape)
    expected = torch.cat([_values(dtype, r, shape) for r in range(size)], axis)
    fresh = _chorus.allgather_array(_native(), x, None, axis)
    assert fresh is not NotImplemented and fresh.dtype == dtype
    assert fresh.shape == expected.shape and torch.equal(fresh, expected)
    out = torch.ones_like(expected)
    assert _chorus.allgather_array(_native(), x, out, axis) is out
    assert torch.equal(out, expected)


def test_the_package_takes_the_short_paths_for_plain_tensors(monkeypatch):
    rank, size = rank_size()
    calls = []
    for name in ("_allreduce", "_broadcast", "_allgather", "_complete"):
        real = getattr(_ops, name)
        monkeypatch.setattr(_ops, name, lambda *a, _n=name, _r=real, **k: (calls.append(_n),
                                                                             _r(*a, **k))[1])
    x = torch.full((5,), float(rank))
    out = torch.empty(5)
    assert chorus.allreduce(x, out=out) is out
    assert chorus.allreduce(x, inplace=True) is x
    gathered = chorus.allgather(torch.ones(1, 2), axis=1)
    broadcast = chorus.broadcast(torch.full((2,), float(rank)), root=size - 1)
    assert calls == []
    total = float(sum(range(size)))
    assert torch.equal(out, torch.full((5,), total)) and torch.equal(x, torch.full((5,), total))
    assert gathered.shape == (1, 2 * size)
    assert torch.equal(broadcast, torch.full((2,), float(size - 1)))
    chorus.allreduce(torch.ones(4, 2).t())  # strided: the general path
    assert calls == ["_allreduce", "_complete"]


def _declined():
    x = torch.ones(8)
    return {
        "a Parameter (a subclass)": (torch.nn.Parameter(torch.ones(8)), None),
        "a strided view": (torch.ones(16)[::2], None),
        "a sparse tensor": (torch.ones(8).to_sparse(), None),
        "a negative-bit view": (torch._neg_view(torch.ones(8)), None),
        "complex32 (not a chorus dtype)": (torch.ones(8, dtype=torch.complex32), None),
        "a conjugate-bit view": (torch.ones(8, dtype=torch.complex64).conj(), None),
        "a NumPy out": (x, x.numpy().copy()),
        "out of another dtype": (x, torch.empty(8, dtype=torch.float64)),
        "a strided out": (x, torch.empty(16)[::2]),
        "a Parameter out": (x, torch.nn.Parameter(torch.empty(8))),
    }


@pytest.mark.parametrize("case", sorted(_declined()))
def test_what_the_general_path_must_see_is_declined(case):
    x, out = _declined()[case]
    assert _chorus.allreduce_array(_native(), x, out, "sum") is NotImplemented
    assert _chorus.broadcast_array(_native(), x, out, 0) is NotImplemented


def test_declined_tensors_still_work_through_the_general_path():
    rank, size = rank_size()
    strided = torch.arange(16, dtype=torch.float32)[::2]
    assert torch.equal(chorus.allreduce(strided), strided * size)
    parameter = torch.nn.Parameter(torch.ones(3))
    assert torch.equal(chorus.allreduce(parameter), torch.full((3,), float(size)))
    conjugated = torch.full((3,), 1 + 2j, dtype=torch.complex64).conj()
    assert torch.equal(chorus.allreduce(conjugated), torch.full((3,), size * (1 - 2j)))
    with pytest.raises(chorus.InvalidArgumentError, match="complex32"):
        chorus.allreduce(torch.ones(3, dtype=torch.complex32))


def test_numpy_calls_work_where_torch_is_blocked(tmp_path):
    # sys.modules["torch"] = None is how programs keep torch out; the short path must then take
    # NumPy arrays as before, not fail looking torch up.
    import os
    import subprocess
    import sys
    script = ("import sys; sys.modules['torch'] = None\n"
              "import numpy as np, chorus\n"
              "x = np.ones(3, np.float32)\n"
              "assert chorus.allreduce(x, out=np.empty_like(x)) is not None\n"
              "print('ok', chorus.allreduce(x).tolist())\n")
    env = dict(os.environ)
    for name in [k for k in env if k.startswith(("CHORUS_", "MASTER_", "OMPI_", "PMIX_"))]:
        del env[name]
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok [1.0, 1.0, 1.0]"
