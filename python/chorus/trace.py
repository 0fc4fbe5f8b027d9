"""chorus.trace: a timeline of every rank's collectives, merged into one Chrome / Perfetto trace.

    import chorus.trace
    with chorus.trace.recording("trace.json"):   # collective: every rank enters and leaves it
        train()
    # or: chorus.trace.start("trace.json"); ...; chorus.trace.stop()
    # or, for a whole job: CHORUS_TRACE=trace.json chorusrun -np 4 python3 train.py

Each rank records each operation (sequence number, collective, bytes, dtype, reduce op, root,
communicator and backend, algorithm row, start and end) into a preallocated ring: recording adds no
allocation to a call, and changes no result. start() first measures this rank's clock offset to
rank 0's, so the tracks line up. stop() writes this rank's part ("trace.json.rank<R>.part"); then
rank 0 merges the parts into trace.json (one track per rank, one lane per communicator), which
chrome://tracing and ui.perfetto.dev open. `chorus-trace summary trace.json` says which rank the
others waited for; `chorus-trace plot trace.json` draws where each rank's time went. See
docs/observability.md.
"""

import contextlib

from . import _chorus


def start(path):
    """Collective over the world: starts recording toward `path`. Returns False (and records
    nothing new) if a trace records already."""
    return _chorus.trace_start(str(path))


def stop(merge=True):
    """Collective over the world: stops recording and writes this rank's part; with `merge`, rank 0
    then merges every rank's part into the path given to start(). Returns that path, or None if no
    trace recorded."""
    path = _chorus.trace_path()
    part = _chorus.trace_stop()
    if not merge:
        return path or None
    from . import barrier
    from .distributed import get_config
    barrier()  # every part is written
    if get_config().rank == 0 and part:
        _chorus.trace_merge(path)
    barrier()  # the merged file exists when stop() returns on any rank
    return path or None


def active():
    """Whether a trace records on this rank."""
    return _chorus.trace_active()


def merge(path):
    """Merges the parts of `path` found next to it into `path` (for parts left by a job); returns
    how many were merged."""
    return _chorus.trace_merge(str(path))


@contextlib.contextmanager
def recording(path):
    """start(path) on entry, stop() on exit (also on an exception)."""
    start(path)
    try:
        yield
    finally:
        stop()
