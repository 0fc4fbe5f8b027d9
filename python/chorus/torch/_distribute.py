"""chorus.torch.distribute: wraps a model (and optimizer) as get_config() says."""

from .. import _chorus
from ._ddp import DistributedDataParallel


def distribute(model, optimizer=None, bucket_cap_mb=None):
    """Returns (model, optimizer) wrapped for the process's configuration:

    - get_config().enable_data_parallel: the model becomes DistributedDataParallel(model) (the
      optimizer, which holds the same parameter objects, works unchanged);
    - otherwise both come back as they are.

    zero_opt_level 1..3 (ZeRO) is not built yet: UnsupportedError.
    """
    config = _chorus.config()
    if config.zero_opt_level != 0:
        raise _chorus.UnsupportedError(
            f"distribute: zero_opt_level={config.zero_opt_level} (ZeRO) is not supported yet; "
            "set it to 0")
    if config.enable_data_parallel:
        model = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    return model, optimizer
