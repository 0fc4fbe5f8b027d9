"""pmap: data-parallel map over the ranks of a group, as jax.pmap maps over devices.

    f = chorus.pmap(fn, in_axes=0, out_axes=0)
    y = f(x, w)      # every rank: fn applied to the whole of x, computed one slice per rank

Each positional argument is split along its in_axes entry into group-size equal parts, and fn is
called on this rank's part; the result is allgathered along out_axes, so every rank returns what
fn gives on the whole.

- in_axes: an int (every argument split along that axis), None (passed whole), or a list/tuple
  with one entry (an int or None) per positional argument. Keyword arguments pass through whole.
- out_axes: an int, None (fn's result is returned as this rank computed it: for results that are
  the same on every rank), or a list/tuple with one entry per item when fn returns a list/tuple.
- Arguments and results may be nests (dicts, lists and tuples of arrays, see chorus._nested): an
  entry applies to every array in its argument, and non-array leaves pass through.
- The split axis of each array must be divisible by the group size (else a ValueError naming the
  argument, the axis and both numbers). Negative axes count from the end.
- rank_list= or group= choose the group (default: the world).
"""

import functools

from . import _chorus, _groups, _nested, _ops


def _is_array(x):
    return hasattr(x, "__dlpack__") and hasattr(x, "shape")


def _per_item(axes, count, what):
    """`axes` as one entry per item: an int or None repeats; a list/tuple must have `count`."""
    if axes is None or isinstance(axes, int) and not isinstance(axes, bool):
        return [axes] * count
    if isinstance(axes, (list, tuple)) and len(axes) == count and all(
            a is None or isinstance(a, int) and not isinstance(a, bool) for a in axes):
        return list(axes)
    raise _chorus.InvalidArgumentError(
        f"pmap: {what} must be an int, None, or a list of {count} ints or Nones (one per "
        f"{'argument' if what == 'in_axes' else 'result'}), not {axes!r}")


def _split(leaf, axis, rank, size, where):
    """This rank's part of `leaf` along `axis`."""
    shape = tuple(leaf.shape)
    if not shape:
        raise _chorus.InvalidArgumentError(f"pmap: {where} is 0-d and cannot be split")
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape):
        raise _chorus.InvalidArgumentError(
            f"pmap: {where} has {len(shape)} dimensions; it cannot be split along axis {axis}")
    if shape[axis] % size != 0:
        raise _chorus.InvalidArgumentError(
            f"pmap: {where} has dimension {axis} of {shape[axis]}, which must be divisible by the "
            f"group size ({size})")
    chunk = shape[axis] // size
    index = (slice(None),) * axis + (slice(rank * chunk, (rank + 1) * chunk),)
    return leaf[index]


def _split_argument(arg, axis, rank, size, where):
    if axis is None:
        return arg
    if _is_array(arg):
        return _split(arg, axis, rank, size, where)
    if _nested.is_nest(arg) or isinstance(arg, (list, tuple)):
        flat = _nested.flatten(arg, where)
        parts = [_split(leaf, axis, rank, size, path) if _is_array(leaf) else leaf
                 for path, leaf in flat]
        return _nested.unflatten(arg, iter(parts))
    return arg


def _gather_result(result, axis, rank_list):
    if axis is None:
        return result
    if _is_array(result):
        return _ops.allgather(result, axis=axis, rank_list=rank_list)
    flat = _nested.flatten(result)
    arrays = [leaf for _, leaf in flat if _is_array(leaf)]
    works = [_ops.allgather(leaf, axis=axis, rank_list=rank_list, async_op=True)
             for leaf in arrays]
    gathered = iter([work.wait() for work in works])
    leaves = [next(gathered) if _is_array(leaf) else leaf for _, leaf in flat]
    return _nested.unflatten(result, iter(leaves))


def pmap(fn, in_axes=0, out_axes=0, rank_list=None, group=None):
    """Returns fn mapped over the ranks of the group (see the module docstring)."""
    if not callable(fn):
        raise _chorus.InvalidArgumentError(f"pmap needs a callable, not {type(fn).__name__}")
    rank_list = _groups.resolve(group, rank_list, "pmap")

    @functools.wraps(fn)
    def mapped(*args, **kwargs):
        comm = _groups.get(rank_list)
        axes = _per_item(in_axes, len(args), "in_axes")
        parts = [_split_argument(arg, axis, comm.rank, comm.size, f"argument {i}")
                 for i, (arg, axis) in enumerate(zip(args, axes))]
        result = fn(*parts, **kwargs)
        if isinstance(out_axes, (list, tuple)):
            if not isinstance(result, (list, tuple)):
                raise _chorus.InvalidArgumentError(
                    "pmap: out_axes is a list, but fn returned a single value")
            out = _per_item(out_axes, len(result), "out_axes")
            return type(result)(_gather_result(r, a, rank_list) for r, a in zip(result, out))
        _per_item(out_axes, 1, "out_axes")  # an int or None
        return _gather_result(result, out_axes, rank_list)

    return mapped


__all__ = ["pmap"]
