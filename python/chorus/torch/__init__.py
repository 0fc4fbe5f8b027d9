"""chorus.torch: training with PyTorch on top of chorus's collectives (DESIGN §7).

    import chorus.torch
    model = chorus.torch.DistributedDataParallel(model)      # gradients averaged during backward
    sampler = chorus.torch.DistributedSampler(dataset)       # each rank its share of the data
    optimizer = chorus.torch.ZeroOptimizer(model, optim="adam", stage=2)   # ZeRO
    model, optimizer = chorus.torch.distribute(model, optimizer)   # as get_config() says

Importing it also registers the "chorus" torch.distributed backend (_backend.py), so that an
unchanged torch program runs on chorus with torch.distributed.init_process_group("chorus").
"""

from ._ddp import DistributedDataParallel
from ._distribute import distribute
from ._sampler import DistributedSampler
from ._zero import ZeroOptimizer
from ._zero_stage3 import register_external_parameter
from ._checkpoint import consolidate as consolidate_checkpoint, load_state_dict
from ._zero_memory import predict as zero_memory_prediction
from . import _backend

_backend.register()

__all__ = ["DistributedDataParallel", "DistributedSampler", "ZeroOptimizer", "distribute",
           "consolidate_checkpoint", "load_state_dict", "zero_memory_prediction",
           "register_external_parameter"]
