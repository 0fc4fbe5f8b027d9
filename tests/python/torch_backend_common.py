"""What the torch.distributed backend's tests share (test_17 on CPU tensors, test_27 on CUDA
tensors), beside conftest's `world` fixture: the closed-form inputs, and a small model trained on
closed-form batches. Expected values come from these closed forms with torch on one process,
never from chorus.
"""

import torch


def values(rank, n, dtype):
    """Rank r's input: (r + 1) * (i % 5 + 1), small enough for every dtype's sums and products."""
    base = (rank + 1) * (torch.arange(n) % 5 + 1)
    if dtype == torch.bool:
        return (base % 2).to(torch.bool)
    if dtype in (torch.complex64, torch.complex128):
        real = base.float() if dtype == torch.complex64 else base.double()
        return torch.complex(real, -real)
    return base.to(dtype)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(6, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


def batches(step, size):
    """Every rank's batch of step `step` (8 rows each), a closed form of (step, rank, row)."""
    rows = torch.arange(8 * size, dtype=torch.float64).reshape(-1, 1)
    x = torch.sin(rows * torch.arange(1, 7, dtype=torch.float64) + step).float()
    y = ((rows.squeeze(1) + step) % 3).long()
    return x, y


def train(model, group, size, rank, steps=5, device="cpu", parameters=None):
    """SGD for `steps` on this rank's 8 rows of each batch (all rows when `group` is None: the
    one-process reference). Returns the parameters, flat, on the CPU: those of `parameters()`
    if given (a sharded model's full parameters), else of the model (unwrapped)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x, y = batches(step, size)
        if group is not None:  # data parallel: this rank's 8 rows
            x, y = x[8 * rank:8 * (rank + 1)], y[8 * rank:8 * (rank + 1)]
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
    if parameters is None:
        inner = model.module if group is not None else model
        parameters = inner.parameters
    return torch.cat([p.detach().reshape(-1).cpu() for p in parameters()])
