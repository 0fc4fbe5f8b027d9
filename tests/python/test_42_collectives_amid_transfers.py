"""Collectives and point-to-point transfers that overlap (Note [Collectives and transfers
together], src/runtime/communicator_transfers.cc), both ways. Programs written for MPI post a
receive, enter a barrier, and send only after it; or send asynchronously before a collective that
the receiver enters before its receive; or send, blocking, to a rank whose receive waits amid its
collective, and may wait for that receive before they let the sender join the collective. And they
issue an async collective, then a send (or receive) whose peer takes it before it joins the
collective, from the same thread or another, as torch.distributed programs do over gloo. MPI runs
them; each must finish here too, with the right data, on the backends of one node (shm under
chorusrun, mpi and mpi_algorithms under mpirun), and through torch.distributed. Before, each
waited until its deadline.

Each case runs on a communicator of its own (the world's ranks reversed) with a 20-second timeout,
so that a regression fails here rather than at ctest's limit; the world carries the signals that
order the ranks; expected values are closed forms.
"""

import datetime
import threading
import time

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


def partner_of(me, size):
    """Even ranks pair with the next rank; the last of an odd size has none (None)."""
    partner = me + 1 if me % 2 == 0 else me - 1
    return partner if partner < size else None


@pytest.mark.parametrize("count", [5, LARGE])
def test_a_send_issued_after_an_async_collective_starts_while_it_runs(rank, size, group, count):
    """The receiver takes the message before it joins the allreduce, so the send cannot wait for
    the allreduce to end."""
    me = group_rank(rank, size)
    partner = partner_of(me, size)
    total = np.array([float(me)])
    if partner is not None and me % 2 == 0:
        allreduce = chorus.allreduce(total, inplace=True, async_op=True, group=group)
        chorus.send(message(me, 8, count), partner, tag=8, group=group)
        allreduce.wait()
    elif partner is not None:
        got = chorus.recv(partner, (count,), "float64", tag=8, group=group)
        np.testing.assert_array_equal(got, message(partner, 8, count))
        chorus.allreduce(total, inplace=True, group=group)
    else:
        chorus.allreduce(total, inplace=True, group=group)
    assert total[0] == size * (size - 1) / 2


@pytest.mark.parametrize("count", [5, LARGE])
def test_a_send_issued_behind_two_async_collectives_starts_while_the_first_runs(rank, size, group,
                                                                                count):
    """As a data-parallel step's bucket allreduces, then a pipeline's send: the send goes ahead of
    the second allreduce, which waits for the first."""
    me = group_rank(rank, size)
    partner = partner_of(me, size)
    first, second = np.array([float(me)]), np.array([2.0 * me])
    if partner is not None and me % 2 == 0:
        works = [chorus.allreduce(x, inplace=True, async_op=True, group=group)
                 for x in (first, second)]
        chorus.send(message(me, 11, count), partner, tag=11, group=group)
        for work in works:
            work.wait()
    else:
        if partner is not None:
            got = chorus.recv(partner, (count,), "float64", tag=11, group=group)
            np.testing.assert_array_equal(got, message(partner, 11, count))
        for x in (first, second):
            chorus.allreduce(x, inplace=True, group=group)
    assert (first[0], second[0]) == (size * (size - 1) / 2, size * (size - 1))


@pytest.mark.parametrize("count", [5, LARGE])
def test_a_receive_issued_after_an_async_collective_takes_a_send_that_waits_for_it(rank, size,
                                                                                   group, count):
    me = group_rank(rank, size)
    partner = partner_of(me, size)
    if partner is not None and me % 2 == 0:
        barrier = chorus.barrier(async_op=True, group=group)
        got = chorus.recv(partner, (count,), "float64", tag=9, group=group)
        np.testing.assert_array_equal(got, message(partner, 9, count))
        barrier.wait()
    elif partner is not None:
        chorus.send(message(me, 9, count), partner, tag=9, group=group)
        chorus.barrier(group=group)
    else:
        chorus.barrier(group=group)


@pytest.mark.parametrize("count", [5, LARGE])
def test_a_send_from_another_thread_starts_while_a_blocking_collective_waits(rank, size, group,
                                                                             count):
    """The main thread's blocking allreduce runs on the main thread; a second thread sends
    meanwhile (it starts a little later, most often while the allreduce waits; sent first, the
    send runs ahead of the allreduce, and the program must finish too)."""
    me = group_rank(rank, size)
    partner = partner_of(me, size)
    total = np.array([float(me)])
    if partner is not None and me % 2 == 0:
        errors = []

        def send():
            try:
                time.sleep(0.03)  # order only, not timing
                chorus.send(message(me, 10, count), partner, tag=10, group=group)
            except Exception as error:  # raised below, on the main thread
                errors.append(error)

        sender = threading.Thread(target=send)
        sender.start()
        chorus.allreduce(total, inplace=True, group=group)
        sender.join()
        assert not errors, errors
    elif partner is not None:
        got = chorus.recv(partner, (count,), "float64", tag=10, group=group)
        np.testing.assert_array_equal(got, message(partner, 10, count))
        chorus.allreduce(total, inplace=True, group=group)
    else:
        chorus.allreduce(total, inplace=True, group=group)
    assert total[0] == size * (size - 1) / 2


def test_torch_an_async_all_reduce_then_a_send_whose_receiver_receives_first(rank, size, world,
                                                                             multi_rank):
    """The same through torch.distributed, as a program written for gloo does it."""
    import torch
    import torch.distributed as tdist
    made = tdist.new_group(list(range(size)), timeout=datetime.timedelta(seconds=20))
    partner = partner_of(rank, size)
    values = torch.tensor([float(rank)])
    expected = torch.arange(LARGE, dtype=torch.float64) + 1000.0 * rank
    if partner is not None and rank % 2 == 0:
        work = tdist.all_reduce(values, async_op=True, group=made)
        tdist.send(expected, partner, group=made)
        work.wait()
    elif partner is not None:
        got = torch.zeros(LARGE, dtype=torch.float64)
        tdist.recv(got, partner, group=made)
        assert torch.equal(got, torch.arange(LARGE, dtype=torch.float64) + 1000.0 * partner)
        tdist.all_reduce(values, group=made)
    else:
        tdist.all_reduce(values, group=made)
    assert values.item() == size * (size - 1) / 2
    tdist.destroy_process_group(made)
