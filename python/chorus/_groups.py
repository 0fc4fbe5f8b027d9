"""Communicators as Python sees them, rank_list handling, and groups with their own ranks
(DESIGN §4).

A rank_list is a list of lists of world ranks, or a flat list (one group). Ranks in no group run
standalone (a group of one). Communicators come from the C++ pool (DistContext::communicator) and
are cached here by normalized rank_list, and by the rank_list as the caller wrote it, so the hot
path of a collective is one dict lookup; the latter are also noted in C++ (_chorus.note_rank_list),
whose fronts then take the short path for them. Roots and peers are given as world ranks and
mapped to ranks within the caller's group. Every rank-like argument (a root, a peer, a rank of a
rank_list or of new_group) is an int or any integer with __index__ (a NumPy integer), never a bool
nor a float (as_int).
"""

import operator
import threading
import weakref

import numpy as np

from . import _chorus

_lock = threading.Lock()
_cache = {}  # normalized rank_list (tuple of tuples) or None -> Communicator
_given = {}  # a rank_list as the caller wrote it (as tuples) -> Communicator, checked before
_world = None
_with_native = weakref.WeakSet()  # Groups whose _native the short paths use, until reset()


class Communicator:
    """The caller's communicator: rank, size, local_rank, local_size, world_rank, world_size,
    root_rank, group_id and group_size (DESIGN §1); `members` lists its world ranks in order."""

    __slots__ = ("_native", "members", "_index")

    def __init__(self, native, members):
        self._native = native
        self.members = tuple(members)
        self._index = {w: g for g, w in enumerate(self.members)}

    rank = property(lambda self: self._native.rank)
    size = property(lambda self: self._native.size)
    local_rank = property(lambda self: self._native.local_rank)
    local_size = property(lambda self: self._native.local_size)
    world_rank = property(lambda self: self._native.world_rank)
    world_size = property(lambda self: self._native.world_size)
    root_rank = property(lambda self: self._native.root_rank)
    group_id = property(lambda self: self._native.group_id)
    group_size = property(lambda self: self._native.group_size)
    backend = property(lambda self: self._native.backend)

    @property
    def timeout(self):
        """Per-operation deadline in seconds (affects operations issued later)."""
        return self._native.timeout

    @timeout.setter
    def timeout(self, seconds):
        self._native.timeout = seconds

    def group_rank(self, world_rank, what):
        """The rank within this group of world rank `world_rank` (`what` names the argument)."""
        if type(world_rank) is not int:
            world_rank = as_int(world_rank, what, "an int (a world rank)")
        g = self._index.get(world_rank)
        if g is None:
            raise _chorus.InvalidArgumentError(
                f"rank {self.world_rank} (this process): {what}={world_rank} is not a member of "
                f"this rank's group {list(self.members)}; {what} is a world rank inside the group")
        return g

    def __repr__(self):
        return (f"Communicator(rank={self.rank}, size={self.size}, world_rank={self.world_rank}, "
                f"members={list(self.members)}, backend={self.backend!r})")


def described(value):
    """`value` for a message: its type, then its repr ("float 0.0", "bool True"), so that a value
    whose repr reads like a valid one is told apart; None as itself."""
    if value is None:
        return "None"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def as_int(value, what, kind="an int"):
    """`value` as a Python int: an int or an integer with __index__ (NumPy's), never a bool (True
    is not rank 1) nor a float. Anything else is an InvalidArgumentError: "WHAT must be KIND, not
    float 0.0"."""
    if type(value) is int:
        return value
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise _chorus.InvalidArgumentError(f"{what} must be {kind}, not {described(value)}")


def _world_communicator():
    global _world
    if _world is None:
        with _lock:
            if _world is None:
                native = _chorus.communicator([])
                _world = Communicator(native, range(native.size))
                _chorus.set_world(native)  # for the fronts' short paths (front_calls.cc)
    return _world


def normalize(rank_list, world_size):
    """A tuple of tuples partitioning range(world_size), or None for the whole world."""
    if rank_list is None:
        return None
    if not isinstance(rank_list, (list, tuple)):
        raise _chorus.InvalidArgumentError(
            "rank_list must be None, a list of world ranks, or a list of lists of world ranks; "
            f"got {type(rank_list).__name__}")
    if not rank_list:
        # It names no group: by the rule for ranks in none, every rank would run alone. None is
        # the whole world (as [] is to C++'s DistContext::communicator).
        raise _chorus.InvalidArgumentError(
            "rank_list is empty, so it names no group; pass None for the whole world, or the "
            "world ranks of at least one group")
    if not any(isinstance(entry, (list, tuple)) for entry in rank_list):
        rank_list = [rank_list]  # a flat list: one group
    groups, seen = [], set()
    for group in rank_list:
        if not isinstance(group, (list, tuple)) or not group:
            raise _chorus.InvalidArgumentError(
                f"rank_list entries must be non-empty lists of world ranks; got {group!r}")
        ranks = []
        for r in group:
            if type(r) is not int:
                try:
                    r = as_int(r, "rank_list")
                except _chorus.InvalidArgumentError:
                    raise _chorus.InvalidArgumentError(
                        f"rank_list holds {described(r)}, which is not an int") from None
            if not 0 <= r < world_size:
                raise _chorus.InvalidArgumentError(
                    f"rank_list names rank {r}, which is not a rank of this job of size "
                    f"{world_size}")
            if r in seen:
                raise _chorus.InvalidArgumentError(
                    f"Each rank can only appear on rank_list once (rank {r} appears twice)")
            seen.add(r)
            ranks.append(r)
        groups.append(tuple(ranks))
    groups.extend((r,) for r in range(world_size) if r not in seen)
    if len(groups) == 1 and groups[0] == tuple(range(world_size)):
        return None  # the whole world, in order: the world communicator serves it
    return tuple(groups)


def _as_given(rank_list):
    """`rank_list` as hashable tuples, exactly as written (ints only: True would hash as 1), or
    None when it is not a list of ints or of lists of ints."""
    if not isinstance(rank_list, (list, tuple)):
        return None
    given = []
    for entry in rank_list:
        if type(entry) is int:
            given.append(entry)
        elif isinstance(entry, (list, tuple)) and all(type(r) is int for r in entry):
            given.append(tuple(entry))
        else:
            return None
    return tuple(given)


def get(rank_list=None):
    """The caller's communicator for `rank_list` (collective on first use of a rank_list).

    A rank_list seen before, written the same way, is one dict lookup away (keyed on what the
    caller passed); a new one is checked and normalized once, then cached under both keys."""
    if rank_list is None:
        return _world if _world is not None else _world_communicator()
    given = _as_given(rank_list)
    comm = _given.get(given) if given is not None else None
    if comm is None:
        comm = _get_normalized(rank_list)
        if given is not None:
            with _lock:  # unless a reset() came between: then comm is of the forgotten ones
                if comm is _world or any(c is comm for c in _cache.values()):
                    _given[given] = comm
                    # the fronts' short paths take this rank_list from now on (rank_lists.h)
                    _chorus.note_rank_list(given, comm._native, list(comm.members))
    return comm


def _get_normalized(rank_list):
    world = _world_communicator()
    key = normalize(rank_list, world.world_size)
    if key is None:
        return world
    comm = _cache.get(key)
    if comm is None:
        with _lock:
            comm = _cache.get(key)
            if comm is None:
                native = _chorus.communicator([list(g) for g in key])
                me = world.world_rank
                members = next(g for g in key if me in g)
                comm = Communicator(native, members)
                _cache[key] = comm
    return comm


class Group:
    """A group made by dist.new_group(ranks), seen with its own ranks (DESIGN §4).

    `ranks`: its members' world ranks, in group-rank order (the order given); `size`; `rank`: this
    process's group rank, or -1 when it is not a member. world_rank(g) and group_rank(w) translate.
    Every operation takes group= instead of rank_list=: only the members call it, and roots and
    peers are group ranks, as in torch.distributed. A non-member calling a group operation is a
    ValueError (chorus.InvalidArgumentError) naming it and the group.
    """

    # _native: on a member, its group's native Communicator, whose ranks are the group ranks; the
    # fronts' short paths (python/src/front_calls.cc) run group= calls on it. None elsewhere, and
    # once reset() has forgotten the communicators.
    __slots__ = ("ranks", "size", "rank", "_index", "_rank_list", "_native", "_destroyed",
                 "__weakref__")

    def __init__(self, ranks, world_rank):
        self.ranks = tuple(ranks)
        self.size = len(self.ranks)
        self._index = {w: g for g, w in enumerate(self.ranks)}
        self.rank = self._index.get(world_rank, -1)
        self._rank_list = (self.ranks,)
        self._native = None
        self._destroyed = False

    def world_rank(self, group_rank):
        """The world rank of group rank `group_rank`."""
        group_rank = as_int(group_rank, "group_rank", "an int (a group rank)")
        if not 0 <= group_rank < self.size:
            raise _chorus.InvalidArgumentError(
                f"{group_rank!r} is not a rank of the group {list(self.ranks)} (its ranks are 0 to "
                f"{self.size - 1})")
        return self.ranks[group_rank]

    def group_rank(self, world_rank):
        """The group rank of world rank `world_rank`, or -1 when it is not a member."""
        return self._index.get(as_int(world_rank, "world_rank", "an int (a world rank)"), -1)

    def __repr__(self):
        return f"Group(ranks={list(self.ranks)}, rank={self.rank})"


def new_group(ranks):
    """A Group of the world ranks `ranks` (collective over the world: every rank calls it with the
    same ranks, as torch.distributed.new_group; the group's communicator is made here)."""
    world = _world_communicator()
    if not isinstance(ranks, (list, tuple, range)) or not ranks:
        raise _chorus.InvalidArgumentError(
            f"new_group needs a non-empty list of world ranks, not {ranks!r}")
    ranks = list(ranks)
    normalize([ranks], world.world_size)  # ints, in range, none twice: or a clear error
    ranks = [as_int(r, "ranks") for r in ranks]  # NumPy integers as ints
    comm = get([ranks])
    group = Group(ranks, world.world_rank)
    if group.rank >= 0 and comm.members == group.ranks:  # group ranks are the communicator's
        with _lock:
            group._native = comm._native
            _with_native.add(group)
    return group


def destroy_group(group):
    """Ends `group` on this rank: its communicator is forgotten, and a later new_group of the same
    ranks makes a new one (torch.distributed.destroy_process_group(group)). Every rank calls it
    for the same group, as for new_group (the next new_group is collective). The way out of a
    group whose communicator failed for good (after a MismatchError)."""
    if not isinstance(group, Group):
        raise _chorus.InvalidArgumentError(
            f"destroy_group takes a chorus Group (from chorus.distributed.new_group), not "
            f"{type(group).__name__}")
    world = _world_communicator()
    key = normalize([list(group.ranks)], world.world_size)
    with _lock:
        group._destroyed = True
        group._native = None
        _with_native.discard(group)
        if key is None:  # the world in order: it stays
            return
        for other in list(_with_native):  # other Groups of these ranks: they get the new one
            if other.ranks == group.ranks:
                other._native = None
                _with_native.discard(other)
        _cache.pop(key, None)
        # A rank_list written another way may name this communicator: forget every noted one (the
        # next call of each takes the general path once and notes it again).
        _given.clear()
        _chorus.forget_rank_lists()
        _chorus.forget_communicator([list(g) for g in key])


_chorus.set_group_type(Group)  # the fronts take group= calls of this type only


def resolve(group, rank_list, operation):
    """The rank_list an operation called with `group` (or `rank_list`) runs on."""
    if group is None:
        return rank_list
    if not isinstance(group, Group):
        raise _chorus.InvalidArgumentError(
            f"group must be a chorus Group (from chorus.distributed.new_group), not "
            f"{type(group).__name__}")
    if rank_list is not None:
        raise _chorus.InvalidArgumentError(
            f"{operation}: pass group= or rank_list=, not both")
    if group._destroyed:
        raise _chorus.InvalidArgumentError(
            f"{operation}: the group {list(group.ranks)} was destroyed (destroy_group); make a new "
            "one with new_group")
    if group.rank < 0:
        world_rank = _world_communicator().world_rank
        raise _chorus.InvalidArgumentError(
            f"rank {world_rank} (this process) called {operation} on the group "
            f"{list(group.ranks)}, which it is not a member of; only the group's members call "
            f"its operations")
    return group._rank_list


def world_rank_of(group, rank, what):
    """`rank` as a world rank (an int): a group rank of `group` when a group is given, else as
    is; `what` names it in the error for anything else."""
    if group is None:
        return rank if type(rank) is int else as_int(rank, what, "an int (a world rank)")
    rank = as_int(rank, what, "an int (a group rank)")
    if not 0 <= rank < group.size:
        raise _chorus.InvalidArgumentError(
            f"{what}={rank!r} is not a rank of the group {list(group.ranks)}: with group=, {what} "
            f"is a group rank from 0 to {group.size - 1}")
    return group.ranks[rank]


def reset():
    """Forgets every communicator (before shutdown)."""
    global _world
    with _lock:
        _cache.clear()
        _given.clear()
        _world = None
        _chorus.set_world(None)
        _chorus.forget_rank_lists()
        for group in list(_with_native):
            group._native = None
        _with_native.clear()
