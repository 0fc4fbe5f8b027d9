"""The GIL is released while chorus communicates (DESIGN §4).

Rank 0 runs a counting thread, then enters a collective that the other ranks join only after
sleeping 0.6 s (the sleep is on the OTHER ranks and only creates the window; it decides nothing).
If chorus held the GIL while rank 0 waits, the counting thread could not run at all inside
[enter + 0.15 s, leave - 0.05 s]; the test asserts it recorded progress in that window.
"""

import threading
import time

import numpy as np
import pytest

import chorus

DELAY_S = 0.6


class Counter(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.started_event = threading.Event()
        self.stop = False
        self.stamps = []

    def run(self):
        count = 0
        self.started_event.set()
        while not self.stop:
            count += 1
            if count % 256 == 0:
                self.stamps.append(time.monotonic())


def blocked_call(kind):
    x = np.ones((1024,), dtype=np.float32)
    if kind == "barrier":
        chorus.barrier()
    elif kind == "allreduce":
        chorus.allreduce(x)
    elif kind == "allreduce_async_wait":
        chorus.allreduce(x, async_op=True).wait()
    elif kind == "broadcast":
        chorus.broadcast(x, root=1)


@pytest.mark.parametrize("kind", ["barrier", "allreduce", "allreduce_async_wait", "broadcast"])
def test_other_thread_runs_while_blocked(multi_rank, rank, size, kind):
    chorus.barrier()  # line the ranks up; the window starts from here
    if rank != 0:
        time.sleep(DELAY_S)
        blocked_call(kind)
        return
    counter = Counter()
    counter.start()
    assert counter.started_event.wait(10)
    try:
        enter = time.monotonic()
        blocked_call(kind)
        leave = time.monotonic()
    finally:
        counter.stop = True
        counter.join(10)
    assert leave - enter > 0.3, f"rank 0 was blocked only {leave - enter:.3f} s; no window"
    inside = [t for t in counter.stamps if enter + 0.15 < t < leave - 0.05]
    assert inside, (f"{kind}: the counting thread made no progress during the "
                    f"{leave - enter:.3f} s rank 0 spent inside chorus (GIL held?)")
