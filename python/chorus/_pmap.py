"""pmap: data-parallel map over the ranks of a group.

pmap(fn)(x, ...) splits every array positional argument along axis 0 into group-size equal parts,
calls fn on this rank's parts (other arguments passed through), and allgathers fn's result (an
array, or a tuple/list of arrays) along axis 0, so every rank returns fn applied to the whole.
Dimension 0 of each split argument must be divisible by the group size.
"""

import functools

from . import _chorus, _groups, _ops


def _is_array(x):
    return hasattr(x, "__dlpack__") and hasattr(x, "shape")


def pmap(fn, rank_list=None):
    """Returns fn mapped over the ranks of the group (see the module docstring)."""
    if not callable(fn):
        raise _chorus.InvalidArgumentError(f"pmap needs a callable, not {type(fn).__name__}")

    @functools.wraps(fn)
    def mapped(*args, **kwargs):
        comm = _groups.get(rank_list)
        parts = []
        for i, arg in enumerate(args):
            if _is_array(arg):
                shape = tuple(arg.shape)
                if not shape or shape[0] % comm.size != 0:
                    raise _chorus.InvalidArgumentError(
                        f"pmap: argument {i} has dimension 0 of "
                        f"{shape[0] if shape else 'none (0-d)'}, which must be divisible by the "
                        f"group size ({comm.size})")
                chunk = shape[0] // comm.size
                arg = arg[comm.rank * chunk:(comm.rank + 1) * chunk]
            parts.append(arg)
        result = fn(*parts, **kwargs)
        if isinstance(result, (list, tuple)):
            gathered = _ops.allgather(list(result), axis=0, rank_list=rank_list)
            return type(result)(gathered)
        return _ops.allgather(result, axis=0, rank_list=rank_list)

    return mapped


__all__ = ["pmap"]
