"""One rank of a mismatch job (run by test_mismatch.py under chorusrun -np 3).

    chorusrun -np 3 /usr/bin/python3 mismatch.py FIELD

The last rank calls the collective differently in FIELD; every rank prints one line
    RESULT rank=R outcome=ok|error type=NAME field=F ranks=A,B message=TEXT
"""

import os
import sys

import numpy as np

import chorus


def call(field, odd):
    """The collective every rank makes; `odd` (the last rank) differs in `field`."""
    count = 1000
    if field == "collective":
        return chorus.allgather(np.ones(count, np.float32)) if odd else \
            chorus.allreduce(np.ones(count, np.float32))
    if field == "dtype":
        return chorus.allreduce(np.ones(count, np.float64 if odd else np.float32))
    if field == "count":
        return chorus.allreduce(np.ones(count + 1 if odd else count, np.float32))
    if field == "root":
        return chorus.broadcast(np.ones(count, np.float32), root=1 if odd else 0)
    if field == "reduce_op":
        return chorus.allreduce(np.ones(count, np.float32), op="max" if odd else "sum")
    if field == "rank_list":
        rank_list = [[0, 1], [2]] if odd else [[0, 1, 2]]
        return chorus.allreduce(np.ones(count, np.float32), rank_list=rank_list)
    if field == "rank_list_groups":  # both set up groups, but different ones
        rank_list = [[0, 2], [1]] if odd else [[0, 1], [2]]
        return chorus.allreduce(np.ones(count, np.float32), rank_list=rank_list)
    raise SystemExit(f"unknown field {field}")


def main():
    field = sys.argv[1]
    rank, size = int(os.environ["CHORUS_RANK"]), int(os.environ["CHORUS_SIZE"])
    try:
        chorus.barrier()
        call(field, rank == size - 1)
        # A rank whose own part of the mismatched call could complete (a broadcast leaf that got
        # its data from the root it expected) learns of the mismatch at its next operation.
        chorus.barrier()
        print(f"RESULT rank={rank} outcome=ok", flush=True)
    except chorus.Error as error:
        ranks = ",".join(map(str, getattr(error, "ranks", [])))
        print(f"RESULT rank={rank} outcome=error type={type(error).__name__} "
              f"field={getattr(error, 'field', '')} ranks={ranks} message={error}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
