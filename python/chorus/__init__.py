"""chorus: collective communication for NumPy arrays, PyTorch tensors and any DLPack array.

    import chorus
    import chorus.distributed as dist
    y = chorus.allreduce(x)            # sum over every rank (run under chorusrun -np N)

The C++ runtime does the work (the _chorus extension only converts types); see DESIGN §4 for the
full API. Errors are chorus.Error and its subclasses InvalidArgumentError (also a ValueError),
TimeoutError, PeerError, MismatchError, UnsupportedError and InternalError.
"""

import atexit as _atexit

from . import _chorus
from ._chorus import (Error, InternalError, InvalidArgumentError, MismatchError, PeerError,
                      TimeoutError, UnsupportedError)
from ._ops import (REDUCE_OPS, Work, all_to_all, allgather, allreduce, barrier, broadcast,
                   gather, recv, reduce, reduce_scatter, scatter, send)
from ._pmap import pmap
from . import distributed

__version__ = "0.1.0"


def shutdown():
    """Waits for pending operations, then closes every communicator. Called at exit; a later
    operation starts a new context (collective: every rank must do the same)."""
    from . import _groups
    _groups.reset()
    _chorus.shutdown()


_atexit.register(shutdown)

__all__ = [
    "Error", "InternalError", "InvalidArgumentError", "MismatchError", "PeerError",
    "TimeoutError", "UnsupportedError", "REDUCE_OPS", "Work", "all_to_all", "allgather",
    "allreduce", "barrier", "broadcast", "gather", "recv", "reduce", "reduce_scatter", "scatter",
    "send", "pmap", "distributed", "shutdown",
]
