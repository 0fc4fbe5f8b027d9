"""Seed example: every rank holds ones((1, 4)) * (rank + 1); after allreduce every entry is
N (N + 1) / 2.

    build/bin/chorusrun -np 4 /usr/bin/python3 examples/python/allreduce.py
    build/bin/chorusrun -np 2 python3 examples/python/allreduce.py --device cuda
(with PYTHONPATH=build/python, or chorus installed). With --device cuda each rank uses
cuda:(local_rank % GPUs) and the nccl backend; ranks that share a GPU run NCCL over loopback
sockets (each its own NCCL_HOSTID), slow but correct (run so on an H200, 2026-11-27).
"""

import argparse
import os

import numpy as np

import chorus
import chorus.distributed as dist


def make(device, rank, local_rank, local_size):
    if device == "cpu":
        return np.ones((1, 4), dtype=np.float32) * (rank + 1)
    import torch
    if not torch.cuda.is_available():
        raise SystemExit(f"rank {rank}: --device cuda needs a CUDA GPU, and torch sees none")
    gpus = torch.cuda.device_count()
    if gpus < local_size:  # NCCL refuses two ranks on one GPU unless each is its own "host"
        os.environ.setdefault("NCCL_HOSTID", f"chorus-example-rank-{rank}")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    return torch.ones((1, 4), device=f"cuda:{local_rank % gpus}") * (rank + 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    device = parser.parse_args().device
    cfg = dist.get_config()
    rank, size = cfg.rank, cfg.size
    x = make(device, rank, cfg.local_rank, cfg.local_size)
    print(f"rank {rank}: before allreduce {x}", flush=True)
    y = chorus.allreduce(x)
    print(f"rank {rank}: after allreduce  {y} (expected {size * (size + 1) // 2} everywhere)",
          flush=True)
    values = y.cpu().numpy() if device == "cuda" else y
    assert np.all(values == size * (size + 1) / 2)


if __name__ == "__main__":
    main()
