"""torch.distributed over chorus: destroy_process_group() and then a second init_process_group()
work, as over gloo. Run by ctest under chorusrun -np 2 as python_torch_reinit_np2; rank 0 prints
"torch_reinit: OK" when both inits' all_reduce gave the closed form.

Found by an audit: chorus kept the default group's store after destroy_process_group(), so rank 0's
TCPStore went on listening on MASTER_PORT, and the second init's store-based barrier met in the old
store: "Timed out initializing process group in store based barrier ... worker_count=4".
"""

import datetime

import torch
import torch.distributed as dist

import chorus
from chorus.torch import _backend  # importing chorus.torch registers the backend

if _backend._c10d is None:
    print("torch_reinit: SKIPPED: this build has no torch.distributed backend")
    raise SystemExit(0)

sums = []
for _ in range(2):
    dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=30))
    rank, size = dist.get_rank(), dist.get_world_size()
    x = torch.full((2,), float(rank + 1))
    dist.all_reduce(x)
    sums.append(x.tolist())
    dist.destroy_process_group()
    # Every rank past its destroy (rank 0's TCPStore closed) before any connects to the next one:
    # else a rank connected to the old store as it closed ("Connection reset by peer"), as it
    # would over gloo too. chorus's own world outlives torch's groups.
    chorus.barrier()
expected = [float(size * (size + 1) // 2)] * 2
if rank == 0:
    ok = sums == [expected, expected]
    print("torch_reinit: OK" if ok else f"torch_reinit: FAIL: {sums}, expected {expected} twice")
