"""Collectives of Python objects: mpi4py's lowercase methods (bcast, allgather, gather, scatter,
alltoall, send, recv), torch.distributed's *_object functions and Horovod's broadcast_object /
allgather_object, for plain data.

Objects travel as plain data (_plain_data.py: None, bool, int, float, complex, str, bytes, list,
tuple, dict, NumPy arrays and scalars, torch tensors), never pickled: DESIGN §8 says nothing is
unpickled, since loading a pickle runs code a peer chose. (mpi4py and torch pickle; an object of
another type, an instance of the program's own class, is a clear error here: send its fields.)
Each object travels as its encoding behind one status byte (its payload), in the array
collectives below; send_object sends a length, then the payload, under one tag.

Note [Objects in slots]
A collective of small objects is one collective of fixed-size slots: 16 bytes of header (the
payload's length, and a flag) and the first _INLINE bytes of the payload. broadcast_object
broadcasts root's slot; allgather_object and gather_object allgather every rank's slot;
scatter_object scatters root's slots; all_to_all_object exchanges them. Every rank then knows
every length it needs to decide the same thing: when a payload is longer than _INLINE, a second
collective moves the whole payloads (broadcast, allgather with uneven=True, or all_to_all with
splits: MPI's Alltoallv). A rank that receives only its own slot (scatter) learns that from the
flag, which root sets in every slot where any payload is long; all_to_all's flag says that its
sender has a long payload for someone, and every rank receives a slot from every sender. Before
slots, every object took two or three collectives (a length, the uneven agreement, the bytes):
5-14 us on 2 ranks of the 2-core dev machine for an int, where mpi4py takes 1-2 us.
A failed rank's status byte is in its slot, so every rank that receives the slot raises at once,
and no second collective is made (gather_object's non-root ranks learn of it too).

Note [An object that cannot be sent]
A rank whose object cannot be sent (of a type that does not travel, or whose encoding fails in any
other way: a meta tensor has no values to copy) still takes part: it sends the
error's text, status byte 1, where the object would have gone, and raises an InvalidArgumentError
itself. Every rank that receives that text raises one too, naming the rank and quoting it, instead
of waiting for bytes that never come (mpi4py, and torch's *_object functions, raise on the failing
rank alone and leave the others waiting). A root's scatter_object list of the wrong length, or an
all_to_all_object list of the wrong length, travels the same way.
"""

import struct

import numpy as np

from . import _chorus, _groups, _ops, _plain_data

_ENCODED, _FAILED = 0, 1
_SLOT, _HEAD = 512, 16  # Note [Objects in slots]
_INLINE = _SLOT - _HEAD
_HEADER = struct.Struct("<qq")  # the payload's length, the flag
_NO_HEADER = bytes(_HEAD)


class _Failure:
    """Why this rank sends no object: `sent`, the text the receivers quote; `own`, this rank's
    message; `cause`, the exception behind it (or None)."""

    __slots__ = ("sent", "own", "cause")

    def __init__(self, sent, own, cause=None):
        self.sent, self.own, self.cause = sent, own, cause

    def raise_here(self, operation):
        raise _chorus.InvalidArgumentError(f"{operation}: {self.own}") from self.cause


class _Packet:
    """One object's slot header and payload (its status byte and encoding) in one bytearray,
    zero-padded to at least a slot: the slot is its first _SLOT bytes, the payload its `length`
    bytes from _HEAD. Neither is copied out of it."""

    __slots__ = ("data", "length")

    def __init__(self, data):
        self.data, self.length = data, len(data) - _HEAD
        if len(data) < _SLOT:
            data += bytes(_SLOT - len(data))
        _HEADER.pack_into(data, 0, self.length, 0)

    def flag(self, value):
        _HEADER.pack_into(self.data, 0, self.length, value)
        return self

    def slot(self):
        return np.frombuffer(self.data, np.uint8, _SLOT)

    def payload(self):
        return np.frombuffer(self.data, np.uint8, self.length, _HEAD)


def _failed(failure):
    return _Packet(bytearray(_NO_HEADER + bytes([_FAILED]) + failure.sent.encode())), failure


def _encoded(obj, what=None):
    """(obj's _Packet, None), or, where obj cannot be sent, (the failure's _Packet, the
    _Failure). `what` names obj (default: the rank's own)."""
    try:  # the header, the status byte, then the encoding, in one buffer: no copy to join them
        return _Packet(_plain_data.encode(obj, _NO_HEADER + bytes([_ENCODED]))), None
    except Exception as error:  # noqa: BLE001 (any failure: the others must learn of it)
        why = f"cannot be sent: {type(error).__name__}: {error}" \
            if not isinstance(error, TypeError) else f"cannot be sent: {error}"
        sent, own = (what, what) if what else ("its object", "this rank's object")
        return _failed(_Failure(f"{sent} {why}", f"{own} {why}", error))


def _decoded(payload, operation, sender):
    """The object in `payload` (bytes-like), or the InvalidArgumentError its sender sent."""
    payload = memoryview(payload)
    if len(payload) == 0:
        raise _chorus.InternalError(f"{operation}: {sender} sent no status byte")
    body = payload[1:]
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


class _Slots:
    """Received slots, one per row of `array` (Note [Objects in slots])."""

    def __init__(self, array, count, operation, name_of):
        self.view, self.count = memoryview(array), count
        self.operation, self.name_of = operation, name_of
        heads = [_HEADER.unpack_from(array, g * _SLOT) for g in range(count)]
        self.lengths = [length for length, _ in heads]
        self.flags = [flag for _, flag in heads]
        if min(self.lengths) < 1:
            raise _chorus.InternalError(f"{operation}: a slot holds no payload")
        self.inline = max(self.lengths) <= _INLINE

    def raise_failures(self, failure):
        """Raises this rank's own failure, or else the first that a slot holds: every rank that
        sees it raises before any second collective."""
        if failure is not None:
            failure.raise_here(self.operation)
        for g in range(self.count):
            if self.view[g * _SLOT + _HEAD] == _FAILED:
                self.decoded(g, min(self.lengths[g], _INLINE))

    def decoded(self, g, length=None):
        start = g * _SLOT + _HEAD
        return _decoded(self.view[start:start + (length or self.lengths[g])], self.operation,
                        self.name_of(g))

    def objects(self):
        return [self.decoded(g) for g in range(self.count)]


def broadcast_object(obj, root=0, rank_list=None, group=None):
    """Returns root's `obj` on every rank of the group (`obj` itself on root); root is a world
    rank (with group=, a group rank). Other ranks' `obj` is not read."""
    rank_list, comm = _where(group, rank_list, "broadcast_object")
    root = _groups.world_rank_of(group, root, "root")
    source = comm.group_rank(root, "root")
    packet = failure = None
    if comm.rank == source:
        packet, failure = _encoded(obj)
        slot = packet.slot()
    else:
        slot = np.empty(_SLOT, np.uint8)
    _ops.broadcast(slot, root=root, rank_list=rank_list, inplace=True)
    sender = lambda g=0: f"root {_name(comm, source)}"  # noqa: E731
    slots = _Slots(slot, 1, "broadcast_object", sender)
    slots.raise_failures(failure)
    if comm.rank == source:
        if not slots.inline:
            _ops.broadcast(packet.payload(), root=root, rank_list=rank_list, inplace=True)
        return obj
    if slots.inline:
        return slots.decoded(0)
    payload = np.empty(slots.lengths[0], np.uint8)
    _ops.broadcast(payload, root=root, rank_list=rank_list, inplace=True)
    return _decoded(payload, "broadcast_object", sender())


def _allgathered(packet, failure, rank_list, comm, operation):
    """Every group rank's slot (_Slots), this rank's failure or the first one sent raised."""
    slots = _Slots(_ops.allgather(packet.slot(), rank_list=rank_list), comm.size, operation,
                   lambda g: _name(comm, g))
    slots.raise_failures(failure)
    return slots


def allgather_object(obj, rank_list=None, group=None):
    """Returns the list of every group rank's `obj` (decoded copies; this rank's own too), in
    group-rank order."""
    rank_list, comm = _where(group, rank_list, "allgather_object")
    packet, failure = _encoded(obj)
    slots = _allgathered(packet, failure, rank_list, comm, "allgather_object")
    if slots.inline:
        return slots.objects()
    lengths = slots.lengths
    gathered = _ops.allgather(packet.payload(), rank_list=rank_list,
                              uneven=any(n != lengths[0] for n in lengths))
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


def _concatenated_slots(packets, flag):
    return np.frombuffer(b"".join(memoryview(p.flag(flag).data)[:_SLOT] for p in packets),
                         np.uint8).copy()


def gather_object(obj, root=0, rank_list=None, group=None):
    """Returns, on root, the list of every group rank's `obj` in group-rank order; None elsewhere.
    root is a world rank (with group=, a group rank)."""
    rank_list, comm = _where(group, rank_list, "gather_object")
    root = _groups.world_rank_of(group, root, "root")
    target = comm.group_rank(root, "root")
    packet, failure = _encoded(obj)
    slots = _allgathered(packet, failure, rank_list, comm, "gather_object")
    if slots.inline:
        return slots.objects() if comm.rank == target else None
    rows, received = _exchange(
        [packet.payload() if g == target else None for g in range(comm.size)], rank_list)
    return _split(rows, received, comm, "gather_object") if comm.rank == target else None


def scatter_object(objs, root=0, rank_list=None, group=None):
    """Returns objs[g] of root on group rank g; `objs` (one object per group rank) is read on
    root only. root is a world rank (with group=, a group rank)."""
    rank_list, comm = _where(group, rank_list, "scatter_object")
    root = _groups.world_rank_of(group, root, "root")
    source = comm.group_rank(root, "root")
    packets, failure = [None] * comm.size, None
    if comm.rank == source:
        packets, failure = _packets_of(objs, comm.size)
        slots = _concatenated_slots(packets, int(any(p.length > _INLINE for p in packets)))
    else:
        slots = np.empty(comm.size * _SLOT, np.uint8)
    sender = lambda g=0: f"root {_name(comm, source)}"  # noqa: E731
    slot = _Slots(_ops.scatter(slots, root=root, rank_list=rank_list), 1, "scatter_object",
                  sender)
    slot.raise_failures(failure)
    if not slot.flags[0]:
        return slot.decoded(0)
    rows, _ = _exchange([p and p.payload() for p in packets], rank_list)
    return _decoded(rows, "scatter_object", sender())


def all_to_all_object(objs, rank_list=None, group=None):
    """Sends objs[g] to group rank g and returns the list of what each group rank sent here, in
    group-rank order (mpi4py's alltoall)."""
    rank_list, comm = _where(group, rank_list, "all_to_all_object")
    packets, failure = _packets_of(objs, comm.size)
    slots = _concatenated_slots(packets, int(any(p.length > _INLINE for p in packets)))
    slots = _Slots(_ops.all_to_all(slots, rank_list=rank_list), comm.size, "all_to_all_object",
                   lambda g: _name(comm, g))
    slots.raise_failures(failure)
    if not any(slots.flags):
        return slots.objects()
    rows, received = _exchange([p.payload() for p in packets], rank_list)
    return _split(rows, received, comm, "all_to_all_object")


def _packets_of(objs, size):
    """One _Packet per group rank; where objs is not a list of `size` objects or one of them
    cannot be sent, the failure's _Packet for every rank, and the _Failure."""
    try:
        return _packets_of_list(objs, size)
    except Exception as error:  # noqa: BLE001 (len() or iteration failed: a 0-d array, say)
        why = f"objs must be a list of one object per group rank: {type(error).__name__}: {error}"
        packet, failure = _failed(_Failure(why, why, error))
        return [packet] * size, failure


def _packets_of_list(objs, size):
    if isinstance(objs, (str, bytes, dict)) or not hasattr(objs, "__len__"):
        why = f"objs must be a list of one object per group rank, not {type(objs).__name__}"
    elif len(objs) != size:
        why = (f"objs holds {len(objs)} object{'' if len(objs) == 1 else 's'}; it must hold one "
               f"per group rank ({size})")
    else:
        packets = []
        for g, obj in enumerate(objs):
            packet, failure = _encoded(obj, f"objs[{g}]")
            if failure is not None:
                return [packet] * size, failure
            packets.append(packet)
        return packets, None
    packet, failure = _failed(_Failure(why, why))
    return [packet] * size, failure


def send_object(obj, peer, tag=0, rank_list=None, group=None):
    """Sends `obj` (as plain data) to world rank `peer` (with group=, a group rank) under `tag`; the
    peer takes it with recv_object."""
    packet, failure = _encoded(obj)
    _ops.send(np.array([packet.length], np.int64), peer, tag=tag, rank_list=rank_list,
              group=group)
    _ops.send(packet.payload(), peer, tag=tag, rank_list=rank_list, group=group)
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
