"""chorus.distributed: the process's configuration and communicators (DESIGN §4).

    cfg = chorus.distributed.get_config()       # rank, size, local_rank, local_size, root_rank,
                                                # enable_data_parallel, zero_opt_level, ...
    comm = chorus.distributed.get_communicator()   # or get_communicator(rank_list=[[0, 1], [2, 3]])
    g = chorus.distributed.new_group([2, 3])    # a Group: chorus.allreduce(x, group=g), roots and
                                                # peers as group ranks
    chorus.distributed.set_default_backend("mpi")  # for communicators made from now on
    dir(chorus.distributed.op)                  # the operators
"""

from .. import _chorus, _groups, _ops
from .._chorus import DistConfig
from .._groups import Communicator, Group


def get_config():
    """The process's DistConfig (one object, shared by every caller).

    Read-only: rank, size, local_rank, local_size, root_rank, node_rank, backend. Settable:
    enable_data_parallel (bool), zero_opt_level (0..3), bucket_bytes, timeout (seconds; for
    communicators created later). dumps() returns one "name: value" line per field.
    """
    return _chorus.config()


def get_communicator(rank_list=None):
    """The caller's communicator for `rank_list` (None: the world). Collective the first time a
    rank_list is used: every rank must call it with the same rank_list."""
    return _groups.get(rank_list)


def new_group(ranks):
    """A Group of the world ranks `ranks`, with its own ranks (in the order given): g.rank, g.size,
    g.ranks, g.world_rank(i), g.group_rank(w). Collective over the world (every rank calls it with
    the same ranks); then only members call operations with group=g, whose roots and peers are
    group ranks. A non-member gets g.rank == -1, and a ValueError if it calls a group operation."""
    return _groups.new_group(ranks)


def destroy_group(group):
    """Ends `group` (from new_group) on this rank: every rank calls it for the same group, as for
    new_group; operations on it are then an error, and a later new_group of the same ranks makes
    a new communicator. A group whose communicator failed for good (a MismatchError) is replaced
    this way. (torch.distributed.destroy_process_group(group).)"""
    _groups.destroy_group(group)


def set_default_backend(name):
    """The backend of communicators made from now on: "auto" (the default; CHORUS_BACKEND), "tcp",
    "mpi", "mpi_algorithms", "void". Every rank must switch alike, since the next get_communicator()
    or operation makes its communicator anew (collectively). Communicators already made keep theirs;
    switching back serves them again from the pool."""
    _chorus.set_default_backend(name)
    _groups.reset()


class _OperatorNamespace:
    """The operators of chorus (chorus.distributed.op.allreduce is chorus.allreduce)."""

    __slots__ = ()

    def __getattr__(self, name):
        if name in _ops.OPERATORS:
            return getattr(_ops, name)
        raise AttributeError(f"chorus.distributed.op has no operator {name!r}; operators: "
                             + ", ".join(_ops.OPERATORS))

    def __dir__(self):
        return list(_ops.OPERATORS)

    def __repr__(self):
        return "<chorus.distributed.op: " + ", ".join(_ops.OPERATORS) + ">"


op = _OperatorNamespace()

__all__ = ["DistConfig", "Communicator", "Group", "get_config", "get_communicator", "new_group",
           "destroy_group", "set_default_backend", "op"]
