"""Inputs and closed forms for the soak (soak_rank.py): what each rank passes and what it gets.

An input is a hash of (key, group rank, element index), turned into small integers for which every
reduction is exact in every dtype, fp16 and bf16 included (they accumulate in fp32 and round once):
sums of values in [-3, 3] (at most 8 ranks), products of +-1 with at most six 2s (|product| <= 64
fits int8), min/max in [-60, 60], avg only where each column's sum is a multiple of the group
size, bitwise ops on 8- or 16-bit patterns. Values are logical int64 arrays; the closed form of a
reduction is computed on them in int64, independently of chorus. Complex inputs (sum, prod and avg
only) take their real and imaginary parts from two such float inputs, as complex128: Gaussian
integers, whose sums, averages and products (parts of at most 1024, every partial product exact
in float32) are exact in complex64.
"""

import zlib

import numpy as np

UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
COMPLEX = ("complex64", "complex128")


def _hash(key, count):
    """uint32 pseudo-random words for elements 0..count-1 of the input named by `key`."""
    base = np.uint32(zlib.crc32(key.encode()))
    x = np.arange(count, dtype=np.uint32) * np.uint32(0x9E3779B1) ^ base
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x85EBCA6B)
    x ^= x >> np.uint32(13)
    x *= np.uint32(0xC2B2AE35)
    x ^= x >> np.uint32(16)
    return x


def _in_range(words, low, high):
    return low + (words % np.uint32(high - low + 1)).astype(np.int64)


def values(key, op, dtype, g, n, count):
    """The logical input (int64; complex128 for complex dtypes) of group rank g of n for one tensor
    of `count` elements."""
    if dtype in COMPLEX:
        return values(key, op, "float32", g, n, count) + 1j * values(
            f"{key}/imag", op, "float32", g, n, count)
    words = _hash(f"{key}/{g}", count)
    unsigned = dtype in UNSIGNED
    if dtype == "bool":
        if op in ("prod", "min", "band"):
            return (words % np.uint32(8) != 0).astype(np.int64)  # mostly true, so "and" varies
        return (words % np.uint32(4) == 0).astype(np.int64)
    if op == "sum":
        return _in_range(words, 0 if unsigned else -3, 3)
    if op == "prod":
        # 2 on at most 6 ranks (|product| <= 64 fits int8), else +-1 (uint8: 1).
        two = (words % np.uint32(4) == 0) & (g < 6)
        sign = np.where((words >> np.uint32(8)) % np.uint32(2) == 0, 1, -1)
        if unsigned:
            sign = 1
        return np.where(two, 2, 1) * sign
    if op in ("min", "max", None):
        return _in_range(words, 0 if unsigned else -60, 120 if unsigned else 60)
    if op == "avg":
        # Values 0..3 on the first n-1 ranks; the last makes each column's sum a multiple of n.
        if g < n - 1:
            return _in_range(words, 0, 3)
        rest = sum((values(key, op, dtype, h, n, count) for h in range(n - 1)),
                   np.zeros(count, np.int64))
        return (-rest) % n
    if op in ("band", "bor", "bxor"):
        if dtype in ("int8", "uint8"):
            return _in_range(words, -128 if not unsigned else 0, 127 if not unsigned else 255)
        if unsigned:
            return _in_range(words, 0, (1 << 16) - 1)
        return _in_range(words, -(1 << 15), (1 << 15) - 1)
    raise AssertionError(op)


def group_values(key, op, dtype, n, count):
    return [values(key, op, dtype, g, n, count) for g in range(n)]


def reduced(op, arrays, n):
    """The closed-form reduction of `arrays` (logical int64 values)."""
    stacked = np.stack(arrays) if arrays else None
    if op == "sum":
        return stacked.sum(axis=0)
    if op == "prod":
        return stacked.prod(axis=0)
    if op == "min":
        return stacked.min(axis=0)
    if op == "max":
        return stacked.max(axis=0)
    if op == "avg":
        total = stacked.sum(axis=0)
        if np.iscomplexobj(total):
            assert (total.real % n == 0).all() and (total.imag % n == 0).all()
            return total / n
        assert (total % n == 0).all()
        return total // n
    if op == "band":
        return np.bitwise_and.reduce(stacked, axis=0)
    if op == "bor":
        return np.bitwise_or.reduce(stacked, axis=0)
    if op == "bxor":
        return np.bitwise_xor.reduce(stacked, axis=0)
    raise AssertionError(op)


def bool_form(op, dtype, logical):
    """bool reductions: sum/max/bor are "or", prod/min/band "and": clip to 0/1."""
    return (logical != 0).astype(np.int64) if dtype == "bool" else logical
