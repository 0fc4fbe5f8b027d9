"""Collectives of Python objects: mpi4py's lowercase methods (bcast, allgather, gather, scatter,
alltoall, send, recv), torch.distributed's *_object functions and Horovod's broadcast_object /
allgather_object, for plain data.

Objects travel as plain data (_plain_data.py: None, bool, int, float, complex, str, bytes, list,
tuple, dict, NumPy arrays and scalars, torch tensors), never pickled: DESIGN §8 says nothing is
unpickled, since loading a pickle runs code a peer chose. (mpi4py and torch pickle; an object of
another type, an instance of the program's own class, is a clear error here: send its fields.)
Each object travels as its encoding behind one status byte, in the array collectives below:
broadcast_object is a broadcast of the length, then of the bytes;
allgather_object an allgather of the lengths, then of the bytes (uneven=True where they differ);
gather_object, scatter_object and all_to_all_object one all_to_all with splits (MPI's Alltoallv);
send_object a length, then the bytes, under one tag.

Note [An object that cannot be sent]
A rank whose object cannot be sent (of a type that does not travel) still takes part: it sends the
error's text, status byte 1, where the object would have gone, and raises an InvalidArgumentError
itself. Every rank that receives that text raises one too, naming the rank and quoting it, instead
of waiting for bytes that never come (mpi4py, and torch's *_object functions, raise on the failing
rank alone and leave the others waiting). A root's scatter_object list of the wrong length, or an
all_to_all_object list of the wrong length, travels the same way.
"""

import numpy as np

from . import _chorus, _groups, _ops, _plain_data

_ENCODED, _FAILED = 0, 1


class _Failure:
    """Why this rank sends no object: `sent`, the text the receivers quote; `own`, this rank's
    message; `cause`, the exception behind it (or None)."""

    __slots__ = ("sent", "own", "cause")

    def __init__(self, sent, own, cause=None):
        self.sent, self.own, self.cause = sent, own, cause

    def raise_here(self, operation):
        raise _chorus.InvalidArgumentError(f"{operation}: {self.own}") from self.cause


def _payload(status, data):
    payload = np.empty(len(data) + 1, np.uint8)
    payload[0] = status
    payload[1:] = np.frombuffer(data, np.uint8)
    return payload


def _failed(failure):
    return _payload(_FAILED, failure.sent.encode()), failure


def _encoded(obj, what=None):
    """(the status byte and obj's encoding as one uint8 array, None), or, where obj cannot be
    sent, (the failure's payload, the _Failure). `what` names obj (default: the rank's own)."""
    try:  # the status byte, then the encoding, in one buffer: no copy to join them
        return np.frombuffer(_plain_data.encode(obj, bytes([_ENCODED])), np.uint8), None
    except TypeError as error:
        why = f"cannot be sent: {error}"
        sent, own = (what, what) if what else ("its object", "this rank's object")
        return _failed(_Failure(f"{sent} {why}", f"{own} {why}", error))


def _decoded(payload, operation, sender):
    """The object in `payload` (a uint8 array), or the InvalidArgumentError its sender sent."""
    if payload.size == 0:
        raise _chorus.InternalError(f"{operation}: {sender} sent no status byte")
    body = memoryview(payload[1:])
    if payload[0] == _FAILED:
        raise _chorus.InvalidArgumentError(
            f"{operation}: {sender} sent no object: {bytes(body).decode(errors='replace')}")
    try:
        return _plain_data.decode(body)
    except ValueError as error:
        raise _chorus.InvalidArgumentError(f"{operation}: what {sender} sent is not an object "
                                           f"chorus encoded: {error}") from None


def _where(group, rank_list, operation):
    """(the rank_list to pass on, this rank's communicator)."""
    rank_list = _groups.resolve(group, rank_list, operation)
    return rank_list, _groups.get(rank_list)


def _name(comm, group_rank):
    world = comm.members[group_rank]
    if comm.size == comm.world_size and world == group_rank:
        return f"rank {world}"
    return f"group rank {group_rank} (world rank {world})"


def broadcast_object(obj, root=0, rank_list=None, group=None):
    """Returns root's `obj` on every rank of the group (`obj` itself on root); root is a world
    rank (with group=, a group rank). Other ranks' `obj` is not read."""
    rank_list, comm = _where(group, rank_list, "broadcast_object")
    root = _groups.world_rank_of(group, root, "root")
    source = comm.group_rank(root, "root")
    failure = None
    if comm.rank == source:
        payload, failure = _encoded(obj)
        length = np.array([payload.size], np.int64)
    else:
        length = np.zeros(1, np.int64)
    _ops.broadcast(length, root=root, rank_list=rank_list, inplace=True)
    if comm.rank != source:
        payload = np.empty(int(length[0]), np.uint8)
    _ops.broadcast(payload, root=root, rank_list=rank_list, inplace=True)
    if comm.rank == source:
        if failure is not None:
            failure.raise_here("broadcast_object")
        return obj
    return _decoded(payload, "broadcast_object", f"root {_name(comm, source)}")


def allgather_object(obj, rank_list=None, group=None):
    """Returns the list of every group rank's `obj` (decoded copies; this rank's own too), in
    group-rank order."""
    rank_list, comm = _where(group, rank_list, "allgather_object")
    payload, failure = _encoded(obj)
    lengths = _ops.allgather(np.array([payload.size], np.int64), rank_list=rank_list)
    gathered = _ops.allgather(payload, rank_list=rank_list,
                              uneven=bool((lengths != lengths[0]).any()))
    if failure is not None:
        failure.raise_here("allgather_object")
    return _split(gathered, lengths, comm, "allgather_object")


def _split(rows, counts, comm, operation):
    """The objects in `rows`, counts[g] bytes of them from group rank g (none where it is 0)."""
    objects, start = [], 0
    for g, count in enumerate(counts):
        end = start + int(count)
        objects.append(_decoded(rows[start:end], operation, _name(comm, g)) if count else None)
        start = end
    return objects


def _exchange(payloads, rank_list):
    """One all_to_all with splits: payloads[g] (None: nothing) to group rank g; returns (the rows
    received, how many from each group rank)."""
    parts = [np.empty(0, np.uint8) if p is None else p for p in payloads]
    return _ops.all_to_all(np.concatenate(parts), splits=[p.size for p in parts],
                           rank_list=rank_list)


def gather_object(obj, root=0, rank_list=None, group=None):
    """Returns, on root, the list of every group rank's `obj` in group-rank order; None elsewhere.
    root is a world rank (with group=, a group rank)."""
    rank_list, comm = _where(group, rank_list, "gather_object")
    root = _groups.world_rank_of(group, root, "root")
    target = comm.group_rank(root, "root")
    payload, failure = _encoded(obj)
    rows, received = _exchange([payload if g == target else None for g in range(comm.size)],
                               rank_list)
    if failure is not None:
        failure.raise_here("gather_object")
    return _split(rows, received, comm, "gather_object") if comm.rank == target else None


def scatter_object(objs, root=0, rank_list=None, group=None):
    """Returns objs[g] of root on group rank g; `objs` (one object per group rank) is read on
    root only. root is a world rank (with group=, a group rank)."""
    rank_list, comm = _where(group, rank_list, "scatter_object")
    root = _groups.world_rank_of(group, root, "root")
    source = comm.group_rank(root, "root")
    payloads, failure = [None] * comm.size, None
    if comm.rank == source:
        payloads, failure = _payloads_of(objs, comm.size)
    rows, _ = _exchange(payloads, rank_list)
    if failure is not None:
        failure.raise_here("scatter_object")
    return _decoded(rows, "scatter_object", f"root {_name(comm, source)}")


def all_to_all_object(objs, rank_list=None, group=None):
    """Sends objs[g] to group rank g and returns the list of what each group rank sent here, in
    group-rank order (mpi4py's alltoall)."""
    rank_list, comm = _where(group, rank_list, "all_to_all_object")
    payloads, failure = _payloads_of(objs, comm.size)
    rows, received = _exchange(payloads, rank_list)
    if failure is not None:
        failure.raise_here("all_to_all_object")
    return _split(rows, received, comm, "all_to_all_object")


def _payloads_of(objs, size):
    """One payload per group rank; where objs is not a list of `size` objects or one does not
    cannot be sent, the failure's payload for every rank, and the _Failure."""
    if isinstance(objs, (str, bytes, dict)) or not hasattr(objs, "__len__"):
        why = f"objs must be a list of one object per group rank, not {type(objs).__name__}"
    elif len(objs) != size:
        why = (f"objs holds {len(objs)} object{'' if len(objs) == 1 else 's'}; it must hold one "
               f"per group rank ({size})")
    else:
        payloads = []
        for g, obj in enumerate(objs):
            payload, failure = _encoded(obj, f"objs[{g}]")
            if failure is not None:
                return [payload] * size, failure
            payloads.append(payload)
        return payloads, None
    payload, failure = _failed(_Failure(why, why))
    return [payload] * size, failure


def send_object(obj, peer, tag=0, rank_list=None, group=None):
    """Sends `obj` (as plain data) to world rank `peer` (with group=, a group rank) under `tag`; the
    peer takes it with recv_object."""
    payload, failure = _encoded(obj)
    _ops.send(np.array([payload.size], np.int64), peer, tag=tag, rank_list=rank_list, group=group)
    _ops.send(payload, peer, tag=tag, rank_list=rank_list, group=group)
    if failure is not None:
        failure.raise_here("send_object")


def recv_object(peer=_ops.ANY_SOURCE, tag=0, rank_list=None, group=None, status=None):
    """Receives the object that `peer` (a world rank, with group= a group rank, or ANY_SOURCE)
    sent with send_object under `tag`; a chorus.Status given as `status` learns the sender."""
    learned = _ops.Status()
    length = _ops.recv(peer, (1,), "int64", tag=tag, rank_list=rank_list, group=group,
                       status=learned)
    payload = _ops.recv(learned.source, (int(length[0]),), "uint8", tag=tag,
                        rank_list=rank_list, group=group)
    if status is not None:
        status.source = learned.source
    return _decoded(payload, "recv_object", f"rank {learned.source}")
