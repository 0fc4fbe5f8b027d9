"""Tensor-parallel layers (Megatron-style sharding) built from chorus.torch.nn.functional.

Each layer splits one dimension of its parameters across the ranks of its group (rank_list as in
DESIGN §4; None: the world) and communicates through the differentiable collectives, so autograd
gives every shard its gradient:

    ColumnParallelLinear   weight rows (output features) split; all_gather of the outputs
    RowParallelLinear      weight columns (input features) split; all_reduce of the outputs
    ParallelEmbedding      vocabulary rows split; all_reduce of the looked-up vectors

Group rank g holds part g, in order, so concatenating the shards gives the unsplit parameter;
from_linear / from_embedding build a layer from an unsplit torch module's weights. Construction
asks for the group's communicator, which is collective the first time a rank_list is used: every
rank of the world constructs its layers in the same order. A rank in no group holds the whole
parameter and computes alone.

Gradients follow functional's convention (the gradient of the sum of every rank's loss): a loss
that every rank of the group computes from a replicated output (gather_output=True,
RowParallelLinear, ParallelEmbedding) is divided by the group size on each rank. Replicated
tensors get per-copy shares that add up over the group: RowParallelLinear's bias (sum its .grad
over the group, chorus.allreduce(bias.grad, rank_list=...), before the optimizer step), and the
input of ColumnParallelLinear or of RowParallelLinear(input_is_parallel=False) (the gradient of a
replicated leaf is the sum of its copies' .grad; one made by all_reduce, such as a
RowParallelLinear output, gets that sum from all_reduce's backward). Sharded parameters get exactly
their part of the unsplit gradient. examples/python/tensor_parallel_mlp.py shows a training step.
"""

import math

import torch
import torch.nn.functional as F

import chorus.distributed as dist
from . import functional as cf
from .functional import _error


def _group(rank_list):
    """(rank, size) of the caller in its group of rank_list."""
    comm = dist.get_communicator(rank_list)
    return comm.rank, comm.size


def _split(total, size, what):
    if total % size != 0:
        raise _error(f"{what} ({total}) must be divisible by the tensor-parallel group size "
                     f"({size})")
    return total // size


def _uniform_(tensor, fan_in):
    """torch.nn.Linear's default initialisation for an unsplit fan_in: U(-1/sqrt(fan_in), ..)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    with torch.no_grad():
        tensor.uniform_(-bound, bound)


def _linear_arguments(linear):
    """The constructor arguments that describe the unsplit torch.nn.Linear `linear`."""
    if not isinstance(linear, torch.nn.Linear):
        raise _error(f"from_linear needs a torch.nn.Linear, not {type(linear).__name__}")
    return dict(in_features=linear.in_features, out_features=linear.out_features,
                bias=linear.bias is not None, dtype=linear.weight.dtype,
                device=linear.weight.device)


class _ShardedLinear(torch.nn.Module):
    """What the two linear layers share: torch.nn.Linear's initialisation for the unsplit
    in_features, applied to this rank's shard."""

    def reset_parameters(self):
        _uniform_(self.weight, self.in_features)
        if self.bias is not None:
            _uniform_(self.bias, self.in_features)


class ColumnParallelLinear(_ShardedLinear):
    """y = x W^T + b with W's rows (the output features) split across the group.

    Group rank g holds rows [g*k, (g+1)*k) of W and of b, k = out_features / group size
    (out_features must be divisible by it). forward(x): x is the full input, the same on every
    rank of the group; the local linear gives this rank's k output features, which gather_output
    concatenates along the last dimension (all_gather) into the full output on every rank; with
    gather_output=False each rank returns its k features (the input RowParallelLinear expects).
    """

    def __init__(self, in_features, out_features, bias=True, gather_output=True, rank_list=None,
                 dtype=None, device=None):
        super().__init__()
        self.rank_list = rank_list
        self.group_rank, self.group_size = _group(rank_list)
        self.in_features, self.out_features = in_features, out_features
        self.out_per_rank = _split(out_features, self.group_size, "out_features")
        self.gather_output = gather_output
        kind = dict(dtype=dtype, device=device)
        self.weight = torch.nn.Parameter(torch.empty(self.out_per_rank, in_features, **kind))
        self.bias = torch.nn.Parameter(torch.empty(self.out_per_rank, **kind)) if bias else None
        self.reset_parameters()

    @property
    def shard(self):
        """The slice of the output features this rank holds."""
        return slice(self.group_rank * self.out_per_rank, (self.group_rank + 1) * self.out_per_rank)

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        if self.gather_output:
            y = cf.all_gather(y, dim=-1, rank_list=self.rank_list)
        return y

    @classmethod
    def from_linear(cls, linear, gather_output=True, rank_list=None):
        """This rank's shard of the unsplit torch.nn.Linear `linear` (same on every rank)."""
        layer = cls(gather_output=gather_output, rank_list=rank_list,
                    **_linear_arguments(linear))
        with torch.no_grad():
            layer.weight.copy_(linear.weight[layer.shard])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias[layer.shard])
        return layer

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"({self.out_per_rank} here), bias={self.bias is not None}, "
                f"gather_output={self.gather_output}, group {self.group_rank}/{self.group_size}")


class RowParallelLinear(_ShardedLinear):
    """y = x W^T + b with W's columns (the input features) split across the group.

    Group rank g holds columns [g*k, (g+1)*k) of W, k = in_features / group size (in_features must
    be divisible by it), and the whole bias (replicated: see the module docstring for its
    gradient). forward(x): with input_is_parallel, x holds this rank's k input features (what
    ColumnParallelLinear(gather_output=False) returns); otherwise x is the full input and the layer
    takes its slice. The partial products are summed across the group (all_reduce), then the bias
    is added once, so every rank returns the full output.
    """

    def __init__(self, in_features, out_features, bias=True, input_is_parallel=True,
                 rank_list=None, dtype=None, device=None):
        super().__init__()
        self.rank_list = rank_list
        self.group_rank, self.group_size = _group(rank_list)
        self.in_features, self.out_features = in_features, out_features
        self.in_per_rank = _split(in_features, self.group_size, "in_features")
        self.input_is_parallel = input_is_parallel
        kind = dict(dtype=dtype, device=device)
        self.weight = torch.nn.Parameter(torch.empty(out_features, self.in_per_rank, **kind))
        self.bias = torch.nn.Parameter(torch.empty(out_features, **kind)) if bias else None
        self.reset_parameters()

    @property
    def shard(self):
        """The slice of the input features this rank holds."""
        return slice(self.group_rank * self.in_per_rank, (self.group_rank + 1) * self.in_per_rank)

    def forward(self, x):
        if not self.input_is_parallel:
            if x.shape[-1] != self.in_features:
                raise _error(f"RowParallelLinear(input_is_parallel=False) needs the full input "
                             f"({self.in_features} features), got {x.shape[-1]}")
            x = x[..., self.shard]
        y = cf.all_reduce(F.linear(x, self.weight), "sum", rank_list=self.rank_list)
        return y + self.bias if self.bias is not None else y

    @classmethod
    def from_linear(cls, linear, input_is_parallel=True, rank_list=None):
        """This rank's shard of the unsplit torch.nn.Linear `linear` (same on every rank)."""
        layer = cls(input_is_parallel=input_is_parallel, rank_list=rank_list,
                    **_linear_arguments(linear))
        with torch.no_grad():
            layer.weight.copy_(linear.weight[:, layer.shard])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def extra_repr(self):
        return (f"in_features={self.in_features} ({self.in_per_rank} here), "
                f"out_features={self.out_features}, bias={self.bias is not None}, "
                f"input_is_parallel={self.input_is_parallel}, "
                f"group {self.group_rank}/{self.group_size}")


class ParallelEmbedding(torch.nn.Module):
    """An embedding table whose rows (the vocabulary) are split across the group.

    Group rank g holds rows [start, end) with start = g*N//p and end = (g+1)*N//p (N rows, p ranks,
    N >= p; the parts differ by at most one row). forward(ids): ids (integers in [0, N), the same
    on every rank of the group) are looked up where they fall in this rank's range, the rest give
    zeros, and the vectors are summed across the group (all_reduce): every rank returns the full
    lookup.
    """

    def __init__(self, num_embeddings, embedding_dim, rank_list=None, dtype=None, device=None):
        super().__init__()
        self.rank_list = rank_list
        self.group_rank, self.group_size = _group(rank_list)
        if num_embeddings < self.group_size:
            raise _error(f"ParallelEmbedding needs at least one row per rank: num_embeddings "
                         f"({num_embeddings}) < group size ({self.group_size})")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.start = self.group_rank * num_embeddings // self.group_size
        self.end = (self.group_rank + 1) * num_embeddings // self.group_size
        self.weight = torch.nn.Parameter(
            torch.empty(self.end - self.start, embedding_dim, dtype=dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.normal_()  # torch.nn.Embedding's N(0, 1)

    def forward(self, ids):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_embeddings):
            raise IndexError(f"ParallelEmbedding: ids must lie in [0, {self.num_embeddings}), "
                             f"got [{int(ids.min())}, {int(ids.max())}]")
        mine = (ids >= self.start) & (ids < self.end)
        local = torch.where(mine, ids - self.start, torch.zeros_like(ids))
        vectors = F.embedding(local, self.weight).masked_fill(~mine.unsqueeze(-1), 0.0)
        return cf.all_reduce(vectors, "sum", rank_list=self.rank_list)

    @classmethod
    def from_embedding(cls, embedding, rank_list=None):
        """This rank's rows of the unsplit torch.nn.Embedding `embedding` (same on every rank);
        padding_idx, max_norm and sparse gradients are not supported."""
        if not isinstance(embedding, torch.nn.Embedding):
            raise _error(f"from_embedding needs a torch.nn.Embedding, not "
                         f"{type(embedding).__name__}")
        if embedding.padding_idx is not None or embedding.max_norm is not None or \
                embedding.sparse:
            raise _error("from_embedding: padding_idx, max_norm and sparse are not supported")
        weight = embedding.weight
        layer = cls(embedding.num_embeddings, embedding.embedding_dim, rank_list=rank_list,
                    dtype=weight.dtype, device=weight.device)
        with torch.no_grad():
            layer.weight.copy_(weight[layer.start:layer.end])
        return layer

    def extra_repr(self):
        return (f"{self.num_embeddings}, {self.embedding_dim}, rows [{self.start}, {self.end}) "
                f"here, group {self.group_rank}/{self.group_size}")
