"""chorus: collective communication for NumPy arrays, PyTorch tensors and any DLPack array.

    import chorus
    import chorus.distributed as dist
    y = chorus.allreduce(x)            # sum over every rank (run under chorusrun -np N)

The C++ runtime does the work (the _chorus extension only converts types); see DESIGN §4 for the
full API. Errors are chorus.Error and its subclasses InvalidArgumentError (also a ValueError),
TimeoutError, PeerError, MismatchError, UnsupportedError and InternalError.
"""

import atexit as _atexit
import sys as _sys

from . import _chorus
from ._chorus import (Error, InternalError, InvalidArgumentError, MismatchError, PeerError,
                      TimeoutError, UnsupportedError)
from ._ops import (ANY_SOURCE, REDUCE_OPS, Status, Work, all_to_all, allgather, allreduce,
                   barrier, broadcast, gather, recv, reduce, reduce_scatter, scatter, send)
from ._objects import (all_to_all_object, allgather_object, broadcast_object, gather_object,
                       recv_object, scatter_object, send_object)
from ._pmap import pmap
from ._loc import allreduce_loc
from ._scan import scan
from . import distributed

__version__ = "0.1.0"


def shutdown():
    """Waits for pending operations, then closes every communicator. Called at exit; a later
    operation starts a new context (collective: every rank must do the same)."""
    from . import _groups
    _groups.reset()
    _chorus.shutdown()


_atexit.register(shutdown)


def _abort_on_uncaught_exception(kind, value, traceback):
    """An uncaught exception ends this rank: abort its communicators first, so that peers waiting
    in a collective with it raise a PeerError quoting the exception at once, instead of learning
    only that the rank went away (or waiting for their timeout)."""
    try:
        if not issubclass(kind, (KeyboardInterrupt, SystemExit)):
            # A PeerError that is let go names the process that failed first, in the message and
            # in the peers' peer_rank, so that peers told of this abort learn who it was
            # (peer_rank is a world rank; see docs/errors.md).
            culprit = getattr(value, "peer_rank", -1) if isinstance(value, Error) else -1
            named = f" (world rank {culprit} failed)" if isinstance(culprit, int) and culprit >= 0 \
                else ""
            _chorus.abort(f"exiting on an uncaught Python exception: {kind.__name__}{named}: "
                          f"{value}", culprit if named else -1)
    finally:
        _previous_excepthook(kind, value, traceback)


_previous_excepthook = _sys.excepthook
_sys.excepthook = _abort_on_uncaught_exception

__all__ = [
    "Error", "InternalError", "InvalidArgumentError", "MismatchError", "PeerError",
    "TimeoutError", "UnsupportedError", "ANY_SOURCE", "REDUCE_OPS", "Status", "Work",
    "all_to_all", "allgather", "allreduce", "barrier", "broadcast", "gather", "recv", "reduce",
    "reduce_scatter", "scatter", "send", "pmap", "distributed", "shutdown", "all_to_all_object",
    "allgather_object", "broadcast_object", "gather_object", "recv_object", "scatter_object",
    "send_object", "scan", "allreduce_loc",
]
