"""PowerSGD: a DistributedDataParallel communication hook that sends low-rank gradient factors.

    state = PowerSGDState(matrix_approximation_rank=1, start_powerSGD_iter=10)
    model.register_comm_hook(state, powerSGD_hook)

Written from Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization" (NeurIPS 2019), Algorithm 1 (rank-r compression with one step of power
iteration) inside Algorithm 2 (error feedback). For each gradient G of a bucket that is a matrix
(a tensor of ndim >= 2 is read as shape[0] x prod(shape[1:])) and worth compressing:

    M = G + e                  e: this rank's error memory of the tensor (zero at first)
    P = M Q                    Q: m x r, warm-started from the previous iteration
    P = allreduce_mean(P)
    P = orthogonalize(P)       Gram-Schmidt, column by column
    Q = M^T P
    Q = allreduce_mean(Q)
    G' = P Q^T                 the gradient DDP receives, identical on every rank of the group
    e = M - G'                 with use_error_feedback

Everything else (vectors, and matrices where r (n + m) is not min_compression_rate times smaller
than n m, as in the paper's practical implementation) is averaged exactly; its error is zero.

Cost per bucket: two allreduces (avg) in every iteration from start_powerSGD_iter on. The first
carries the P of every compressed matrix of the bucket and the uncompressed tensors, as one fused
list message; the second the Qs. An n x m matrix sends r (n + m) elements instead of n m. Before
start_powerSGD_iter a bucket is one plain average allreduce. Compute: two n x m x r products, an
n x r x r Gram-Schmidt, and one n x m x r product for G', per matrix.

Error memory. Algorithm 2 memorizes e_w = M_w - P Q_w^T with this rank's Q before its allreduce;
here, as the hook contract asks, e_w = M_w - P Q^T with the averaged Q. The two differ on each rank
by P P^T (M_w - mean(M)), which sums to zero over the group; since P and Q are computed from the
group's mean of M only, the gradients the hook returns are the same under either rule.

Determinism. Every rank of a group must call the hook for the same buckets, in the same order,
with the same gradient shapes (DDP does): then the collectives line up, and every rank draws the
same Qs from its torch.Generator seeded with random_seed (standard normal, drawn in float32, in the
order the hook needs them: bucket by bucket, tensors in bucket order, whenever a tensor has no warm
Q). A bucket whose gradient shapes change (DDP rebuilds its buckets after the first iteration)
restarts its memory: zero error, fresh Qs.

Precision and limits. float32 and float64 buckets are computed in their dtype; float16 and
bfloat16 buckets in float32 (their P and Q travel as float32), the result is cast back. A column of
P whose norm plus orthogonalization_epsilon is zero (a gradient that is zero on every rank) stays
zero rather than becoming NaN, and a warm Q with a zero column (which would keep that column zero
in every later iteration) is drawn again at the next iteration; that test reads the averaged Q,
which every rank of the group receives alike. Gram-Schmidt runs once: when the group's mean of M
has rank below r, the last columns of P are rounding noise, not orthogonal to the others, and the
approximation is off until error feedback catches up (a positive orthogonalization_epsilon such as
1e-8, or a smaller r, avoids it). The hook communicates before it returns (its future is already
complete), so a bucket's compression does not overlap the rest of backward.
"""

import torch

from .. import _chorus, _ops


class PowerSGDState:
    """What powerSGD_hook keeps between calls, for one DistributedDataParallel model.

    rank_list: the chorus group to average over (a list of world ranks, or a list of lists as in
        chorus.allreduce; None: the world).
    matrix_approximation_rank: r, the rank of the approximation (clipped to min(n, m) per matrix).
    start_powerSGD_iter: iterations before it average the buckets exactly (plain allreduce).
    min_compression_rate: a matrix is compressed only if n m >= min_compression_rate r (n + m).
    use_error_feedback, warm_start: Algorithm 2's error memory; reuse Q across iterations.
    orthogonalization_epsilon: added to each column's norm before dividing by it.
    random_seed: seed of the generator the Qs are drawn from (standard normal, float32).

    Attributes the hook maintains: iteration (incremented after the bucket whose is_last() is
    true), error_dict (bucket index -> flat error memory, the bucket's length, zero where a tensor
    is not compressed), q_memory_dict (bucket index -> {position in bucket -> averaged Q, m x r,
    or None where it had a zero column and is drawn again}; empty without warm_start).
    Not thread-safe: one model's hooks run one at a time.
    """

    def __init__(self, rank_list=None, matrix_approximation_rank=1, start_powerSGD_iter=10,
                 min_compression_rate=2, use_error_feedback=True, warm_start=True,
                 orthogonalization_epsilon=0, random_seed=0):
        self.rank_list = rank_list
        self.matrix_approximation_rank = _count(matrix_approximation_rank,
                                                "matrix_approximation_rank", 1)
        self.start_powerSGD_iter = _count(start_powerSGD_iter, "start_powerSGD_iter", 0)
        self.min_compression_rate = _non_negative(min_compression_rate, "min_compression_rate")
        self.use_error_feedback = bool(use_error_feedback)
        self.warm_start = bool(warm_start)
        self.orthogonalization_epsilon = _non_negative(orthogonalization_epsilon,
                                                       "orthogonalization_epsilon")
        self.random_seed = _count(random_seed, "random_seed", 0)
        self.iteration = 0
        self.error_dict = {}
        self.q_memory_dict = {}
        self._layouts = {}  # bucket index -> the gradient shapes its memory was made for
        self._generator = torch.Generator().manual_seed(self.random_seed)

    def __repr__(self):
        return (f"PowerSGDState(rank={self.matrix_approximation_rank}, iteration={self.iteration}, "
                f"start_powerSGD_iter={self.start_powerSGD_iter})")

    def _advance(self, bucket):
        if bucket.is_last():
            self.iteration += 1

    def _memory_for(self, index, shapes, numel, dtype, device):
        """The error memory (flat, None without error feedback) and the Q dict of bucket `index`,
        made afresh when the bucket's gradient shapes are new."""
        if self._layouts.get(index) != shapes:
            self._layouts[index] = shapes
            self.q_memory_dict[index] = {}
            self.error_dict.pop(index, None)
            if self.use_error_feedback:
                self.error_dict[index] = torch.zeros(numel, dtype=dtype, device=device)
        return self.error_dict.get(index), self.q_memory_dict[index]

    def _initial_q(self, qs, position, cols, rank, dtype, device):
        """Q of the tensor at `position`: last iteration's (warm start) or a fresh draw."""
        q = qs.get(position)
        if q is None or not self.warm_start:
            q = torch.randn((cols, rank), generator=self._generator, dtype=torch.float32)
            q = q.to(dtype=dtype, device=device)
        return q


def _count(value, name, smallest):
    if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
        raise _chorus.InvalidArgumentError(
            f"PowerSGDState: {name} must be an int >= {smallest}, not {value!r}")
    return value


def _non_negative(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise _chorus.InvalidArgumentError(
            f"PowerSGDState: {name} must be a number >= 0, not {value!r}")
    return value


def _completed(tensor):
    future = torch.futures.Future()
    future.set_result(tensor)
    return future


def _compute_dtype(dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if dtype in (torch.float32, torch.float64):
        return dtype
    raise _chorus.InvalidArgumentError(
        f"powerSGD_hook: bucket dtype {dtype}; gradients must be floating point")


def _plan(state, gradients, buffer):
    """Per gradient, in bucket order: (offset, numel, matrix shape (n, m, r) or None). The offset is
    where the gradient's view lies in the bucket's buffer (a bucket may pad between gradients, as
    chorus's DistributedDataParallel aligns each one); gradients that are not views into it are
    taken as packed one after another."""
    plan, offset = [], 0
    base, end = buffer.data_ptr(), buffer.data_ptr() + buffer.numel() * buffer.element_size()
    for grad in gradients:
        numel = grad.numel()
        if base <= grad.data_ptr() < end:
            offset = (grad.data_ptr() - base) // buffer.element_size()
        shape = None
        if grad.dim() >= 2 and numel > 0:
            rows = grad.shape[0]
            cols = numel // rows
            rank = min(state.matrix_approximation_rank, rows, cols)
            if rows * cols >= state.min_compression_rate * rank * (rows + cols):
                shape = (rows, cols, rank)
        plan.append((offset, numel, shape))
        offset += numel
    return plan


def _orthogonalize(p, epsilon):
    """Gram-Schmidt on the columns of `p`, in place: each column, once made orthogonal to the
    ones before it, is divided by its norm plus epsilon (a zero column stays zero)."""
    tiny = torch.finfo(p.dtype).tiny
    for i in range(p.shape[1]):
        column = p[:, i:i + 1]
        column.div_(torch.clamp(torch.linalg.vector_norm(column) + epsilon, min=tiny))
        if i + 1 < p.shape[1]:
            rest = p[:, i + 1:]
            rest.sub_(column @ (column.t() @ rest))
    return p


def _average(state, tensors):
    """The group's mean of each of `tensors`, as one fused message."""
    if not tensors:
        return []
    return _ops.allreduce(tensors, "avg", rank_list=state.rank_list)


def _compress(state, bucket, buffer, dtype):
    """The bucket's new flat buffer (in `dtype`) from the PowerSGD iteration described above."""
    gradients = bucket.gradients()
    plan = _plan(state, gradients, buffer)
    shapes = tuple(tuple(g.shape) for g in gradients)
    error, qs = state._memory_for(bucket.index(), shapes, buffer.numel(), dtype, buffer.device)
    m = buffer.to(dtype=dtype, copy=True)
    if error is not None:
        m.add_(error)
    matrices, plain = [], []  # (position, n x m view of M, Q); (offset, numel)
    for position, (offset, numel, shape) in enumerate(plan):
        if shape is None:
            plain.append((offset, numel))
            continue
        rows, cols, rank = shape
        q = state._initial_q(qs, position, cols, rank, dtype, buffer.device)
        matrices.append((position, m[offset:offset + numel].view(rows, cols), q))
    # First allreduce: the uncompressed tensors and every P = M Q, one message.
    received = _average(state, [m[offset:offset + numel] for offset, numel in plain]
                        + [mat @ q for _, mat, q in matrices])
    out = torch.zeros_like(m)  # the padding between gradients, if any, stays zero
    for (offset, numel), mean in zip(plain, received):
        out[offset:offset + numel].copy_(mean)
    ps = [_orthogonalize(p, state.orthogonalization_epsilon) for p in received[len(plain):]]
    # Second allreduce: every Q = M^T P.
    new_qs = _average(state, [mat.t() @ p for (_, mat, _), p in zip(matrices, ps)])
    for (position, mat, _), p, q in zip(matrices, ps, new_qs):
        offset, numel, _ = plan[position]
        out[offset:offset + numel].view(mat.shape).copy_(p @ q.t())
    if state.warm_start and new_qs:
        # A Q with a zero column would keep that column of P zero for good: draw it again.
        usable = torch.stack([q.any(dim=0).all() for q in new_qs]).tolist()
        for (position, _, _), q, keep in zip(matrices, new_qs, usable):
            qs[position] = q if keep else None
    if error is not None:
        torch.sub(m, out, out=error)
        for offset, numel in plain:
            error[offset:offset + numel].zero_()
    return out


def powerSGD_hook(state, bucket):
    """Communication hook: the bucket's gradients averaged over state.rank_list, each matrix worth
    compressing replaced by its rank-r PowerSGD approximation (see the module docstring).

    Returns a completed torch.futures.Future whose wait() and value() give the new flat buffer
    (the bucket's dtype, device and length); bucket.buffer() itself is not modified. Collective:
    every rank of the group calls it for the same buckets in the same order. Advances
    state.iteration after the bucket whose is_last() is true.
    """
    buffer = bucket.buffer()
    dtype = _compute_dtype(buffer.dtype)
    if state.iteration < state.start_powerSGD_iter:
        result = _ops.allreduce(buffer, "avg", rank_list=state.rank_list)
    else:
        result = _compress(state, bucket, buffer, dtype).to(buffer.dtype)
    state._advance(bucket)
    return _completed(result)


__all__ = ["PowerSGDState", "powerSGD_hook"]
