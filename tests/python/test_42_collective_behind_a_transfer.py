"""A collective behind an unfinished send or recv (Note [A collective behind a transfer],
src/runtime/communicator_state.cc): programs written for MPI may post a receive, enter a barrier,
and send only after it, or send asynchronously before a collective that the receiver enters before
its receive. A chorus collective starts only once the transfers issued before it are done, so both
ranks wait until the deadline; the transfer's timeout must then say that, and what to do, rather
than only "it may have crashed".

Each case runs on a communicator of its own with a 1.5-second timeout, destroyed afterwards.
"""

import numpy as np
import pytest

import chorus
import chorus.distributed as dist

_HINT = ("next collective on this communicator is queued behind the transfer, and a collective "
         "starts only once every send and recv issued before it is done")


@pytest.fixture
def quick_group(size, multi_rank):
    ranks = list(reversed(range(size)))
    group = dist.new_group(ranks)
    chorus.barrier(group=group)  # made, and joined, under the job's timeout
    dist.get_communicator([ranks]).timeout = 1.5  # the communicator new_group(ranks) has
    yield group
    dist.destroy_group(group)


def test_a_receive_posted_before_a_barrier_whose_sender_sends_after_it(rank, quick_group):
    """World rank 1 posts a receive from world rank 0 (group ranks size-2 and size-1), then enters
    the barrier; rank 0 would send after the barrier."""
    group, size = quick_group, dist.get_config().size
    me, sender, receiver = size - 1 - rank, size - 1, size - 2  # group ranks
    if me == receiver:
        work = chorus.recv(sender, (1,), "float64", tag=5, async_op=True, group=group)
        with pytest.raises(chorus.TimeoutError, match=_HINT):
            chorus.barrier(group=group)
        with pytest.raises(chorus.TimeoutError):
            work.wait()
    else:
        with pytest.raises(chorus.Error) as raised:
            chorus.barrier(group=group)
        assert _HINT not in str(raised.value)  # nothing is queued behind a transfer here


def test_a_send_issued_before_a_collective_that_its_receiver_enters_first(rank, quick_group):
    """World rank 0 sends 1 MiB asynchronously (too much to leave in a ring: it waits for its
    receiver), then allreduces; rank 1 would receive after the allreduce."""
    group, size = quick_group, dist.get_config().size
    me, sender = size - 1 - rank, size - 1
    x = np.ones(1)
    if me == sender:
        work = chorus.send(np.ones(1 << 17), size - 2, tag=6, async_op=True, group=group)
        with pytest.raises(chorus.TimeoutError, match=_HINT):
            chorus.allreduce(x, group=group)
        with pytest.raises(chorus.TimeoutError):
            work.wait()
    else:
        with pytest.raises(chorus.Error) as raised:
            chorus.allreduce(x, group=group)
        assert _HINT not in str(raised.value)


def test_the_world_is_untouched(size):
    assert chorus.allreduce(np.ones(2))[0] == size
