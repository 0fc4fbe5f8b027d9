"""chorus.scan: MPI's Scan and Exscan (prefix reductions over the ranks of a group).

scan(x) on group rank r returns the reduction of the x of group ranks 0..r; exclusive=True, of
ranks 0..r-1 (MPI_Exscan), and on rank 0 the op's identity (0 for sum, bor and bxor, 1 for prod,
all bits set for band, the dtype's largest value for min and smallest for max, +-inf for floats),
where MPI leaves rank 0's result undefined and mpi4py's lowercase exscan returns None. The usual
use is an offset: `start = chorus.scan(np.array([count]), exclusive=True)[0]`.

How: one allgather of every rank's x, then the reduction of the rows up to this rank, here, in
rank order, with the reductions' semantics of chorus (integers wrap, a NaN wins min and max,
float16 and bfloat16 accumulate in float32 and round once). Its cost is that allgather: every rank
receives size x len(x) elements, which suits the small arrays a scan is used for (counts,
offsets) and not large ones. avg has no prefix form in MPI and is refused. x is one NumPy array
or torch CPU tensor; the result has its kind, dtype and shape.
"""

import numpy as np

from . import _arrays, _chorus, _groups, _ops

_SCAN_OPS = ("sum", "prod", "min", "max", "band", "bor", "bxor")


def scan(x, op="sum", exclusive=False, rank_list=None, group=None):
    """The reduction (op) of x over group ranks 0..r on group rank r (exclusive: 0..r-1, and the
    op's identity on rank 0). See the module doc."""
    rank_list = _groups.resolve(group, rank_list, "scan")
    torch = torch_of(x, "scan")
    _check(x, op, exclusive, torch)
    rows = gathered_rows(x, torch, rank_list)
    last = _groups.get(rank_list).rank - (1 if exclusive else 0)
    if last < 0:
        return _identity(x, op, torch)
    return _reduce_rows(rows, last, op, x.dtype, torch)


def torch_of(x, operation):
    """torch for a torch tensor x, None for a NumPy array; an InvalidArgumentError naming
    `operation` for anything else. (allreduce_loc, _loc.py, takes x the same way.)"""
    torch = _arrays._torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return torch
    if not isinstance(x, np.ndarray):
        raise _chorus.InvalidArgumentError(
            f"{operation}: x must be a NumPy array or a torch tensor, not {type(x).__name__}")
    return None


def gathered_rows(x, torch, rank_list):
    """Every group rank's x, stacked along a new axis 0 in group-rank order (one allgather)."""
    return _ops.allgather(x[np.newaxis] if torch is None else x.unsqueeze(0), rank_list=rank_list)


def _check(x, op, exclusive, torch):
    if op not in _SCAN_OPS:
        raise _chorus.InvalidArgumentError(
            f"scan: op must be one of {', '.join(map(repr, _SCAN_OPS))}, not {op!r}")
    if not isinstance(exclusive, bool):
        raise _chorus.InvalidArgumentError(
            f"scan: exclusive must be a bool, not {type(exclusive).__name__}")
    kind = dtype_kind(x.dtype, torch)
    if op in ("band", "bor", "bxor") and kind in "fc":
        raise _chorus.InvalidArgumentError(
            f"scan: op {op!r} needs integer or bool data, not {x.dtype}")
    if op in ("min", "max") and kind == "c":
        raise _chorus.InvalidArgumentError(
            f"scan: op {op!r} of complex numbers: they have no order")


def dtype_kind(dtype, torch):
    """NumPy's kind letter of dtype: b, i, u, f or c."""
    if torch is None:
        return np.dtype(dtype).kind
    if dtype == torch.bool:
        return "b"
    return "c" if dtype.is_complex else "f" if dtype.is_floating_point else \
        "u" if dtype == torch.uint8 or str(dtype).startswith("torch.uint") else "i"


def _reduce_rows(rows, last, op, dtype, torch):
    """op over rows[0..last] in order, in float32 for the half types, as dtype."""
    lib = torch if torch is not None else np
    half = (torch.float16, torch.bfloat16) if torch is not None else (np.float16,)
    if dtype in half:
        rows = rows.float() if torch is not None else rows.astype(np.float32)
    combine = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b,
               "min": lib.minimum, "max": lib.maximum, "band": lambda a, b: a & b,
               "bor": lambda a, b: a | b, "bxor": lambda a, b: a ^ b}[op]
    result = rows[0].clone() if torch is not None else rows[0].copy()
    for row in range(1, last + 1):
        result = combine(result, rows[row])
    if dtype in half:
        return result.to(dtype) if torch is not None else result.astype(dtype)
    return result


def _identity(x, op, torch):
    """The identity of op for x's dtype, shaped as x."""
    lib = torch if torch is not None else np
    zeros = lib.zeros_like(x)
    if op in ("sum", "bor", "bxor"):
        return zeros
    if op == "prod":
        return lib.ones_like(x)
    if op == "band":
        return ~zeros  # every bit set (True for bool)
    kind = dtype_kind(x.dtype, torch)
    if kind == "b":
        return ~zeros if op == "min" else zeros
    if kind == "f":
        return lib.full_like(x, float("inf") if op == "min" else -float("inf"))
    info = torch.iinfo(x.dtype) if torch is not None else np.iinfo(x.dtype)
    return lib.full_like(x, info.max if op == "min" else info.min)
