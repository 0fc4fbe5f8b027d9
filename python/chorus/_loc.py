"""chorus.allreduce_loc: MPI's MINLOC and MAXLOC, elementwise over the ranks of a group.

values, ranks = chorus.allreduce_loc(x, "min") gives, for every element of x, the smallest value
across the group and the group rank that holds it. A tie goes to the lowest rank (MPI's rule: the
lesser index), and a NaN wins (chorus's min and max; its lowest rank holding one is named). MPI
passes the index as data (MPI_DOUBLE_INT pairs); here it is the rank, which is what a (value, rank)
pair nearly always carries. Every rank gets the same two arrays: values of x's dtype and shape,
ranks as int64 of x's shape (torch tensors for a torch x).

How: one allgather of every rank's x, then an argmin or argmax over the ranks, here (NumPy's and
torch's take the first of equal values and of NaNs). Every rank receives size x len(x) elements:
for the small arrays it is used for (a loss and who has it, the best score), not large ones.
"""

import numpy as np

from . import _chorus, _groups
from ._scan import dtype_kind, gathered_rows, torch_of


def allreduce_loc(x, op="min", rank_list=None, group=None):
    """(the elementwise min or max of x across the group, the group rank holding each); see the
    module doc."""
    rank_list = _groups.resolve(group, rank_list, "allreduce_loc")
    if op not in ("min", "max"):
        raise _chorus.InvalidArgumentError(
            f"allreduce_loc: op must be 'min' or 'max', not {op!r}")
    torch = torch_of(x, "allreduce_loc")
    if dtype_kind(x.dtype, torch) not in "iuf":
        raise _chorus.InvalidArgumentError(
            f"allreduce_loc: x of dtype {x.dtype} has no order to take a {op} of")
    rows = gathered_rows(x, torch, rank_list)
    ranks = rows.argmin(0) if op == "min" else rows.argmax(0)
    if torch is not None:
        return rows.gather(0, ranks.unsqueeze(0)).squeeze(0), ranks
    ranks = ranks.astype(np.int64)
    return np.take_along_axis(rows, ranks[np.newaxis], 0)[0], ranks
