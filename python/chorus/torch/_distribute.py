"""chorus.torch.distribute: wraps a model (and optimizer) as get_config() says."""

import torch

from .. import _chorus
from ._ddp import DistributedDataParallel
from ._zero import ZeroOptimizer

_ZERO_OPTIMIZERS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}


def _zero_arguments(optimizer, level):
    """ZeroOptimizer's arguments for a torch.optim.SGD / Adam / AdamW with one parameter group."""
    kind = _ZERO_OPTIMIZERS.get(type(optimizer))
    if kind is None:
        raise _chorus.UnsupportedError(
            f"distribute: zero_opt_level={level} shards the optimizer, which chorus does for "
            "torch.optim.SGD, Adam and AdamW only, not "
            f"{type(optimizer).__module__}.{type(optimizer).__name__}; set zero_opt_level=0")
    if len(optimizer.param_groups) != 1:
        raise _chorus.UnsupportedError(
            f"distribute: the optimizer has {len(optimizer.param_groups)} parameter groups; "
            "ZeRO supports one")
    group = optimizer.param_groups[0]
    for flag in ("amsgrad", "maximize", "differentiable"):
        if group.get(flag):
            raise _chorus.UnsupportedError(f"distribute: ZeRO does not support {flag}=True")
    arguments = {"optim": kind, "lr": group["lr"], "weight_decay": group["weight_decay"]}
    if kind == "sgd":
        arguments.update(momentum=group["momentum"], dampening=group["dampening"],
                         nesterov=group["nesterov"])
    else:
        arguments.update(betas=group["betas"], eps=group["eps"])
    return arguments


def distribute(model, optimizer=None, bucket_cap_mb=None):
    """Returns (model, optimizer) set up for the process's configuration:

    - get_config().zero_opt_level 1, 2 or 3: the optimizer (torch.optim.SGD, Adam or AdamW, one
      parameter group) is replaced by a ZeroOptimizer of that stage with the same hyperparameters;
      the model is returned as it is (stage 3 hooks it), since ZeRO averages the gradients itself.
      Any other optimizer is an UnsupportedError.
    - otherwise, get_config().enable_data_parallel: the model becomes
      DistributedDataParallel(model) (the optimizer, which holds the same parameter objects, works
      unchanged);
    - otherwise both come back as they are.
    """
    config = _chorus.config()
    level = config.zero_opt_level
    if level not in (0, 1, 2, 3):
        raise _chorus.InvalidArgumentError(
            f"distribute: zero_opt_level must be 0, 1, 2 or 3, not {level}")
    if level > 0:
        if optimizer is None:
            raise _chorus.InvalidArgumentError(
                f"distribute: zero_opt_level={level} needs the optimizer to shard")
        arguments = _zero_arguments(optimizer, level)
        return model, ZeroOptimizer(model, stage=level, bucket_cap_mb=bucket_cap_mb, **arguments)
    if config.enable_data_parallel:
        model = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    return model, optimizer
