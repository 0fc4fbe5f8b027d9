"""chorus.torch.distribute: wraps a model (and optimizer) as get_config() says."""

import torch

from .. import _chorus
from ._ddp import DistributedDataParallel
from ._zero import ZeroOptimizer

_ZERO_OPTIMIZERS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}


def _zero_kind(optimizer, level):
    """ZeroOptimizer's `optim` for a torch.optim.SGD / Adam / AdamW."""
    kind = _ZERO_OPTIMIZERS.get(type(optimizer))
    if kind is None:
        raise _chorus.UnsupportedError(
            f"distribute: zero_opt_level={level} shards the optimizer, which chorus does for "
            "torch.optim.SGD, Adam and AdamW only, not "
            f"{type(optimizer).__module__}.{type(optimizer).__name__}; set zero_opt_level=0")
    # torch 2.7+'s Adam with decoupled_weight_decay in every group is AdamW.
    if kind == "adam" and all(g.get("decoupled_weight_decay") for g in optimizer.param_groups):
        kind = "adamw"
    return kind


def distribute(model, optimizer=None, bucket_cap_mb=None):
    """Returns (model, optimizer) set up for the process's configuration:

    - get_config().zero_opt_level 1, 2 or 3: the optimizer (torch.optim.SGD, Adam or AdamW) is
      replaced by a ZeroOptimizer of that stage with the same parameter groups and
      hyperparameters (build a learning-rate scheduler on the optimizer returned);
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
        kind = _zero_kind(optimizer, level)
        # Its parameter groups as they are: every hyperparameter, under torch.optim's names.
        groups = [dict(group) for group in optimizer.param_groups]
        return model, ZeroOptimizer(groups, optim=kind, stage=level, module=model,
                                    bucket_cap_mb=bucket_cap_mb)
    if config.enable_data_parallel:
        model = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    return model, optimizer
