"""Collectives of Python objects (chorus/_objects.py): broadcast_object, allgather_object,
gather_object, scatter_object, all_to_all_object, send_object and recv_object, on the world, on
rank_list groups and on new_group groups, and what happens when an object cannot be sent (Note
[An object that cannot be sent]): every rank raises, naming the one that failed, and the world
goes on.

The objects are closed forms of (rank, index) (obj_of), so each rank knows what every other rank
sent; sizes differ across ranks (the uneven paths) unless a test says otherwise.
"""

import threading

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist


def obj_of(rank, index=0):
    """A nest of several kinds, of a size that grows with the rank."""
    return {"rank": rank, "index": index, "text": "x" * (rank + 3 * index),
            "array": np.arange(rank + 2, dtype=np.float32) * (index + 1),
            "tensor": torch.full((2,), float(rank)), "pair": (rank, None)}


def same(got, expected):
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[key], value)
        elif isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value)
        else:
            assert got[key] == value, key


def world_still_works(size):
    assert chorus.allreduce(np.ones(3, np.int64))[0] == size


def test_broadcast_object_from_every_root(rank, size):
    for root in range(size):
        mine = obj_of(rank)
        got = chorus.broadcast_object(mine, root=root)
        if rank == root:
            assert got is mine  # root keeps its own object, as mpi4py's bcast
        else:
            same(got, obj_of(root))


def test_broadcast_object_of_a_megabyte(rank, size):
    blob = bytes(range(256)) * 4096 if rank == size - 1 else None
    got = chorus.broadcast_object(blob, root=size - 1)
    assert got == bytes(range(256)) * 4096


@pytest.mark.parametrize("sizes", ["differ", "equal"])
def test_allgather_object(rank, size, sizes):
    make = obj_of if sizes == "differ" else (lambda r: ("rank", r))
    got = chorus.allgather_object(make(rank))
    assert len(got) == size
    for r in range(size):
        if sizes == "differ":
            same(got[r], obj_of(r))
        else:
            assert got[r] == ("rank", r)


def test_gather_object_to_every_root(rank, size):
    for root in range(size):
        got = chorus.gather_object(obj_of(rank, root), root=root)
        if rank != root:
            assert got is None
            continue
        assert len(got) == size
        for r in range(size):
            same(got[r], obj_of(r, root))


def test_scatter_object_from_every_root(rank, size):
    for root in range(size):
        objs = [obj_of(r, root) for r in range(size)] if rank == root else None
        same(chorus.scatter_object(objs, root=root), obj_of(rank, root))


def test_all_to_all_object(rank, size):
    got = chorus.all_to_all_object([(rank, to, "y" * (rank * to)) for to in range(size)])
    assert got == [(source, rank, "y" * (source * rank)) for source in range(size)]


def padded(rank, index, long_ranks):
    """obj_of(rank, index), made longer than one slot (Note [Objects in slots]) on long_ranks."""
    obj = obj_of(rank, index)
    if rank in long_ranks:
        obj["pad"] = "p" * (600 + 7 * rank + index)
    return obj


@pytest.mark.parametrize("long", ["none", "last", "all"])
def test_objects_longer_than_a_slot(rank, size, long):
    """Each collective where no rank's object fits a slot, where one does not, and where none
    does: the second collective, when there is one, is made by every rank alike."""
    long_ranks = {"none": set(), "last": {size - 1}, "all": set(range(size))}[long]
    root = size - 1
    got = chorus.broadcast_object(padded(rank, 0, long_ranks), root=root)
    same(got, padded(root, 0, long_ranks))
    for r, got in enumerate(chorus.allgather_object(padded(rank, 1, long_ranks))):
        same(got, padded(r, 1, long_ranks))
    gathered = chorus.gather_object(padded(rank, 2, long_ranks), root=0)
    if rank == 0:
        for r, got in enumerate(gathered):
            same(got, padded(r, 2, long_ranks))
    else:
        assert gathered is None
    objs = [padded(r, 3, long_ranks) for r in range(size)] if rank == root else None
    same(chorus.scatter_object(objs, root=root), padded(rank, 3, long_ranks))
    sent = [padded(rank * size + to, 4, long_ranks) for to in range(size)]
    for source, got in enumerate(chorus.all_to_all_object(sent)):
        same(got, padded(source * size + rank, 4, long_ranks))


def test_a_long_failure_text_is_cut_not_lost(rank, size, multi_rank):
    """A failure whose text is longer than a slot still reaches every rank at once."""
    obj = {"k" * 700: threading.Lock()} if rank == 1 else rank
    pattern = "the object\\['kkkk" if rank == 1 else "rank 1 sent no object: its object cannot"
    with pytest.raises(chorus.InvalidArgumentError, match=pattern):
        chorus.allgather_object(obj)
    world_still_works(size)


def test_send_and_recv_objects_around_a_ring(rank, size, multi_rank):
    right, left = (rank + 1) % size, (rank - 1) % size
    for tag in (0, 7):
        if rank % 2 == 0:
            chorus.send_object(obj_of(rank, tag), right, tag=tag)
            same(chorus.recv_object(left, tag=tag), obj_of(left, tag))
        else:
            same(chorus.recv_object(left, tag=tag), obj_of(left, tag))
            chorus.send_object(obj_of(rank, tag), right, tag=tag)


def test_recv_object_from_any_source_learns_the_sender(rank, size, multi_rank):
    """Every other rank sends two objects to rank 0, which takes them from whoever comes first:
    each sender's two arrive in order, and the status names it."""
    if rank == 0:
        seen = {}
        for _ in range(2 * (size - 1)):
            status = chorus.Status()
            got = chorus.recv_object(chorus.ANY_SOURCE, tag=3, status=status)
            assert got["rank"] == status.source
            seen.setdefault(status.source, []).append(got["index"])
        assert seen == {r: [0, 1] for r in range(1, size)}
    else:
        chorus.send_object(obj_of(rank, 0), 0, tag=3)
        chorus.send_object(obj_of(rank, 1), 0, tag=3)


def test_rank_list_groups(rank, size):
    halves = [list(range(0, size, 2)), list(range(1, size, 2))]
    halves = [h for h in halves if h]
    mine = next(h for h in halves if rank in h)
    got = chorus.allgather_object(rank * 10, rank_list=halves)
    assert got == [r * 10 for r in mine]
    root = mine[-1]  # a world rank, with rank_list=
    assert chorus.broadcast_object(f"from {rank}", root=root, rank_list=halves) == f"from {root}"
    gathered = chorus.gather_object(rank, root=root, rank_list=halves)
    assert gathered == (mine if rank == root else None)


def test_new_group_takes_group_ranks(rank, size):
    group = dist.new_group(list(reversed(range(size))))
    me = size - 1 - rank  # this rank's group rank
    assert chorus.allgather_object(rank, group=group) == list(reversed(range(size)))
    assert chorus.broadcast_object(rank, root=0, group=group) == size - 1  # group rank 0
    assert chorus.scatter_object([f"g{g}" for g in range(size)] if me == 0 else None, root=0,
                                 group=group) == f"g{me}"
    assert chorus.all_to_all_object([(me, g) for g in range(size)], group=group) == \
        [(g, me) for g in range(size)]


class Point:
    def __init__(self, x):
        self.x = x


def test_only_plain_data_travels_never_pickles(rank, size):
    """Objects travel as plain data (DESIGN §8: nothing is unpickled): every kind it carries
    arrives equal and of its type; an instance of the program's own class is refused on every
    rank, naming its type."""
    plain = [None, True, -(2 ** 70), 2.5, 1 - 2j, "é", b"\x00", (1, [2]), {(0, "k"): {3: None}},
             np.float32(1.5), np.arange(3, dtype=np.uint16), torch.tensor([1.0, 2.0]).bfloat16()]
    got = chorus.broadcast_object(plain, root=0)
    if rank != 0:
        for sent, arrived in zip(plain[:9], got[:9]):
            assert arrived == sent and type(arrived) is type(sent)
        assert type(got[9]) is np.float32 and got[9] == 1.5
        np.testing.assert_array_equal(got[10], plain[10])
        assert got[10].dtype == np.uint16
        assert got[11].dtype == torch.bfloat16 and torch.equal(got[11], plain[11])
    with pytest.raises(chorus.InvalidArgumentError, match="test_40_objects.Point, which chorus "
                                                          "does not send"):
        chorus.allgather_object({"p": Point(rank)})
    world_still_works(size)


def test_a_malformed_payload_is_a_value_error_never_anything_else():
    """decode() checks every tag, length and count: truncated or corrupted bytes (a peer's, or
    anyone's who reached the socket) are a ValueError, never another exception or an allocation
    the bytes do not back."""
    from chorus import _plain_data
    good = bytes(_plain_data.encode({"a": [1, 2.5, "xyz", np.arange(3), (None, b"q")],
                                     "t": torch.ones(2)}))
    assert _plain_data.decode(good)["a"][2] == "xyz"
    corrupt = [good[:cut] for cut in range(len(good))]
    corrupt += [good[:i] + bytes([(good[i] + 1 + k) % 256]) + good[i + 1:]
                for i in range(len(good)) for k in (0, 77, 254)]
    huge = b"a" + (2).to_bytes(8, "little") + b"<f" + (1).to_bytes(8, "little") + \
        (1 << 60).to_bytes(8, "little") + (0).to_bytes(8, "little")
    odd_dtypes = [b"a" + len(name).to_bytes(8, "little") + name + bytes(16)
                  for name in (b"zz", b"(2,)<i4", b"|O8", b"<i04")]
    for data in corrupt + odd_dtypes + [huge, good + b"N"]:
        try:
            _plain_data.decode(data)
        except ValueError:
            pass


def test_a_plain_send_met_by_recv_object_is_a_clear_error(rank, size, multi_rank):
    if rank == 0:
        chorus.send(np.array([3], np.int64), 1, tag=6)
        chorus.send(np.array([9, 9, 9], np.uint8), 1, tag=6)
    elif rank == 1:
        with pytest.raises(chorus.InvalidArgumentError,
                           match="what rank 0 sent is not an object chorus encoded"):
            chorus.recv_object(0, tag=6)
    world_still_works(size)


def _unpicklable(rank, failing):
    return threading.Lock() if rank == failing else rank


@pytest.mark.parametrize("operation", ["allgather", "gather", "broadcast", "all_to_all"])
def test_an_object_that_cannot_be_sent_fails_every_rank(rank, size, operation):
    """The last rank's object does not travel (a lock): it raises, and the others raise
    naming it, at once (not at the timeout)."""
    failing = size - 1
    calls = {
        "allgather": lambda: chorus.allgather_object(_unpicklable(rank, failing)),
        "gather": lambda: chorus.gather_object(_unpicklable(rank, failing), root=0),
        "broadcast": lambda: chorus.broadcast_object(_unpicklable(rank, failing), root=failing),
        "all_to_all": lambda: chorus.all_to_all_object([_unpicklable(rank, failing)] * size),
    }
    own, sent = ((r"objs\[0\]", r"objs\[0\]") if operation == "all_to_all" else
                 ("this rank's object", "its object"))
    pattern = (f"{own} cannot be sent: the object is a _thread.lock" if rank == failing else
               f"rank {failing} sent no object: {sent} cannot be sent: the object is a "
               "_thread.lock")
    with pytest.raises(chorus.InvalidArgumentError, match=pattern):  # a gather's non-roots too
        calls[operation]()
    world_still_works(size)


@pytest.mark.parametrize("operation", ["allgather", "broadcast"])
def test_an_object_whose_encoding_fails_otherwise_fails_every_rank(rank, size, operation):
    """A failure other than a TypeError while encoding (a meta tensor has no values to copy:
    NotImplementedError) travels like one: before, that rank raised alone and the others waited
    for its bytes until the timeout."""
    failing = size - 1
    obj = {"w": torch.empty(2, device="meta")} if rank == failing else rank
    calls = {"allgather": lambda: chorus.allgather_object(obj),
             "broadcast": lambda: chorus.broadcast_object(obj, root=failing)}
    why = "cannot be sent: NotImplementedError: .*meta"
    pattern = (f"this rank's object {why}" if rank == failing else
               f"rank {failing} sent no object: its object {why}")
    with pytest.raises(chorus.InvalidArgumentError, match=pattern):
        calls[operation]()
    world_still_works(size)


@pytest.mark.parametrize("objs,why", [
    (lambda size: list(range(size + 1)), "objs holds {n} objects; it must hold one per group rank"),
    (lambda size: "ab", "objs must be a list of one object per group rank, not str"),
    (lambda size: [threading.Lock()] * size,
     r"objs\[0\] cannot be sent: the object is a _thread.lock"),
    (lambda size: np.array(5), r"objs must be a list of one object per group rank: TypeError: "
                               r"len\(\) of unsized object"),
], ids=["wrong length", "a string", "cannot be sent", "a 0-d array"])
def test_a_bad_scatter_list_on_root_fails_every_rank(rank, size, objs, why):
    root = size - 1
    why = why.format(n=size + 1)
    pattern = why if rank == root else f"root rank {root} sent no object: {why}"
    with pytest.raises(chorus.InvalidArgumentError, match=pattern):
        chorus.scatter_object(objs(size) if rank == root else None, root=root)
    world_still_works(size)


def test_an_all_to_all_list_of_the_wrong_length_fails_every_rank(rank, size, multi_rank):
    with pytest.raises(chorus.InvalidArgumentError,
                       match=f"objs holds {size + 1} objects; it must hold"):
        chorus.all_to_all_object([rank] * (size + 1) if rank == 0 else [rank] * size)
    world_still_works(size)


def test_an_unpicklable_sent_object_fails_the_receiver_too(rank, size, multi_rank):
    if rank == 0:
        with pytest.raises(chorus.InvalidArgumentError, match="this rank's object cannot be sent"):
            chorus.send_object(threading.Lock(), 1, tag=4)
    elif rank == 1:
        with pytest.raises(chorus.InvalidArgumentError,
                           match="recv_object: rank 0 sent no object: its object cannot be "
                                 "sent"):
            chorus.recv_object(0, tag=4)
    world_still_works(size)
