"""A rank that exits before its first operation: the others' first operation, which sets up the
world's communicator, raises a PeerError naming it at once (Note [A rank that never joins] in
src/runtime/communicator_factory.cc) instead of a store TimeoutError naming a key at CHORUS_TIMEOUT.
Run by ctest under chorusrun -np 2 as python_never_joined_exit0 and _exit1 (the first argument is
rank 1's exit code). Rank 0 prints "never_joined: OK" when its error is right.

Found by an audit: rank 0 waited the full timeout and then raised `timed out waiting for key
"comm/world0/nodes/node/1" in the store`, with missing_ranks empty; with a non-zero exit it
printed nothing before chorusrun stopped it.
"""

import os
import sys

code = int(sys.argv[1])
if os.environ["CHORUS_RANK"] == "1":
    sys.exit(code)  # before importing chorus: never joins anything

import numpy as np  # noqa: E402

import chorus  # noqa: E402

try:
    chorus.allreduce(np.ones(4, np.float32))
    print("never_joined: FAIL: the allreduce returned")
except chorus.PeerError as error:
    message = str(error)
    expected = f"rank 1 exited with code {code}"
    if error.peer_rank == 1 and expected in message and message.startswith("rank 0 (this"):
        print("never_joined: OK")
    else:
        print(f"never_joined: FAIL: peer_rank {error.peer_rank}: {message}")
except chorus.Error as error:
    print(f"never_joined: FAIL: {type(error).__name__}: {error}")
