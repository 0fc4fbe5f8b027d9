"""What torch >= 2.7's blocking calls save on chorus's backend: an 8 B torch.distributed.all_reduce
made without async_op (torch marks it asyncOp=false, and chorus runs it on the calling thread,
docs/torch.md "Design") against the same call with async_op=True and an immediate wait() (handed to
the communicator's worker thread and back). Rounds of 2000 calls alternate between the two; rank 0
prints each one's median over 7 rounds, in microseconds per call. Run it under chorusrun:

    chorusrun -np 2 python3 bench/torch_blocking_cost.py

On torch 1.13, which marks no call, both go to the worker.
"""
import importlib
import statistics
import time

import torch
import torch.distributed as tdist

CALLS, ROUNDS = 2000, 7


def main():
    importlib.import_module("chorus.torch")  # registers the "chorus" backend
    tdist.init_process_group("chorus")
    tensor = torch.ones(2)
    variants = {
        "blocking": lambda: tdist.all_reduce(tensor),
        "async_op=True + wait()": lambda: tdist.all_reduce(tensor, async_op=True).wait(),
    }
    for call in variants.values():
        for _ in range(200):
            call()
    times = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, call in variants.items():
            tdist.barrier()
            start = time.perf_counter()
            for _ in range(CALLS):
                call()
            times[name].append((time.perf_counter() - start) / CALLS * 1e6)
    if tdist.get_rank() == 0:
        for name, runs in times.items():
            print(f"torch {torch.__version__}, 8 B all_reduce, {name}: median "
                  f"{statistics.median(runs):.1f} us ({', '.join(f'{t:.1f}' for t in runs)})")
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
