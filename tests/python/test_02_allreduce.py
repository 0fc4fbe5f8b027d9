"""allreduce: every op x dtype x input kind, shapes (empty, odd, 2-D), fused lists (DESIGN §4)."""

import numpy as np
import pytest

import chorus
from helpers import (ALL_OPS, avg_rtol, case_id, check_result, kind_dtype_cases, make, op_valid,
                     reduce_exact, snapshot, stored, assert_unchanged, values)

CASES = [(kind, dtype, op) for kind, dtype in kind_dtype_cases() for op in ALL_OPS
         if op_valid(op, dtype)]


def run_allreduce(rank, size, kind, dtype, op, shape):
    x = make(kind, values(rank, shape, dtype, op), dtype)
    before = snapshot(x)
    result = chorus.allreduce(x, op)
    expected = reduce_exact(op, [values(r, shape, dtype, op) for r in range(size)], dtype)
    rtol = avg_rtol(dtype) if op == "avg" else 0.0
    check_result(result, kind, dtype, expected, rtol)
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype,op", CASES, ids=case_id)
def test_allreduce_op_dtype(rank, size, kind, dtype, op):
    run_allreduce(rank, size, kind, dtype, op, (3, 5))


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 0, 3), (300007,)], ids=str)
@pytest.mark.parametrize("kind,dtype", kind_dtype_cases(["float32", "int64", "bfloat16"]),
                         ids=case_id)
def test_allreduce_shapes(rank, size, kind, dtype, shape):
    run_allreduce(rank, size, kind, dtype, "sum", shape)


def test_allreduce_default_op_is_sum(rank, size):
    x = make("numpy", values(rank, (11,), "float32"), "float32")
    expected = reduce_exact("sum", [values(r, (11,), "float32") for r in range(size)], "float32")
    check_result(chorus.allreduce(x), "numpy", "float32", expected)


def test_allreduce_keyword_op(rank, size):
    x = make("torch", values(rank, (4,), "int32"), "int32")
    expected = reduce_exact("max", [values(r, (4,), "int32") for r in range(size)], "int32")
    check_result(chorus.allreduce(x, op="max"), "torch", "int32", expected)


def test_allreduce_scalar_shape(rank, size):
    x = np.array(float(rank + 1), dtype=np.float64)
    result = chorus.allreduce(x)
    check_result(result, "numpy", "float64", np.array(size * (size + 1) / 2))


def test_allreduce_half_accumulates_in_float32(rank, size):
    # 2048 + 1 + 1 + ... is not representable step by step in float16 (2049 rounds to 2048), but
    # the float32 accumulation rounds once: 2048 + (size - 1) on every rank but 0's 2048.
    vals = np.full((9,), 2048.0 if rank == 0 else 1.0)
    for kind, dtype in [("numpy", "float16"), ("torch", "float16"), ("torch", "bfloat16")]:
        result = chorus.allreduce(make(kind, vals, dtype))
        exact = np.full((9,), 2048.0 + (size - 1))
        check_result(result, kind, dtype, stored(exact, dtype))


@pytest.mark.parametrize("kind,dtype", kind_dtype_cases(["float32", "bfloat16", "int8", "bool"]),
                         ids=case_id)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_allreduce_list_fused(rank, size, kind, dtype, op):
    shapes = [(5,), (0,), (2, 3), (1,), (4, 1, 2)]
    xs = [make(kind, values(rank + i, shape, dtype, op), dtype) for i, shape in enumerate(shapes)]
    befores = [snapshot(x) for x in xs]
    results = chorus.allreduce(xs, op)
    assert isinstance(results, list), f"list in should give a list out, got {type(results)}"
    assert len(results) == len(xs)
    for i, (shape, result) in enumerate(zip(shapes, results)):
        expected = reduce_exact(op, [values(r + i, shape, dtype, op) for r in range(size)], dtype)
        check_result(result, kind, dtype, expected)
    for x, before in zip(xs, befores):
        assert_unchanged(x, before)


def test_allreduce_list_single_and_empty_list(rank, size):
    x = make("numpy", values(rank, (3,), "int32"), "int32")
    results = chorus.allreduce([x], "sum")
    assert isinstance(results, list) and len(results) == 1
    expected = reduce_exact("sum", [values(r, (3,), "int32") for r in range(size)], "int32")
    check_result(results[0], "numpy", "int32", expected)
    assert chorus.allreduce([], "sum") == []


def test_allreduce_mib_sized(rank, size):
    n = (4 << 20) // 4 + 3  # 4 MiB of float32, odd count
    x = np.full((n,), float(rank + 1), dtype=np.float32)
    x[::1024] = -float(rank)
    result = chorus.allreduce(x, "sum")
    expected = np.full((n,), size * (size + 1) / 2, dtype=np.float64)
    expected[::1024] = -size * (size - 1) / 2
    check_result(result, "numpy", "float32", expected)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_allreduce_non_contiguous_input(rank, size, kind):
    base_vals = values(rank, (4, 6), "float64")
    base = make(kind, base_vals, "float64")
    view = base[:, ::2]
    before = snapshot(base)
    result = chorus.allreduce(view, "sum")
    expected = reduce_exact("sum", [values(r, (4, 6), "float64")[:, ::2] for r in range(size)],
                            "float64")
    check_result(result, kind, "float64", expected)
    assert_unchanged(base, before)
    # A transposed view too.
    t = base.T
    expected_t = reduce_exact("sum", [values(r, (4, 6), "float64").T for r in range(size)],
                              "float64")
    check_result(chorus.allreduce(t, "sum"), kind, "float64", expected_t)
