"""Nests of arrays as collective arguments (DESIGN §4), as JAX pytrees are:

    grads = chorus.allreduce({"w": w, "b": [b1, b2]}, "avg")   # the same nest back

A nest is a dict, or a list or tuple that holds a container; a plain list or tuple of arrays keeps
its own meaning (allreduce fuses it, allgather gathers each item, reduce_scatter reduces item g to
rank g). The leaves are the arrays in a fixed order: dict keys sorted (by repr, so every rank walks
them alike, whatever the insertion order), lists and tuples in order. Each leaf gets the operation's
meaning for one array, and the result is the same nest, with dicts in the caller's key order.

Before the operation, the ranks compare their nests: one 8-byte allgather of a hash of every leaf's
path and dtype. If any hash differs, they exchange the descriptions and every rank raises
chorus.MismatchError naming the first path where the nests part and the ranks on each side (a
differing shape is the operation's own MismatchError). allreduce then sends one fused message per
(framework, dtype, device); the other operations issue one asynchronous call per leaf and wait for
all of them. out= is not supported with a nest; inplace= is, where the operation has it.
"""

import hashlib

import numpy as np

from . import _chorus, _groups


def is_nest(x):
    """Whether `x` is a nest (a dict, or a list or tuple holding a container)."""
    if isinstance(x, dict):
        return True
    return isinstance(x, (list, tuple)) and any(isinstance(i, (list, tuple, dict)) for i in x)


def _keys(mapping):
    return sorted(mapping, key=repr)


def flatten(x, path="x"):
    """[(path, leaf), ...] of the nest `x`, in the order every rank walks it."""
    if isinstance(x, dict):
        return [item for key in _keys(x) for item in flatten(x[key], f"{path}[{key!r}]")]
    if isinstance(x, (list, tuple)):
        return [item for i, v in enumerate(x) for item in flatten(v, f"{path}[{i}]")]
    return [(path, x)]


def unflatten(template, leaves):
    """The nest shaped as `template` holding the next items of the iterator `leaves`."""
    if isinstance(template, dict):
        values = {key: unflatten(template[key], leaves) for key in _keys(template)}
        return type(template)((key, values[key]) for key in template)
    if isinstance(template, (list, tuple)):
        items = [unflatten(v, leaves) for v in template]
        return type(template)(items) if not hasattr(template, "_fields") else type(template)(*items)
    return next(leaves)


def _dtype_name(leaf):
    return str(getattr(leaf, "dtype", type(leaf).__name__))


def _signature(flat):
    return "\n".join(f"{path}: {_dtype_name(leaf)}" for path, leaf in flat)


def check_same_structure(flat, rank_list, operation):
    """Raises MismatchError on every rank of the group if the ranks' nests differ."""
    from ._ops import _allgather  # _ops imports this module
    comm = _groups.get(rank_list)
    if comm.size == 1:
        return
    signature = _signature(flat)
    digest = hashlib.blake2b(signature.encode(), digest_size=8).digest()
    mine = np.frombuffer(digest, dtype=np.int64).copy()
    hashes = _allgather(mine, 0, rank_list, False, False, out=None)
    if np.all(hashes == hashes[0]):
        return
    data = np.frombuffer(signature.encode(), dtype=np.uint8)
    lengths = _allgather(np.array([data.size], dtype=np.int64), 0, rank_list, False, False,
                         out=None)
    padded = np.zeros(int(lengths.max()), dtype=np.uint8)
    padded[:data.size] = data
    every = _allgather(padded, 0, rank_list, False, False, out=None).reshape(comm.size, -1)
    signatures = [bytes(every[g][:int(lengths[g])]).decode().split("\n") for g in range(comm.size)]
    raise _chorus.MismatchError(_describe_difference(signatures, comm, operation))


def _describe_difference(signatures, comm, operation):
    """The message: the first entry where some rank's nest differs from group rank 0's."""
    world = comm.members
    first = signatures[0]
    for g, other in enumerate(signatures[1:], start=1):
        if other == first:
            continue
        for i in range(max(len(first), len(other))):
            a = first[i] if i < len(first) else "(nothing)"
            b = other[i] if i < len(other) else "(nothing)"
            if a != b:
                return (f"rank {comm.world_rank} (this process): {operation} of a nest: the nests "
                        f"differ across ranks; at leaf {i}, rank {world[0]} has {a} and rank "
                        f"{world[g]} has {b}")
    return f"rank {comm.world_rank} (this process): {operation} of a nest: the nests differ"


class NestWork:
    """The handle of an asynchronous operation on a nest: wait(timeout=None) returns the nest;
    is_completed() never blocks."""

    __slots__ = ("_works", "_finish", "_result", "_done")

    def __init__(self, works, finish):
        self._works, self._finish = works, finish
        self._result, self._done = None, False

    def wait(self, timeout=None):
        if not self._done:
            results = [work.wait(timeout) for work in self._works]
            self._result, self._done = self._finish(results), True
        return self._result

    def is_completed(self):
        return self._done or all(work.is_completed() for work in self._works)


def _refuse_out(out, operation):
    if out is not None:
        raise _chorus.InvalidArgumentError(
            f"{operation} of a nest takes no out=; it returns a new nest (or use inplace=True)")


def leafwise(call, x, arguments, async_op, out, operation):
    """`call(leaf, async_op=True, **arguments)` for every leaf of the nest `x`, all issued before
    any is waited for; returns the nest of results (or a NestWork)."""
    _refuse_out(out, operation)
    flat = flatten(x)
    check_same_structure(flat, arguments["rank_list"], operation)
    works = [call(leaf, async_op=True, **arguments) for _, leaf in flat]

    def finish(results):
        return unflatten(x, iter(results))

    work = NestWork(works, finish)
    return work if async_op else work.wait()


def allreduce(x, op, rank_list, async_op, inplace, synchronize, out):
    """allreduce of the nest `x`: one fused message per (framework, dtype, device)."""
    from ._ops import _allreduce  # _ops imports this module
    _refuse_out(out, "allreduce")
    flat = flatten(x)
    check_same_structure(flat, rank_list, "allreduce")
    groups = {}
    for index, (_, leaf) in enumerate(flat):
        key = (type(leaf).__module__, _dtype_name(leaf), str(getattr(leaf, "device", "")))
        groups.setdefault(key, []).append(index)
    order = sorted(groups)  # the same on every rank: the nests were compared above
    works = [_allreduce([flat[i][1] for i in groups[key]], op, rank_list, True, synchronize,
                        inplace=inplace, out=None) for key in order]

    def finish(results):
        leaves = [None] * len(flat)
        for key, reduced in zip(order, results):
            for i, value in zip(groups[key], reduced):
                leaves[i] = value
        return unflatten(x, iter(leaves))

    work = NestWork(works, finish)
    return work if async_op else work.wait()
