"""chorus.torch: training with PyTorch on top of chorus's collectives (DESIGN §7).

    import chorus.torch
    model = chorus.torch.DistributedDataParallel(model)      # gradients averaged during backward
    sampler = chorus.torch.DistributedSampler(dataset)       # each rank its share of the data
    model, optimizer = chorus.torch.distribute(model, optimizer)   # as get_config() says
"""

from ._ddp import DistributedDataParallel
from ._distribute import distribute
from ._sampler import DistributedSampler

__all__ = ["DistributedDataParallel", "DistributedSampler", "distribute"]
