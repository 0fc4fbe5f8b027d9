"""DistributedDataParallel's construction and its use with ZeroOptimizer (audit findings).

- Frozen parameters (requires_grad=False) were not broadcast: each rank kept its own, so the
  replicas differed silently. torch's DDP broadcasts every parameter; chorus's now does too.
- ZeroOptimizer over the parameters of a DistributedDataParallel trained to wrong values from the
  second step on, both reducing the gradients: ZeroOptimizer now refuses them while the
  DistributedDataParallel lives.
"""

import gc

import pytest
import torch

import chorus
import chorus.torch  # noqa: F401  (chorus.torch.DistributedDataParallel, ZeroOptimizer)
from helpers import rank_size


def _model(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    model[0].weight.requires_grad_(False)
    return model


def test_frozen_parameters_take_rank_zeros_values():
    rank, _ = rank_size()
    model = _model(100 + rank)  # every rank its own values
    chorus.torch.DistributedDataParallel(model)
    reference = _model(100)  # what rank 0 made
    for (name, mine), (_, theirs) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(mine, theirs), name


def test_zero_optimizer_refuses_parameters_data_parallel_reduces():
    rank, _ = rank_size()
    model = _model(100)
    ddp = chorus.torch.DistributedDataParallel(model)
    with pytest.raises(chorus.InvalidArgumentError,
                       match=r"parameter param\.1 belongs to a chorus\.torch\."
                             r"DistributedDataParallel; ZeroOptimizer averages the gradients"):
        chorus.torch.ZeroOptimizer(list(model.parameters()), optim="sgd", stage=1, lr=0.1)
    with pytest.raises(chorus.InvalidArgumentError, match="belongs to a chorus.torch.Distributed"):
        chorus.torch.ZeroOptimizer(ddp, optim="sgd", stage=3, lr=0.1)
    del ddp
    gc.collect()
    # Once the DistributedDataParallel is gone, the bare module's parameters are ZeroOptimizer's.
    chorus.torch.ZeroOptimizer(list(model.parameters()), optim="sgd", stage=1, lr=0.1)
