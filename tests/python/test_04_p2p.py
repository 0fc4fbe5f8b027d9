"""send / recv around a ring (DESIGN §4). Needs more than one rank.

Even ranks send first, odd ranks receive first, so the ring never waits on itself whether or not a
send blocks until it is received (odd sizes included: rank size-1 and rank 0 are both even, but
rank 0's send to rank 1 completes first).
"""

import numpy as np
import pytest
import torch

import chorus
from helpers import (MUTABLE_KINDS, NP_DTYPES, assert_unchanged, case_id, check_result,
                     kind_dtype_cases, make, snapshot, stored, values)

SHAPE = (3, 4)


def ring_exchange(rank, size, send_obj, receive, tag=0):
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    if rank % 2 == 0:
        chorus.send(send_obj, nxt, tag=tag)
        return receive(prv)
    got = receive(prv)
    chorus.send(send_obj, nxt, tag=tag)
    return got


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_ring_recv_shape_dtype(multi_rank, rank, size, dtype):
    x = make("numpy", values(rank, SHAPE, dtype), dtype)
    before = snapshot(x)
    got = ring_exchange(rank, size, x, lambda prv: chorus.recv(prv, SHAPE, dtype))
    prv = (rank - 1) % size
    check_result(got, "numpy", dtype, stored(values(prv, SHAPE, dtype), dtype))
    assert_unchanged(x, before)


def test_ring_recv_default_dtype_is_float32(multi_rank, rank, size):
    x = make("numpy", values(rank, (5,), "float32"), "float32")
    got = ring_exchange(rank, size, x, lambda prv: chorus.recv(prv, (5,)))
    check_result(got, "numpy", "float32", values((rank - 1) % size, (5,), "float32"))


@pytest.mark.parametrize("kind,dtype", kind_dtype_cases(kinds=MUTABLE_KINDS), ids=case_id)
def test_ring_recv_into_out(multi_rank, rank, size, kind, dtype):
    x = make(kind, values(rank, SHAPE, dtype), dtype)
    before = snapshot(x)
    buf = make(kind, np.zeros(SHAPE), dtype)
    got = ring_exchange(rank, size, x, lambda prv: chorus.recv(prv, out=buf))
    expected = stored(values((rank - 1) % size, SHAPE, dtype), dtype)
    check_result(buf, kind, dtype, expected)
    if got is not None:
        check_result(got, kind, dtype, expected)
    assert_unchanged(x, before)


def test_ring_with_tag_and_mib_message(multi_rank, rank, size):
    n = (1 << 20) // 4 + 1  # 1 MiB of int32, odd count
    x = torch.arange(n, dtype=torch.int32) * (rank + 1)
    got = ring_exchange(rank, size, x,
                        lambda prv: chorus.recv(prv, (n,), dtype="int32", tag=5), tag=5)
    expected = np.arange(n, dtype=np.int64) * (((rank - 1) % size) + 1)
    np.testing.assert_array_equal(np.asarray(got).astype(np.int64), expected)


def test_ring_positional_tag(multi_rank, rank, size):
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    x = np.full((2,), rank, dtype=np.int64)
    if rank % 2 == 0:
        chorus.send(x, nxt, 9)
        got = chorus.recv(prv, (2,), "int64", 9)
    else:
        got = chorus.recv(prv, (2,), "int64", 9)
        chorus.send(x, nxt, 9)
    np.testing.assert_array_equal(np.asarray(got), np.full((2,), prv))


def test_ring_empty_message(multi_rank, rank, size):
    x = np.zeros((0, 3), dtype=np.float64)
    got = ring_exchange(rank, size, x, lambda prv: chorus.recv(prv, (0, 3), "float64"))
    check_result(got, "numpy", "float64", np.zeros((0, 3)))


def test_recv_from_any_source(multi_rank, rank, size):
    """Rank 0 receives every other rank's two messages with ANY_SOURCE, blocking and async: the
    Status names each sender, whose messages carry its rank, in the order each sender sent them."""
    for async_op in (False, True):
        if rank != 0:
            for k in range(2):
                chorus.send(np.full((4,), 10 * rank + k, dtype=np.int64), 0, tag=12)
        else:
            seen = {}
            for _ in range(2 * (size - 1)):
                status = chorus.Status()
                if async_op:
                    work = chorus.recv(chorus.ANY_SOURCE, (4,), "int64", tag=12, async_op=True,
                                       status=status)
                    got = work.wait()
                else:
                    got = chorus.recv(chorus.ANY_SOURCE, (4,), "int64", tag=12, status=status)
                got = np.asarray(got)
                assert status.source == got[0] // 10
                np.testing.assert_array_equal(got, np.full((4,), got[0]))
                seen.setdefault(status.source, []).append(int(got[0]))
            assert seen == {q: [10 * q, 10 * q + 1] for q in range(1, size)}
        chorus.barrier()


def test_recv_from_any_source_in_a_group_names_group_ranks(multi_rank, rank, size):
    """With group=, the Status holds group ranks: in a group that reverses the world's order,
    world rank w is group rank size-1-w. A named peer's recv reports that peer."""
    group = chorus.distributed.new_group(list(reversed(range(size))))
    me = size - 1 - rank
    if rank != 0:
        chorus.send(np.full((2,), rank, dtype=np.int32), size - 1, tag=3, group=group)
        chorus.send(np.full((2,), rank, dtype=np.int32), size - 1, tag=4, group=group)
    else:
        for _ in range(size - 1):
            status = chorus.Status()
            got = chorus.recv(chorus.ANY_SOURCE, (2,), "int32", tag=3, group=group, status=status)
            assert status.source == size - 1 - int(np.asarray(got)[0])
        for sender in range(size - 1):
            status = chorus.Status()
            got = chorus.recv(sender, (2,), "int32", tag=4, group=group, status=status)
            assert status.source == sender
            assert int(np.asarray(got)[0]) == size - 1 - sender
    assert me == group.rank
    chorus.barrier()


def test_recv_status_must_be_a_status():
    with pytest.raises(chorus.InvalidArgumentError, match="chorus.Status"):
        chorus.recv(0, (1,), status={})


def test_any_source_is_for_receives_from_other_ranks(size):
    with pytest.raises(ValueError, match="peer"):
        chorus.send(np.zeros(1), chorus.ANY_SOURCE)
    if size == 1:
        with pytest.raises(ValueError, match="recv from any rank on a communicator of one rank"):
            chorus.recv(chorus.ANY_SOURCE, (1,))
