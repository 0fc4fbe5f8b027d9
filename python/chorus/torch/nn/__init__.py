"""chorus.torch.nn: tensor-parallel layers and differentiable collectives for PyTorch.

    import chorus.torch.nn as cnn
    import chorus.torch.nn.functional as cf
    fc1 = cnn.ColumnParallelLinear.from_linear(full.fc1, gather_output=False, rank_list=tp)
    fc2 = cnn.RowParallelLinear.from_linear(full.fc2, input_is_parallel=True, rank_list=tp)
    y = fc2(torch.nn.functional.gelu(fc1(x)))        # equals full.fc2(gelu(full.fc1(x)))

functional holds the collectives whose backward is the adjoint collective (all_reduce,
all_gather, reduce_scatter, broadcast, all_to_all, send, recv) and states the gradient convention
that the layers (_layers.py: ColumnParallelLinear, RowParallelLinear, ParallelEmbedding) follow:
the gradient each rank gets is that of the sum of every rank's loss.
"""

from . import functional
from ._layers import ColumnParallelLinear, ParallelEmbedding, RowParallelLinear

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "ParallelEmbedding", "functional"]
