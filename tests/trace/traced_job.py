"""A rank program for test_trace_job.py: collectives on the world and on two halves, a send/recv
pair, with rank SLOW_RANK late to every world allreduce (it sleeps SLOW_S before each).

    chorusrun -np 4 python3 traced_job.py env|api|off TRACE_PATH

env: CHORUS_TRACE (set by the test) records the whole run. api: chorus.trace.recording(path)
records only the loop (one allreduce runs before it). off: nothing records. Every result is checked
against its closed form; the rank prints "RESULT rank=R ok" when all are right.
"""

import sys
import time

import numpy as np

import chorus
import chorus.distributed as dist
import chorus.trace

SLOW_RANK = 2
SLOW_S = 0.05
ROUNDS = 10


def body(rank, size):
    for _ in range(ROUNDS):
        if rank == SLOW_RANK:
            time.sleep(SLOW_S)
        total = chorus.allreduce(np.full(1024, rank + 1, dtype=np.float32))
        assert np.all(total == size * (size + 1) / 2), total[:4]
    halves = [list(range(size // 2)), list(range(size // 2, size))]
    mine = halves[0] if rank in halves[0] else halves[1]
    for _ in range(3):
        half = chorus.allreduce(np.full(8, rank, dtype=np.int64), rank_list=halves)
        assert np.all(half == sum(mine)), half
    root_value = chorus.broadcast(np.full(4, rank, dtype=np.float64), root=1)
    assert np.all(root_value == 1), root_value
    if rank == 0:
        chorus.send(np.arange(3, dtype=np.float32), 1)
    elif rank == 1:
        got = chorus.recv(0, (3,))
        assert np.all(got == np.arange(3)), got


def main():
    mode, path = sys.argv[1], sys.argv[2]
    config = dist.get_config()
    rank, size = config.rank, config.size
    if mode == "api":
        warm = chorus.allreduce(np.ones(2, dtype=np.float32))  # before the trace: not in it
        assert np.all(warm == size)
        with chorus.trace.recording(path):
            body(rank, size)
        assert not chorus.trace.active()
    else:
        body(rank, size)
    print(f"RESULT rank={rank} ok", flush=True)


if __name__ == "__main__":
    main()
