"""A rank that returns from its program while the others wait for it in a collective: theirs
raise a PeerError saying it closed its communicator (and exited), not that it "closed its connection
unexpectedly (the process died or was killed)", which the shm backend said of a clean exit
(found by an mpi4py-port audit: a rank that caught an error of its own and returned). Run by
ctest under chorusrun -np 3 as python_left_early_np3; every rank but 0 prints "left_early: OK".
"""

import os
import sys

import numpy as np

import chorus

chorus.barrier()
if os.environ["CHORUS_RANK"] == "0":
    sys.exit(0)  # a clean return: atexit closes the world's communicator
try:
    chorus.allreduce(np.ones(4, np.float32))
    print("left_early: FAIL: the allreduce returned")
except chorus.PeerError as error:
    message = str(error)
    # "... and exited" once its process is gone, which may come a moment after the close
    if error.peer_rank == 0 and "rank 0 has closed its communicator" in message and \
            "died" not in message:
        print("left_early: OK")
    else:
        print(f"left_early: FAIL: peer_rank {error.peer_rank}: {message}")
except chorus.Error as error:
    print(f"left_early: FAIL: {type(error).__name__}: {error}")
