"""ZeroOptimizer.clip_grad_norm_: torch.nn.utils.clip_grad_norm_'s rule on gradients that no rank
holds whole.

After backward each rank holds the averaged gradient of its own shard of every unit (the engine's
owned_gradients, padding left out through owned_pieces), and together the shards cover every
gradient element once. So the whole model's p-norm is (sum over ranks of each shard's sum of
|g|^p)^(1/p), or for p = inf the largest shard maximum: one allreduce of one float64 number. Every
rank then scales by the same factor, min(1, max_norm / (norm + 1e-6)): stage 1 every gradient it
holds whole (.grad stays what torch's function would leave), stages 2 and 3 its shard. Nothing
waits on the host (on a GPU the factor stays on the device), unless error_if_nonfinite asks.
A NaN in the inf norm's maximum is taken as inf (where torch's would be NaN): NCCL's max may
return the other operand, which would hide it.
"""

import math

import torch

from .. import _chorus, _ops
from ._zero_stage3 import as_torch

_WHO = "ZeroOptimizer.clip_grad_norm_"


def owned_runs(engine):
    """(unit, start, numel) of each run of parameter elements in this rank's shards."""
    runs = []
    for parameter, _, numel, shard_offset in engine.owned_pieces(True):
        unit = engine.unit_of(parameter)
        runs.append((unit, shard_offset - engine.shard_offset(unit), numel))
    return runs


def _local_part(gradients, runs, norm_type, device):
    """This rank's share of the norm: the sum of |g|^p over its runs, or their largest |g|."""
    part = torch.zeros((), dtype=torch.float64, device=device)
    for unit, start, numel in runs:
        run = gradients[unit][start:start + numel]
        if math.isinf(norm_type):
            part = torch.maximum(part, run.abs().max().to(torch.float64))
        else:
            part = part + torch.linalg.vector_norm(run, norm_type,
                                                   dtype=torch.float64) ** norm_type
    return part


def clip_grad_norm(engine, runs, params, max_norm, norm_type, error_if_nonfinite):
    """The total norm of the averaged gradients (float32, on the parameters' device); scales them
    by min(1, max_norm / (norm + 1e-6)). Collective."""
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not norm_type > 0:
        raise _chorus.InvalidArgumentError(
            f"{_WHO}: norm_type must be positive or inf, not {norm_type}")
    device = params[0].device
    gradients = [as_torch(engine.owned_gradients(u)) for u in range(engine.num_units)]
    part = _local_part(gradients, runs, norm_type, device).reshape(1)
    infinite = math.isinf(norm_type)
    if infinite:  # NCCL's max may drop a NaN operand; an infinite one it keeps
        part = torch.nan_to_num(part, nan=math.inf)
    total = _ops.allreduce(part, op="max" if infinite else "sum")[0]
    if not infinite:
        total = total ** (1.0 / norm_type)
    if error_if_nonfinite and not bool(torch.isfinite(total)):
        raise RuntimeError(
            f"{_WHO}: the total norm of order {norm_type} of the gradients is non-finite, so it "
            "cannot be clipped. To disable this error and scale the gradients by the non-finite "
            "norm anyway, set error_if_nonfinite=False")
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    if engine.stage == 1:  # whole gradients: scale all of them, as torch's function would
        scaled = [as_torch(engine.gradient(i)) for i in range(len(params))]
    else:
        scaled = gradients
    for gradient in scaled:
        gradient.mul_(factor)
    return total.to(torch.float32)
