"""Tensor parallelism within data parallelism: an MLP block trained on a 2 x 2 mesh of 4 ranks.

    PYTHONPATH=build/python build/bin/chorusrun -np 4 /usr/bin/python3 \
        examples/python/tensor_parallel_mlp.py [--tp 2] [--steps 8]

The ranks form a mesh of dp x tp (4 ranks, --tp 2: 2 x 2). The ranks of one row
(tensor-parallel group; [[0, 1], [2, 3]]) hold one copy of the model between them:
ColumnParallelLinear (hidden features split) -> gelu -> RowParallelLinear (the same features split,
summed by all_reduce). The ranks of one column (data-parallel group; [[0, 2], [1, 3]]) hold the same
shard and see different parts of the batch; their gradients are averaged with
chorus.allreduce(op="avg", rank_list=dp_groups). One SGD step on the mesh is one SGD step of the
unsplit model on the whole batch: each rank also trains the unsplit model alone on the same data,
and the run fails unless every shard matches it at the end.

The loss: every rank of a tensor-parallel group computes the same loss from the replicated output,
so each divides it by the group size (chorus.torch.nn.functional's gradient convention: the
gradient is that of the sum of every rank's loss). The row layer's bias is replicated across the
group, so its copies' gradients are summed over the group before the step.

Expected output (rank 0): the loss every 4 steps, falling (0.53 to 0.33 in 20 steps), then
    final loss 0.0...; every shard matches the unsplit model (max difference ~1e-16)
"""

import argparse
import sys

import torch
import torch.nn.functional as F

import chorus
import chorus.distributed as dist
import chorus.torch.nn as cnn

IN_FEATURES, HIDDEN, OUT_FEATURES = 8, 24, 4  # HIDDEN splits across 1, 2, 3 or 4 ranks
BATCH = 24  # the whole data set, every step's batch, split across the data-parallel groups
LR = 0.2


def mesh(size, tp):
    """(tp_groups, dp_groups) of a dp x tp mesh of world ranks: rank = d * tp + t."""
    if tp < 1 or size % tp != 0:
        raise ValueError(f"the world size ({size}) must be divisible by --tp ({tp})")
    dp = size // tp
    tp_groups = [[d * tp + t for t in range(tp)] for d in range(dp)]
    dp_groups = [[d * tp + t for d in range(dp)] for t in range(tp)]
    return tp_groups, dp_groups


def unsplit_model(seed=0):
    """The reference MLP, made identically on every rank."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, HIDDEN), torch.nn.GELU(),
                               torch.nn.Linear(HIDDEN, OUT_FEATURES)).double()


class ParallelMLP(torch.nn.Module):
    """fc2(gelu(fc1(x))) with fc1's output features and fc2's input features split."""

    def __init__(self, unsplit, tp_groups):
        super().__init__()
        self.fc1 = cnn.ColumnParallelLinear.from_linear(unsplit[0], gather_output=False,
                                                        rank_list=tp_groups)
        self.fc2 = cnn.RowParallelLinear.from_linear(unsplit[2], input_is_parallel=True,
                                                     rank_list=tp_groups)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def dataset(seed=1):
    """A synthetic regression (the same on every rank): BATCH samples of y = sin(x A) + noise."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(IN_FEATURES, OUT_FEATURES, generator=generator, dtype=torch.float64)
    x = torch.randn(BATCH, IN_FEATURES, generator=generator, dtype=torch.float64)
    noise = torch.randn(BATCH, OUT_FEATURES, generator=generator, dtype=torch.float64)
    return x, torch.sin(x @ a) + 0.05 * noise


def sgd_step(parameters, grads, lr=LR):
    with torch.no_grad():
        for p, g in zip(parameters, grads):
            p -= lr * g
            p.grad = None


def parallel_step(model, x, y, tp_groups, dp_groups):
    """One training step on this rank's part of the batch; the loss of the whole batch."""
    tp_size = dist.get_communicator(tp_groups).size
    loss = F.mse_loss(model(x), y)  # the mean over this data-parallel group's samples
    (loss / tp_size).backward()  # the same loss on each rank of the group counts once
    bias = model.fc2.bias
    bias.grad = chorus.allreduce(bias.grad, rank_list=tp_groups)  # replicated: sum the copies
    parameters = list(model.parameters())
    grads = chorus.allreduce([p.grad for p in parameters], op="avg", rank_list=dp_groups)
    sgd_step(parameters, grads)
    return float(chorus.allreduce(loss.detach(), op="avg", rank_list=dp_groups))


def train_parallel(steps, tp):
    """Trains ParallelMLP on the mesh for `steps` steps; (model, the loss of each step)."""
    cfg = dist.get_config()
    tp_groups, dp_groups = mesh(cfg.size, tp)
    replica, dp = cfg.rank // tp, cfg.size // tp
    model = ParallelMLP(unsplit_model(), tp_groups)
    x, y = (t.chunk(dp)[replica] for t in dataset())
    return model, [parallel_step(model, x, y, tp_groups, dp_groups) for _ in range(steps)]


def train_reference(steps):
    """Trains the unsplit model in this process alone on the same data; (model, losses)."""
    model = unsplit_model()
    x, y = dataset()
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        parameters = list(model.parameters())
        sgd_step(parameters, [p.grad for p in parameters])
        losses.append(float(loss))
    return model, losses


def max_difference(parallel, reference):
    """The largest difference, over every rank, between a shard and its part of the unsplit
    model (collective)."""
    fc1, fc2 = parallel.fc1, parallel.fc2
    pairs = [(fc1.weight, reference[0].weight[fc1.shard]), (fc1.bias, reference[0].bias[fc1.shard]),
             (fc2.weight, reference[2].weight[:, fc2.shard]), (fc2.bias, reference[2].bias)]
    mine = max(float((a - b).abs().max()) for a, b in pairs)
    return float(chorus.allreduce(torch.tensor([mine], dtype=torch.float64), op="max")[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel group size")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    cfg = dist.get_config()
    torch.set_num_threads(1)
    model, losses = train_parallel(args.steps, args.tp)
    reference, reference_losses = train_reference(args.steps)
    difference = max_difference(model, reference)
    if cfg.rank == 0:
        tp_groups, dp_groups = mesh(cfg.size, args.tp)
        print(f"{cfg.size // args.tp} x {args.tp} mesh: tensor parallel {tp_groups}, data "
              f"parallel {dp_groups}")
        for step, (loss, ref) in enumerate(zip(losses, reference_losses)):
            if step % 4 == 0 or step == args.steps - 1:
                print(f"step {step:3d}: loss {loss:.6f} (unsplit model alone: {ref:.6f})")
        verdict = "matches" if difference < 1e-9 else "DOES NOT match"
        print(f"final loss {losses[-1]:.6f}; every shard {verdict} the unsplit model (max "
              f"difference {difference:.1e})", flush=True)
    return 0 if difference < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
