"""Seed example: every rank holds ones((1, 4)) * (rank + 1); after allreduce every entry is
N (N + 1) / 2.

    build/bin/chorusrun -np 4 /usr/bin/python3 examples/python/allreduce.py
(with PYTHONPATH=build/python, or chorus installed)
"""

import numpy as np

import chorus
import chorus.distributed as dist


def main():
    cfg = dist.get_config()
    rank, size = cfg.rank, cfg.size
    x = np.ones((1, 4), dtype=np.float32) * (rank + 1)
    print(f"rank {rank}: before allreduce {x}", flush=True)
    y = chorus.allreduce(x)
    print(f"rank {rank}: after allreduce  {y} (expected {size * (size + 1) // 2} everywhere)",
          flush=True)
    assert np.all(y == size * (size + 1) / 2)


if __name__ == "__main__":
    main()
