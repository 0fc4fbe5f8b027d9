"""The flat-shard optimizers under ZeRO (src/parallel/flat_optimizer.h) against torch.optim: the
same hyperparameters, parameters and gradients, ten steps, and after every step the parameters
agree within 1e-6 relative (max |chorus - torch| / max |torch|). No communication."""

import pytest
import torch
import torch.utils.dlpack

from chorus import _chorus

NUMEL = 1000
STEPS = 10

CASES = {
    "sgd": ("sgd", torch.optim.SGD, dict(lr=0.1)),
    "sgd-momentum-decay": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    "sgd-dampening": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.3)),
    "sgd-nesterov": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True,
                                                  weight_decay=1e-3)),
    "adam": ("adam", torch.optim.Adam, dict(lr=1e-2)),
    "adam-decay": ("adam", torch.optim.Adam, dict(lr=1e-3, betas=(0.8, 0.99), eps=1e-6,
                                                  weight_decay=0.1)),
    "adamw": ("adamw", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
}


def chorus_options(kind, options):
    out = {key: value for key, value in options.items() if key != "betas"}
    if "betas" in options:
        out["beta1"], out["beta2"] = options["betas"]
    if kind == "adamw":
        out.setdefault("weight_decay", 0.01)  # torch.optim.AdamW's default
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch_optim_step_by_step(case):
    kind, torch_class, options = CASES[case]
    generator = torch.Generator().manual_seed(7)
    start = torch.randn(NUMEL, generator=generator)
    reference = start.clone().requires_grad_(True)
    torch_optimizer = torch_class([reference], **options)
    mine = start.clone()
    flat = _chorus.FlatOptimizer(kind, NUMEL, **chorus_options(kind, options))
    for step in range(STEPS):
        grad = torch.randn(NUMEL, generator=generator) * (1 + step)
        reference.grad = grad.clone()
        torch_optimizer.step()
        flat.step(torch.utils.dlpack.to_dlpack(mine), torch.utils.dlpack.to_dlpack(grad))
        expected = reference.detach()
        error = float((mine - expected).abs().max() / expected.abs().max())
        assert error <= 1e-6, f"{case}, step {step + 1}: relative error {error:.3g}"
    assert flat.steps == STEPS


def test_state_size_and_bad_arguments():
    assert _chorus.FlatOptimizer("adam", 10, lr=1e-3).state_bytes == 80   # m and v
    assert _chorus.FlatOptimizer("sgd", 10, lr=0.1, momentum=0.9).state_bytes == 40
    assert _chorus.FlatOptimizer("sgd", 10, lr=0.1).state_bytes == 0
    with pytest.raises(_chorus.InvalidArgumentError, match="beta1"):
        _chorus.FlatOptimizer("adam", 10, lr=1e-3, beta1=1.0)
    with pytest.raises(_chorus.InvalidArgumentError, match="nesterov"):
        _chorus.FlatOptimizer("sgd", 10, lr=0.1, nesterov=True)
    with pytest.raises(_chorus.InvalidArgumentError, match="lamb"):
        _chorus.FlatOptimizer("lamb", 10, lr=0.1)
    flat = _chorus.FlatOptimizer("sgd", 10, lr=0.1)
    with pytest.raises(_chorus.InvalidArgumentError, match="float32 of 10"):
        flat.step(torch.utils.dlpack.to_dlpack(torch.zeros(9)),
                  torch.utils.dlpack.to_dlpack(torch.zeros(10)))
