"""The short paths of the uneven collectives (python/src/short_uneven.cc): all_to_all with splits
and allgather with uneven=True, on one NumPy array or torch CPU tensor, go straight to C++, whose
agreement (python/src/uneven_agreement.h) the package's general path (chorus/_uneven.py) shares.

These tests check:
  - the common calls take the short path (the general path is never entered), blocking or async,
    on the world, a rank_list and a group, with the closed-form rows and counts;
  - ranks on the short path and ranks on the general path meet: one rank's call declined (its
    splits a NumPy array, its x strided) still gives every rank the closed-form result;
  - errors reach every rank alike from the short path: rows of another dtype or shape, recv_splits
    that disagree, and a call that one rank refuses while the others take the short path;
  - the direct functions decline what the general path must see;
  - the signatures tell dtypes, dimensions and devices apart.
Expected values are closed forms of (sender, receiver, row): rank q sends rank p (q + 2p) % 3
rows (some pairs none), row k of them holding [q, p, k].
"""

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist
from chorus import _chorus, _groups, _ops, _uneven

from helpers import TORCH_DTYPES, rank_size


def rows_between(q, p):
    return (q + 2 * p) % 3


def outgoing(rank, size, kind="numpy", dtype=np.int64):
    """This rank's rows for every rank, in rank order, and the splits (a list)."""
    splits = [rows_between(rank, p) for p in range(size)]
    rows = [[rank, p, k] for p in range(size) for k in range(splits[p])]
    array = np.array(rows, dtype=dtype).reshape(-1, 3)
    return (torch.from_numpy(array) if kind == "torch" else array), splits


def incoming(rank, size, dtype=np.int64):
    splits = [rows_between(q, rank) for q in range(size)]
    rows = [[q, rank, k] for q in range(size) for k in range(splits[q])]
    return np.array(rows, dtype=dtype).reshape(-1, 3), splits


def gathered_rows(size):
    """allgather(uneven=True) of rank r's r + 1 rows [r, k, 7]."""
    return np.array([[r, k, 7] for r in range(size) for k in range(r + 1)],
                    dtype=np.float32).reshape(-1, 3)


def my_rows(rank):
    return np.array([[rank, k, 7] for k in range(rank + 1)], dtype=np.float32).reshape(-1, 3)


@pytest.fixture
def general_calls(monkeypatch):
    """Records each entry into the general paths of the uneven forms."""
    calls = []
    for name in ("all_to_all", "allgather"):
        real = getattr(_uneven, name)

        def spy(*args, _name=name, _real=real, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(_uneven, name, spy)
    real_complete = _ops._complete

    def complete(*args, **kwargs):
        calls.append("_complete")
        return real_complete(*args, **kwargs)

    monkeypatch.setattr(_ops, "_complete", complete)
    return calls


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_common_calls_take_the_short_path(general_calls, kind):
    rank, size = rank_size()
    x, splits = outgoing(rank, size, kind)
    expected, expected_splits = incoming(rank, size)
    y, received = chorus.all_to_all(x, splits=splits)
    assert isinstance(y, torch.Tensor if kind == "torch" else np.ndarray)
    assert received == expected_splits
    np.testing.assert_array_equal(np.asarray(y), expected)
    y, received = chorus.all_to_all(x, splits=tuple(splits), recv_splits=expected_splits)
    np.testing.assert_array_equal(np.asarray(y), expected)
    y, received = chorus.all_to_all(x, splits=splits, async_op=True).wait()
    assert received == expected_splits
    np.testing.assert_array_equal(np.asarray(y), expected)
    mine = my_rows(rank) if kind == "numpy" else torch.from_numpy(my_rows(rank))
    gathered = chorus.allgather(mine, uneven=True)
    assert isinstance(gathered, torch.Tensor if kind == "torch" else np.ndarray)
    np.testing.assert_array_equal(np.asarray(gathered), gathered_rows(size))
    gathered = chorus.allgather(mine, uneven=True, async_op=True).wait()
    np.testing.assert_array_equal(np.asarray(gathered), gathered_rows(size))
    even = chorus.allgather(np.full((2, 3), rank, np.float32), uneven=True)  # extents equal
    np.testing.assert_array_equal(even, np.repeat(np.arange(size, dtype=np.float32), 6)
                                  .reshape(2 * size, 3))
    assert general_calls == []


@pytest.fixture
def fresh_groups():
    yield
    _groups.reset()  # the package forgets the groups made here


def test_a_rank_list_and_a_group_take_the_short_path_too(general_calls, fresh_groups):
    rank, size = rank_size()
    members = list(reversed(range(size)))  # group rank g is world rank size - 1 - g
    group = dist.new_group(members)
    group_rank = members.index(rank)
    x, splits = outgoing(group_rank, size)
    expected, expected_splits = incoming(group_rank, size)
    chorus.all_to_all(x, splits=splits, rank_list=[members])  # resolves the rank_list
    del general_calls[:]
    for kwargs in (dict(rank_list=[members]), dict(group=group)):
        y, received = chorus.all_to_all(x, splits=splits, **kwargs)
        assert received == expected_splits
        np.testing.assert_array_equal(y, expected)
        gathered = chorus.allgather(my_rows(group_rank), uneven=True, **kwargs)
        np.testing.assert_array_equal(gathered, gathered_rows(size))
    assert general_calls == []


@pytest.mark.parametrize("declined", ["numpy splits", "strided x", "numpy recv_splits"])
def test_ranks_on_either_path_meet(general_calls, declined):
    """Rank 0's call takes the general path, the others' the short path: every rank still gets
    the closed-form rows (with recv_splits on rank 0 only, after a round of verdicts)."""
    rank, size = rank_size()
    x, splits = outgoing(rank, size)
    expected, expected_splits = incoming(rank, size)
    mine = my_rows(rank)
    recv_splits = None
    if rank == 0:
        if declined == "numpy splits":
            splits = np.array(splits)
        elif declined == "strided x":
            x = np.repeat(x, 2, axis=1)[:, ::2]
            mine = np.repeat(mine, 2, axis=1)[:, ::2]
        else:
            recv_splits = [np.int64(n) for n in expected_splits]
    y, received = chorus.all_to_all(x, splits=splits, recv_splits=recv_splits)
    assert received == expected_splits
    np.testing.assert_array_equal(np.asarray(y), expected)
    gathered = chorus.allgather(mine, uneven=True)
    np.testing.assert_array_equal(np.asarray(gathered), gathered_rows(size))
    # (An x of no rows is contiguous however it was cut: one rank alone sends itself none.)
    declined_here = rank == 0 and (declined != "strided x" or not x.flags.c_contiguous)
    assert ("all_to_all" in general_calls) == declined_here
    assert ("allgather" in general_calls) == (rank == 0 and declined == "strided x")


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("row_shape", [(), (2,), (2, 1, 3)])
def test_either_path_takes_rows_of_every_kind(general_calls, dtype, row_shape):
    """Every dtype, rows of no, one and three more dimensions, and nothing sent to group rank 0:
    rank 0's call declined (its splits a NumPy array, its allgather input strided), the others'
    short; torch tensors (bfloat16 has no NumPy form). Rank q sends rank p > 0 (q + p) % 2 + 1
    rows, row k of them all (q * 8 + p * 2 + k) % 5 (exact in every dtype; bool: nonzero)."""
    rank, size = rank_size()

    def rows(q, p, n):
        values = [(q * 8 + p * 2 + k) % 5 for k in range(n)]
        block = torch.tensor(values, dtype=torch.float64).reshape((n,) + (1,) * len(row_shape))
        return block.expand((n,) + row_shape).to(getattr(torch, dtype))

    def count(q, p):
        return 0 if p == 0 else (q + p) % 2 + 1

    splits = [count(rank, p) for p in range(size)]
    x = torch.cat([rows(rank, p, splits[p]) for p in range(size)]).contiguous()
    y, received = chorus.all_to_all(x, splits=np.array(splits) if rank == 0 else splits)
    assert received == [count(q, rank) for q in range(size)]
    assert y.dtype == x.dtype and tuple(y.shape[1:]) == row_shape
    expected = torch.cat([rows(q, rank, count(q, rank)) for q in range(size)])
    assert torch.equal(y, expected)
    mine = rows(rank, rank, rank + 1)
    if rank == 0:  # strided, and so declined
        mine = torch.stack([mine, mine], dim=1)[:, 0]
    gathered = chorus.allgather(mine, uneven=True)
    assert torch.equal(gathered, torch.cat([rows(r, r, r + 1) for r in range(size)]))
    assert ("all_to_all" in general_calls) == (rank == 0)


def test_rows_of_another_kind_fail_on_every_rank(general_calls):
    rank, size = rank_size()
    if size == 1:
        pytest.skip("needs two ranks")
    x, splits = outgoing(rank, size, dtype=np.int64 if rank else np.int32)
    with pytest.raises(chorus.MismatchError, match="different dtypes, devices or dimensions"):
        chorus.all_to_all(x, splits=splits)
    wide = np.zeros((sum(splits), 4 if rank else 3), np.int64)
    with pytest.raises(chorus.MismatchError, match="different dtypes, devices or dimensions"):
        chorus.all_to_all(wide, splits=splits)
    with pytest.raises(chorus.MismatchError, match="extents other than along axis 0"):
        chorus.allgather(np.zeros((rank + 1, 3 if rank else 2), np.float32), uneven=True)
    with pytest.raises(chorus.MismatchError, match="extents other than along axis 0"):
        chorus.allgather(np.zeros((rank + 1, 3), np.float32 if rank else np.float64),
                         uneven=True)
    assert general_calls == []
    chorus.barrier()


def test_recv_splits_that_disagree_fail_on_every_rank(general_calls):
    rank, size = rank_size()
    x, splits = outgoing(rank, size)
    _, expected_splits = incoming(rank, size)
    last = size - 1
    if rank == last:
        expected_splits[0] += 1  # the last rank expects one row more from rank 0
    with pytest.raises(chorus.MismatchError,
                       match=f"group rank 0 sends {rows_between(0, last)} rows to group rank "
                             f"{last}, which expects {rows_between(0, last) + 1} "
                             r"\(recv_splits\)"):
        chorus.all_to_all(x, splits=splits, recv_splits=expected_splits if rank == last else None)
    assert general_calls == []
    chorus.barrier()


def test_a_call_one_rank_refuses_fails_on_every_rank():
    """The last rank's splits do not add up to its rows: it raises the general path's error, and
    the others, on the short path, name it."""
    rank, size = rank_size()
    x, splits = outgoing(rank, size)
    last = size - 1
    if rank == last:
        splits = [n + 1 for n in splits]
        with pytest.raises(chorus.InvalidArgumentError, match="splits add up to"):
            chorus.all_to_all(x, splits=splits)
        with pytest.raises(chorus.InvalidArgumentError, match="out of range"):
            chorus.allgather(my_rows(rank), axis=2, uneven=True)
    else:
        with pytest.raises(chorus.MismatchError, match=f"group rank {last}'s call was refused"):
            chorus.all_to_all(x, splits=splits)
        with pytest.raises(chorus.MismatchError, match=f"group rank {last}'s call was refused"):
            chorus.allgather(my_rows(rank), uneven=True)
    chorus.barrier()


BAD_ALL_TO_ALL = {
    "out=": (dict(out=np.zeros(1)), "does not take out="),
    "split_axis": (dict(split_axis=1), "split_axis and concat_axis must be 0"),
    "synchronize": (dict(synchronize=1), "synchronize must be True or False"),
    "recv_splits without splits": (dict(splits=None, recv_splits=[0]), "needs splits"),
    "a list x": (dict(x=[np.zeros(3)]), "takes one array, not a list"),
}
BAD_ALLGATHER = {
    "uneven=1": (dict(uneven=1), "uneven must be True or False"),
    "out=": (dict(out=np.zeros(1)), "does not take out="),
    "synchronize": (dict(synchronize="yes"), "synchronize must be True or False"),
}


@pytest.mark.parametrize("case", sorted(BAD_ALL_TO_ALL))
def test_a_bad_argument_on_one_rank_fails_every_rank_at_once(case):
    """Arguments the package refuses before any row moves still join the agreement, as a
    refusal: the others raise at once instead of waiting for the timeout."""
    rank, size = rank_size()
    x, splits = outgoing(rank, size)
    last = size - 1
    changes, message = BAD_ALL_TO_ALL[case]
    kwargs = dict(x=x, splits=splits)
    if rank == last:
        kwargs.update(changes)
        with pytest.raises(chorus.InvalidArgumentError, match=message):
            chorus.all_to_all(**kwargs)
    else:
        with pytest.raises(chorus.MismatchError, match=f"group rank {last}'s call was refused"):
            chorus.all_to_all(**kwargs)
    allgather_case = BAD_ALLGATHER.get(case)
    if allgather_case is not None:
        changes, message = allgather_case
        kwargs = dict(x=my_rows(rank), uneven=True)
        if rank == last:
            kwargs.update(changes)
            with pytest.raises(chorus.InvalidArgumentError, match=message):
                chorus.allgather(**kwargs)
        else:
            with pytest.raises(chorus.MismatchError,
                               match=f"group rank {last}'s call was refused"):
                chorus.allgather(**kwargs)
    chorus.barrier()


def test_uneven_1_on_one_rank_fails_every_rank_at_once():
    rank, size = rank_size()
    last = size - 1
    if rank == last:
        with pytest.raises(chorus.InvalidArgumentError, match="uneven must be True or False"):
            chorus.allgather(my_rows(rank), uneven=1)
    else:
        with pytest.raises(chorus.MismatchError, match=f"group rank {last}'s call was refused"):
            chorus.allgather(my_rows(rank), uneven=True)
    chorus.barrier()


def test_the_direct_functions_decline_what_the_general_path_must_see():
    """NotImplemented, before anything is sent (so one rank alone may call each)."""
    rank, size = rank_size()
    native = _groups.get(None)._native
    x = np.zeros((size, 3), np.int64)
    ones = [1] * size
    declined = {
        "splits a NumPy array": (x, np.array(ones), None),
        "splits too short": (x, ones[:-1], None),
        "a negative split": (x, [-1] + [1] * (size - 1), None),
        "a bool split": (x, [True] * size, None),
        "splits that do not add up": (x, [2] * size, None),
        "recv_splits a generator": (x, ones, (n for n in ones)),
        "a 0-d x": (np.zeros((), np.int64), ones, None),
        "a strided x": (np.zeros((size, 6), np.int64)[:, ::2], ones, None),
        "splits past x's rows": (np.zeros((0, 3), np.int64), [_chorus.most_rows - 1] * size,
                                 None),
        "a split past the most rows": (np.zeros((0, 3), np.int64), [_chorus.most_rows] * size,
                                       None),
    }
    for case, args in declined.items():
        assert _chorus.all_to_all_splits_array(native, *args) is NotImplemented, case
    rows = np.zeros((2, 3), np.float32)
    assert _chorus.allgather_uneven_array(native, rows, 1, True) is NotImplemented
    assert _chorus.allgather_uneven_array(native, rows, 0, 1) is NotImplemented
    assert _chorus.allgather_uneven_array(native, rows, 0.0, True) is NotImplemented
    assert _chorus.allgather_uneven_array(native, np.float32(1) * np.ones(()), 0, True) \
        is NotImplemented


def test_the_padded_path_stays_the_general_paths(general_calls, monkeypatch):
    """Tests send host rows through the padded exchange of CUDA rows, which only the general
    path makes: the short path declines then."""
    monkeypatch.setattr(_uneven, "_PADDED_ON_HOST", True)
    rank, size = rank_size()
    x, splits = outgoing(rank, size)
    y, received = chorus.all_to_all(x, splits=splits)
    expected, expected_splits = incoming(rank, size)
    np.testing.assert_array_equal(y, expected)
    assert general_calls[0] == "all_to_all"


def test_the_signatures_tell_kinds_apart():
    """Rows: the dimensions after the first count, the first does not. Extents: every dimension
    but along the axis counts, and the axis itself."""
    base = _chorus.rows_signature("float32", [7, 3, 4], False)
    assert base == _chorus.rows_signature("float32", [9, 3, 4], False) >= 0
    others = [_chorus.rows_signature("float64", [7, 3, 4], False),
              _chorus.rows_signature("float32", [7, 4, 3], False),
              _chorus.rows_signature("float32", [7, 3, 4, 1], False),
              _chorus.rows_signature("float32", [7, 34], False),
              _chorus.rows_signature("float32", [7, 3, 4], True)]
    assert base not in others and len(set(others)) == len(others)
    gathered = _chorus.extents_signature("int8", [2, 5, 6], 1, False)
    assert gathered == _chorus.extents_signature("int8", [2, 9, 6], 1, False) >= 0
    others = [_chorus.extents_signature("int8", [3, 5, 6], 1, False),
              _chorus.extents_signature("int8", [2, 5, 6], 0, False),
              _chorus.extents_signature("int8", [2, 5, 6, 1], 1, False),
              _chorus.extents_signature("uint8", [2, 5, 6], 1, False),
              _chorus.extents_signature("int8", [2, 5, 6], 1, True)]
    assert gathered not in others and len(set(others)) == len(others)
