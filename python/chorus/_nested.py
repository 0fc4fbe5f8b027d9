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
(framework, dtype, device), and so does every other collective for NumPy and torch leaves: the
leaves are flattened into one buffer per dtype and split back afterwards. For the collectives
that split their input (scatter, reduce_scatter, all_to_all), block g of the buffer holds chunk g
of every leaf, so one call moves them all. Leaves of other frameworks (CuPy, JAX) take one
asynchronous call each. out= is not supported with a nest; inplace= is, where the operation has
it.
"""

import hashlib

import numpy as np

from . import _arrays, _chorus, _groups


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
    """One line per leaf: its path, dtype and shape, which every rank's nest must agree on (a
    fused message checks only the total count)."""
    return "\n".join(f"{path}: {_dtype_name(leaf)} {tuple(getattr(leaf, 'shape', ()))}"
                     for path, leaf in flat)


def check_same_structure(flat, rank_list, operation, subject="of a nest: the nests differ"):
    """Raises MismatchError on every rank of the group if the ranks' nests differ. The message
    reads "OPERATION SUBJECT across ranks; at leaf I, ..."."""
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
    raise _chorus.MismatchError(_describe_difference(signatures, comm, operation, subject))


def _describe_difference(signatures, comm, operation, subject):
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
                return (f"rank {comm.world_rank} (this process): {operation} {subject} across "
                        f"ranks; at leaf {i}, rank {world[0]} has {a} and rank {world[g]} has {b}")
    return f"rank {comm.world_rank} (this process): {operation} {subject}"


class NestWork:
    """The handle of an asynchronous operation on a nest: wait(timeout=None) returns the nest;
    is_completed() never blocks."""

    __slots__ = ("_works", "_finish", "_result", "_done")

    def __init__(self, works, finish):
        self._works, self._finish = works, finish
        self._result, self._done = None, False

    def wait(self, timeout=None):
        results = [work.wait(timeout) for work in self._works]  # each orders this stream (CUDA)
        if not self._done:
            self._result, self._done = self._finish(results), True
        return self._result

    def is_completed(self):
        return self._done or all(work.is_completed() for work in self._works)


def _refuse_out(out, operation):
    if out is not None:
        raise _chorus.InvalidArgumentError(
            f"{operation} of a nest takes no out=; it returns a new nest (or use inplace=True)")


def _flat_checked(x, rank_list, operation, async_op):
    """The leaves of the nest `x` (flatten()), once the ranks agree on the nest and each leaf is
    an array chorus takes: what is not is refused here, named by its path (x['b'], x[1][1]), not
    by its place in the list of leaves of its dtype that the operation is given."""
    from ._ops import _check_bool_flag  # _ops imports this module
    _check_bool_flag(async_op, "async_op")
    flat = flatten(x)
    check_same_structure(flat, rank_list, operation)
    for path, leaf in flat:
        _arrays.check(leaf, path)
    return flat


def _leafwise(call, x, flat, arguments, async_op):
    """`call(leaf, async_op=True, **arguments)` for every leaf of the nest `x` (`flat`, checked),
    all issued before any is waited for; returns the nest of results (or a NestWork)."""
    works = [call(leaf, async_op=True, **arguments) for _, leaf in flat]

    def finish(results):
        return unflatten(x, iter(results))

    work = NestWork(works, finish)
    return work if async_op else work.wait()


def _framework(leaf):
    """"numpy" or "torch" for leaves that fuse (NumPy arrays, torch tensors), else None."""
    if isinstance(leaf, np.ndarray):
        return "numpy"
    module = type(leaf).__module__.split(".", 1)[0]
    return "torch" if module == "torch" else None


def _fusion_groups(flat):
    """{(framework, dtype, device): [leaf indices]} in an order every rank shares, or None when
    some leaf cannot be fused."""
    groups = {}
    for index, (_, leaf) in enumerate(flat):
        framework = _framework(leaf)
        if framework is None:
            return None
        key = (framework, _dtype_name(leaf), str(getattr(leaf, "device", "")))
        groups.setdefault(key, []).append(index)
    return {key: groups[key] for key in sorted(groups)}


def _concat(framework, leaves):
    """The leaves flattened into one contiguous 1-D buffer."""
    if framework == "numpy":
        return np.concatenate([np.ravel(leaf) for leaf in leaves])
    import torch
    return torch.cat([leaf.reshape(-1) for leaf in leaves])


def _pieces(flat_buffer, leaves):
    """`flat_buffer` cut back into arrays shaped like `leaves`."""
    pieces, offset = [], 0
    for leaf in leaves:
        count = int(np.prod(leaf.shape)) if leaf.shape else 1
        pieces.append(flat_buffer[offset:offset + count].reshape(leaf.shape))
        offset += count
    return pieces


def _stitch(framework, parts, axis):
    if framework == "numpy":
        return np.concatenate(parts, axis=axis)
    import torch
    return torch.cat(parts, dim=axis)


def _chunks(framework, leaf, axis, size, path):
    """`leaf` cut into `size` equal chunks along `axis` (a ValueError naming `path` otherwise)."""
    shape = tuple(leaf.shape)
    if not shape or shape[axis] % size != 0:
        raise _chorus.InvalidArgumentError(
            f"{path} has shape {list(shape)}: its dimension {axis} must be divisible by the group "
            f"size ({size})")
    step = shape[axis] // size
    index = [slice(None)] * len(shape)
    chunks = []
    for g in range(size):
        index[axis] = slice(g * step, (g + 1) * step)
        chunks.append(leaf[tuple(index)])
    return chunks


def fused_split(operation, x, arguments, async_op, out):
    """scatter, reduce_scatter, all_to_all and gather of the nest `x` as one message per
    (framework, dtype, device): block g of each buffer holds chunk g of every leaf."""
    from . import _ops  # _ops imports this module
    _refuse_out(out, operation)
    rank_list = arguments["rank_list"]
    flat = _flat_checked(x, rank_list, operation, async_op)
    groups = _fusion_groups(flat)
    if groups is None:
        call = {"scatter": _ops._scatter, "reduce_scatter": _ops._reduce_scatter,
                "all_to_all": _ops._all_to_all, "gather": _ops._gather}[operation]
        return _leafwise(call, x, flat, arguments, async_op)
    comm = _groups.get(rank_list)
    size = comm.size
    split = arguments.get("split_axis", 0)
    works, layouts = [], []
    for (framework, _, _), indices in groups.items():
        leaves = [flat[i][1] for i in indices]
        if operation == "gather":
            chunked = [[leaf] for leaf in leaves]
            buffer = _concat(framework, leaves)
            work = _ops._gather(buffer, arguments["root"], 0, rank_list, True)
        else:
            chunked = [_chunks(framework, leaf, split, size, flat[i][0])
                       for i, leaf in zip(indices, leaves)]
            buffer = _concat(framework, [chunks[g] for g in range(size) for chunks in chunked])
            if operation == "scatter":
                work = _ops._scatter(buffer, arguments["root"], rank_list, True)
            elif operation == "reduce_scatter":
                work = _ops._reduce_scatter(buffer, arguments["op"], rank_list, True)
            else:
                work = _ops._all_to_all(buffer, 0, 0, rank_list, True)
        works.append(work)
        layouts.append((framework, indices, chunked))

    def finish(results):
        leaves = [leaf for _, leaf in flat]
        is_root = operation in ("gather", "scatter") and \
            comm.members[comm.rank] == arguments["root"]
        for (framework, indices, chunked), result in zip(layouts, results):
            pieces_of = [chunks[0] if operation == "gather" else chunks[comm.rank]
                         for chunks in chunked]
            if operation == "gather" and not is_root:
                continue  # non-roots get their input back
            if operation in ("gather", "all_to_all"):
                blocks = [_pieces(block, pieces_of) for block in result.reshape(size, -1)]
                axis = arguments.get("axis", arguments.get("concat_axis", 0))
                new = [_stitch(framework, [blocks[r][j] for r in range(size)], axis)
                       for j in range(len(indices))]
            else:
                new = _pieces(result, pieces_of)
            for i, value in zip(indices, new):
                leaves[i] = value
        return unflatten(x, iter(leaves))

    work = NestWork(works, finish)
    return work if async_op else work.wait()


def fused(operation, x, arguments, async_op, inplace, out):
    """broadcast, reduce or allgather of the nest `x` as one message per (framework, dtype,
    device); falls back to _leafwise() when a leaf is of another framework."""
    from . import _ops  # _ops imports this module
    _refuse_out(out, operation)
    rank_list = arguments["rank_list"]
    flat = _flat_checked(x, rank_list, operation, async_op)
    groups = _fusion_groups(flat)
    if groups is None:
        call = {"broadcast": _ops._broadcast_leaf, "reduce": _ops._reduce,
                "allgather": _ops._allgather_leaf}[operation]
        extra = {"inplace": inplace} if operation != "allgather" else {}
        return _leafwise(call, x, flat, dict(arguments, **extra), async_op)
    comm = _groups.get(rank_list)
    works = []
    for (framework, _, _), indices in groups.items():
        buffer = _concat(framework, [flat[i][1] for i in indices])
        if operation == "broadcast":
            work = _ops._broadcast(buffer, arguments["root"], rank_list, True, False,
                                   inplace=True, out=None)
        elif operation == "reduce":
            work = _ops._reduce(buffer, arguments["root"], arguments["op"], rank_list, True,
                                inplace=True)
        else:
            work = _ops._allgather(buffer, 0, rank_list, True, False, out=None)
        works.append(work)

    def finish(results):
        leaves = [leaf for _, leaf in flat]
        is_root = operation != "allgather" and comm.members[comm.rank] == arguments["root"]
        for ((framework, _, _), indices), result in zip(groups.items(), results):
            own = [flat[i][1] for i in indices]
            if operation == "allgather":
                blocks = [_pieces(block, own) for block in result.reshape(comm.size, -1)]
                new = [_stitch(framework, [blocks[r][j] for r in range(comm.size)],
                               arguments["axis"]) for j in range(len(own))]
            elif operation == "reduce" and not is_root:
                new = [leaf if inplace else leaf.copy() if framework == "numpy" else leaf.clone()
                       for leaf in own]
            else:
                new = _pieces(result, own)
                if inplace:
                    for leaf, value in zip(own, new):
                        leaf[...] = value
                    new = own
            for i, value in zip(indices, new):
                leaves[i] = value
        return unflatten(x, iter(leaves))

    work = NestWork(works, finish)
    return work if async_op else work.wait()


def allreduce(x, op, rank_list, async_op, inplace, synchronize, out):
    """allreduce of the nest `x`: one fused message per (framework, dtype, device)."""
    from ._ops import _allreduce  # _ops imports this module
    _refuse_out(out, "allreduce")
    flat = _flat_checked(x, rank_list, "allreduce", async_op)
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
