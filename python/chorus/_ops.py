"""The collective and point-to-point operations of DESIGN §4.

Every operation: wraps its inputs as contiguous buffers (chorus._arrays), allocates its results with
the input's framework, and hands DLPack capsules to the C++ core, which does the work with the GIL
released. Inputs are never modified unless inplace=True. async_op=True returns a Work whose wait()
returns the result. CuPy and JAX arrays pass through torch (chorus._foreign). rank_list selects the
caller's group (see chorus._groups); roots and peers are world ranks inside the caller's group.
"""

import time

from . import _arrays, _chorus, _groups
from ._foreign import accepts_foreign

REDUCE_OPS = ("sum", "prod", "min", "max", "avg", "band", "bor", "bxor")
_BITWISE_OPS = frozenset(("band", "bor", "bxor"))
_OP_SET = frozenset(REDUCE_OPS)


class Work:
    """Handle of an operation started with async_op=True.

    wait(timeout=None) blocks (the GIL is released) until the operation completes and returns its
    result, or raises its failure; with `timeout` (seconds) it raises chorus.TimeoutError if the
    operation is still running then (it keeps running and can be waited for again). For CUDA
    tensors, "completes" means the waiting thread's current stream is ordered after the collective
    (no host wait); synchronize() also waits on the host until the GPU has finished it.
    is_completed() never blocks (for CUDA tensors it asks the GPU).
    """

    __slots__ = ("_pending", "_finish", "_result", "_done")

    def __init__(self, pending, finish):
        self._pending = [p for p in pending if p is not None]
        self._finish = finish
        self._result = None
        self._done = False

    def wait(self, timeout=None):
        if not self._done:
            _arrays.follow_current_stream()  # wait() orders the stream current here and now
            deadline = None if timeout is None else time.monotonic() + timeout
            for p in self._pending:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not p.wait(left):
                    error = _chorus.TimeoutError(
                        f"{p.description} did not complete within {timeout} s; it keeps running, "
                        "call wait() again")
                    error.missing_ranks = []  # unknown here: the operation has not failed
                    raise error
            self._result = self._finish()
            self._done = True
            self._pending = []
        return self._result

    def synchronize(self):
        """wait(), then a host wait until the operation is complete on the GPU; the result."""
        for p in self._pending:
            p.synchronize()
        return self.wait()

    def is_completed(self):
        return self._done or all(p.is_completed() for p in self._pending)

    def __repr__(self):
        return f"<chorus.Work {'completed' if self.is_completed() else 'running'}>"


def _complete(calls, finish, async_op, synchronize):
    """Runs `calls` (each takes the async flag) and returns finish(), or a Work for async_op.

    synchronize=True: a blocking call also waits on the host until the operation is complete on
    the GPU (CUDA tensors); host operations are complete when a blocking call returns anyway."""
    _check_bool_flag(synchronize, "synchronize")
    if async_op:
        return Work([call(True) for call in calls], finish)
    if synchronize:
        for call in calls:
            call(True).synchronize()
        return finish()
    for call in calls:
        call(False)
    return finish()


def _check_op(op, dtype):
    if not isinstance(op, str) or op not in _OP_SET:
        raise _chorus.InvalidArgumentError(
            f"op must be one of {', '.join(repr(o) for o in REDUCE_OPS)} ('band', 'bor', 'bxor' "
            f"for integer and bool tensors); got {op!r}")
    if op in _BITWISE_OPS and dtype in _arrays.FLOAT_DTYPES:
        raise _chorus.InvalidArgumentError(
            f"op {op!r} applies to integer and bool tensors only, not {dtype}; valid for {dtype}: "
            "'sum', 'prod', 'min', 'max', 'avg'")
    if op == "avg" and dtype == "bool":
        raise _chorus.InvalidArgumentError(
            "op 'avg' is not defined on bool tensors; valid for bool: 'sum', 'prod', 'min', "
            "'max', 'band', 'bor', 'bxor'")


def _check_bool_flag(value, name):
    if not isinstance(value, bool):
        raise _chorus.InvalidArgumentError(f"{name} must be True or False, not {value!r}")


def _axis(axis, ndim, what):
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise _chorus.InvalidArgumentError(f"{what} must be an int, not {type(axis).__name__}")
    if ndim == 0:
        raise _chorus.InvalidArgumentError(
            f"{what}: the tensor is 0-dimensional; this operation needs at least one dimension")
    if not -ndim <= axis < ndim:
        raise _chorus.InvalidArgumentError(
            f"{what}={axis} is out of range for a tensor of {ndim} dimensions")
    return axis % ndim


def _divisible(buf, axis, size, what):
    extent = buf.shape[axis] if buf.shape else 0
    if not buf.shape or extent % size != 0:
        raise _chorus.InvalidArgumentError(
            f"{what} needs dimension {axis} ({extent if buf.shape else 'none: 0-d tensor'}) to be "
            f"divisible by the group size ({size})")
    return extent // size


def _is_list(x):
    return isinstance(x, (list, tuple))


def _inplace_result(buf):
    """After an in-place operation on `buf`: the caller's object, updated."""
    if buf.is_copy:
        buf.write_back(buf.array)
    return buf.original


# --------------------------------------------------------------------------- reductions


@accepts_foreign
def allreduce(x, op="sum", rank_list=None, async_op=False, inplace=False, synchronize=False):
    """Reduces `x` element-wise across the ranks of the group and returns the result.

    A list of arrays (one dtype) is reduced as one fused message and gives a list.
    op: "sum", "prod", "min", "max", "avg" ("band", "bor", "bxor" for integers and bool).
    inplace=True writes the result into `x` and returns it.
    """
    _check_bool_flag(inplace, "inplace")
    items = list(x) if _is_list(x) else [x]
    bufs = [_arrays.prepare(item, f"x[{i}]" if _is_list(x) else "x", inplace)
            for i, item in enumerate(items)]
    if not bufs:
        return [] if not async_op else Work([], lambda: [])
    dtype = bufs[0].dtype
    for i, b in enumerate(bufs):
        if b.dtype != dtype:
            raise _chorus.InvalidArgumentError(
                f"allreduce of a list needs one dtype; x[0] is {dtype} but x[{i}] is {b.dtype}")
    _check_op(op, dtype)
    comm = _groups.get(rank_list)
    if inplace:
        ins, outs = [], None
        out_caps = [b.capsule() for b in bufs]
    elif any(b.cuda for b in bufs):
        # CUDA: torch copies the input on the current stream, which the collective follows.
        ins, outs = [], [b.array.clone() for b in bufs]
        out_caps = [b.like(o).capsule() for o, b in zip(outs, bufs)]
    else:
        ins = [b.capsule() for b in bufs]
        outs = [b.empty(b.shape) for b in bufs]
        out_caps = [b.like(o).capsule() for o, b in zip(outs, bufs)]

    def call(is_async):
        return _chorus.allreduce(comm._native, ins, out_caps, bufs[0].export_dtype, op, is_async)

    def finish():
        results = [_inplace_result(b) for b in bufs] if inplace else outs
        return results if _is_list(x) else results[0]

    return _complete([call], finish, async_op, synchronize)


def _rooted(collective, x, root, op, rank_list, async_op, inplace, synchronize):
    """broadcast and reduce: in place on a copy of x (or on x for inplace=True)."""
    _check_bool_flag(inplace, "inplace")
    items = list(x) if _is_list(x) else [x]
    bufs = [_arrays.prepare(item, "x", inplace) for item in items]
    if op is not None:
        for b in bufs:
            _check_op(op, b.dtype)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    is_broadcast = collective == "broadcast"
    calls, outs = [], []
    for b in bufs:
        if inplace:
            out, in_cap, out_cap = b.array, None, b.capsule()
        elif b.cuda:  # torch copies on the current stream, which the collective follows
            out, in_cap = b.array.clone(), None
            out_cap = b.like(out).capsule()
        else:
            out = b.empty(b.shape)
            in_cap = b.capsule() if (not is_broadcast or comm.rank == group_root) else None
            out_cap = b.like(out).capsule()
        outs.append(out)
        calls.append(lambda a, i=in_cap, o=out_cap, d=b.export_dtype: _chorus.rooted_in_place(
            comm._native, is_broadcast, i, o, d, group_root, op or "sum", a))

    def finish():
        results = [_inplace_result(b) for b in bufs] if inplace else outs
        return results if _is_list(x) else results[0]

    return _complete(calls, finish, async_op, synchronize)


@accepts_foreign
def broadcast(x, root=0, rank_list=None, async_op=False, inplace=False, synchronize=False):
    """Returns root's `x` on every rank of the group (root is a world rank). A list broadcasts
    each item. inplace=True overwrites `x` on non-roots."""
    return _rooted("broadcast", x, root, None, rank_list, async_op, inplace, synchronize)


@accepts_foreign
def reduce(x, root=0, op="sum", rank_list=None, async_op=False, inplace=False, synchronize=False):
    """Returns the reduction of `x` across the group on `root` (a world rank); other ranks get
    their input back unchanged (a copy of it, or `x` itself with inplace=True)."""
    return _rooted("reduce", x, root, op, rank_list, async_op, inplace, synchronize)


@accepts_foreign
def reduce_scatter(x, op="sum", rank_list=None, async_op=False, synchronize=False):
    """Reduces across the group and returns this rank's part of the result.

    An array: dimension 0 must be divisible by the group size; returns chunk `rank` along axis 0.
    A list of exactly group-size arrays: returns the reduction of item `rank`.
    """
    comm = _groups.get(rank_list)
    size = comm.size
    if _is_list(x):
        if len(x) != size:
            raise _chorus.InvalidArgumentError(
                f"reduce_scatter of a list needs exactly group-size ({size}) items, got {len(x)}")
        bufs = [_arrays.prepare(item, f"x[{i}]") for i, item in enumerate(x)]
        first = bufs[0]
        for b in bufs:
            _check_op(op, b.dtype)
        if any(b.dtype != first.dtype or b.shape != first.shape or b.torch != first.torch
               for b in bufs):
            return _reduce_scatter_uneven(comm, bufs, op, async_op, synchronize)
        stacked = _arrays.stack(bufs)
        buf = _arrays.Buffer(stacked, stacked, first.torch, first.dtype)
        out_shape = first.shape
    else:
        buf = _arrays.prepare(x)
        _check_op(op, buf.dtype)
        chunk = _divisible(buf, 0, size, "reduce_scatter")
        out_shape = (chunk,) + buf.shape[1:]
    out = buf.empty(out_shape)
    in_cap, out_cap = buf.capsule(), buf.like(out).capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "reduce_scatter", in_cap, out_cap,
                                    buf.export_dtype, 0, 0, 0, op, is_async)

    return _complete([call], lambda: out, async_op, synchronize)


def _reduce_scatter_uneven(comm, bufs, op, async_op, synchronize):
    """reduce_scatter of items of different shapes: item i is reduced to group rank i."""
    outs, calls = [], []
    for g, b in enumerate(bufs):
        out = b.empty(b.shape)
        in_cap, out_cap = b.capsule(), b.like(out).capsule()
        outs.append(out)
        calls.append(lambda a, i=in_cap, o=out_cap, r=g, d=b.export_dtype: _chorus.rooted_in_place(
            comm._native, False, i, o, d, r, op, a))
    return _complete(calls, lambda: outs[comm.rank], async_op, synchronize)


# --------------------------------------------------------------------------- data movement


@accepts_foreign
def allgather(x, axis=0, rank_list=None, async_op=False, synchronize=False):
    """Concatenates every rank's `x` along `axis` in group-rank order. A list gathers each item."""
    comm = _groups.get(rank_list)
    items = list(x) if _is_list(x) else [x]
    calls, outs = [], []
    for i, item in enumerate(items):
        b = _arrays.prepare(item, f"x[{i}]" if _is_list(x) else "x")
        ax = _axis(axis, len(b.shape), "axis")
        shape = list(b.shape)
        shape[ax] *= comm.size
        out = b.empty(tuple(shape))
        outs.append(out)
        in_cap, out_cap = b.capsule(), b.like(out).capsule()
        calls.append(lambda a, i=in_cap, o=out_cap, d=b.export_dtype, ax=ax: _chorus.out_of_place(
            comm._native, "allgather", i, o, d, 0, ax, 0, "sum", a))
    return _complete(calls, lambda: outs if _is_list(x) else outs[0], async_op, synchronize)


@accepts_foreign
def gather(x, root=0, axis=0, rank_list=None, async_op=False, synchronize=False):
    """Concatenates every rank's `x` along `axis` on `root` (a world rank) and returns it there.
    Non-root ranks get their input `x` back unchanged (the same object)."""
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    ax = _axis(axis, len(b.shape), "axis")
    out, out_cap = None, None
    if comm.rank == group_root:
        shape = list(b.shape)
        shape[ax] *= comm.size
        out = b.empty(tuple(shape))
        out_cap = b.like(out).capsule()
    in_cap = b.capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "gather", in_cap, out_cap, b.export_dtype,
                                    group_root, ax, 0, "sum", is_async)

    return _complete([call], lambda: out if out is not None else x, async_op, synchronize)


@accepts_foreign
def scatter(x, root=0, rank_list=None, async_op=False, synchronize=False):
    """Splits root's `x` along axis 0 into group-size chunks and returns chunk `rank` on each rank.

    Every rank passes an array of the full shape and dtype (root is a world rank); only root's
    content is read. Dimension 0 must be divisible by the group size.
    """
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    chunk = _divisible(b, 0, comm.size, "scatter")
    out = b.empty((chunk,) + b.shape[1:])
    in_cap = b.capsule() if comm.rank == group_root else None
    out_cap = b.like(out).capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "scatter", in_cap, out_cap, b.export_dtype,
                                    group_root, 0, 0, "sum", is_async)

    return _complete([call], lambda: out, async_op, synchronize)


@accepts_foreign
def all_to_all(x, split_axis=0, concat_axis=0, rank_list=None, async_op=False, synchronize=False):
    """Splits `x` along split_axis into group-size chunks, sends chunk i to group rank i, and
    concatenates what arrives along concat_axis in group-rank order."""
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    split = _axis(split_axis, len(b.shape), "split_axis")
    concat = _axis(concat_axis, len(b.shape), "concat_axis")
    _divisible(b, split, comm.size, "all_to_all")
    shape = list(b.shape)
    shape[split] //= comm.size
    shape[concat] *= comm.size
    out = b.empty(tuple(shape))
    in_cap, out_cap = b.capsule(), b.like(out).capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "all_to_all", in_cap, out_cap, b.export_dtype,
                                    0, split, concat, "sum", is_async)

    return _complete([call], lambda: out, async_op, synchronize)


@accepts_foreign
def send(x, peer, tag=0, rank_list=None, async_op=False, synchronize=False):
    """Sends `x` to world rank `peer` (matched by the recv with the same peer and tag)."""
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_peer = comm.group_rank(peer, "peer")
    cap = b.capsule()

    def call(is_async):
        return _chorus.point_to_point(comm._native, True, cap, b.export_dtype, group_peer,
                                      _tag(tag), is_async)

    return _complete([call], lambda: None, async_op, synchronize)


@accepts_foreign
def recv(peer, shape=None, dtype="float32", tag=0, out=None, rank_list=None, async_op=False,
         synchronize=False):
    """Receives from world rank `peer` into a new array of `shape` and `dtype` (a name, NumPy
    dtype, or torch dtype, which gives a torch tensor), or into `out` (returned)."""
    comm = _groups.get(rank_list)
    group_peer = comm.group_rank(peer, "peer")
    if out is not None:
        b = _arrays.prepare(out, "out", writable=True)
    else:
        if shape is None:
            raise _chorus.InvalidArgumentError("recv needs either shape (with dtype) or out")
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        kind, dt, name = _arrays.dtype_of(dtype)
        if kind == "torch":
            import torch
            array = torch.empty(shape, dtype=dt)
        else:
            import numpy as np
            array = np.empty(shape, dtype=dt)
        b = _arrays.Buffer(array, array, kind == "torch", name)
    cap = b.capsule()

    def call(is_async):
        return _chorus.point_to_point(comm._native, False, cap, b.export_dtype, group_peer,
                                      _tag(tag), is_async)

    return _complete([call], lambda: _inplace_result(b), async_op, synchronize)


def _tag(tag):
    if isinstance(tag, bool) or not isinstance(tag, int) or tag < 0:
        raise _chorus.InvalidArgumentError(f"tag must be a non-negative int, not {tag!r}")
    return tag


def barrier(rank_list=None, async_op=False, synchronize=False):
    """Returns once every rank of the group has entered it."""
    comm = _groups.get(rank_list)
    return _complete([lambda a: _chorus.barrier(comm._native, a)], lambda: None, async_op,
                     synchronize)


OPERATORS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "gather",
             "scatter", "all_to_all", "send", "recv", "barrier")
