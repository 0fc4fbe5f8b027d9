"""Collectives issued while sends and receives issued before them are in flight (Note [A
collective amid transfers], src/runtime/communicator_state.cc). Programs written for MPI post a
receive, enter a barrier, and send only after it; or send asynchronously before a collective that
the receiver enters before its receive; or send, blocking, to a rank whose receive waits amid its
collective, and may wait for that receive before they let the sender join the collective. MPI
runs them; each must finish here too, with the right data, on the backends of one node (shm under
chorusrun, mpi and mpi_algorithms under mpirun). Before, each waited until its deadline.

Each case runs on a communicator of its own (the world's ranks reversed) with a 20-second timeout,
so that a regression fails here rather than at ctest's limit; the world carries the signals that
order the ranks; expected values are closed forms.
"""

import numpy as np
import pytest

import chorus
import chorus.distributed as dist

LARGE = 1 << 18  # float64s: 2 MiB, more than a ring or an eager message holds


@pytest.fixture
def group(size, multi_rank):
    ranks = list(reversed(range(size)))
    made = dist.new_group(ranks)
    chorus.barrier(group=made)  # made, and joined, under the job's timeout
    dist.get_communicator([ranks]).timeout = 20.0  # the communicator new_group(ranks) has
    yield made
    dist.destroy_group(made)


def group_rank(rank, size):
    return size - 1 - rank


def message(sender, tag, count):
    return np.arange(count, dtype=np.float64) + 1000.0 * sender + 100.0 * tag


@pytest.mark.parametrize("count", [5, LARGE])
def test_a_receive_posted_before_a_barrier_gets_the_send_issued_after_it(rank, size, group, count):
    me = group_rank(rank, size)
    right, left = (me + 1) % size, (me - 1) % size
    got = np.zeros(count)
    work = chorus.recv(left, out=got, tag=1, async_op=True, group=group)
    chorus.barrier(group=group)
    chorus.send(message(me, 1, count), right, tag=1, group=group)
    work.wait()
    np.testing.assert_array_equal(got, message(left, 1, count))


@pytest.mark.parametrize("count", [5, LARGE])
def test_an_async_send_before_a_collective_that_its_receiver_enters_first(rank, size, group,
                                                                          count):
    me = group_rank(rank, size)
    partner = me + 1 if me % 2 == 0 else me - 1  # size when me is the last of an odd size
    work = None
    if me % 2 == 0 and partner < size:
        work = chorus.send(message(me, 2, count), partner, tag=2, async_op=True, group=group)
    total = chorus.allreduce(np.array([float(me)]), group=group)
    assert total[0] == size * (size - 1) / 2
    if me % 2 == 1:
        got = chorus.recv(partner, (count,), "float64", tag=2, group=group)
        np.testing.assert_array_equal(got, message(partner, 2, count))
    if work is not None:
        work.wait()


def world_rank(me, size):
    return size - 1 - me  # the group's ranks are the world's reversed


@pytest.mark.parametrize("count", [5, LARGE])
def test_a_blocking_send_to_a_receiver_waiting_in_a_collective(rank, size, group, count):
    """The receiver posts a receive, issues an allreduce, and says so over the world; only then
    does the sender send, blocking, and join the allreduce: the receiver's allreduce must move the
    transfer while it waits."""
    me = group_rank(rank, size)
    partner = me + 1 if me % 2 == 0 else me - 1
    total = np.ones(3, np.float32)
    if me % 2 == 0 and partner < size:
        got = np.zeros(count)
        receive = chorus.recv(partner, out=got, tag=3, async_op=True, group=group)
        allreduce = chorus.allreduce(total, inplace=True, async_op=True, group=group)
        chorus.send(np.ones(1), world_rank(partner, size), tag=3)
        allreduce.wait()
        receive.wait()
        np.testing.assert_array_equal(got, message(partner, 3, count))
    elif me % 2 == 1:
        chorus.recv(world_rank(partner, size), (1,), "float64", tag=3)
        chorus.send(message(me, 3, count), partner, tag=3, group=group)
        chorus.allreduce(total, inplace=True, group=group)
    else:
        chorus.allreduce(total, inplace=True, group=group)
    np.testing.assert_array_equal(total, np.full(3, size, np.float32))


@pytest.mark.parametrize("count", [5, LARGE])
def test_a_receive_that_lands_during_a_collective_completes_during_it(rank, size, group, count):
    """The receiver waits for its receive while its allreduce waits for the sender, and only then
    tells the sender (over the world) to join the allreduce."""
    me = group_rank(rank, size)
    partner = me + 1 if me % 2 == 0 else me - 1
    total = np.array([float(me)])
    if me % 2 == 0 and partner < size:
        got = np.zeros(count)
        receive = chorus.recv(partner, out=got, tag=6, async_op=True, group=group)
        allreduce = chorus.allreduce(total, inplace=True, async_op=True, group=group)
        chorus.send(np.ones(1), world_rank(partner, size), tag=6)
        receive.wait()
        np.testing.assert_array_equal(got, message(partner, 6, count))
        chorus.send(np.ones(1), world_rank(partner, size), tag=7)
        allreduce.wait()
    elif me % 2 == 1:
        chorus.recv(world_rank(partner, size), (1,), "float64", tag=6)
        chorus.send(message(me, 6, count), partner, tag=6, group=group)
        chorus.recv(world_rank(partner, size), (1,), "float64", tag=7)
        chorus.allreduce(total, inplace=True, group=group)
    else:
        chorus.allreduce(total, inplace=True, group=group)
    assert total[0] == size * (size - 1) / 2


def test_the_world_is_untouched(size):
    assert chorus.allreduce(np.ones(2))[0] == size
