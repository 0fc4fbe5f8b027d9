"""allgather, reduce_scatter, broadcast, reduce, gather, scatter, all_to_all, barrier (DESIGN §4).

Every rank's input is a closed form of its rank (helpers.values); the expected result is built with
NumPy from the inputs of all ranks. Each test checks kind, dtype, shape, values, and that the input
was not modified.
"""

import numpy as np
import pytest

import chorus
from helpers import (assert_unchanged, case_id, check_result, kind_dtype_cases, make, reduce_exact,
                     snapshot, stored, values)

CASES = kind_dtype_cases()


def both_roots():
    # Parametrized by position so that every rank collects the same ids whatever the size.
    return pytest.mark.parametrize("root_pos", ["first", "last"])


def pick_root(root_pos, size):
    return 0 if root_pos == "first" else size - 1


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_allgather(rank, size, kind, dtype, axis):
    x = make(kind, values(rank, (2, 3), dtype), dtype)
    before = snapshot(x)
    result = chorus.allgather(x, axis=axis)
    expected = np.concatenate([stored(values(r, (2, 3), dtype), dtype) for r in range(size)],
                              axis=axis)
    check_result(result, kind, dtype, expected)
    assert_unchanged(x, before)


def test_allgather_default_axis_and_odd_shapes(rank, size):
    for shape in [(0, 4), (7,), (1, 1, 5)]:
        x = make("torch", values(rank, shape, "int32"), "int32")
        expected = np.concatenate([values(r, shape, "int32") for r in range(size)], axis=0)
        check_result(chorus.allgather(x), "torch", "int32", expected)


def test_allgather_list(rank, size):
    shapes = [(2,), (3, 2)]
    xs = [make("numpy", values(rank + i, s, "float32"), "float32") for i, s in enumerate(shapes)]
    results = chorus.allgather(xs, axis=0)
    assert isinstance(results, list) and len(results) == 2
    for i, (shape, result) in enumerate(zip(shapes, results)):
        expected = np.concatenate([values(r + i, shape, "float32") for r in range(size)], axis=0)
        check_result(result, "numpy", "float32", expected)


@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_reduce_scatter_array(rank, size, kind, dtype, op):
    shape = (size * 2, 3)
    x = make(kind, values(rank, shape, dtype, op), dtype)
    before = snapshot(x)
    result = chorus.reduce_scatter(x, op)
    full = reduce_exact(op, [values(r, shape, dtype, op) for r in range(size)], dtype)
    check_result(result, kind, dtype, full[2 * rank:2 * rank + 2])
    assert_unchanged(x, before)


def test_reduce_scatter_default_op_is_sum(rank, size):
    shape = (size * 3,)
    x = make("numpy", values(rank, shape, "int64"), "int64")
    full = reduce_exact("sum", [values(r, shape, "int64") for r in range(size)], "int64")
    check_result(chorus.reduce_scatter(x), "numpy", "int64", full[3 * rank:3 * rank + 3])


@pytest.mark.parametrize("kind,dtype", kind_dtype_cases(["float32", "bfloat16", "int32"]),
                         ids=case_id)
def test_reduce_scatter_list(rank, size, kind, dtype):
    # Item i of rank r holds values(r + 10 i); the result is the sum over ranks of item `rank`.
    xs = [make(kind, values(rank + 10 * i, (4, 2), dtype), dtype) for i in range(size)]
    befores = [snapshot(x) for x in xs]
    result = chorus.reduce_scatter(xs, "sum")
    expected = reduce_exact("sum", [values(r + 10 * rank, (4, 2), dtype) for r in range(size)],
                            dtype)
    check_result(result, kind, dtype, expected)
    for x, before in zip(xs, befores):
        assert_unchanged(x, before)


@both_roots()
@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_broadcast(rank, size, kind, dtype, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, values(rank, (3, 5), dtype), dtype)
    before = snapshot(x)
    result = chorus.broadcast(x, root=root)
    check_result(result, kind, dtype, stored(values(root, (3, 5), dtype), dtype))
    assert_unchanged(x, before)


def test_broadcast_empty_and_positional_root(rank, size):
    x = make("numpy", np.zeros((0, 3)), "float64")
    check_result(chorus.broadcast(x, 0), "numpy", "float64", np.zeros((0, 3)))
    y = make("numpy", values(rank, (7,), "int8"), "int8")
    check_result(chorus.broadcast(y, size - 1), "numpy", "int8",
                 values(size - 1, (7,), "int8"))


@both_roots()
@pytest.mark.parametrize("op", ["sum", "min"])
@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_reduce(rank, size, kind, dtype, op, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, values(rank, (3, 5), dtype, op), dtype)
    before = snapshot(x)
    result = chorus.reduce(x, root=root, op=op)
    if rank == root:
        expected = reduce_exact(op, [values(r, (3, 5), dtype, op) for r in range(size)], dtype)
    else:
        expected = stored(values(rank, (3, 5), dtype, op), dtype)
    check_result(result, kind, dtype, expected)
    assert_unchanged(x, before)


@both_roots()
@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_gather(rank, size, kind, dtype, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, values(rank, (2, 3), dtype), dtype)
    before = snapshot(x)
    result = chorus.gather(x, root=root, axis=0)
    if rank == root:
        expected = np.concatenate([stored(values(r, (2, 3), dtype), dtype) for r in range(size)])
    else:
        expected = stored(values(rank, (2, 3), dtype), dtype)
    check_result(result, kind, dtype, expected)
    assert_unchanged(x, before)


def test_gather_axis_1(rank, size):
    x = make("torch", values(rank, (2, 3), "float32"), "float32")
    result = chorus.gather(x, root=0, axis=1)
    if rank == 0:
        expected = np.concatenate([values(r, (2, 3), "float32") for r in range(size)], axis=1)
    else:
        expected = values(rank, (2, 3), "float32")
    check_result(result, "torch", "float32", expected)


@both_roots()
@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_scatter(rank, size, kind, dtype, root_pos):
    # Every rank passes an array of the full shape; only the root's content matters.
    root = pick_root(root_pos, size)
    shape = (size * 2, 3)
    x = make(kind, values(rank, shape, dtype), dtype)
    before = snapshot(x)
    result = chorus.scatter(x, root=root)
    full = stored(values(root, shape, dtype), dtype)
    check_result(result, kind, dtype, full[2 * rank:2 * rank + 2])
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_all_to_all_axis_0_0(rank, size, kind, dtype):
    shape = (size * 2, 3)
    x = make(kind, values(rank, shape, dtype), dtype)
    before = snapshot(x)
    result = chorus.all_to_all(x, split_axis=0, concat_axis=0)
    expected = np.concatenate(
        [stored(values(r, shape, dtype), dtype)[2 * rank:2 * rank + 2] for r in range(size)],
        axis=0)
    check_result(result, kind, dtype, expected)
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype", kind_dtype_cases(["float64", "bfloat16", "int8", "bool"]),
                         ids=case_id)
def test_all_to_all_axis_1_0(rank, size, kind, dtype):
    shape = (2, size * 3)
    x = make(kind, values(rank, shape, dtype), dtype)
    before = snapshot(x)
    result = chorus.all_to_all(x, split_axis=1, concat_axis=0)
    expected = np.concatenate(
        [stored(values(r, shape, dtype), dtype)[:, 3 * rank:3 * rank + 3] for r in range(size)],
        axis=0)
    check_result(result, kind, dtype, expected)
    assert_unchanged(x, before)


def test_all_to_all_defaults(rank, size):
    shape = (size, 4)
    x = make("numpy", values(rank, shape, "int64"), "int64")
    expected = np.stack([values(r, shape, "int64")[rank] for r in range(size)])
    check_result(chorus.all_to_all(x), "numpy", "int64", expected)


def test_barrier_returns_none():
    assert chorus.barrier() is None
    assert chorus.barrier(rank_list=None) is None


def test_non_contiguous_inputs_are_copied(rank, size):
    base = make("torch", values(rank, (4, 6), "int32"), "int32")
    view = base[:, ::2]
    expected = np.concatenate([values(r, (4, 6), "int32")[:, ::2] for r in range(size)], axis=0)
    check_result(chorus.allgather(view, axis=0), "torch", "int32", expected)
    npbase = make("numpy", values(rank, (6, 4), "float32"), "float32")
    check_result(chorus.broadcast(npbase.T, root=0), "numpy", "float32",
                 values(0, (6, 4), "float32").T)


def test_mib_sized_allgather_and_broadcast(rank, size):
    n = (2 << 20) // 8  # 2 MiB of float64 per rank
    x = np.arange(n, dtype=np.float64) + rank * n
    result = chorus.allgather(x)
    check_result(result, "numpy", "float64", np.arange(n * size, dtype=np.float64))
    y = np.arange(n, dtype=np.float64) * (rank + 1)
    check_result(chorus.broadcast(y, root=size - 1), "numpy", "float64",
                 np.arange(n, dtype=np.float64) * size)
