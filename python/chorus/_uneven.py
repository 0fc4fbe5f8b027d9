"""The uneven forms of all_to_all and allgather: Horovod's alltoall with splits and its allgather
of first dimensions that differ, MPI's Alltoallv and Allgatherv, torch's all_to_all_single with
split sizes (what mixture-of-experts layers send their tokens with).

all_to_all(x, splits=...): group rank q's rows splits[p] (consecutive along axis 0, in rank order)
go to group rank p, and each rank returns the rows it received, in rank order, with how many came
from each rank. The ranks first exchange what each pair will send, in one even all_to_all of three
int64 per pair (the rows, a signature of the dtype, device and other dimensions, and whether the
sender checks recv_splits); when some rank passed recv_splits, each receiver checks them and the
ranks gather every verdict (one allgather), so that an error, or a call one rank refuses, is
raised on every rank: a rank whose own call was refused (its arguments, checked in _ops.py, too)
raises its own error, the others a MismatchError naming the first rank that refused. That
agreement is C++'s (python/src/uneven_agreement.h), shared with the short paths of the common
calls (python/src/short_uneven.cc: one NumPy array or torch CPU tensor, splits a list or tuple
of ints), which make the same collectives without a Python frame. Then host rows move in one native
all_to_all_v (Communicator::allToAllV), straight from x into the result; CUDA rows (the native
form takes host tensors only) through one even all_to_all padded to the largest pair.

allgather(x, uneven=True): the extents along `axis` may differ. The ranks gather every rank's
extent and a signature of the rest (one allgather of two int64 per rank, C++'s agreement too)
and check that the rest agrees. Along axis 0, host rows then move in one native allgather_v
(Communicator::allgatherV); CUDA rows, and other axes, gather x padded to the largest extent
(along axis 0 into one array, this rank's block in place, whose blocks then move down to follow
each other).
"""

import numpy as np

from . import _arrays, _chorus, _groups, _ops
from ._foreign import accepts_foreign

# CUDA rows take the padded even all_to_all; tests set this to run that path on host arrays.
_PADDED_ON_HOST = False

_MOST_ROWS = _chorus.most_rows  # the short paths' limit too


def _counts(values, size, what):
    """(`values` as a list of `size` non-negative ints, None), or (None, the error)."""
    try:
        counts = [int(v) for v in values]
    except (TypeError, ValueError, OverflowError):
        return None, _chorus.InvalidArgumentError(f"{what} must be a list of ints, not {values!r}")
    if len(counts) != size:
        return None, _chorus.InvalidArgumentError(
            f"{what} has {len(counts)} entries; the group has {size} ranks")
    if any(not 0 <= c < _MOST_ROWS for c in counts):
        return None, _chorus.InvalidArgumentError(f"{what} has an entry out of range: {counts}")
    return counts, None


def _prepared(x):
    """(x's Buffer, None), or (None, why it cannot be sent): the caller still takes part in the
    agreement, so that every rank raises."""
    try:
        return _arrays.prepare(x), None
    except _chorus.Error as error:
        return None, error


def all_to_all(x, splits, recv_splits, rank_list, async_op, synchronize, problem=None):
    """(the rows received, how many came from each group rank), or with async_op a Work whose
    wait() returns that pair (the agreement on the counts is made before it returns). A
    `problem` (the caller's arguments refused) is raised after the agreement has told every
    rank."""
    problem = problem or _ops._problem_of(lambda: _ops._check_flags(async_op, synchronize))
    received = []
    result = _exchange_rows(x, splits, recv_splits, rank_list, async_op, synchronize, received,
                            problem)
    if isinstance(result, _ops.Work):
        finish = result._finish
        result._finish = lambda: (finish(), list(received))
        return result
    return result, received


@accepts_foreign
def _exchange_rows(x, splits, recv_splits, rank_list, async_op, synchronize, received, problem):
    comm = _groups.get(rank_list)
    b, problem = _prepared(x) if problem is None else (None, problem)
    sends = expects = None
    if problem is None and not b.shape:
        problem = _chorus.InvalidArgumentError("all_to_all with splits needs x to have dimension 0")
    if problem is None:
        sends, problem = _counts(splits, comm.size, "splits")
    if problem is None and sum(sends) != b.shape[0]:
        problem = _chorus.InvalidArgumentError(
            f"all_to_all: splits add up to {sum(sends)} rows, but x has {b.shape[0]} along "
            "dimension 0")
    if problem is None and recv_splits is not None:
        expects, problem = _counts(recv_splits, comm.size, "recv_splits")
    # (computed in C++, as the short paths compute it)
    signature = _chorus.rows_signature(b.dtype, b.shape, b.cuda) if b is not None else 0
    padded = b is not None and (b.cuda or _PADDED_ON_HOST)
    agreed = _chorus.agree_on_rows(comm._native, sends if problem is None else None, expects,
                                   signature, padded)
    if agreed is None:
        raise problem
    arrives, largest = agreed
    received.extend(arrives)
    if padded:
        return _padded_exchange(b, sends, arrives, largest, rank_list, async_op, synchronize)
    y = b.like(b.empty((sum(arrives),) + b.shape[1:]))
    in_cap, out_cap = b.capsule(), y.capsule()

    def call(is_async):
        return _chorus.all_to_all_v(comm._native, in_cap, sends, out_cap, arrives, b.export_dtype,
                                    is_async)

    return _ops._complete([call], lambda: _ops._results([y], False), async_op, synchronize)


def _padded_exchange(b, sends, arrives, largest, rank_list, async_op, synchronize):
    """The rows through one even all_to_all of blocks of `largest` rows (CUDA arrays, and small
    host rows). Every rank holds size x largest rows twice meanwhile: a skewed exchange of CUDA
    rows needs that much memory."""
    size = len(sends)
    padded = b.empty((size * largest,) + b.shape[1:])
    at = 0
    for p, n in enumerate(sends):
        padded[p * largest:p * largest + n] = b.array[at:at + n]
        at += n
    gathered = _ops._all_to_all(padded, 0, 0, rank_list, async_op, synchronize, None)

    def compact(whole):
        parts = [whole[q * largest:q * largest + n] for q, n in enumerate(arrives)]
        return _arrays._torch().cat(parts) if b.torch else np.concatenate(parts)

    return _then(gathered, compact)


@accepts_foreign
def allgather(x, axis, rank_list, async_op, synchronize, problem=None):
    """Every rank's x concatenated along `axis` in group-rank order, extents along it free; a
    `problem` as for all_to_all."""
    problem = problem or _ops._problem_of(lambda: _ops._check_flags(async_op, synchronize))
    comm = _groups.get(rank_list)
    b, problem = _prepared(x) if problem is None else (None, problem)
    if problem is None:
        try:
            axis = _ops._int(axis, "axis")
        except _chorus.InvalidArgumentError as error:
            problem = error
    ndim = len(b.shape) if b is not None else 0
    if problem is None and not -ndim <= axis < ndim:
        problem = _chorus.InvalidArgumentError(
            f"allgather: axis {axis} is out of range for x of {ndim} dimensions")
    axis = axis % ndim if problem is None else 0
    signature = _chorus.extents_signature(b.dtype, b.shape, axis, b.cuda) if b else 0
    extents = _chorus.agree_on_extents(comm._native, -1 if problem else b.shape[axis], signature,
                                       axis)
    if extents is None:
        raise problem
    largest = max(extents)
    if all(extent == largest for extent in extents):
        return _ops._allgather(b.array, axis, rank_list, async_op, synchronize, None)
    if axis == 0 and not (b.cuda or _PADDED_ON_HOST):
        y = b.like(b.empty((sum(extents),) + b.shape[1:]))
        in_cap, out_cap = b.capsule(), y.capsule()

        def call(is_async):
            return _chorus.allgather_v(comm._native, in_cap, out_cap, extents, b.export_dtype,
                                       is_async)

        return _ops._complete([call], lambda: _ops._results([y], False), async_op, synchronize)
    if axis == 0:
        return _gather_rows(b, comm, extents, largest, rank_list, async_op, synchronize)
    padded = b.empty(b.shape[:axis] + (largest,) + b.shape[axis + 1:])
    before = (slice(None),) * axis
    padded[before + (slice(0, b.shape[axis]),)] = b.array
    gathered = _ops._allgather(padded, axis, rank_list, async_op, synchronize, None)

    def compact(whole):
        parts = [whole[before + (slice(r * largest, r * largest + n),)]
                 for r, n in enumerate(extents)]
        return _arrays._torch().cat(parts, axis) if b.torch else np.concatenate(parts, axis)

    return _then(gathered, compact)


def _gather_rows(b, comm, extents, largest, rank_list, async_op, synchronize):
    """Along axis 0, for CUDA arrays (host arrays take the native allgather_v): one array of
    every rank's block of `largest` rows, this rank's gathered in place, then each block moved
    down to follow the one before; the result is a view of it (one new array in all, as for the
    plain allgather)."""
    whole = b.empty((comm.size * largest,) + b.shape[1:])
    mine = whole[comm.rank * largest:(comm.rank + 1) * largest]
    mine[:extents[comm.rank]] = b.array
    gathered = _ops._allgather(mine, 0, rank_list, async_op, synchronize, whole)

    def compact(whole):
        at = extents[0]
        for r in range(1, comm.size):
            if at != r * largest:
                source = whole[r * largest:r * largest + extents[r]]
                if b.torch and at + extents[r] > r * largest:
                    source = source.clone()  # torch does not copy between overlapping places
                whole[at:at + extents[r]] = source
            at += extents[r]
        # A view, unless it would keep more than twice its size alive.
        return whole[:at] if 2 * at >= len(whole) else whole[:at].copy() if not b.torch \
            else whole[:at].clone()

    return _then(gathered, compact)


def _then(result, change):
    """change(result), or for a Work, a Work whose wait() returns that."""
    if isinstance(result, _ops.Work):
        finish = result._finish
        result._finish = lambda: change(finish())
        return result
    return change(result)
