"""The short paths of reduce, reduce_scatter, gather, scatter, all_to_all, send and recv
(python/src/short_calls.cc, short_point_to_point.cc), as test_16 checks allreduce, broadcast and
allgather's.

The package's functions are CPython fronts (front_calls.cc) that hand the common call (one NumPy
array or torch CPU tensor, the world, blocking) straight to C++, which answers NotImplemented for
anything it does not take, so that the package's general path handles it. These tests check both
sides of that line:
  - every operation's common calls take the short path (the general path is never entered) and
    give the closed-form result, for every dtype, with a fresh result, out= and in place;
  - the short path returns what the general path returns: a copy of x from reduce's other ranks,
    x itself from gather's, `out` untouched there;
  - it declines (NotImplemented, nothing sent) every case the general path must see, and those
    calls still raise the general path's errors.
Expected values are closed forms, or NumPy's own split and concatenate of every rank's input.
"""

import numpy as np
import pytest
import torch

import chorus
from chorus import _chorus, _groups

from helpers import NP_DTYPES, exact_sum, rank_size, spy_on_general_paths, summable

GENERAL_PATHS = ["_reduce", "_reduce_scatter", "_gather", "_scatter", "_all_to_all", "_send",
                 "_recv", "_complete"]


def _native():
    return _groups.get(None)._native


def _distinct(dtype, k, n):
    """Values that differ from one k (< 16) to the next, within a dtype's exact range (bool: k's
    four bits, repeated)."""
    if dtype == "bool":
        return ((k >> (np.arange(n) % 4)) & 1).astype(bool)
    return ((np.arange(n) + 7 * k) % 100).astype(dtype)


def _assert_exactly(result, expected):
    """`result` is a NumPy array of expected's dtype (its very type code) and values."""
    assert isinstance(result, np.ndarray)
    assert result.dtype.char == np.asarray(expected).dtype.char, (result.dtype, expected.dtype)
    np.testing.assert_array_equal(result, expected)


def _spy_on_general_paths(monkeypatch):
    return spy_on_general_paths(monkeypatch, GENERAL_PATHS)


def _torch_of(array):
    return torch.from_numpy(np.ascontiguousarray(array))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_every_operation_takes_its_short_path(monkeypatch, kind):
    rank, size = rank_size()
    root = size - 1
    wrap = _torch_of if kind == "torch" else (lambda a: a)
    calls = _spy_on_general_paths(monkeypatch)
    x = wrap(np.full((2, 3), rank + 1, np.float32))
    whole = wrap(np.full((2 * size, 3), rank + 1, np.float32))
    reduced = chorus.reduce(x, root)
    parts = chorus.reduce_scatter(whole)
    gathered = chorus.gather(x, root=root, axis=1)
    dealt = chorus.scatter(wrap(np.repeat(np.arange(size, dtype=np.float32), 2)[:, None] * 10
                                + (0 if rank == root else 1)), root)
    exchanged = chorus.all_to_all(wrap(np.repeat(np.arange(size, dtype=np.float32), 2)
                                       + 100 * rank))
    if size > 1:
        partner = rank ^ 1 if rank ^ 1 < size else rank
        if partner != rank:
            if rank % 2 == 0:
                chorus.send(x, partner, tag=7)
                heard = chorus.recv(partner, (2, 3), "float32", 7)
            else:
                heard = chorus.recv(partner, out=np.empty((2, 3), np.float32), tag=7)
                chorus.send(x, partner, tag=7)
            np.testing.assert_array_equal(np.asarray(heard), np.full((2, 3), partner + 1))
    assert calls == []
    for result in (reduced, parts, gathered, dealt, exchanged):
        assert isinstance(result, torch.Tensor if kind == "torch" else np.ndarray)
    if rank == root:
        np.testing.assert_array_equal(np.asarray(reduced), np.full((2, 3), size * (size + 1) / 2))
        np.testing.assert_array_equal(np.asarray(gathered),
                                      np.repeat(np.arange(1, size + 1), 3)[None].repeat(2, 0))
    else:
        assert reduced is not x
        np.testing.assert_array_equal(np.asarray(reduced), np.asarray(x))
        assert gathered is x
    np.testing.assert_array_equal(np.asarray(parts), np.full((2, 3), size * (size + 1) / 2))
    np.testing.assert_array_equal(np.asarray(dealt), np.full((2, 1), rank * 10))
    np.testing.assert_array_equal(np.asarray(exchanged),
                                  np.repeat(100 * np.arange(size) + rank, 2))


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_the_short_paths_reduce_every_dtype(dtype):
    rank, size = rank_size()
    root = size - 1
    n = 7
    x = summable(dtype, rank, size * n)
    expected = exact_sum(dtype, size, size * n)
    before = x.copy()
    fresh = _chorus.reduce_array(_native(), x, None, root, "sum")
    out = np.empty_like(x)
    assert _chorus.reduce_array(_native(), x, out, root, "sum") is out
    if rank == root:
        _assert_exactly(fresh, expected)
        np.testing.assert_array_equal(out, expected)
    else:  # a copy of x, as the general path gives
        assert fresh is not x
        _assert_exactly(fresh, x)
        np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(x, before)
    parts = _chorus.reduce_scatter_array(_native(), x, None, "sum")
    _assert_exactly(parts, expected[rank * n:(rank + 1) * n])
    into = np.empty(n, dtype)
    assert _chorus.reduce_scatter_array(_native(), x, into, "sum") is into
    np.testing.assert_array_equal(into, parts)
    y = x.copy()
    assert _chorus.reduce_array(_native(), y, y, root, "sum") is y  # in place
    np.testing.assert_array_equal(y, expected if rank == root else x)


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_the_short_paths_move_every_dtype(dtype):
    rank, size = rank_size()
    root = 0
    n = 5
    every = [_distinct(dtype, r, n) for r in range(size)]
    x = every[rank]
    gathered = _chorus.gather_array(_native(), x, None, root, 0)
    if rank == root:
        _assert_exactly(gathered, np.concatenate(every))
    else:
        assert gathered is x
    whole = np.concatenate(every) if rank == root else np.zeros(size * n, dtype)
    dealt = _chorus.scatter_array(_native(), whole, None, root)
    _assert_exactly(dealt, x)
    blocks = np.concatenate([_distinct(dtype, rank * size + p, n) for p in range(size)])
    received = _chorus.all_to_all_array(_native(), blocks, None, 0, 0)
    _assert_exactly(
        received, np.concatenate([_distinct(dtype, q * size + rank, n) for q in range(size)]))


@pytest.mark.parametrize("axes", [(0, 0), (0, 1), (1, 0), (1, 1), (-1, 0), (2, -3)])
def test_all_to_all_along_other_axes_matches_numpy(axes):
    """Rank q's x splits along split_axis; rank r receives every rank's chunk r, concatenated
    along concat_axis (NumPy's array_split and concatenate of every rank's input)."""
    rank, size = rank_size()
    split, concat = axes

    def x_of(q):
        shape = [2, 3, 2]
        shape[split] *= size
        return (np.arange(np.prod(shape), dtype=np.float64) + 1000 * q).reshape(shape)

    expected = np.concatenate([np.split(x_of(q), size, axis=split)[rank] for q in range(size)],
                              axis=concat)
    fresh = _chorus.all_to_all_array(_native(), x_of(rank), None, split, concat)
    np.testing.assert_array_equal(fresh, expected)
    out = np.empty_like(expected)
    assert chorus.all_to_all(x_of(rank), split, concat, out=out) is out
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_along_an_axis_and_its_other_ranks(axis):
    rank, size = rank_size()
    root = size - 1
    every = [np.full((2, 3), r, np.int32) + np.arange(3, dtype=np.int32) for r in range(size)]
    untouched = np.full(np.concatenate(every, axis=axis).shape, -1, np.int32)
    out = untouched.copy()
    result = chorus.gather(every[rank], root, axis, out=out)
    if rank == root:
        assert result is out
        np.testing.assert_array_equal(out, np.concatenate(every, axis=axis))
    else:  # x itself; out checked, not written
        assert result is every[rank]
        np.testing.assert_array_equal(out, untouched)


def test_reduce_in_place_leaves_other_ranks_as_they_were():
    rank, size = rank_size()
    root = 0
    w = np.full(4, rank + 1, np.int64)
    assert chorus.reduce(w, root, "max", inplace=True) is w
    np.testing.assert_array_equal(w, np.full(4, size if rank == root else rank + 1))


@pytest.mark.parametrize("dtype", NP_DTYPES)
def test_send_and_recv_every_dtype(dtype):
    rank, size = rank_size()
    if size == 1:
        pytest.skip("send and recv need a peer")
    partner = rank ^ 1
    if partner >= size:
        return  # the odd rank out of an odd world sits this one out
    x = _distinct(dtype, rank, 6).reshape(2, 3)
    if rank % 2 == 0:
        assert _chorus.send_array(_native(), x, partner, 2) is None
        fresh = _chorus.recv_array(_native(), None, partner, 2, [2, 3], dtype)
        out = np.empty((3, 2), dtype)  # the size must agree, not the shape
        assert _chorus.recv_array(_native(), out, partner, 2, None, "float32") is out
    else:
        fresh = _chorus.recv_array(_native(), None, partner, 2, (2, 3), dtype)
        _chorus.send_array(_native(), x, partner, 2)
        _chorus.send_array(_native(), x, partner, 2)
        out = fresh
    assert fresh.shape == (2, 3)
    _assert_exactly(fresh, _distinct(dtype, partner, 6).reshape(2, 3))
    np.testing.assert_array_equal(out.reshape(2, 3), _distinct(dtype, partner, 6).reshape(2, 3))


def _declined_cases():
    """{case: (function, arguments after native)}: calls each short path must leave to the general
    path. None of them reaches C++, so every rank runs them alone."""
    _, size = rank_size()
    x = np.ones(4 * size, np.float32)
    frozen = np.ones(4 * size, np.float32)
    frozen.flags.writeable = False
    odd = np.ones(4 * size + 1, np.float32)
    return {
        "reduce of a strided input": ("reduce_array", x[::2], None, 0, "sum"),
        "reduce of a list": ("reduce_array", [x], None, 0, "sum"),
        "reduce root a bool": ("reduce_array", x, None, False, "sum"),
        "reduce root a NumPy int": ("reduce_array", x, None, np.int64(0), "sum"),
        "reduce root too large": ("reduce_array", x, None, size, "sum"),
        "reduce root negative": ("reduce_array", x, None, -1, "sum"),
        "reduce unknown op": ("reduce_array", x, None, 0, "median"),
        "reduce band of floats": ("reduce_array", x, None, 0, "band"),
        "reduce out of another dtype": ("reduce_array", x, np.empty(4 * size, np.float64), 0,
                                        "sum"),
        "reduce out of another size": ("reduce_array", x, np.empty(3, np.float32), 0, "sum"),
        "reduce read-only out": ("reduce_array", x, frozen, 0, "sum"),
        "reduce in place of a read-only x": ("reduce_array", frozen, frozen, 0, "sum"),
        "reduce in place of a read-only x elsewhere": ("reduce_array", frozen, frozen, size - 1,
                                                       "sum"),
        "reduce_scatter of a 0-d array": ("reduce_scatter_array", np.ones((), np.float32), None,
                                          "sum"),
        "reduce_scatter of a byte-swapped input": ("reduce_scatter_array",
                                                   np.ones(4 * size, ">f4"), None, "sum"),
        "reduce_scatter op not a str": ("reduce_scatter_array", x, None, None),
        "reduce_scatter out of another size": ("reduce_scatter_array", x,
                                               np.empty(5, np.float32), "sum"),
        "reduce_scatter torch out of a NumPy input": ("reduce_scatter_array", x,
                                                      torch.empty(4), "sum"),
        "gather axis out of range": ("gather_array", x, None, 0, 1),
        "gather axis a float": ("gather_array", x, None, 0, 0.0),
        "gather root out of range": ("gather_array", x, None, size, 0),
        "gather out of another dtype": ("gather_array", x, np.empty(4 * size * size, np.int32),
                                        size - 1, 0),
        "scatter root a bool": ("scatter_array", x, None, True),
        "scatter of a 0-d array": ("scatter_array", np.ones((), np.float32), None, 0),
        "scatter read-only out": ("scatter_array", x, frozen[:4], 0),
        "all_to_all split_axis out of range": ("all_to_all_array", x, None, 1, 0),
        "all_to_all concat_axis too negative": ("all_to_all_array", x, None, 0, -2),
        "all_to_all split_axis a bool": ("all_to_all_array", x, None, False, 0),
        "all_to_all strided out": ("all_to_all_array", x, np.empty(8 * size, np.float32)[::2],
                                   0, 0),
        "send peer out of range": ("send_array", x, size, 0),
        "send peer a NumPy int": ("send_array", x, np.int64(0), 0),
        "send tag negative": ("send_array", x, 0, -1),
        "send tag a bool": ("send_array", x, 0, True),
        "send of a strided input": ("send_array", x[::2], 0, 0),
        "recv from any source": ("recv_array", None, -1, 0, (4,), "float32"),
        "recv tag negative": ("recv_array", None, 0, -3, (4,), "float32"),
        "recv shape negative": ("recv_array", None, 0, 0, (-4,), "float32"),
        "recv shape of floats": ("recv_array", None, 0, 0, (4.0,), "float32"),
        "recv shape None": ("recv_array", None, 0, 0, None, "float32"),
        "recv dtype a NumPy dtype": ("recv_array", None, 0, 0, (4,), np.float32),
        "recv dtype bfloat16": ("recv_array", None, 0, 0, (4,), "bfloat16"),
        "recv dtype an alias": ("recv_array", None, 0, 0, (4,), "float"),
        "recv read-only out": ("recv_array", frozen, 0, 0, None, "float32"),
        "recv strided out": ("recv_array", np.empty(8, np.float32)[::2], 0, 0, None, "float32"),
        **({"reduce_scatter of an extent that does not divide":
            ("reduce_scatter_array", odd, None, "sum"),
            "scatter of an extent that does not divide": ("scatter_array", odd, None, 0),
            "all_to_all of an extent that does not divide": ("all_to_all_array", odd, None, 0, 0)}
           if size > 1 else {}),
    }


@pytest.mark.parametrize("case", sorted(_declined_cases()))
def test_the_short_paths_decline_what_the_general_path_handles(case):
    name, *arguments = _declined_cases()[case]
    assert getattr(_chorus, name)(_native(), *arguments) is NotImplemented


def test_declined_calls_behave_as_before(monkeypatch):
    """What the short paths decline reaches the general path, with its results and its errors."""
    rank, size = rank_size()
    calls = _spy_on_general_paths(monkeypatch)
    x = np.arange(2 * size, dtype=np.float32) + rank
    strided = np.repeat(x, 2)[::2]  # x's values, not contiguous: declined
    np.testing.assert_array_equal(
        chorus.reduce_scatter(strided),
        (np.arange(2 * size) * size + size * (size - 1) / 2)[2 * rank:2 * rank + 2])
    assert calls == ["_reduce_scatter", "_complete"]
    root = np.int64(size - 1)  # a NumPy int: the general path takes it
    gathered = chorus.gather(x, root=root)
    if rank == size - 1:
        np.testing.assert_array_equal(gathered, np.concatenate([x - rank + r for r in range(size)]))
    else:
        assert gathered is x
    assert calls[2:] == ["_gather", "_complete"]
    with pytest.raises(chorus.InvalidArgumentError, match=f"root={size} is not a member"):
        chorus.reduce(x, root=size)
    with pytest.raises(chorus.InvalidArgumentError, match="axis must be an int"):
        chorus.gather(x, axis=0.0)
    with pytest.raises(chorus.InvalidArgumentError, match="split_axis must be an int"):
        chorus.all_to_all(x, split_axis=False)
    with pytest.raises(chorus.InvalidArgumentError, match="tag must be a non-negative int"):
        chorus.send(x, 0, tag=True)
    with pytest.raises(chorus.InvalidArgumentError, match="dtype bfloat16 needs a torch dtype"):
        chorus.recv(0, (4,), "bfloat16")
    with pytest.raises(chorus.InvalidArgumentError, match="recv needs either shape"):
        chorus.recv(0)
    if size > 1:
        with pytest.raises(chorus.InvalidArgumentError, match="divisible by the group size"):
            chorus.scatter(np.ones(2 * size + 1, np.float32), 0)


def test_a_front_reads_every_parameter_its_short_path_needs():
    def recv(peer, shape=None, tag=0, out=None, rank_list=None, async_op=False,
             synchronize=False):
        pass

    def send_with_a_required_extra(x, peer, tag, extra, rank_list=None, async_op=False,
                                   synchronize=False):
        pass

    def send(x, peer, tag=0, rank_list=None, async_op=False, synchronize=False, extra=None):
        return ("general", extra)

    with pytest.raises(ValueError, match="'recv' lacks a parameter of its short path"):
        _chorus.front("recv", recv, "")
    with pytest.raises(ValueError, match="has a required parameter the short path cannot take"):
        _chorus.front("send", send_with_a_required_extra, "")
    front = _chorus.front("send", send, "send(...)\n--\n\n")
    # A parameter the short path does not read, away from its default: the general function.
    assert front(np.ones(2), 0, extra=1) == ("general", 1)
    assert front(np.ones(2), 0, synchronize=True) == ("general", None)
    assert front(np.ones(2), 0, 0, None, False, False, 5) == ("general", 5)


def test_the_fronts_bind_arguments_as_python_does(monkeypatch):
    """Positional, keyword and default arguments reach the short path in their places."""
    rank, size = rank_size()
    calls = _spy_on_general_paths(monkeypatch)
    x = (np.arange(2 * size * 3, dtype=np.int64) + 100 * rank).reshape(2 * size, 3)
    for result in (chorus.all_to_all(x, 0, 1), chorus.all_to_all(x, concat_axis=1),
                   chorus.all_to_all(x=x, split_axis=0, concat_axis=1, splits=None)):
        np.testing.assert_array_equal(
            result, np.concatenate([np.split(x - 100 * rank + 100 * q, size)[rank]
                                    for q in range(size)], axis=1))
    gathered = chorus.gather(x, size - 1, 1)
    if rank == size - 1:
        np.testing.assert_array_equal(
            gathered, np.concatenate([x - 100 * rank + 100 * q for q in range(size)], axis=1))
    assert calls == []


def test_torch_tensors_take_the_short_paths_in_bfloat16(monkeypatch):
    rank, size = rank_size()
    calls = _spy_on_general_paths(monkeypatch)
    x = torch.full((size, 2), float(rank + 1), dtype=torch.bfloat16)
    parts = chorus.reduce_scatter(x)
    reduced = chorus.reduce(x, 0, "max")
    exchanged = chorus.all_to_all(x)
    assert calls == []
    assert parts.dtype == reduced.dtype == exchanged.dtype == torch.bfloat16
    torch.testing.assert_close(parts, torch.full((1, 2), size * (size + 1) / 2,
                                                 dtype=torch.bfloat16))
    torch.testing.assert_close(reduced, torch.full((size, 2), float(size if rank == 0 else rank + 1),
                                                   dtype=torch.bfloat16))
    torch.testing.assert_close(exchanged, torch.arange(1, size + 1, dtype=torch.bfloat16)
                               [:, None].expand(size, 2).contiguous())
    y = x.clone()
    assert chorus.reduce(y, 0, inplace=True) is y
    torch.testing.assert_close(y, torch.full((size, 2), size * (size + 1) / 2 if rank == 0
                                             else rank + 1.0, dtype=torch.bfloat16))
    assert calls == []


def test_torch_outputs_of_reduce_gather_and_recv(monkeypatch):
    rank, size = rank_size()
    root = size - 1
    calls = _spy_on_general_paths(monkeypatch)
    x = torch.arange(3, dtype=torch.float64) + 10 * rank
    out = torch.full((3,), -1.0, dtype=torch.float64)
    assert chorus.reduce(x, root, out=out) is out
    torch.testing.assert_close(out, torch.arange(3, dtype=torch.float64) * size
                               + 10 * size * (size - 1) / 2 if rank == root else x)
    gathered = torch.full((3 * size,), -1.0, dtype=torch.float64)
    result = chorus.gather(x, root, out=gathered)
    if rank == root:
        assert result is gathered
        torch.testing.assert_close(gathered, torch.cat([x - 10 * rank + 10 * r
                                                        for r in range(size)]))
    else:
        assert result is x
        torch.testing.assert_close(gathered, torch.full((3 * size,), -1.0, dtype=torch.float64))
    if size > 1 and rank ^ 1 < size:
        partner = rank ^ 1
        into = torch.empty(3, dtype=torch.float64)
        if rank % 2 == 0:
            chorus.send(x, partner)
            assert chorus.recv(partner, out=into) is into
        else:
            assert chorus.recv(partner, out=into) is into
            chorus.send(x, partner)
        torch.testing.assert_close(into, x - 10 * rank + 10 * partner)
    assert calls == []
    # A NumPy out for a torch x: declined, the general path's business (which takes it).
    mixed = np.full(3 * size, -1.0)
    chorus.gather(x, root, out=mixed)
    assert calls == ["_gather", "_complete"]
    np.testing.assert_array_equal(
        mixed, np.concatenate([np.arange(3) + 10 * r for r in range(size)]) if rank == root
        else np.full(3 * size, -1.0))


def test_group_calls_take_the_short_path_with_group_ranks(monkeypatch):
    """A Group from new_group carries its communicator, whose ranks are the group ranks: calls
    with group= take the short path, roots and peers read as group ranks (here the world reversed:
    group rank g is world rank size - 1 - g)."""
    rank, size = rank_size()
    g = chorus.distributed.new_group(list(reversed(range(size))))
    me = g.rank
    assert me == size - 1 - rank
    calls = _spy_on_general_paths(monkeypatch)
    x = np.full(2, me + 1, np.float32)
    whole = np.full(2 * size, me + 1, np.float32)
    reduced = chorus.reduce(x, 0, group=g)
    gathered = chorus.gather(x, root=0, group=g)
    dealt = chorus.scatter(np.repeat(np.arange(size, dtype=np.float32), 2), 0, group=g)
    exchanged = chorus.all_to_all(np.repeat(np.arange(size, dtype=np.float32), 2) + 100 * me,
                                  group=g)
    parts = chorus.reduce_scatter(whole, group=g)
    broadcast = chorus.broadcast(x, root=size - 1, group=g)
    chorus.barrier(group=g)
    partner = me ^ 1
    if partner < size:
        if me % 2 == 0:
            chorus.send(x, partner, group=g)
            heard = chorus.recv(partner, (2,), "float32", group=g)
        else:
            heard = chorus.recv(partner, (2,), "float32", group=g)
            chorus.send(x, partner, group=g)
        np.testing.assert_array_equal(heard, np.full(2, partner + 1))
    assert calls == []
    total = size * (size + 1) / 2
    if me == 0:  # world rank size - 1
        np.testing.assert_array_equal(reduced, np.full(2, total))
        np.testing.assert_array_equal(gathered, np.repeat(np.arange(1, size + 1), 2))
    else:
        np.testing.assert_array_equal(reduced, x)
        assert gathered is x
    np.testing.assert_array_equal(dealt, np.full(2, me))
    np.testing.assert_array_equal(exchanged, np.repeat(100 * np.arange(size) + me, 2))
    np.testing.assert_array_equal(parts, np.full(2, total))
    np.testing.assert_array_equal(broadcast, np.full(2, size))


def test_a_subgroup_runs_among_its_members_only(monkeypatch):
    rank, size = rank_size()
    members = [size - 1, 0] if size > 1 else [0]
    g = chorus.distributed.new_group(members)
    calls = _spy_on_general_paths(monkeypatch)
    if g.rank >= 0:
        total = chorus.reduce(np.array([rank + 1], np.int64), root=0, group=g)
        if g.rank == 0:
            np.testing.assert_array_equal(total, [sum(m + 1 for m in members)])
        assert calls == []
    else:
        assert g._native is None
        with pytest.raises(chorus.InvalidArgumentError, match="which it is not a member of"):
            chorus.reduce(np.ones(1), root=0, group=g)
        assert calls == []  # refused by the front's general function, before any general path


def test_a_group_forgotten_by_a_reset_takes_the_general_path(monkeypatch):
    """After the package forgets its communicators (as chorus.shutdown does), a Group's calls go
    through the general path, which finds the group's communicator anew."""
    rank, size = rank_size()
    g = chorus.distributed.new_group(list(range(size)))
    assert g._native is not None
    _groups.reset()
    assert g._native is None
    calls = _spy_on_general_paths(monkeypatch)
    np.testing.assert_array_equal(chorus.reduce(np.ones(3), 0, group=g),
                                  np.full(3, size) if rank == 0 else np.ones(3))
    assert calls == ["_reduce", "_complete"]
