"""An unchanged torch.distributed program on the "chorus" backend, for launchers other than chorus's.

    python3 -m torch.distributed.run --nproc_per_node 3 unchanged_program.py   # torchrun, env://
    python3 unchanged_program.py --spawn 3                                      # torch's spawn

Its only line about chorus is the import that registers the backend. Every rank checks
all_reduce, broadcast, all_gather, a new_group of the even ranks and a few steps of torch's
DistributedDataParallel against closed forms, and prints "unchanged_program: OK on N ranks".
"""

import argparse
import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chorus.torch  # noqa: F401  registers the "chorus" backend


def check(rank, size):
    assert dist.get_backend() == chorus.torch._backend.NAME == "chorus", dist.get_backend()
    x = torch.full((10,), float(rank + 1))
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((10,), size * (size + 1) / 2)), x
    y = torch.arange(5.0) * (rank + 1)
    dist.broadcast(y, size - 1)
    assert torch.equal(y, torch.arange(5.0) * size), y
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(gathered, torch.tensor([rank, rank * rank]))
    assert all(torch.equal(g, torch.tensor([r, r * r])) for r, g in enumerate(gathered))
    evens = list(range(0, size, 2))
    group = dist.new_group(evens)
    if rank in evens:
        z = torch.tensor([float(rank)])
        dist.all_reduce(z, group=group)
        assert z.item() == sum(evens), z
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        # Rank r's loss is (r + 1) * sum(w): the averaged gradient of w is mean(r + 1) per entry.
        (model(torch.ones(1, 4)).sum() * (rank + 1) - model.module.bias.sum() * (rank + 1)).backward()
        optimizer.step()
    # w0 - 3 * 0.1 * (size + 1) / 2, the same on every rank; compare across ranks through chorus.
    weights = model.module.weight.detach().clone()
    everyone = [torch.zeros_like(weights) for _ in range(size)]
    dist.all_gather(everyone, weights)
    assert all(torch.equal(w, weights) for w in everyone), everyone
    torch.manual_seed(0)
    expected = torch.nn.Linear(4, 1).weight.detach() - 0.3 * (size + 1) / 2
    assert torch.allclose(weights, expected, atol=1e-6), (weights, expected)
    dist.barrier()
    if rank == 0:
        print(f"unchanged_program: OK on {size} ranks", flush=True)
    dist.destroy_process_group()


def spawned(rank, size, init_file):
    dist.init_process_group("chorus", init_method="file://" + init_file, rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=60))
    check(rank, size)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spawn", type=int, default=0, help="start N ranks with torch's spawn")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.spawn:
        with tempfile.TemporaryDirectory() as folder:
            mp.spawn(spawned, args=(args.spawn, os.path.join(folder, "init")), nprocs=args.spawn)
        return 0
    dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=60))  # env://
    check(dist.get_rank(), dist.get_world_size())
    return 0


if __name__ == "__main__":
    sys.exit(main())
