"""Rank-like arguments, flags, recv's shape and dtype, and nests (DESIGN §4): a root, peer, tag,
axis or rank is an int or a NumPy integer (operator.index), never a bool or a float; a bad one is
an InvalidArgumentError naming the argument (and the value's type where its repr reads like a
valid one), on every rank that passes it, before anything is sent; the communicator keeps
working afterwards.

Every rank passes the same arguments, so each checks its own error; a valid call that follows
each refusal shows that nothing was left half-sent.
"""

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist
from helpers import check_result, make, reduce_exact, spy_on_general_paths, values

INT_MAX = 2**31 - 1  # the bindings' tags are C ints (python/src/operations.cc)


def still_agree(rank, size):
    probe = make("numpy", values(rank, (3,), "int32"), "int32")
    expected = reduce_exact("sum", [values(r, (3,), "int32") for r in range(size)], "int32")
    check_result(chorus.allreduce(probe), "numpy", "int32", expected)


def refused(call, message):
    """The InvalidArgumentError of call(), whose message must match the regular expression."""
    with pytest.raises(chorus.InvalidArgumentError, match=message) as info:
        call()
    return info.value


def ring(rank, size, send, receive):
    """send(next rank) and receive(previous rank), even ranks sending first (test_04_p2p.py)."""
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    if rank % 2 == 0:
        send(nxt)
        return receive(prv)
    got = receive(prv)
    send(nxt)
    return got


@pytest.fixture(scope="module")
def world_group(size):
    return dist.new_group(list(range(size)))


# --------------------------------------------------------------------------- tags (fault 1)


@pytest.mark.parametrize("tag", [2**31, 2**63, -2**31 - 1], ids=["2**31", "2**63", "below"])
def test_a_tag_beyond_a_c_int_names_its_range(rank, size, tag):
    x = np.ones(4, np.float32)
    peer = (rank + 1) % size
    message = rf"^tag must be a non-negative int up to {INT_MAX} \(a C int\), not {tag}$"
    refused(lambda: chorus.send(x, peer, tag=tag), message)
    refused(lambda: chorus.recv(peer, (4,), tag=tag), message)
    refused(lambda: chorus.send(torch.ones(4), peer, tag=tag, async_op=True), message)
    still_agree(rank, size)


# --------------------------------------------------------------------------- NumPy ints (fault 2)


def test_numpy_integers_are_roots_with_a_group(rank, size):
    world_group = dist.new_group([np.int64(r) for r in range(size)])  # NumPy ints as ranks
    assert world_group.ranks == tuple(range(size))
    assert all(type(r) is int for r in world_group.ranks)
    last = size - 1
    x = np.full(3, float(rank), np.float32)
    got = chorus.broadcast(x, root=np.int64(last), group=world_group)
    np.testing.assert_array_equal(got, np.full(3, last, np.float32))
    got = chorus.reduce(x, root=np.int32(last), group=world_group)
    if rank == last:
        np.testing.assert_array_equal(got, np.full(3, size * (size - 1) / 2, np.float32))
    got = chorus.gather(x, root=np.int64(0), axis=np.int64(0), group=world_group)
    if rank == 0:
        np.testing.assert_array_equal(got, np.repeat(np.arange(size, dtype=np.float32), 3))
    assert world_group.world_rank(np.int64(last)) == last
    assert world_group.group_rank(np.int64(last)) == last


def test_numpy_integers_are_peers_and_tags(multi_rank, rank, size, world_group):
    x = np.full(4, float(rank), np.float32)
    prv = (rank - 1) % size
    for group in (None, world_group):
        got = ring(rank, size,
                   lambda nxt: chorus.send(x, np.int64(nxt), tag=np.int64(3), group=group),
                   lambda prv: chorus.recv(np.int64(prv), (np.int64(4),), tag=np.uint16(3),
                                           group=group))
        np.testing.assert_array_equal(got, np.full(4, prv, np.float32))


def test_numpy_integers_in_rank_lists_and_axes(rank, size):
    x = np.full(2, rank + 1.0, np.float32)
    total = np.full(2, size * (size + 1) / 2, np.float32)
    for rank_list, expected in (([[np.int64(r) for r in range(size)]], total),  # one group
                                ([np.int32(r) for r in range(size)], total),  # flat: one group
                                ([[np.int64(r)] for r in range(size)], x)):  # each rank alone
        np.testing.assert_array_equal(chorus.allreduce(x, rank_list=rank_list), expected)
    got = chorus.allgather(x.reshape(1, 2), axis=np.int64(1))
    np.testing.assert_array_equal(
        got, np.repeat(np.arange(1, size + 1, dtype=np.float32), 2).reshape(1, 2 * size))
    y = np.arange(2 * size, dtype=np.float32).reshape(size, 2) + 10 * rank
    got = chorus.all_to_all(y, split_axis=np.int64(0), concat_axis=np.int8(0))
    np.testing.assert_array_equal(got, np.array([[2 * rank + 10 * r, 2 * rank + 1 + 10 * r]
                                                 for r in range(size)], np.float32))


# --------------------------------------------------------------------------- floats (fault 3)


def test_a_float_rank_is_refused_naming_its_type(rank, size, world_group):
    x = np.ones(2 * size, np.float32)
    refused(lambda: chorus.broadcast(x, root=0.0, group=world_group),
            r"^root must be an int \(a group rank\), not float 0\.0$")
    refused(lambda: chorus.scatter(x, root=0.0, group=world_group), r"not float 0\.0$")
    refused(lambda: chorus.send(x, 0.0, group=world_group),
            r"^peer must be an int \(a group rank\), not float 0\.0$")
    refused(lambda: chorus.reduce(x, root=0.0), r"^root must be an int \(a world rank\), not "
            r"float 0\.0$")
    refused(lambda: chorus.gather(torch.ones(2), root=0.0), r"not float 0\.0$")
    refused(lambda: chorus.allgather(x, axis=0.0), r"^axis must be an int, not float 0\.0$")
    refused(lambda: chorus.allreduce(x, rank_list=[[0.0] + list(range(1, size))]),
            r"^rank_list holds float 0\.0, which is not an int$")
    refused(lambda: dist.new_group([float(r) for r in range(size)]), r"holds float 0\.0")
    still_agree(rank, size)


# --------------------------------------------------------------------------- bools (fault 4)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_bool_is_not_a_rank(rank, size, world_group, kind):
    x = make(kind, np.ones(2 * size), "float32")
    message = r"must be an int \(a (world|group) rank\), not bool (True|False)$"
    for group in (None, world_group):
        refused(lambda: chorus.reduce(x, root=True, group=group), "^root " + message)
        refused(lambda: chorus.broadcast(x, root=False, group=group), "^root " + message)
        refused(lambda: chorus.gather(x, root=True, group=group), "^root " + message)
        refused(lambda: chorus.scatter(x, root=False, group=group), "^root " + message)
        refused(lambda: chorus.send(x, True, group=group), "^peer " + message)
        refused(lambda: chorus.recv(True, (2,), group=group), "^peer " + message)
        refused(lambda: chorus.recv(False, out=x, group=group), "^peer " + message)
    refused(lambda: chorus.reduce(x, root=np.bool_(True)), "not bool_ True$")
    refused(lambda: world_group.world_rank(True), r"^group_rank must be an int \(a group rank\)")
    refused(lambda: dist.new_group([False] + list(range(1, size))),
            r"^rank_list holds bool False, which is not an int$")
    still_agree(rank, size)


# --------------------------------------------------------------------------- async_op (fault 5)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("flag", [1, 0, "yes", None], ids=["1", "0", "yes", "None"])
def test_async_op_must_be_a_bool(monkeypatch, rank, size, kind, flag):
    # The short path (python/src/front_calls.cc) takes async_op True or False only and leaves
    # anything else to the package's function, whose check this reaches.
    x = make(kind, values(rank, (2 * size,), "float32"), "float32")
    message = rf"^async_op must be True or False, not {flag!r}$"
    for call in (lambda: chorus.allreduce(x, async_op=flag),
                 lambda: chorus.allreduce([x, x], async_op=flag),
                 lambda: chorus.allreduce([], async_op=flag),
                 lambda: chorus.allreduce({"a": x, "b": [x]}, async_op=flag),
                 lambda: chorus.broadcast({"a": x}, async_op=flag),
                 lambda: chorus.reduce_scatter({"a": x}, async_op=flag),
                 lambda: chorus.broadcast(x, root=0, async_op=flag),
                 lambda: chorus.reduce(x, async_op=flag),
                 lambda: chorus.allgather(x, async_op=flag),
                 lambda: chorus.allgather(x, uneven=True, async_op=flag),
                 lambda: chorus.reduce_scatter(x, async_op=flag),
                 lambda: chorus.gather(x, async_op=flag),
                 lambda: chorus.scatter(x, async_op=flag),
                 lambda: chorus.all_to_all(x, async_op=flag),
                 lambda: chorus.barrier(async_op=flag),
                 lambda: chorus.allreduce(x, rank_list=[list(range(size))], async_op=flag)):
        refused(call, message)
    if size > 1:  # a send to oneself is refused first
        refused(lambda: chorus.send(x, (rank + 1) % size, async_op=flag), message)
        refused(lambda: chorus.recv((rank + 1) % size, (2,), async_op=flag), message)
    calls = spy_on_general_paths(monkeypatch, ["_allreduce"])
    refused(lambda: chorus.allreduce(x, async_op=flag), message)
    assert calls == ["_allreduce"]  # the front left the call to the package's function
    work = chorus.allreduce(x, async_op=True)  # True still gives a Work
    expected = reduce_exact("sum", [values(r, (2 * size,), "float32") for r in range(size)],
                            "float32")
    check_result(work.wait(), kind, "float32", expected)
    still_agree(rank, size)


# --------------------------------------------------------------------------- recv (faults 6, 7)


def test_a_float_source_is_not_any_source(rank, size):
    # Rank 1's message waits for rank 0, whose receives from -1.0 must not take it (as ANY_SOURCE
    # would); a receive from rank 1 then does.
    message = r"^peer must be an int \(a world rank\), not float -1\.0$"
    if rank == 1:
        chorus.send(np.full(4, 1.0, np.float32), 0, tag=21)
    elif rank == 0:
        refused(lambda: chorus.recv(-1.0, (4,), tag=21), message)
        refused(lambda: chorus.recv(-1.0, out=np.zeros(4, np.float32), tag=21), message)
        refused(lambda: chorus.recv(-1.0, (4,), tag=21, async_op=True), message)
        if size > 1:
            np.testing.assert_array_equal(chorus.recv(1, (4,), tag=21), np.ones(4, np.float32))
    still_agree(rank, size)


def test_any_source_still_receives(multi_rank, rank, size):
    if rank == 0:
        senders = set()
        for _ in range(size - 1):
            status = chorus.Status()
            got = chorus.recv(np.int64(chorus.ANY_SOURCE), (2,), "int32", tag=5, status=status)
            np.testing.assert_array_equal(got, np.full(2, status.source, np.int32))
            senders.add(status.source)
        assert senders == set(range(1, size))
    else:
        chorus.send(np.full(2, rank, np.int32), 0, tag=5)


@pytest.mark.parametrize("shape,shown", [
    (4.0, "float 4.0"), ("4", "str '4'"), ((-4,), r"tuple \(-4,\)"), (-4, "int -4"),
    ((4.0,), r"tuple \(4\.0,\)"), ([2, None], r"list \[2, None\]"), (True, "bool True"),
], ids=["float", "str", "negative", "negative-int", "float-item", "None-item", "bool"])
def test_recv_shape_is_checked(rank, size, shape, shown):
    refused(lambda: chorus.recv((rank + 1) % size, shape),
            rf"^recv: shape must be a non-negative int or a tuple or list of them \(the "
            rf"extents\), not {shown}$")
    still_agree(rank, size)


def test_recv_dtype_none_is_not_float64(rank, size):
    message = r"^dtype None is not a dtype; use one of float16, bfloat16, float32"
    if size == 1:
        refused(lambda: chorus.recv(0, (4,), dtype=None), message)
        return

    def receive(prv):  # refused, not taken as float64; the message waits for a good receive
        refused(lambda: chorus.recv(prv, (4,), dtype=None, tag=22), message)
        refused(lambda: chorus.recv(prv, (4,), dtype=None, tag=22, async_op=True), message)
        return chorus.recv(prv, (4,), dtype="float64", tag=22)

    got = ring(rank, size, lambda nxt: chorus.send(np.full(4, float(rank)), nxt, tag=22), receive)
    np.testing.assert_array_equal(got, np.full(4, float((rank - 1) % size)))
    still_agree(rank, size)


def test_recv_shapes_that_are_allowed(multi_rank, rank, size):
    x = np.full(4, float(rank), np.float32)
    prv = (rank - 1) % size
    for shape in (4, np.int64(4), [4], torch.Size([4]), (np.int32(2), 2)):
        got = ring(rank, size, lambda nxt: chorus.send(x, nxt, tag=9),
                   lambda prv: chorus.recv(prv, shape, tag=9))
        np.testing.assert_array_equal(got.reshape(-1), np.full(4, prv, np.float32))


# --------------------------------------------------------------------------- nests (fault 8)


@pytest.mark.parametrize("call,message", [
    (lambda a: chorus.allreduce({"a": a, "b": "oops"}),
     r"^x\['b'\] must be a NumPy array, a torch tensor or an object with __dlpack__, not str$"),
    (lambda a: chorus.allreduce({"a": a, "b": np.ones(2, np.clongdouble)}),
     r"^x\['b'\] has dtype complex256, which chorus does not support"),
    (lambda a: chorus.allreduce([[a], [a, None]]), r"^x\[1\]\[1\] must be a NumPy array"),
    (lambda a: chorus.allreduce({"a": torch.ones(2), "b": [a, torch.ones(2, dtype=torch.chalf)]}),
     r"^x\['b'\]\[1\] has dtype complex32"),
    (lambda a: chorus.broadcast({"a": a, "b": None}), r"^x\['b'\] must be a NumPy array"),
    (lambda a: chorus.reduce({"a": a, "b": [a, 3]}), r"^x\['b'\]\[1\] must be a NumPy array"),
    (lambda a: chorus.allgather({"a": a, "b": np.ones(2, np.longdouble)}),
     r"^x\['b'\] has dtype float128"),
    (lambda a: chorus.scatter({"a": a, "b": None}), r"^x\['b'\] must be a NumPy array"),
    (lambda a: chorus.gather([[a], [a, "no"]]), r"^x\[1\]\[1\] must be a NumPy array"),
], ids=["allreduce-str", "allreduce-complex", "allreduce-list", "allreduce-torch", "broadcast",
        "reduce", "allgather", "scatter", "gather"])
def test_an_error_in_a_nest_names_the_leaf(rank, size, call, message):
    a = np.ones(2 * size, np.float32)
    refused(lambda: call(a), message)
    still_agree(rank, size)


# --------------------------------------------------------------------------- empty lists (fault 9)


def test_an_empty_rank_list_is_refused(rank, size):
    x = np.ones(2, np.float32)
    message = (r"^rank_list is empty, so it names no group; pass None for the whole world, or the "
               r"world ranks of at least one group$")
    for rank_list in ([], ()):
        refused(lambda: chorus.allreduce(x, rank_list=rank_list), message)
        refused(lambda: chorus.barrier(rank_list=rank_list), message)
        refused(lambda: dist.get_communicator(rank_list), message)
    refused(lambda: chorus.allreduce(x, rank_list=[[]]), "non-empty lists")
    still_agree(rank, size)


def test_an_empty_list_allreduces_to_an_empty_list(rank, size):
    # A list in gives a list out (DESIGN §4); C++'s fused allreduce refuses [] (docs/errors.md).
    assert chorus.allreduce([]) == []
    assert chorus.allreduce([], async_op=True).wait() == []
    still_agree(rank, size)
