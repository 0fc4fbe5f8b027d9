"""The collective and point-to-point operations of DESIGN §4.

Every operation: wraps its inputs as contiguous buffers (chorus._arrays), allocates its results with
the input's framework, and hands DLPack capsules to the C++ core, which does the work with the GIL
released. Inputs are never modified unless inplace=True. async_op=True returns a Work whose wait()
returns the result. CuPy and JAX arrays pass through torch (chorus._foreign). rank_list selects the
caller's group (see chorus._groups); roots and peers are world ranks inside the caller's group.

Each operation calls the _chorus function of the same name, which mirrors the C++ Communicator
method (python/src/operations.cc). C++ checks each call before anything is sent (the op against the
dtype; axes, roots, peers and tags against the tensors and the group; outputs against inputs;
unknown op names). This file checks what C++ cannot see: the Python types of arguments (an axis,
root, peer or tag that is not an int or a NumPy integer, or is a bool; flags that are not bools),
what the bindings' C ints hold, the package's own arguments (inplace= with out=, out= lists, recv's
shape, the dimension 0 that reduce_scatter and scatter split along), world ranks with no group rank,
and dtypes the export hides (bool travels as uint8 under one dtype override per call, so out= and a
list's items are compared with x before it). A Python number x goes to _scalars.
"""

import inspect
import time

from . import _arrays, _chorus, _groups, _nested, _scalars
from ._foreign import accepts_foreign

_OPS = dict(_chorus.ReduceOp.__members__)  # "sum": _chorus.ReduceOp.sum, ... in C++'s order
REDUCE_OPS = tuple(_OPS)


def _reduce_op(op):
    """The _chorus.ReduceOp named `op`; C++ parses anything else (and refuses it, naming the valid
    ones)."""
    try:
        return _OPS[op]
    except (KeyError, TypeError):
        return _chorus.parse_reduce_op(op)


class Work:
    """Handle of an operation started with async_op=True.

    wait(timeout=None) blocks (the GIL is released) until the operation completes and returns its
    result, or raises its failure; with `timeout` (seconds) it raises chorus.TimeoutError if the
    operation is still running then (it keeps running and can be waited for again). For CUDA
    tensors, "completes" means the waiting thread's current stream is ordered after the collective
    (no host wait); synchronize() also waits on the host until the GPU has finished it.
    is_completed() never blocks (for CUDA tensors it asks the GPU).
    """

    __slots__ = ("_pending", "_finish", "_result", "_done", "_device")
    # Short paths (front_calls.cc) make Works without __init__: pending, native PendingWorks;
    # finish makes the result (None: _result has it); device, the tensors' CUDA device or None.

    def __init__(self, pending, finish, device=None):
        self._pending = [p for p in pending if p is not None]
        self._finish = finish
        self._result = None
        self._done = False
        self._device = device  # the CUDA device of its tensors, None for host arrays

    def wait(self, timeout=None):
        if self._done:
            if self._pending:  # CUDA: every wait orders the stream current here, as torch's does
                _arrays.follow_current_stream(self._device)
                for p in self._pending:
                    p.wait(None)
            return self._result
        # wait() orders the current stream (of the tensors' device) here and now
        _arrays.follow_current_stream(self._device)
        deadline = None if timeout is None else time.monotonic() + timeout
        for p in self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not p.wait(left):
                error = _chorus.TimeoutError(
                    f"{p.description} did not complete within {timeout} s; it keeps running, "
                    "call wait() again")
                error.missing_ranks = []  # unknown here: the operation has not failed
                raise error
        if self._finish is not None:  # None: the result was known at the start (a short call's)
            self._result = self._finish()
        self._done = True
        if not _chorus.gpu_backend:  # kept on a GPU build: each later wait orders its stream
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


_chorus.set_work_type(Work)  # async short calls return one (python/src/front_calls.cc)


def _complete(calls, finish, async_op, synchronize):
    """Runs `calls` (each takes the async flag) and returns finish(), or a Work for async_op.

    synchronize=True: a blocking call also waits on the host until the operation is complete on
    the GPU (CUDA tensors); host operations are complete when a blocking call returns anyway."""
    _check_flags(async_op, synchronize)
    if async_op:
        pending = [call(True) for call in calls]
        return Work(pending, finish, _arrays.take_cuda_device())
    if synchronize:
        for call in calls:
            call(True).synchronize()
    else:
        for call in calls:
            call(False)
    _arrays.take_cuda_device()
    return finish()


def _check_bool_flag(value, name):
    if not isinstance(value, bool):
        raise _chorus.InvalidArgumentError(f"{name} must be True or False, not {value!r}")


def _check_flags(async_op, synchronize):
    """Every operation's flags. (The short paths take True and False only: anything else comes
    here, python/src/front_calls.cc.)"""
    _check_bool_flag(async_op, "async_op")
    _check_bool_flag(synchronize, "synchronize")


# The C++ bindings take axes and tags as C ints (python/src/operations.cc).
_INT_MIN, _INT_MAX = -2**31, 2**31 - 1


def _int(value, what):
    """`value` as an int (an int or a NumPy integer, not a bool or a float); C++ checks its range
    against the tensor, here only what a C int holds."""
    value = _groups.as_int(value, what)
    if not _INT_MIN <= value <= _INT_MAX:
        raise _chorus.InvalidArgumentError(
            f"{what}={value} is out of range: no tensor has that many dimensions")
    return value


def _scaled(shape, axis, multiply=1, divide=1):
    """`shape` with dimension `axis` (negative: from the end) multiplied by `multiply` and divided
    by `divide`; `shape` itself when it has no such dimension, which C++ then refuses."""
    if not -len(shape) <= axis < len(shape):
        return shape
    shape = list(shape)
    shape[axis] = shape[axis] * multiply // divide
    return tuple(shape)


def _divisible(buf, size, what):
    """The extent of chunk `rank` when `what` splits buf along dimension 0 (its rule, which C++'s
    count check does not state)."""
    extent = buf.shape[0] if buf.shape else 0
    if not buf.shape or extent % size != 0:
        raise _chorus.InvalidArgumentError(
            f"{what} needs dimension 0 ({extent if buf.shape else 'none: 0-d tensor'}) to be "
            f"divisible by the group size ({size})")
    return extent // size


def _problem_of(check):
    """The chorus.Error that check() raises, or None."""
    try:
        check()
    except _chorus.Error as error:
        return error
    return None


def _check_uneven_all_to_all(x, out, splits, split_axis, concat_axis):
    if splits is None:
        raise _chorus.InvalidArgumentError("all_to_all: recv_splits needs splits")
    _check_uneven_call("all_to_all", "splits", x, out)
    if split_axis != 0 or concat_axis != 0:
        raise _chorus.InvalidArgumentError(
            "all_to_all with splits sends rows: split_axis and concat_axis must be 0, not "
            f"{split_axis} and {concat_axis}")


def _check_uneven_call(operation, form, x, out):
    if _is_list(x) or _nested.is_nest(x):
        raise _chorus.InvalidArgumentError(f"{operation} with {form} takes one array, not a list")
    if out is not None:
        raise _chorus.InvalidArgumentError(f"{operation} with {form} does not take out=")


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
    framework. C++ checks each out's size against what the operation writes."""
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


def _front(general):
    """The public function `general.__name__` as the CPython function that _chorus.front makes
    (python/src/front_calls.cc): the common call (one NumPy array, the world, blocking) goes
    straight to C++'s short path, with no Python frame; anything else, and anything the short path
    declines, calls `general` with the arguments as given. `general`'s signature and docstring are
    the front's."""
    doc = f"{general.__name__}{inspect.signature(general)}\n--\n\n{inspect.getdoc(general)}"
    return _chorus.front(general.__name__, general, doc)


# --------------------------------------------------------------------------- reductions


def allreduce(x, op="sum", rank_list=None, async_op=False, inplace=False, synchronize=False,
              out=None, group=None):
    """Reduces `x` element-wise across the ranks of the group and returns the result.

    A list of arrays (one dtype) is reduced as one fused message and gives a list.
    op: "sum", "prod", "min", "max", "avg" ("band", "bor", "bxor" for integers and bool).
    inplace=True writes the result into `x` and returns it; out= writes it into `out` (an array of
    x's dtype and size, or a list like x) and returns `out`.
    A nest of dicts, lists and tuples of arrays gives the same nest, one fused message per dtype.
    """
    if type(x) in _scalars.DTYPES:  # a Python number
        return _scalars.number_call(allreduce, locals())
    rank_list = _groups.resolve(group, rank_list, "allreduce")
    if _nested.is_nest(x):
        return _nested.allreduce(x, op, rank_list, async_op, inplace, synchronize, out)
    return _allreduce(x, op, rank_list, async_op, synchronize, inplace=inplace, out=out)


allreduce = _front(allreduce)  # the common call takes the short path (python/src/front_calls.cc)


@accepts_foreign
def _allreduce(x, op, rank_list, async_op, synchronize, inplace, out):
    _check_bool_flag(inplace, "inplace")
    is_list = _is_list(x)
    items = list(x) if is_list else [x]
    bufs = [_arrays.prepare(item, f"x[{i}]" if is_list else "x", inplace)
            for i, item in enumerate(items)]
    if not bufs:  # a list in gives a list out: [] for [] (C++'s fused allreduce refuses it)
        _check_flags(async_op, synchronize)
        return [] if not async_op else Work([], lambda: [])
    dtype = bufs[0].dtype
    for i, b in enumerate(bufs):  # before DLPack export, which carries bool as uint8
        if b.dtype != dtype:
            raise _chorus.InvalidArgumentError(
                f"allreduce of a list needs one dtype; x[0] is {dtype} but x[{i}] is {b.dtype}")
    native_op = _reduce_op(op)
    comm = _groups.get(rank_list)
    targets = _targets(bufs, [b.shape for b in bufs], out, inplace, is_list)
    native, export = comm._native, bufs[0].export_dtype
    if len(bufs) == 1 and not bufs[0].cuda:  # C++ reads x and writes the target in one pass
        out_cap = targets[0].capsule()
        in_cap = out_cap if targets[0] is bufs[0] else bufs[0].capsule()

        def call(is_async):
            return _chorus.allreduce(native, in_cap, out_cap, native_op, export, is_async)
    else:  # fused (and CUDA): the targets hold the inputs and are reduced in place
        caps = [t.capsule() for t in targets]
        ins, outs = [], []  # the host items that are copied into their targets, in one call
        for b, t, cap in zip(bufs, targets, caps):
            if b.cuda:
                _copy_on_stream(b, t)
            elif t is not b:
                ins.append(b.capsule())
                outs.append(cap)
        if ins:
            _chorus.copy(ins, outs, export)

        def call(is_async):
            return _chorus.allreduce(native, caps, native_op, export, is_async)

    return _complete([call], lambda: _results(targets, is_list), async_op, synchronize)


def _rooted(x, root, op, rank_list, async_op, inplace, synchronize, out):
    """broadcast (op None) and reduce: out of place from x into a new array, `out`, or x
    (inplace=True). A reduce's other ranks return a copy of x, which C++ never writes there: a
    new one is made here (C++ then gets no output), `out` is written once C++ has taken the
    call."""
    _check_bool_flag(inplace, "inplace")
    is_list = _is_list(x)
    items = list(x) if is_list else [x]
    bufs = [_arrays.prepare(item, "x", inplace) for item in items]
    native_op = None if op is None else _reduce_op(op)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    copies = native_op is not None and comm.rank != group_root
    made = copies and out is None and not inplace
    if made:  # CUDA copies are made on the stream below
        targets = [b.like(b.empty(b.shape)) if b.cuda else b.copy() for b in bufs]
    else:
        targets = _targets(bufs, [b.shape for b in bufs], out, inplace, is_list)
    native = comm._native
    calls = []
    for b, t in zip(bufs, targets):
        if b.cuda:
            _copy_on_stream(b, t)
        out_cap = None if made and not b.cuda else t.capsule()
        # In place passes one capsule twice (a broadcast reads only the root's input).
        in_cap = out_cap if b.cuda or t is b else b.capsule()
        if native_op is None:
            calls.append(lambda a, i=in_cap, o=out_cap, d=b.export_dtype: _chorus.broadcast(
                native, i, o, group_root, d, a))
        elif copies and out is not None:
            calls.append(_reduce_then_copy(native, in_cap, out_cap, group_root, native_op,
                                           b.export_dtype))
        else:
            calls.append(lambda a, i=in_cap, o=out_cap, d=b.export_dtype: _chorus.reduce(
                native, i, o, group_root, native_op, d, a))
    return _complete(calls, lambda: _results(targets, is_list), async_op, synchronize)


def _reduce_then_copy(native, in_cap, out_cap, root, op, export):
    """The call (it takes the async flag) of a reduce on a rank other than the root, which then
    copies its input into its `out` (C++ has checked the pair)."""

    def call(is_async):
        work = _chorus.reduce(native, in_cap, out_cap, root, op, export, is_async)
        _chorus.copy([in_cap], [out_cap], export)
        return work

    return call


def broadcast(x, root=0, rank_list=None, async_op=False, inplace=False, synchronize=False,
              out=None, group=None):
    """Returns root's `x` on every rank of the group (root is a world rank; with group=, a group
    rank). A list broadcasts each item. inplace=True overwrites `x` on non-roots; out= writes into
    `out` and returns it."""
    if type(x) in _scalars.DTYPES:  # a Python number
        return _scalars.number_call(broadcast, locals())
    rank_list = _groups.resolve(group, rank_list, "broadcast")
    root = _groups.world_rank_of(group, root, "root")
    if _nested.is_nest(x):
        return _nested.fused("broadcast", x, dict(root=root, rank_list=rank_list), async_op,
                             inplace, out)
    return _broadcast(x, root, rank_list, async_op, synchronize, inplace=inplace, out=out)


broadcast = _front(broadcast)


@accepts_foreign
def _broadcast(x, root, rank_list, async_op, synchronize, inplace, out):
    return _rooted(x, root, None, rank_list, async_op, inplace, synchronize, out)


def _broadcast_leaf(x, root, rank_list, inplace, async_op):
    return _broadcast(x, root, rank_list, async_op, False, inplace=inplace, out=None)


def reduce(x, root=0, op="sum", rank_list=None, async_op=False, inplace=False, synchronize=False,
           out=None, group=None):
    """Returns the reduction of `x` across the group on `root` (a world rank; with group=, a group
    rank); other ranks get their input back unchanged (a copy of it, `x` itself with inplace=True,
    or `out` holding a copy of it with out=)."""
    if type(x) in _scalars.DTYPES:  # a Python number
        return _scalars.number_call(reduce, locals())
    rank_list = _groups.resolve(group, rank_list, "reduce")
    root = _groups.world_rank_of(group, root, "root")
    if _nested.is_nest(x):
        return _nested.fused("reduce", x, dict(root=root, op=op, rank_list=rank_list), async_op,
                             inplace, out)
    return _reduce(x, root, op, rank_list, async_op, inplace=inplace, synchronize=synchronize,
                   out=out)


reduce = _front(reduce)


@accepts_foreign
def _reduce(x, root=0, op="sum", rank_list=None, async_op=False, inplace=False, synchronize=False,
            out=None):
    return _rooted(x, root, op, rank_list, async_op, inplace, synchronize, out)


def reduce_scatter(x, op="sum", rank_list=None, async_op=False, synchronize=False, out=None,
                   group=None):
    """Reduces across the group and returns this rank's part of the result.

    An array: dimension 0 must be divisible by the group size; returns chunk `rank` along axis 0.
    A list of exactly group-size arrays: returns the reduction of item `rank`.
    A nest (dicts, or lists and tuples holding containers): each array as above, same nest out.
    out= writes the part into `out` and returns it.
    """
    rank_list = _groups.resolve(group, rank_list, "reduce_scatter")
    if _nested.is_nest(x):
        return _nested.fused_split("reduce_scatter", x, dict(op=op, rank_list=rank_list),
                                   async_op, out)
    return _reduce_scatter(x, op, rank_list, async_op, synchronize, out=out)


reduce_scatter = _front(reduce_scatter)


@accepts_foreign
def _reduce_scatter(x, op="sum", rank_list=None, async_op=False, synchronize=False, out=None):
    comm = _groups.get(rank_list)
    size = comm.size
    if _is_list(x):
        if len(x) != size:
            raise _chorus.InvalidArgumentError(
                f"reduce_scatter of a list needs exactly group-size ({size}) items, got {len(x)}")
        bufs = [_arrays.prepare(item, f"x[{i}]") for i, item in enumerate(x)]
        native_op = _reduce_op(op)
        first = bufs[0]
        if any(b.dtype != first.dtype or b.shape != first.shape or b.torch != first.torch
               for b in bufs):
            return _reduce_scatter_uneven(comm, bufs, native_op, async_op, synchronize, out)
        stacked = _arrays.stack(bufs)
        buf = _arrays.Buffer(stacked, stacked, first.torch, first.dtype)
        out_shape = first.shape
    else:
        buf = _arrays.prepare(x)
        native_op = _reduce_op(op)
        out_shape = (_divisible(buf, size, "reduce_scatter"),) + buf.shape[1:]
    target = _targets([buf], [out_shape], out, False, False)[0]
    in_cap, out_cap = buf.capsule(), target.capsule()

    def call(is_async):
        return _chorus.reduce_scatter(comm._native, in_cap, out_cap, native_op, buf.export_dtype,
                                      is_async)

    return _complete([call], lambda: _results([target], False), async_op, synchronize)


def _reduce_scatter_uneven(comm, bufs, op, async_op, synchronize, out):
    """reduce_scatter of items of different shapes: item g is reduced to group rank g, into `out`
    (or a new array) there; the other ranks give no output."""
    mine = _targets([bufs[comm.rank]], [bufs[comm.rank].shape], out, False, False)[0]
    calls = []
    for g, b in enumerate(bufs):
        in_cap = b.capsule()
        out_cap = mine.capsule() if g == comm.rank else None
        calls.append(lambda a, i=in_cap, o=out_cap, r=g, d=b.export_dtype:
                     _chorus.reduce(comm._native, i, o, r, op, d, a))
    return _complete(calls, lambda: _results([mine], False), async_op, synchronize)


# --------------------------------------------------------------------------- data movement


def allgather(x, axis=0, rank_list=None, async_op=False, synchronize=False, out=None, group=None,
              uneven=False):
    """Concatenates every rank's `x` along `axis` in group-rank order. A list gathers each item; a
    nest gives the same nest. out= writes into `out` (a list like x for a list) and returns it.
    uneven=True: the extents along `axis` may differ across ranks (Horovod's allgather, MPI's
    Allgatherv); x is one array, and out= is not taken."""
    rank_list = _groups.resolve(group, rank_list, "allgather")
    if uneven is not False:
        # A bad argument here joins the agreement as a refusal, so every rank raises.
        problem = _problem_of(lambda: (_check_bool_flag(uneven, "uneven"),
                                       _check_uneven_call("allgather", "uneven=True", x, out)))
        from . import _uneven
        return _uneven.allgather(x, axis, rank_list, async_op, synchronize, problem)
    if _nested.is_nest(x):
        return _nested.fused("allgather", x, dict(axis=axis, rank_list=rank_list), async_op,
                             False, out)
    return _allgather(x, axis, rank_list, async_op, synchronize, out=out)


allgather = _front(allgather)


def _allgather_leaf(x, axis, rank_list, async_op):
    return _allgather(x, axis, rank_list, async_op, False, out=None)


@accepts_foreign
def _allgather(x, axis, rank_list, async_op, synchronize, out):
    comm = _groups.get(rank_list)
    is_list = _is_list(x)
    items = list(x) if is_list else [x]
    bufs = [_arrays.prepare(item, f"x[{i}]" if is_list else "x") for i, item in enumerate(items)]
    axis = _int(axis, "axis")
    targets = _targets(bufs, [_scaled(b.shape, axis, comm.size) for b in bufs], out, False,
                       is_list)
    native = comm._native
    calls = [lambda a, i=b.capsule(), o=t.capsule(), d=b.export_dtype: _chorus.allgather(
        native, i, o, axis, d, a) for b, t in zip(bufs, targets)]
    return _complete(calls, lambda: _results(targets, is_list), async_op, synchronize)


def gather(x, root=0, axis=0, rank_list=None, async_op=False, synchronize=False, out=None,
           group=None):
    """Concatenates every rank's `x` along `axis` on `root` (a world rank; with group=, a group
    rank) and returns it there (in `out`, if given). Non-root ranks get their input `x` back
    unchanged (the same object) and leave `out` untouched."""
    rank_list = _groups.resolve(group, rank_list, "gather")
    root = _groups.world_rank_of(group, root, "root")
    if _nested.is_nest(x):
        return _nested.fused_split("gather", x, dict(root=root, axis=axis, rank_list=rank_list),
                                   async_op, out)
    return _gather(x, root, axis, rank_list, async_op, synchronize, out=out)


gather = _front(gather)


@accepts_foreign
def _gather(x, root=0, axis=0, rank_list=None, async_op=False, synchronize=False, out=None):
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    axis = _int(axis, "axis")
    target, out_cap = None, None
    if comm.rank == group_root or out is not None:  # elsewhere out is checked, never written
        target = _targets([b], [_scaled(b.shape, axis, comm.size)], out, False, False)[0]
        out_cap = target.capsule()
    in_cap = b.capsule()

    def call(is_async):
        return _chorus.gather(comm._native, in_cap, out_cap, group_root, axis, b.export_dtype,
                              is_async)

    return _complete([call], lambda: _results([target], False) if comm.rank == group_root else x,
                     async_op, synchronize)


def scatter(x, root=0, rank_list=None, async_op=False, synchronize=False, out=None, group=None):
    """Splits root's `x` along axis 0 into group-size chunks and returns chunk `rank` on each rank
    (in `out`, if given).

    Every rank passes an array of the full shape and dtype (root is a world rank; with group=, a
    group rank); only root's content is read. Dimension 0 must be divisible by the group size.
    """
    rank_list = _groups.resolve(group, rank_list, "scatter")
    root = _groups.world_rank_of(group, root, "root")
    if _nested.is_nest(x):
        return _nested.fused_split("scatter", x, dict(root=root, rank_list=rank_list), async_op,
                                   out)
    return _scatter(x, root, rank_list, async_op, synchronize, out=out)


scatter = _front(scatter)


@accepts_foreign
def _scatter(x, root=0, rank_list=None, async_op=False, synchronize=False, out=None):
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_root = comm.group_rank(root, "root")
    chunk = _divisible(b, comm.size, "scatter")
    target = _targets([b], [(chunk,) + b.shape[1:]], out, False, False)[0]
    in_cap = b.capsule()  # read on the root; checked against out everywhere
    out_cap = target.capsule()

    def call(is_async):
        return _chorus.scatter(comm._native, in_cap, out_cap, group_root, b.export_dtype, is_async)

    return _complete([call], lambda: _results([target], False), async_op, synchronize)


def all_to_all(x, split_axis=0, concat_axis=0, rank_list=None, async_op=False, synchronize=False,
               out=None, group=None, splits=None, recv_splits=None):
    """Splits `x` along split_axis into group-size chunks, sends chunk i to group rank i, and
    concatenates what arrives along concat_axis in group-rank order (into `out`, if given).

    splits (a list of group-size row counts adding up to x's dimension 0): rows splits[i] go to
    group rank i, and the result is the pair (the rows received, concatenated along axis 0 in
    group-rank order; how many came from each group rank), as Horovod's alltoall with splits and
    MPI's Alltoallv. recv_splits, when given, is checked against what each rank sends here: a
    disagreement is a MismatchError on every rank. Both axes stay 0; out= is not taken.
    """
    rank_list = _groups.resolve(group, rank_list, "all_to_all")
    if splits is not None or recv_splits is not None:
        # A bad argument here joins the agreement as a refusal, so every rank raises.
        problem = _problem_of(lambda: _check_uneven_all_to_all(x, out, splits, split_axis,
                                                               concat_axis))
        from . import _uneven
        return _uneven.all_to_all(x, splits, recv_splits, rank_list, async_op, synchronize,
                                  problem)
    if _nested.is_nest(x):
        return _nested.fused_split("all_to_all", x, dict(split_axis=split_axis,
                                                         concat_axis=concat_axis,
                                                         rank_list=rank_list), async_op, out)
    return _all_to_all(x, split_axis, concat_axis, rank_list, async_op, synchronize, out=out)


all_to_all = _front(all_to_all)


@accepts_foreign
def _all_to_all(x, split_axis=0, concat_axis=0, rank_list=None, async_op=False, synchronize=False,
                out=None):
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    split = _int(split_axis, "split_axis")
    concat = _int(concat_axis, "concat_axis")
    shape = _scaled(_scaled(b.shape, split, 1, comm.size), concat, comm.size)
    target = _targets([b], [shape], out, False, False)[0]
    in_cap, out_cap = b.capsule(), target.capsule()

    def call(is_async):
        return _chorus.all_to_all(comm._native, in_cap, out_cap, split, concat, b.export_dtype,
                                  is_async)

    return _complete([call], lambda: _results([target], False), async_op, synchronize)


def send(x, peer, tag=0, rank_list=None, async_op=False, synchronize=False, group=None):
    """Sends `x` to world rank `peer` (with group=, a group rank), matched by the recv with the
    same peer and tag."""
    rank_list = _groups.resolve(group, rank_list, "send")
    peer = _groups.world_rank_of(group, peer, "peer")
    return _send(x, peer, tag, rank_list, async_op, synchronize)


send = _front(send)


@accepts_foreign
def _send(x, peer, tag=0, rank_list=None, async_op=False, synchronize=False):
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    group_peer = comm.group_rank(peer, "peer")
    tag = _tag(tag)
    cap = b.capsule()

    def call(is_async):
        return _chorus.send(comm._native, cap, group_peer, tag, b.export_dtype, is_async)

    return _complete([call], lambda: None, async_op, synchronize)


ANY_SOURCE = -1  # recv's peer: whichever rank sends first (as MPI.ANY_SOURCE)


class Status:
    """What a recv learned: `source`, the rank that sent the message (a world rank, or with group=
    a group rank), set when the recv completes (pass `status=` to recv, as with mpi4py)."""

    __slots__ = ("source",)

    def __init__(self):
        self.source = None

    def __repr__(self):
        return f"chorus.Status(source={self.source})"


def recv(peer, shape=None, dtype="float32", tag=0, out=None, rank_list=None, async_op=False,
         synchronize=False, group=None, status=None):
    """Receives from world rank `peer` (with group=, a group rank) into a new array of `shape` and
    `dtype` (a name, NumPy dtype, or torch dtype, which gives a torch tensor), or into `out`
    (returned). `peer` ANY_SOURCE takes the first message with `tag` from whichever rank (host
    arrays only; one rank's messages still arrive in order); a chorus.Status given as `status`
    learns the sender."""
    rank_list = _groups.resolve(group, rank_list, "recv")
    if status is not None and not isinstance(status, Status):
        raise _chorus.InvalidArgumentError(
            f"status must be a chorus.Status, not {type(status).__name__}")
    peer = ANY_SOURCE if _is_any_source(peer) else _groups.world_rank_of(group, peer, "peer")
    return _recv(peer, shape, dtype, tag, out=out, rank_list=rank_list, async_op=async_op,
                 synchronize=synchronize, status=status, group=group)


recv = _front(recv)


@accepts_foreign
def _recv(peer, shape=None, dtype="float32", tag=0, out=None, rank_list=None, async_op=False,
          synchronize=False, status=None, group=None):
    comm = _groups.get(rank_list)
    group_peer = ANY_SOURCE if _is_any_source(peer) else comm.group_rank(peer, "peer")
    if out is not None:
        b = _arrays.prepare(out, "out", writable=True)
    else:
        if shape is None:
            raise _chorus.InvalidArgumentError("recv needs either shape (with dtype) or out")
        shape = _extents(shape)
        kind, dt, name = _arrays.dtype_of(dtype)
        if kind == "torch":
            import torch
            array = torch.empty(shape, dtype=dt)
        else:
            import numpy as np
            array = np.empty(shape, dtype=dt)
        b = _arrays.Buffer(array, array, kind == "torch", name)
    tag = _tag(tag)
    cap = b.capsule()
    issued = []  # a recv from any rank: its PendingWork, which learns the sender

    def call(is_async):
        if group_peer != ANY_SOURCE:
            return _chorus.recv(comm._native, cap, group_peer, tag, b.export_dtype, is_async)
        pending = _chorus.recv(comm._native, cap, group_peer, tag, b.export_dtype, True)
        issued.append(pending)
        if not is_async:
            pending.wait(None)
        return pending

    def finish():
        if status is not None:
            source = peer if not issued else comm.members[issued[0].source_rank]
            status.source = source if group is None else group.group_rank(source)
        return _inplace_result(b)

    return _complete([call], finish, async_op, synchronize)


def _is_any_source(peer):
    """Whether recv's `peer` is ANY_SOURCE: -1 as an int or a NumPy integer (not -1.0, which
    world_rank_of refuses as it refuses 1.0)."""
    if type(peer) is int:
        return peer == ANY_SOURCE
    try:
        return _groups.as_int(peer, "peer") == ANY_SOURCE
    except _chorus.InvalidArgumentError:
        return False


def _extents(shape):
    """recv's `shape` (an int, or a sequence of ints such as a tuple, list or torch.Size), none
    negative, as a tuple."""
    try:
        if hasattr(shape, "__index__"):
            extents = (_groups.as_int(shape, "shape"),)
        elif isinstance(shape, (str, bytes)):
            extents = None
        else:
            extents = tuple(_groups.as_int(e, "shape") for e in shape)
    except (_chorus.InvalidArgumentError, TypeError):
        extents = None
    if extents is None or any(e < 0 for e in extents):
        raise _chorus.InvalidArgumentError(
            "recv: shape must be a non-negative int or a tuple or list of them (the extents), "
            f"not {_groups.described(shape)}")
    return extents


def _tag(tag):
    """`tag` as an int (an int or a NumPy integer, not a bool or a float) that the bindings' C
    int holds; C++ refuses a negative one, naming the operation."""
    if type(tag) is not int:
        tag = _groups.as_int(tag, "tag", "a non-negative int")
    if not _INT_MIN <= tag <= _INT_MAX:
        raise _chorus.InvalidArgumentError(
            f"tag must be a non-negative int up to {_INT_MAX} (a C int), not {tag}")
    return tag


def barrier(rank_list=None, async_op=False, synchronize=False, group=None):
    """Returns once every rank of the group has entered it."""
    comm = _groups.get(_groups.resolve(group, rank_list, "barrier"))
    return _complete([lambda a: _chorus.barrier(comm._native, a)], lambda: None, async_op,
                     synchronize)


barrier = _front(barrier)


OPERATORS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "gather",
             "scatter", "all_to_all", "send", "recv", "barrier")
