"""Data-parallel training and its reference, shared by the host (test_10) and CUDA (test_23)
tests: N ranks with per-rank batches must end with the same parameters as one process trained on
the concatenated batch (the reference, computed on every rank by plain torch with no
communication).
"""

import torch

import chorus.torch as ct

BATCH = 6   # per rank
STEPS = 5
IN, HIDDEN, OUT = 12, 20, 5


class Mlp(torch.nn.Module):
    """Two layers, an unused one (no gradient anywhere), and an extra branch that only the samples
    flagged `special` go through (so some ranks give it no gradient)."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(IN, HIDDEN)
        self.second = torch.nn.Linear(HIDDEN, OUT)
        self.unused = torch.nn.Linear(3, 3)
        self.extra = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x, special=None):
        h = torch.relu(self.first(x))
        if special is not None and bool(special.any()):
            h = torch.where(special[:, None], torch.tanh(self.extra(h)), h)
        return self.second(h)


def make_model(seed, dtype=torch.float32, device="cpu"):
    torch.manual_seed(seed)
    return Mlp().to(dtype).to(device)


def global_batch(size, step, micro=1, dtype=torch.float32, device="cpu"):
    """The concatenated batch of every rank (rank r owns rows r*n:(r+1)*n, n = micro * BATCH),
    drawn on the host (the same numbers for every device), then moved to `device`."""
    generator = torch.Generator().manual_seed(1000 + step)
    n = size * micro * BATCH
    x = torch.randn(n, IN, generator=generator).to(dtype)
    y = torch.randn(n, OUT, generator=generator).to(dtype)
    special = torch.zeros(n, dtype=torch.bool)
    special[: micro * BATCH] = True  # rank 0's rows only
    return x.to(device), y.to(device), special.to(device)


def loss_of(model, x, y, special):
    return ((model(x, special) - y) ** 2).mean()


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)
    return torch.optim.Adam(params, lr=0.01)


def relative_error(actual, expected):
    scale = expected.abs().max().clamp_min(1e-12)
    return float((actual.float() - expected.float()).abs().max() / scale)


def train_reference(optimizer_name, size, micro=1, dtype=torch.float32, set_to_none=False,
                    device="cpu"):
    model = make_model(0, dtype, device)
    optimizer = make_optimizer(optimizer_name, model.parameters())
    for step in range(STEPS):
        x, y, special = global_batch(size, step, micro, dtype, device)
        optimizer.zero_grad(set_to_none=set_to_none)
        loss_of(model, x, y, special).backward()
        optimizer.step()
    return model


def train_data_parallel(optimizer_name, comm, micro=1, dtype=torch.float32, set_to_none=False,
                        bucket_cap_mb=None, device="cpu"):
    # Every rank starts from different weights: the wrapper must broadcast rank 0's.
    model = make_model(comm.rank, dtype, device)
    ddp = ct.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    optimizer = make_optimizer(optimizer_name, ddp.parameters())
    n = micro * BATCH
    for step in range(STEPS):
        x, y, special = global_batch(comm.size, step, micro, dtype, device)
        mine = slice(comm.rank * n, (comm.rank + 1) * n)
        optimizer.zero_grad(set_to_none=set_to_none)
        for m in range(micro):
            part = slice(mine.start + m * BATCH, mine.start + (m + 1) * BATCH)
            # Each micro-batch's loss is a mean over BATCH rows; dividing by micro makes the sum
            # over micro-batches the mean over the rank's rows.
            if m < micro - 1:
                with ddp.no_sync():
                    (loss_of(ddp, x[part], y[part], special[part]) / micro).backward()
            else:
                (loss_of(ddp, x[part], y[part], special[part]) / micro).backward()
        optimizer.step()
    return model, ddp


def assert_same_parameters(model, reference, tolerance):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        error = relative_error(p.detach(), q.detach())
        assert error <= tolerance, f"{name}: relative error {error:.3g} > {tolerance}"
