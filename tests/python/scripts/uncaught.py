"""An uncaught exception aborts its rank's communicators (chorus's sys.excepthook), and every peer
learns which process failed first. Run by ctest as python_uncaught_np3 (chorusrun -np 3).

1. Rank 2 raises ValueError and lets it go. Ranks 0 and 1, in a world allreduce, must raise a
   PeerError quoting it, with peer_rank 2.
2. Rank 0 lets that PeerError go. Its abort reaches rank 1 in their group [0, 1], where rank 2 is
   no member: rank 1's PeerError must still name rank 2 (peer_rank and "world rank 2 failed"),
   not rank 0, which only passed the news on.

Rank 1 prints "uncaught: OK" when both hold; ranks 0 and 2 exit non-zero, as they must. Ranks 0
and 2 call the excepthook themselves (what letting the exception go does) and then stay alive,
their communicators aborted, until rank 1 has checked: so rank 1 hears the aborts rather than a
process's exit, and chorusrun (which stops the other ranks 3 s after one fails) cannot stop rank 1
first on a loaded machine. A file that rank 1 creates (UNCAUGHT_MARK) says when.
"""

import os
import sys
import time

import numpy as np

import chorus
import chorus.distributed as dist

rank, size = dist.get_config().rank, dist.get_config().size
assert size == 3, "run with chorusrun -np 3"
mark = os.environ.get("UNCAUGHT_MARK", f"/tmp/chorus-uncaught-{os.getppid()}")
pair = [[0, 1], [2]]


def fail(what):
    print(f"rank {rank}: FAIL {what}", flush=True)
    sys.exit(1)


def let_go_and_exit(error):
    """What an uncaught `error` does (chorus's excepthook aborts), then exit 1 once rank 1 is done."""
    try:
        raise error
    except Exception:
        sys.excepthook(*sys.exc_info())
    deadline = time.monotonic() + 30
    while not os.path.exists(mark) and time.monotonic() < deadline:
        time.sleep(0.05)  # only keeps this process alive; rank 1 decides the result
    sys.exit(1)  # the mark stays for the other waiting rank; the next run's rank 0 removes it


if rank == 0 and os.path.exists(mark):
    os.remove(mark)  # a stale one; rank 1 makes it only after rank 0 has aborted, below
# Every communicator is made while all ranks are alive.
chorus.allreduce(np.ones(4), rank_list=pair)
chorus.allreduce(np.ones(4))

if rank == 2:
    let_go_and_exit(ValueError("rank 2 gives up"))

try:
    chorus.allreduce(np.ones(4))
    fail("the world allreduce returned without rank 2")
except chorus.PeerError as error:
    if error.peer_rank != 2 or "ValueError: rank 2 gives up" not in str(error):
        fail(f"step 1: expected a PeerError naming rank 2, got peer_rank={error.peer_rank}: {error}")
    first = error

if rank == 0:
    let_go_and_exit(first)

try:
    chorus.allreduce(np.ones(4), rank_list=pair)
    fail("the group allreduce returned after rank 0 aborted")
except chorus.PeerError as error:
    if error.peer_rank != 2 or "(world rank 2 failed)" not in str(error):
        fail(f"step 2: expected a PeerError naming rank 2, got peer_rank={error.peer_rank}: {error}")
finally:
    open(mark, "w").close()
print("uncaught: OK", flush=True)
