"""Times chorus.allreduce through Python (time.perf_counter around the call; median).

    chorusrun -np 2 /usr/bin/python3 bench/python_allreduce.py [--torch] [--inplace]
"""

import statistics
import sys
import time

import numpy as np

import chorus

use_torch = "--torch" in sys.argv
inplace = "--inplace" in sys.argv
rank = chorus.distributed.get_config().rank
for nbytes, iters in ((8, 20), (64 << 20, 5)):
    if use_torch:
        import torch
        x = torch.ones(nbytes // 4, dtype=torch.float32)
    else:
        x = np.ones(nbytes // 4, dtype=np.float32)
    chorus.allreduce(x)  # warm-up (connections, first touch)
    times = []
    for _ in range(iters):
        chorus.barrier()
        t0 = time.perf_counter()
        chorus.allreduce(x, inplace=inplace)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print(f"{'torch' if use_torch else 'numpy'} inplace={inplace} {nbytes} B: median "
              f"{statistics.median(times) * 1e6:.1f} us over {iters} (min "
              f"{min(times) * 1e6:.1f})", flush=True)
