"""allreduce: every op x dtype x input kind, shapes (empty, odd, 2-D), fused lists (DESIGN §4)."""

import itertools
import math

import numpy as np
import pytest
import torch

import chorus
from helpers import (ALL_OPS, avg_rtol, case_id, check_result, kind_dtype_cases, make, op_valid,
                     reduce_exact, snapshot, stored, assert_unchanged, torch_dtype,
                     values)

CASES = [(kind, dtype, op) for kind, dtype in kind_dtype_cases() for op in ALL_OPS
         if op_valid(op, dtype, kind)]


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


HALF_CASES = [("numpy", "float16"), ("torch", "float16"), ("torch", "bfloat16")]
# The power of two whose ulp is 2 in each half type (11 and 8 significand bits): 1 is half an ulp.
HALF_ULP2 = {"float16": 2048.0, "bfloat16": 256.0}


def half_accumulation_values(rank, size, dtype):
    """Element k is HALF_ULP2 on rank k and 1 on the other ranks (k < size)."""
    return np.where(np.arange(size) == rank, HALF_ULP2[dtype], 1.0)


def rounded_each_step(order, size, dtype):
    """What a kernel that rounds to `dtype` after every addition gives, adding ranks in `order`."""
    acc = half_accumulation_values(order[0], size, dtype)
    for r in order[1:]:
        acc = stored(acc + half_accumulation_values(r, size, dtype), dtype)
    return acc


@pytest.mark.parametrize("kind,dtype", HALF_CASES, ids=[case_id(c) for c in HALF_CASES])
def test_allreduce_half_accumulates_in_float32(rank, size, kind, dtype):
    """float16 and bfloat16 sums accumulate in float32 and round once at the end.

    Added one at a time to a running sum near B = HALF_ULP2, each 1 is a tie and rounds away (to
    even) unless the 1s have already met; in float32 they all count: element k is B + size - 1,
    rounded once. From 3 ranks, whatever order the ranks are added in (rank order, or a rank's own
    first), some element differs when rounded after each addition: asserted below by enumerating
    the orders. At 2 ranks an element is one addition, rounded once either way, so no sum can tell
    the two apart; the avg case below does."""
    result = chorus.allreduce(make(kind, half_accumulation_values(rank, size, dtype), dtype))
    expected = stored(np.full(size, HALF_ULP2[dtype] + (size - 1)), dtype)
    check_result(result, kind, dtype, expected)
    if 3 <= size <= 6:  # size! orders: the suite runs at 1 to 4 ranks
        for order in itertools.permutations(range(size)):
            naive = rounded_each_step(order, size, dtype)
            assert not np.array_equal(naive, expected), f"values cannot tell order {order} apart"


@pytest.mark.parametrize("kind,dtype", HALF_CASES, ids=[case_id(c) for c in HALF_CASES])
def test_allreduce_half_avg_accumulates_in_float32(rank, size, kind, dtype):
    """avg of float16 and bfloat16 sums in float32, so a sum past the type's range still averages.

    Rank 0 holds the type's largest value M, rank 1 three quarters of M's ulp, the others 0: the sum
    is finite in float32 but rounds to inf in the half type, in whatever order the ranks are added.
    This tells the two apart from 2 ranks on, where a sum cannot (see above)."""
    largest = float(torch.finfo(torch_dtype(dtype)).max)
    ulp = 2.0 ** (math.floor(math.log2(largest)) + 1) - largest
    vals = np.full(4, [largest, 0.75 * ulp, 0.0][min(rank, 2)])
    result = chorus.allreduce(make(kind, vals, dtype), "avg")
    total = largest + (0.75 * ulp if size >= 2 else 0.0)
    with np.errstate(over="ignore"):
        assert size == 1 or not np.isfinite(stored(total, dtype)), "the sum must overflow the type"
    check_result(result, kind, dtype, stored(np.full(4, total / size), dtype), avg_rtol(dtype))


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
