"""The uneven forms of all_to_all and allgather: Horovod's alltoall with splits and its allgather
of first dimensions that differ, MPI's Alltoallv and Allgatherv, torch's all_to_all_single with
split sizes (what mixture-of-experts layers send their tokens with).

all_to_all(x, splits=...): group rank q's rows splits[p] (consecutive along axis 0, in rank order)
go to group rank p, and each rank returns the rows it received, in rank order, with how many came
from each rank. The ranks first exchange what each pair will send, in one even all_to_all of two
int64 per pair (the rows, and a signature of the dtype and the other dimensions); each receiver
checks them (against its recv_splits, when it passes them), and the ranks gather every verdict,
so that an error is raised on every rank, naming the same pair. Then each pair's rows travel point to point,
straight from their place in x into their place in the result, no padding.

allgather(x, uneven=True): the extents along `axis` may differ. The ranks gather every rank's
shape and dtype signature (one allgather of three int64 per rank), check that the other dimensions
agree, then gather x padded to the largest extent and keep each rank's part.
"""

import zlib

import numpy as np

from . import _arrays, _chorus, _groups, _ops
from ._foreign import accepts_foreign

# The point-to-point tag of all_to_all's rows: far above what programs use, so a receive a program
# has posted on the group does not take them.
_ROWS_TAG = (1 << 31) - 2

# What a rank may find wrong with its part of an all_to_all, in its verdict.
_FINE, _BAD_SPLITS, _ROWS_DISAGREE, _ARRAYS_DISAGREE = 0, 1, 2, 3


def _signature(dtype, shape):
    """The same int on every rank for the same dtype and dimensions (Python's str hash is salted
    per process, so a CRC instead)."""
    return zlib.crc32(f"{dtype}{tuple(shape)}".encode())


def _counts(values, size, what):
    """`values` as a list of `size` non-negative ints, or a reason it is not one."""
    try:
        counts = [int(v) for v in values]
    except (TypeError, ValueError):
        return None, f"{what} must be a list of ints, not {values!r}"
    if len(counts) != size:
        return None, f"{what} has {len(counts)} entries; the group has {size} ranks"
    if any(c < 0 for c in counts):
        return None, f"{what} has a negative entry: {counts}"
    return counts, None


def all_to_all(x, splits, recv_splits, rank_list, async_op, synchronize):
    """(the rows received, how many came from each group rank), or with async_op a Work whose
    wait() returns that pair."""
    received = []
    result = _exchange_rows(x, splits, recv_splits, rank_list, async_op, synchronize, received)
    if isinstance(result, _ops.Work):
        finish = result._finish
        result._finish = lambda: (finish(), list(received))
        return result
    return result, received


@accepts_foreign
def _exchange_rows(x, splits, recv_splits, rank_list, async_op, synchronize, received):
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    if not b.shape:
        raise _chorus.InvalidArgumentError("all_to_all with splits needs x to have a dimension 0")
    sends, problem = _counts(splits, comm.size, "splits")
    if sends is not None and sum(sends) != b.shape[0]:
        sends, problem = None, (f"splits add up to {sum(splits)} rows, but x has {b.shape[0]} "
                                "along dimension 0")
    expects = None
    if recv_splits is not None and problem is None:
        expects, problem = _counts(recv_splits, comm.size, "recv_splits")
    arrives = _agree_on_rows(comm, rank_list, sends, expects, _signature(b.dtype, b.shape[1:]),
                             problem)
    received.extend(arrives)
    y = b.like(b.empty((sum(arrives),) + b.shape[1:]))
    works = _post_rows(comm, b.array, y.array, sends, arrives, rank_list)

    def finish():
        for work in works:
            work.wait()
        return _ops._results([y], False)

    _ops._check_bool_flag(synchronize, "synchronize")
    if async_op:
        pending = [p for work in works for p in work._pending]
        return _ops.Work(pending, finish, works[0]._device if works else None)
    if synchronize:
        for work in works:
            work.synchronize()
    return finish()


def _agree_on_rows(comm, rank_list, sends, expects, signature, problem):
    """The rows each group rank sends here, after every rank has checked its pairs and seen every
    other rank's verdict; an error on every rank when any rank found one."""
    told = np.full((comm.size, 2), -1, dtype=np.int64)  # row p: the rows for p, the signature
    if sends is not None:
        told[:, 0] = sends
    told[:, 1] = signature
    heard = _ops._all_to_all(told, 0, 0, rank_list, False, False, None)
    verdict = np.array([_FINE, -1, -1, -1], dtype=np.int64)  # (what, peer, rows, expected)
    if problem is not None:
        verdict[:] = [_BAD_SPLITS, -1, -1, -1]
    else:
        for peer in range(comm.size):
            rows, theirs = (int(v) for v in heard[peer])
            if theirs != signature:
                verdict[:] = [_ARRAYS_DISAGREE, peer, -1, -1]
                break
            # rows < 0: that rank's splits are bad, and its own verdict says so.
            if expects is not None and rows >= 0 and rows != expects[peer]:
                verdict[:] = [_ROWS_DISAGREE, peer, rows, expects[peer]]
                break
    verdicts = _ops._allgather(verdict[None], 0, rank_list, False, False, None)
    _raise_first(verdicts, problem, comm)
    return [int(v) for v in heard[:, 0]]


def _raise_first(verdicts, problem, comm):
    """Raises, on every rank alike, for the lowest group rank that found something wrong."""
    for rank, (what, peer, rows, expected) in enumerate(verdicts.tolist()):
        if what == _FINE:
            continue
        if what == _BAD_SPLITS:
            if rank == comm.rank:
                raise _chorus.InvalidArgumentError(f"all_to_all: {problem}")
            raise _chorus.MismatchError(
                f"all_to_all: group rank {rank} passed splits it cannot send (see its error)")
        if what == _ARRAYS_DISAGREE:
            raise _chorus.MismatchError(
                f"all_to_all: group ranks {peer} and {rank} have arrays of different dtypes or "
                "dimensions other than 0; their rows cannot be exchanged")
        raise _chorus.MismatchError(
            f"all_to_all: group rank {peer} sends {rows} rows to group rank {rank}, which expects "
            f"{expected} (recv_splits)")


def _post_rows(comm, x, y, sends, arrives, rank_list):
    """Every pair's rows, point to point, straight into their place in y (this rank's own rows
    copied); returns the Works of the transfers."""
    me = comm.rank
    send_at = np.concatenate([[0], np.cumsum(sends)]).tolist()
    recv_at = np.concatenate([[0], np.cumsum(arrives)]).tolist()
    works = []
    for peer in range(comm.size):
        if peer != me and arrives[peer] > 0:
            works.append(_ops._recv(comm.members[peer], out=y[recv_at[peer]:recv_at[peer + 1]],
                                    tag=_ROWS_TAG, rank_list=rank_list, async_op=True))
    for peer in range(comm.size):
        if peer != me and sends[peer] > 0:
            works.append(_ops._send(x[send_at[peer]:send_at[peer + 1]], comm.members[peer],
                                    _ROWS_TAG, rank_list, True))
    mine = x[send_at[me]:send_at[me + 1]]
    y[recv_at[me]:recv_at[me + 1]] = mine
    return works


@accepts_foreign
def allgather(x, axis, rank_list, async_op, synchronize):
    """Every rank's x concatenated along `axis` in group-rank order, extents along it free."""
    b = _arrays.prepare(x)
    comm = _groups.get(rank_list)
    axis = _ops._int(axis, "axis")
    ndim = len(b.shape)
    problem = None if -ndim <= axis < ndim else (
        f"axis {axis} is out of range for x of {ndim} dimensions")
    axis = axis % ndim if problem is None else 0
    others = b.shape[:axis] + b.shape[axis + 1:]
    mine = np.array([[-1 if problem else b.shape[axis],
                      _signature(b.dtype, (ndim, axis) + others)]], dtype=np.int64)
    every = _ops._allgather(mine, 0, rank_list, False, False, None).tolist()
    for rank, (extent, signature) in enumerate(every):
        if extent < 0:
            if rank == comm.rank:
                raise _chorus.InvalidArgumentError(f"allgather: {problem}")
            raise _chorus.MismatchError(
                f"allgather: group rank {rank} passed an axis its x does not have (see its error)")
        if signature != every[0][1]:
            raise _chorus.MismatchError(
                f"allgather (uneven=True): group ranks 0 and {rank} have arrays of different "
                f"dtypes, numbers of dimensions or extents other than along axis {axis}")
    extents = [extent for extent, _ in every]
    largest = max(extents)
    if all(extent == largest for extent in extents):
        return _ops._allgather(b.array, axis, rank_list, async_op, synchronize, None)
    padded = b.empty(b.shape[:axis] + (largest,) + b.shape[axis + 1:])
    before = (slice(None),) * axis
    padded[before + (slice(0, b.shape[axis]),)] = b.array
    gathered = _ops._allgather(padded, axis, rank_list, async_op, synchronize, None)

    def compact(whole):
        parts = [whole[before + (slice(r * largest, r * largest + n),)]
                 for r, n in enumerate(extents)]
        return _arrays._torch().cat(parts, axis) if b.torch else np.concatenate(parts, axis)

    if isinstance(gathered, _ops.Work):
        finish = gathered._finish
        gathered._finish = lambda: compact(finish())
        return gathered
    return compact(gathered)
