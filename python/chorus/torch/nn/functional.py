"""chorus.torch.nn.functional: collectives that autograd can differentiate (DESIGN §4).

    import chorus.torch.nn.functional as cf
    y = cf.all_gather(x, dim=1)              # backward: reduce_scatter (sum) of the gradient
    y = cf.all_reduce(x, rank_list=[[0, 1], [2, 3]])

Each function is a torch.autograd.Function whose forward is the chorus operation of the same name
(chorus.allreduce, allgather, reduce_scatter, broadcast, all_to_all, send, recv) and whose backward
is its adjoint, itself a chorus operation:

    forward                            backward (g: the gradient of the output)
    all_reduce(x, "sum" | "avg")       all_reduce(g, same op)
    all_gather(x, dim)                 reduce_scatter(g, dim, "sum")
    reduce_scatter(x, dim, op)         all_gather(g, dim) (divided by the group size for "avg")
    broadcast(x, src)                  reduce(g, src, "sum") on src; zeros elsewhere
    all_to_all(x, split_dim, cat_dim)  all_to_all(g, split_dim=cat_dim, concat_dim=split_dim)
    all_to_all(x, splits=s) -> y, r    all_to_all(g, splits=r, recv_splits=s)
    send(x, dst) -> token              recv of x's gradient from dst
    recv(shape, src) -> y              send of g to src

Gradient convention. The adjoint of a collective gives every rank the gradient of the SUM of all
ranks' losses with respect to its own input. When each rank of a group computes the same loss from
a replicated output (after all_reduce or all_gather), that sum counts the loss group-size times:
divide each rank's loss by the group size to get the gradient of one loss. A tensor that is
replicated on several ranks (an input every rank holds, a parameter copied on each) is several
variables: each copy gets its own share, and the copies' gradients add up to the gradient of the
one tensor (chorus.allreduce(t.grad, rank_list=...) when it is a leaf; a replicated tensor made
by all_reduce gets the sum from all_reduce's backward). chorus.torch.nn's layers follow this.

Groups and timing. rank_list is as in DESIGN §4: lists of world ranks; ranks in no group run
standalone (the op is the identity there, and so is its backward); src, dst are world ranks of the
caller's group. Every rank of a group must call each function in the same order, and each must
run its backward: a rank whose loss does not use the output of a collective never runs that
backward, and its peers wait in theirs until chorus's timeout (chorus.TimeoutError). The autograd
engine orders the backward nodes of one graph deterministically, so ranks that build the same
graph run the adjoint collectives in the same order. Each call blocks like the chorus operation it
makes (the GIL released while it waits); the functions hold no state and may be called from any
thread that may call chorus.

Point to point. send(x, dst, tag) returns a zero-element token connected to x. The sender must
backpropagate through the token (`(loss + token.sum()).backward()`, or `token.sum().backward()`
on a stage with no loss of its own); the token's backward receives x's gradient from dst. On dst,
recv(...)'s output requires grad, and its backward sends the gradient back to src. The gradient
travels in the reverse direction with tag `tag + GRAD_TAG_OFFSET` (2**30), so it can never be taken
for a user message of the same pair: user tags of these two functions must be below
GRAD_TAG_OFFSET (a ValueError otherwise), and other chorus.send/recv traffic between the same pair
must keep below it too. Under MPI both ranges are as wide as half the MPI tags the library has
(tags below 15871 where its MPI_TAG_UB is 32767, the least MPI allows). If x does not require grad (or is not floating point), the pair carries no
gradient: pass requires_grad=False to recv on the other side, or a gradient is sent that nobody
receives. The receiver's loss must use the output of recv, and the sender must backpropagate
through the token, once per send, or the pair's gradients are left unmatched.

Errors: an op that has no gradient ("prod", "min", "max", bitwise) or a dimension that does not
split evenly is a chorus.InvalidArgumentError (a ValueError) raised before anything is sent, on
every rank alike when the ranks call alike; chorus's own errors pass through unchanged.
"""

import torch

import chorus
import chorus.distributed as dist

GRAD_TAG_OFFSET = 1 << 30  # gradient messages of send/recv use tag + this (see the docstring)
DIFFERENTIABLE_OPS = ("sum", "avg")

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send",
           "recv", "GRAD_TAG_OFFSET", "DIFFERENTIABLE_OPS"]


def _error(message):
    return chorus.InvalidArgumentError(
        f"rank {dist.get_config().rank} (this process): {message}")


def _check_tensor(x, what):
    if not isinstance(x, torch.Tensor):
        raise _error(f"{what} needs a torch.Tensor, not {type(x).__name__}")


def _check_op(op, what):
    if op in DIFFERENTIABLE_OPS:
        return
    if op in chorus.REDUCE_OPS:
        raise _error(f"{what}: op {op!r} is not differentiable; use 'sum' or 'avg', or call "
                     f"chorus's non-differentiable operation on a detached tensor")
    raise _error(f"{what}: unknown op {op!r}; the differentiable ones are 'sum' and 'avg'")


def _dim(x, dim, what):
    """`dim` of x as a non-negative int (negative counts from the end)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise _error(f"{what} must be an int, not {type(dim).__name__}")
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise _error(f"{what}={dim} is out of range for a tensor of {x.dim()} dimensions")
    return dim % x.dim()


def _check_split(x, dim, size, what):
    if x.shape[dim] % size != 0:
        raise _error(f"{what} needs dimension {dim} ({x.shape[dim]}) to be divisible by the "
                     f"group size ({size})")


def _tag(tag):
    if isinstance(tag, bool) or not isinstance(tag, int) or not 0 <= tag < GRAD_TAG_OFFSET:
        raise _error(f"tag must be an int in [0, {GRAD_TAG_OFFSET}) (tags from GRAD_TAG_OFFSET "
                     f"up carry the gradients), not {tag!r}")
    return tag


def _moved(t, dim):
    """t with dimension `dim` first, contiguous (the layout reduce_scatter splits)."""
    return t.movedim(dim, 0).contiguous() if dim else t.contiguous()


def _restored(t, dim):
    return t.movedim(0, dim).contiguous() if dim else t


# --------------------------------------------------------------------------- reductions


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, op, rank_list):
        ctx.op, ctx.rank_list = op, rank_list
        return chorus.allreduce(x, op, rank_list=rank_list)

    @staticmethod
    def backward(ctx, grad):
        # y = op_i x_i on every rank j: dL/dx_i = sum_j g_j ("sum"), (1/n) sum_j g_j ("avg").
        return chorus.allreduce(grad.contiguous(), ctx.op, rank_list=ctx.rank_list), None, None


def all_reduce(x, op="sum", rank_list=None):
    """Reduces x across the group (op "sum" or "avg"); differentiable, backward: all_reduce of
    the gradient with the same op."""
    _check_tensor(x, "all_reduce")
    _check_op(op, "all_reduce")
    return _AllReduce.apply(x, op, rank_list)


class _ReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, op, rank_list):
        ctx.dim, ctx.op, ctx.rank_list = dim, op, rank_list
        part = chorus.reduce_scatter(_moved(x, dim), op, rank_list=rank_list)
        return _restored(part, dim)

    @staticmethod
    def backward(ctx, grad):
        # y_r = op_i chunk r of x_i: dL/d(chunk r of x_i) = g_r (/ n for "avg").
        full = chorus.allgather(grad.contiguous(), axis=ctx.dim, rank_list=ctx.rank_list)
        if ctx.op == "avg":
            full = full / dist.get_communicator(ctx.rank_list).size
        return full, None, None, None


def reduce_scatter(x, dim=0, op="sum", rank_list=None):
    """Reduces x across the group (op "sum" or "avg") and returns this rank's chunk along `dim`
    (x.shape[dim] must be divisible by the group size); backward: all_gather of the gradient."""
    _check_tensor(x, "reduce_scatter")
    _check_op(op, "reduce_scatter")
    dim = _dim(x, dim, "dim")
    _check_split(x, dim, dist.get_communicator(rank_list).size, "reduce_scatter")
    return _ReduceScatter.apply(x, dim, op, rank_list)


# --------------------------------------------------------------------------- data movement


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, rank_list):
        ctx.dim, ctx.rank_list = dim, rank_list
        return chorus.allgather(x, axis=dim, rank_list=rank_list)

    @staticmethod
    def backward(ctx, grad):
        # y = cat_i x_i on every rank j: dL/dx_i = sum_j (chunk i of g_j).
        part = chorus.reduce_scatter(_moved(grad, ctx.dim), "sum", rank_list=ctx.rank_list)
        return _restored(part, ctx.dim), None, None


def all_gather(x, dim=0, rank_list=None):
    """Concatenates every rank's x along `dim` in group-rank order; backward: reduce_scatter
    (sum) of the gradient along `dim`."""
    _check_tensor(x, "all_gather")
    return _AllGather.apply(x, _dim(x, dim, "dim"), rank_list)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, src, rank_list):
        ctx.src, ctx.rank_list = src, rank_list
        return chorus.broadcast(x, root=src, rank_list=rank_list)

    @staticmethod
    def backward(ctx, grad):
        # y_j = x_src on every rank j: dL/dx_src = sum_j g_j; the others' x is not used.
        total = chorus.reduce(grad.contiguous(), root=ctx.src, op="sum", rank_list=ctx.rank_list)
        if dist.get_config().rank != ctx.src:
            total = torch.zeros_like(grad)
        return total, None, None


def broadcast(x, src, rank_list=None):
    """Returns src's x on every rank of the group (src: a world rank of the caller's group; every
    rank passes an x of the same shape and dtype); backward: reduce (sum) of the gradient to src,
    whose x gets it; the other ranks' x get zeros."""
    _check_tensor(x, "broadcast")
    return _Broadcast.apply(x, src, rank_list)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, split_dim, concat_dim, rank_list):
        ctx.split_dim, ctx.concat_dim, ctx.rank_list = split_dim, concat_dim, rank_list
        return chorus.all_to_all(x, split_axis=split_dim, concat_axis=concat_dim,
                                 rank_list=rank_list)

    @staticmethod
    def backward(ctx, grad):
        # Chunk i (along concat_dim) of y_j is chunk j (along split_dim) of x_i: the inverse
        # exchange takes each gradient chunk back where it came from.
        back = chorus.all_to_all(grad.contiguous(), split_axis=ctx.concat_dim,
                                 concat_axis=ctx.split_dim, rank_list=ctx.rank_list)
        return back, None, None, None


class _AllToAllRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, splits, rank_list, received):
        y, arrived = chorus.all_to_all(x, splits=splits, rank_list=rank_list)
        ctx.splits, ctx.arrived, ctx.rank_list = list(splits), arrived, rank_list
        received.extend(arrived)
        return y

    @staticmethod
    def backward(ctx, grad):
        # The rows' gradients go back the way the rows came: splits and received swap, and each
        # rank checks that what arrives is what it sent.
        back, _ = chorus.all_to_all(grad.contiguous(), splits=ctx.arrived,
                                    recv_splits=ctx.splits, rank_list=ctx.rank_list)
        return back, None, None, None


def all_to_all(x, split_dim=0, concat_dim=0, rank_list=None, splits=None):
    """Splits x along split_dim into group-size chunks, sends chunk i to group rank i, and
    concatenates what arrives along concat_dim; backward: the inverse all_to_all.

    splits (a row count per group rank, as chorus.all_to_all's): rows splits[i] of x go to group
    rank i, and the result is (the rows received, how many came from each rank): a mixture of
    experts' dispatch; the backward sends each row's gradient back to the rank it came from.
    Both dims stay 0."""
    _check_tensor(x, "all_to_all")
    if splits is not None:
        if split_dim != 0 or concat_dim != 0:
            raise chorus.InvalidArgumentError(
                "all_to_all with splits sends rows: split_dim and concat_dim must be 0")
        received = []
        y = _AllToAllRows.apply(x, splits, rank_list, received)
        return y, received
    split_dim = _dim(x, split_dim, "split_dim")
    concat_dim = _dim(x, concat_dim, "concat_dim")
    _check_split(x, split_dim, dist.get_communicator(rank_list).size, "all_to_all")
    return _AllToAll.apply(x, split_dim, concat_dim, rank_list)


# --------------------------------------------------------------------------- point to point


class _Send(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dst, tag, rank_list):
        ctx.dst, ctx.tag, ctx.rank_list = dst, tag, rank_list
        ctx.shape, ctx.dtype, ctx.device = tuple(x.shape), x.dtype, x.device
        chorus.send(x, dst, tag=tag, rank_list=rank_list)
        return x.new_empty((0,))

    @staticmethod
    def backward(ctx, _token_grad):
        grad = torch.empty(ctx.shape, dtype=ctx.dtype, device=ctx.device)
        chorus.recv(ctx.dst, out=grad, tag=ctx.tag + GRAD_TAG_OFFSET, rank_list=ctx.rank_list)
        return grad, None, None, None


def send(x, dst, tag=0, rank_list=None):
    """Sends x to world rank dst (matched by recv(..., src=this rank, tag=tag) there) and returns
    a zero-element token; backpropagating through the token receives x's gradient from dst (see
    the module docstring: the token must be part of what this rank backpropagates)."""
    _check_tensor(x, "send")
    return _Send.apply(x, dst, _tag(tag), rank_list)


class _Recv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, _anchor, empty, src, tag, rank_list):
        ctx.src, ctx.tag, ctx.rank_list = src, tag, rank_list
        return chorus.recv(src, out=empty(), tag=tag, rank_list=rank_list)

    @staticmethod
    def backward(ctx, grad):
        chorus.send(grad.contiguous(), ctx.src, tag=ctx.tag + GRAD_TAG_OFFSET,
                    rank_list=ctx.rank_list)
        return None, None, None, None, None


def recv(shape_or_like, src, tag=0, rank_list=None, dtype=None, requires_grad=True, device=None):
    """Receives a tensor from world rank src (sent with send(..., dst=this rank, tag=tag)).

    shape_or_like: a shape (int or sequence) or a tensor whose shape (and, unless given, dtype and
    device) the message has; dtype: a torch dtype or its name (default: like's dtype, else torch's
    default dtype); device: default like's device, else the CPU. With requires_grad (and a
    floating dtype) the result requires grad, and its backward sends the gradient to src, whose
    send token receives it.
    """
    if isinstance(shape_or_like, torch.Tensor):
        shape = tuple(shape_or_like.shape)
        dtype = shape_or_like.dtype if dtype is None else dtype
        device = shape_or_like.device if device is None else device
    else:
        shape = (shape_or_like,) if isinstance(shape_or_like, int) else tuple(shape_or_like)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise _error(f"recv's dtype must be a torch dtype or its name, not {dtype!r}")
    tag = _tag(tag)

    def empty():
        return torch.empty(shape, dtype=dtype, device=device)

    if not requires_grad or not (dtype.is_floating_point or dtype.is_complex):
        return chorus.recv(src, out=empty(), tag=tag, rank_list=rank_list)
    anchor = torch.empty(0, requires_grad=True)  # makes the result part of the graph
    return _Recv.apply(anchor, empty, src, tag, rank_list)
