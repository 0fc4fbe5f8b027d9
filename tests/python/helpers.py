"""Shared helpers for the chorus Python tests.

Every rank runs the same tests in the same order (pytest collection is deterministic), so the
collectives line up across ranks. Inputs are closed forms of (rank, index); expected values are
computed here with NumPy from those closed forms, never with chorus.
"""

import numpy as np
import torch

import chorus
import chorus.distributed as dist
from chorus import _ops

# Element types chorus moves. bfloat16 exists in torch only.
NP_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]
TORCH_DTYPES = NP_DTYPES + ["bfloat16"]
FLOAT_DTYPES = {"float16", "bfloat16", "float32", "float64"}
INT_DTYPES = {"int8", "uint8", "int32", "int64"}
# The element types added after the nine above (test_39_more_dtypes.py; the lists above, and so
# every other test, leave them out). torch 1.13 has no uint16, uint32 or uint64.
WIDE_INT_DTYPES = ["int16", "uint16", "uint32", "uint64"]
COMPLEX_DTYPES = ["complex64", "complex128"]
WIDE_DTYPES = WIDE_INT_DTYPES + COMPLEX_DTYPES
# GPU kinds, in the grid where the machine has a GPU and this chorus a GPU backend (see cuda_device
# and conftest.py's shared-GPU switch): "torch_cuda" (torch tensors on this rank's GPU), and
# "cupy" and "jax_cuda" (CuPy arrays, JAX arrays on that GPU) where those are installed.
CUDA = torch.cuda.is_available() and chorus._chorus.gpu_backend


def _optional(module):
    try:
        return __import__(module)
    except ImportError:
        return None


cupy = _optional("cupy") if CUDA else None
jax = _optional("jax") if CUDA else None
if jax is not None:
    jax.config.update("jax_enable_x64", True)  # float64 / int64 stay 64-bit
    if not jax.devices()[0].platform == "gpu":
        jax = None
GPU_KINDS = (["torch_cuda"] if CUDA else []) + (["cupy"] if cupy else []) + (
    ["jax_cuda"] if jax else [])
KINDS = ["numpy", "torch"] + GPU_KINDS
# Kinds whose arrays can be written in place (JAX arrays are immutable).
MUTABLE_KINDS = [kind for kind in KINDS if kind != "jax_cuda"]
ARITH_OPS = ["sum", "prod", "min", "max", "avg"]
BIT_OPS = ["band", "bor", "bxor"]
ALL_OPS = ARITH_OPS + BIT_OPS


def rank_size():
    comm = dist.get_communicator()
    return comm.rank, comm.size


def cuda_device():
    """This rank's GPU: local rank modulo the GPUs this process sees."""
    return torch.device("cuda", dist.get_config().local_rank % torch.cuda.device_count())


def kind_dtype_cases(dtypes=None, kinds=KINDS):
    """(kind, dtype) pairs; bfloat16 only for torch (CPU or CUDA)."""
    cases = []
    for kind in kinds:
        for dtype in dtypes or TORCH_DTYPES:
            if dtype == "bfloat16" and not kind.startswith("torch"):
                continue
            cases.append((kind, dtype))
    return cases


class DlpackOnly:
    """Exposes a NumPy array (.array) through the DLPack protocol only."""

    def __init__(self, array):
        self.array = array
        self.shape = array.shape

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def case_id(case):
    """A test id: pytest passes a multi-name parametrization's values one at a time (a kind, a
    dtype), and a single name's tuples whole."""
    if isinstance(case, (tuple, list)):
        return "-".join(str(part) for part in case)
    return str(case)


def op_valid(op, dtype, kind="numpy"):
    if op in BIT_OPS and kind in GPU_KINDS:
        # NCCL has no bitwise reductions: bool band/bor only (the rest is UnsupportedError).
        return dtype == "bool" and op != "bxor"
    if op in BIT_OPS:
        return dtype in INT_DTYPES or dtype == "bool"
    if op == "avg":
        return dtype != "bool"
    return True


def values(rank, shape, dtype, op="sum"):
    """Closed-form input of `rank`: float64 / int64 / bool NumPy values, exact in every dtype."""
    idx = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    if dtype == "bool":
        return (idx + rank) % 3 == 0
    if op == "prod":
        # Factors in {1, 2, -1} (unsigned: {1, 2}) keep every product of <= 4 ranks exact.
        table = np.array([1, 2, 1 if dtype == "uint8" else -1], dtype=np.int64)
        base = table[(idx + rank) % 3]
    elif dtype == "uint8":
        base = (idx * 7 + rank * 3) % 11
    else:
        base = (idx * 7 + rank * 3) % 11 - 5
    return base.astype(np.float64) if dtype in FLOAT_DTYPES else base


def torch_dtype(dtype):
    return getattr(torch, dtype)


def make(kind, vals, dtype):
    """An array of `kind` (one of KINDS) and `dtype` holding `vals`."""
    vals = np.asarray(vals)
    if kind == "numpy":
        return np.ascontiguousarray(vals.astype(dtype))
    if kind == "cupy":
        with cupy.cuda.Device(cuda_device().index):
            return cupy.asarray(vals.astype(dtype))
    if kind == "jax_cuda":
        return jax.device_put(vals.astype(dtype), jax.devices("gpu")[cuda_device().index])
    if kind == "torch_cuda":
        return make("torch", vals, dtype).to(cuda_device())
    if dtype == "bfloat16":
        return torch.from_numpy(vals.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(vals.astype(dtype).copy())


def _foreign_to_np(x):
    """A NumPy copy of a CuPy or JAX array; other arrays unchanged."""
    if cupy is not None and isinstance(x, cupy.ndarray):
        return cupy.asnumpy(x)
    if jax is not None and isinstance(x, jax.Array):
        return np.asarray(x)
    return x


def to_np(x):
    """float64 (or bool) NumPy copy of an array of any kind."""
    x = _foreign_to_np(x)
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bool:
            return x.numpy().copy()
        return x.to(torch.float64).numpy().copy()
    x = np.asarray(x)
    return x.copy() if x.dtype == np.bool_ else x.astype(np.float64)


def stored(vals, dtype):
    """`vals` (exact) as `dtype` would store them (rounded once), back as float64 / bool."""
    vals = np.asarray(vals)
    if dtype == "bool":
        return vals.astype(bool)
    if dtype == "bfloat16":
        return to_np(torch.from_numpy(vals.astype(np.float64)).to(torch.bfloat16))
    return vals.astype(dtype).astype(np.float64)


def dtype_name(x):
    if isinstance(x, torch.Tensor):
        return str(x.dtype).replace("torch.", "")
    return np.dtype(x.dtype).name if hasattr(x, "dtype") else np.asarray(x).dtype.name


def reduce_exact(op, inputs, dtype):
    """Reduction of `inputs` (one closed-form array per rank) in exact arithmetic, then stored."""
    stack = np.stack([np.asarray(v) for v in inputs])
    n = len(inputs)
    if dtype == "bool":
        if op in ("sum", "max", "bor"):
            return stack.any(axis=0)
        if op in ("prod", "min", "band"):
            return stack.all(axis=0)
        if op == "bxor":
            return stack.sum(axis=0) % 2 == 1
        raise AssertionError(op)
    if op == "sum":
        out = stack.sum(axis=0)
    elif op == "prod":
        out = stack.prod(axis=0)
    elif op == "min":
        out = stack.min(axis=0)
    elif op == "max":
        out = stack.max(axis=0)
    elif op == "avg":
        total = stack.sum(axis=0)
        if dtype in FLOAT_DTYPES:
            out = total / n
        else:  # integers: truncate toward zero
            out = np.sign(total) * (np.abs(total) // n)
    elif op == "band":
        out = np.bitwise_and.reduce(stack, axis=0)
    elif op == "bor":
        out = np.bitwise_or.reduce(stack, axis=0)
    elif op == "bxor":
        out = np.bitwise_xor.reduce(stack, axis=0)
    else:
        raise AssertionError(op)
    return stored(out, dtype)


def check_result(result, kind, dtype, expected, rtol=0.0):
    """`result` has `kind`, `dtype`, expected's shape and values (exact unless rtol)."""
    if kind == "numpy":
        assert isinstance(result, np.ndarray), f"expected np.ndarray, got {type(result)}"
    elif kind == "cupy":
        assert isinstance(result, cupy.ndarray), f"expected cupy.ndarray, got {type(result)}"
        assert result.device.id == cuda_device().index, f"on GPU {result.device.id}"
    elif kind == "jax_cuda":
        assert isinstance(result, jax.Array), f"expected jax.Array, got {type(result)}"
        devices = {d.id for d in result.devices()}
        assert devices == {cuda_device().index}, f"on GPUs {devices}"
    else:
        assert isinstance(result, torch.Tensor), f"expected torch.Tensor, got {type(result)}"
        expected_device = cuda_device() if kind == "torch_cuda" else torch.device("cpu")
        assert result.device == expected_device, f"device {result.device} != {expected_device}"
    assert dtype_name(result) == dtype, f"dtype {dtype_name(result)} != {dtype}"
    expected = np.asarray(expected)
    assert tuple(result.shape) == expected.shape, f"shape {tuple(result.shape)} != {expected.shape}"
    got = to_np(result)
    if rtol:
        np.testing.assert_allclose(got, expected.astype(np.float64), rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, expected)


def snapshot(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    return np.array(_foreign_to_np(x), copy=True)


def assert_unchanged(x, before):
    if isinstance(x, torch.Tensor):
        assert torch.equal(x, before), "input was modified"
    else:
        np.testing.assert_array_equal(_foreign_to_np(x), before, err_msg="input was modified")


def avg_rtol(dtype):
    return {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-6, "float64": 1e-12}.get(dtype, 0.0)


def summable(dtype, rank, n):
    """Rank r's input: small values whose sum over ranks is exact in every dtype."""
    if dtype == "bool":
        return (np.arange(n) + rank) % 3 == 0
    return ((np.arange(n) % 3) + rank % 2).astype(dtype)


def exact_sum(dtype, size, n):
    """The sum over `size` ranks of summable(dtype, r, n) (logical or for bool), in NumPy."""
    total = sum(summable(dtype, r, n).astype(np.float64) for r in range(size))
    return (total > 0) if dtype == "bool" else total.astype(dtype)


def spy_on_general_paths(monkeypatch, names):
    """Records each call of chorus._ops's functions `names` (the general paths the fronts call
    for what their short paths do not take, and _complete, where every general path ends)."""
    calls = []
    for name in names:
        real = getattr(_ops, name)

        def spy(*args, _name=name, _real=real, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(_ops, name, spy)
    return calls
