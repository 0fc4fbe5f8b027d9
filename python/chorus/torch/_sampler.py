"""chorus.torch.DistributedSampler: torch's DistributedSampler, with this rank and world size.

torch.utils.data.distributed.DistributedSampler does the work (each rank takes every
num_replicas-th index of one shuffled permutation, padded so all ranks get as many); it asks
torch.distributed for the rank and world size unless they are given, so this subclass gives it
chorus's. Call set_epoch(epoch) at the start of every epoch to reshuffle.
"""

import torch.utils.data.distributed as _torch_distributed

from .. import _groups


class DistributedSampler(_torch_distributed.DistributedSampler):
    """Splits `dataset` across ranks: rank r gets len(dataset) / size indices (rounded up, the
    first indices repeated to pad, or rounded down with drop_last=True). num_replicas and rank
    default to the world communicator's size and rank."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            world = _groups.get(None)
            num_replicas = world.size if num_replicas is None else num_replicas
            rank = world.rank if rank is None else rank
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last)
