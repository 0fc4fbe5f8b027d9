"""A rank killed while the other's allreduce on CUDA tensors is in flight (issue 18): the survivor
must raise a PeerError naming it within 5 s, not hang inside NCCL. Run by ctest as
python_cuda_killed_rank_np2 (chorusrun -np 2); prints "cuda_killed_rank: SKIPPED" without a GPU.

Rank 0 queues a slow kernel (torch.cuda._sleep, ~2 s of GPU time) and then its allreduce, so the
collective is still queued behind it when rank 1, having called the same allreduce, is killed.
Rank 0 then waits on the host (synchronize=True). Nothing in NCCL names the dead rank; chorus's
watchdog reads chorusrun's record of the death, or sees NCCL's error and attributes it.
"""

import os
import signal
import sys
import time

import torch

import chorus
import chorus.distributed as dist

config = dist.get_config()
rank, size = config.rank, config.size
assert size == 2, "run with chorusrun -np 2"
if not (chorus._chorus.gpu_backend and torch.cuda.is_available()):
    print("cuda_killed_rank: SKIPPED (needs a CUDA device and chorus built with NCCL)", flush=True)
    sys.exit(0)
gpus = torch.cuda.device_count()
if gpus < config.local_size:  # ranks sharing a GPU: each its own NCCL "host", over loopback
    os.environ.setdefault("NCCL_HOSTID", f"chorus-killed-rank-{rank}")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
device = torch.device("cuda", config.local_rank % gpus)
x = torch.ones(1 << 20, device=device)
chorus.allreduce(x, synchronize=True)  # both NCCL communicators are up

if rank == 1:
    chorus.allreduce(x, async_op=True)
    time.sleep(0.5)  # its host check passes meanwhile; either way rank 0 must name this rank
    os.kill(os.getpid(), signal.SIGKILL)

torch.cuda._sleep(4_000_000_000)  # ~2 s of GPU time ahead of the collective
start = time.monotonic()
try:
    chorus.allreduce(x, synchronize=True)
    print("rank 0: FAIL the allreduce completed although rank 1 died", flush=True)
    sys.exit(1)
except chorus.PeerError as error:
    waited = time.monotonic() - start
    if error.peer_rank != 1 or waited >= 5.0:
        print(f"rank 0: FAIL PeerError naming rank {error.peer_rank} after {waited:.1f} s: {error}",
              flush=True)
        sys.exit(1)
    print(f"cuda_killed_rank: OK, PeerError naming rank 1 after {waited:.1f} s: {error}",
          flush=True)
