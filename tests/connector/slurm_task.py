"""A task of a faked srun step (test_slurm.py): prints its place in the seed attribute table and
the result of an allreduce, checked against its closed form. --hold: once connected, prints
CONNECTED and waits for a line on stdin before the allreduce."""

import sys

import numpy as np

import chorus
import chorus.distributed as dist

config = dist.get_config()
comm = dist.get_communicator()
if "--hold" in sys.argv:  # connected: wait for the test's word before the collective
    print("CONNECTED", flush=True)
    sys.stdin.readline()
total = chorus.allreduce(np.full(4, config.rank + 1.0))
assert np.all(total == comm.size * (comm.size + 1) / 2), total
print(f"TASK rank={config.rank} size={config.size} local_rank={config.local_rank} "
      f"local_size={config.local_size} root_rank={config.root_rank} comm_rank={comm.rank} "
      f"comm_size={comm.size} comm_local_rank={comm.local_rank} "
      f"comm_local_size={comm.local_size} backend={comm.backend}", flush=True)
