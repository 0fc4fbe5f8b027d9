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


def _targets(bufs, shapes, out, inplace, is_list):
    """The Buffers an operation writes its results into: `bufs` themselves (inplace=True), the
    caller's `out` (an array, or a list like x), or new arrays of `shapes` in the inputs'
    framework. C++ checks each out's dtype and size against what the operation writes."""
    if out is None:
        if inplace:
            return bufs
        return [b.like(b.empty(shape)) for b, shape in zip(bufs, shapes)]
    if inplace:
        raise _chorus.InvalidArgumentError("pass either inplace=True or out=, not both")
    if not is_list:
        targets = [_arrays.prepare(out, "out", writable=True)]
    elif not _is_list(out) or len(out) != len(bufs):
        raise _chorus.InvalidArgumentError(
            f"out must be a list of {len(bufs)} arrays, like x; got "
            f"{len(out) if _is_list(out) else type(out).__name__}")
    else:
        targets = [_arrays.prepare(o, f"out[{i}]", writable=True) for i, o in enumerate(out)]
    for b, t in zip(bufs, targets):
        if t.dtype != b.dtype:  # before DLPack export, which carries bool as uint8
            raise _chorus.InvalidArgumentError(f"out has dtype {t.dtype}, but x has {b.dtype}")
    return targets


def _results(targets, is_list):
    """The caller's view of `targets` after the operation (out= written back if it was copied)."""
    results = [_inplace_result(t) for t in targets]
    return results if is_list else results[0]


def _copy_on_stream(source, target):
    """CUDA: the input copied into the target on torch's current stream, which the collective
    follows; the collective then runs in place on the target."""
    if target.array is not source.array:
        with _arrays._torch().no_grad():
            target.array.copy_(source.array)


# --------------------------------------------------------------------------- reductions


def allreduce(x, op="sum", rank_list=None, async_op=False, inplace=False, synchronize=False,
              out=None):
    """Reduces `x` element-wise across the ranks of the group and returns the result.

    A list of arrays (one dtype) is reduced as one fused message and gives a list.
    op: "sum", "prod", "min", "max", "avg" ("band", "bor", "bxor" for integers and bool).
    inplace=True writes the result into `x` and returns it; out= writes it into `out` (an array of
    x's dtype and size, or a list like x) and returns `out`.
    """
    if rank_list is None and async_op is False and synchronize is False and (
            inplace is False or (inplace is True and out is None)):
        # The common call, one NumPy array on the world, blocking, goes straight to C++; it
        # answers NotImplemented for anything else (python/src/short_calls.cc).
        result = _chorus.allreduce_array(_groups.world_native(), x, x if inplace is True else out,
                                         op)
        if result is not NotImplemented:
            return result
    return _allreduce(x, op, rank_list, async_op, inplace, synchronize, out)


@accepts_foreign
def _allreduce(x, op, rank_list, async_op, inplace, synchronize, out):
    _check_bool_flag(inplace, "inplace")
    is_list = _is_list(x)
    items = list(x) if is_list else [x]
    bufs = [_arrays.prepare(item, f"x[{i}]" if is_list else "x", inplace)
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
    targets = _targets(bufs, [b.shape for b in bufs], out, inplace, is_list)
    if any(b.cuda for b in bufs):
        for b, t in zip(bufs, targets):
            _copy_on_stream(b, t)
        ins = []
    else:  # C++ reads the input and writes the target in one pass
        ins = [] if targets is bufs else [b.capsule() for b in bufs]
    out_caps = [t.capsule() for t in targets]

    def call(is_async):
        return _chorus.allreduce(comm._native, ins, out_caps, bufs[0].export_dtype, op, is_async)

    return _complete([call], lambda: _results(targets, is_list), async_op, synchronize)


def _rooted(collective, x, root, op, rank_list, async_op, inplace, synchronize, out):
    """broadcast and reduce: out of place from x into a new array, `out`, or x (inplace=True)."""
    _check_bool_flag(inplace, "inplace")
    is_list = _is_list(x)
    items = list(x) if is_list else [x]
    bufs = [_arrays.prepare(item, "x", inplace) for item in items]
    if op is not None:
        for b in bufs:
            _check_op(op, b.dtype)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    is_broadcast = collective == "broadcast"
    targets = _targets(bufs, [b.shape for b in bufs], out, inplace, is_list)
    calls = []
    for b, t in zip(bufs, targets):
        if b.cuda:
            _copy_on_stream(b, t)
            in_cap = None
        elif t is b:
            in_cap = None  # in place
        else:  # (a broadcast reads the root's only; the others' are checked against their out)
            in_cap = b.capsule()
        calls.append(lambda a, i=in_cap, o=t.capsule(), d=b.export_dtype: _chorus.rooted(
            comm._native, is_broadcast, i, o, d, group_root, op or "sum", a))
    return _complete(calls, lambda: _results(targets, is_list), async_op, synchronize)


@accepts_foreign
def broadcast(x, root=0, rank_list=None, async_op=False, inplace=False, synchronize=False,
              out=None):
    """Returns root's `x` on every rank of the group (root is a world rank). A list broadcasts
    each item. inplace=True overwrites `x` on non-roots; out= writes into `out` and returns it."""
    return _rooted("broadcast", x, root, None, rank_list, async_op, inplace, synchronize, out)


@accepts_foreign
def reduce(x, root=0, op="sum", rank_list=None, async_op=False, inplace=False, synchronize=False,
           out=None):
    """Returns the reduction of `x` across the group on `root` (a world rank); other ranks get
    their input back unchanged (a copy of it, `x` itself with inplace=True, or `out` holding a copy
    of it with out=)."""
    return _rooted("reduce", x, root, op, rank_list, async_op, inplace, synchronize, out)


@accepts_foreign
def reduce_scatter(x, op="sum", rank_list=None, async_op=False, synchronize=False, out=None):
    """Reduces across the group and returns this rank's part of the result.

    An array: dimension 0 must be divisible by the group size; returns chunk `rank` along axis 0.
    A list of exactly group-size arrays: returns the reduction of item `rank`.
    out= writes the part into `out` and returns it.
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
            return _reduce_scatter_uneven(comm, bufs, op, async_op, synchronize, out)
        stacked = _arrays.stack(bufs)
        buf = _arrays.Buffer(stacked, stacked, first.torch, first.dtype)
        out_shape = first.shape
    else:
        buf = _arrays.prepare(x)
        _check_op(op, buf.dtype)
        chunk = _divisible(buf, 0, size, "reduce_scatter")
        out_shape = (chunk,) + buf.shape[1:]
    target = _targets([buf], [out_shape], out, False, False)[0]
    in_cap, out_cap = buf.capsule(), target.capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "reduce_scatter", in_cap, out_cap,
                                    buf.export_dtype, 0, 0, 0, op, is_async)

    return _complete([call], lambda: _results([target], False), async_op, synchronize)


def _reduce_scatter_uneven(comm, bufs, op, async_op, synchronize, out):
    """reduce_scatter of items of different shapes: item i is reduced to group rank i (its
    reduce writes `out` there, if given; the other items' results go to scratch arrays)."""
    mine = _targets([bufs[comm.rank]], [bufs[comm.rank].shape], out, False, False)[0]
    calls = []
    for g, b in enumerate(bufs):
        target = mine if g == comm.rank else b.like(b.empty(b.shape))
        calls.append(lambda a, i=b.capsule(), o=target.capsule(), r=g, d=b.export_dtype:
                     _chorus.rooted(comm._native, False, i, o, d, r, op, a))
    return _complete(calls, lambda: _results([mine], False), async_op, synchronize)


# --------------------------------------------------------------------------- data movement


@accepts_foreign
def allgather(x, axis=0, rank_list=None, async_op=False, synchronize=False, out=None):
    """Concatenates every rank's `x` along `axis` in group-rank order. A list gathers each item.
    out= writes into `out` (a list like x for a list) and returns it."""
    comm = _groups.get(rank_list)
    is_list = _is_list(x)
    items = list(x) if is_list else [x]
    bufs = [_arrays.prepare(item, f"x[{i}]" if is_list else "x") for i, item in enumerate(items)]
    axes, shapes = [], []
    for b in bufs:
        axes.append(_axis(axis, len(b.shape), "axis"))
        shape = list(b.shape)
        shape[axes[-1]] *= comm.size
        shapes.append(tuple(shape))
    targets = _targets(bufs, shapes, out, False, is_list)
    calls = [lambda a, i=b.capsule(), o=t.capsule(), d=b.export_dtype, ax=ax: _chorus.out_of_place(
        comm._native, "allgather", i, o, d, 0, ax, 0, "sum", a)
        for b, t, ax in zip(bufs, targets, axes)]
    return _complete(calls, lambda: _results(targets, is_list), async_op, synchronize)


@accepts_foreign
def gather(x, root=0, axis=0, rank_list=None, async_op=False, synchronize=False, out=None):
    """Concatenates every rank's `x` along `axis` on `root` (a world rank) and returns it there
    (in `out`, if given). Non-root ranks get their input `x` back unchanged (the same object) and
    leave `out` untouched."""
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    ax = _axis(axis, len(b.shape), "axis")
    target, out_cap = None, None
    if comm.rank == group_root or out is not None:  # elsewhere out is checked, never written
        shape = list(b.shape)
        shape[ax] *= comm.size
        target = _targets([b], [tuple(shape)], out, False, False)[0]
        out_cap = target.capsule()
    in_cap = b.capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "gather", in_cap, out_cap, b.export_dtype,
                                    group_root, ax, 0, "sum", is_async)

    return _complete([call], lambda: _results([target], False) if comm.rank == group_root else x,
                     async_op, synchronize)


@accepts_foreign
def scatter(x, root=0, rank_list=None, async_op=False, synchronize=False, out=None):
    """Splits root's `x` along axis 0 into group-size chunks and returns chunk `rank` on each rank
    (in `out`, if given).

    Every rank passes an array of the full shape and dtype (root is a world rank); only root's
    content is read. Dimension 0 must be divisible by the group size.
    """
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    chunk = _divisible(b, 0, comm.size, "scatter")
    target = _targets([b], [(chunk,) + b.shape[1:]], out, False, False)[0]
    in_cap = b.capsule()  # read on the root; checked against out everywhere
    out_cap = target.capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "scatter", in_cap, out_cap, b.export_dtype,
                                    group_root, 0, 0, "sum", is_async)

    return _complete([call], lambda: _results([target], False), async_op, synchronize)


@accepts_foreign
def all_to_all(x, split_axis=0, concat_axis=0, rank_list=None, async_op=False, synchronize=False,
               out=None):
    """Splits `x` along split_axis into group-size chunks, sends chunk i to group rank i, and
    concatenates what arrives along concat_axis in group-rank order (into `out`, if given)."""
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    split = _axis(split_axis, len(b.shape), "split_axis")
    concat = _axis(concat_axis, len(b.shape), "concat_axis")
    _divisible(b, split, comm.size, "all_to_all")
    shape = list(b.shape)
    shape[split] //= comm.size
    shape[concat] *= comm.size
    target = _targets([b], [tuple(shape)], out, False, False)[0]
    in_cap, out_cap = b.capsule(), target.capsule()

    def call(is_async):
        return _chorus.out_of_place(comm._native, "all_to_all", in_cap, out_cap, b.export_dtype,
                                    0, split, concat, "sum", is_async)

    return _complete([call], lambda: _results([target], False), async_op, synchronize)


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
    if rank_list is None and async_op is False and synchronize is False:
        return _chorus.barrier_world(_groups.world_native())  # straight to C++ (short_calls.cc)
    comm = _groups.get(rank_list)
    return _complete([lambda a: _chorus.barrier(comm._native, a)], lambda: None, async_op,
                     synchronize)


OPERATORS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "gather",
             "scatter", "all_to_all", "send", "recv", "barrier")
