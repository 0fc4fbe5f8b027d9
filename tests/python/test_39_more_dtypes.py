"""The six element types added after the first nine: int16, uint16, uint32, uint64, complex64 and
complex128, through every operation (DESIGN §4), from NumPy arrays, torch CPU tensors (torch 1.13
has no uint16, uint32 or uint64: those run where torch has them) and objects that speak only
DLPack (whose results are NumPy arrays).

Inputs are closed forms of (rank, element) as Python ints and complex numbers (value()); expected
results are computed from them with Python's own arithmetic (reduce_one()), or with NumPy's where
the point is to wrap around as NumPy does, never with chorus. Integer inputs include the patterns
where signed and unsigned arithmetic part ways: all bits set, the top bit alone, the largest signed
value, so uint64 holds values above 2^63 for sum, prod, min, max, band, bor and bxor, and int16
negative ones. Integer sums and products wrap modulo 2^bits; avg truncates toward zero, summing
int16, uint16 and uint32 in int64 (so it never overflows) and uint64 in its own type (so its avg
inputs keep the sum below 2^64). Complex inputs are small Gaussian integers (and halves and
quarters where nothing multiplies them), so every sum, product and average is exact in complex64;
complex takes sum, prod and avg, and refuses min, max and the bitwise ops on every rank.

A dtype mismatch in a plain collective aborts its communicator for good: each such mismatch here
runs on a reversed world of its own (fresh_group), destroyed afterwards; the uneven forms and nests
check dtypes before anything moves and leave the world usable.
"""

import contextlib
import functools
import math
import operator

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist
from chorus import _uneven
from helpers import COMPLEX_DTYPES, WIDE_DTYPES, WIDE_INT_DTYPES, DlpackOnly, case_id

KINDS = ("numpy", "torch", "dlpack")
HOST_KINDS = ("numpy", "torch")  # those that take inplace= and out= (and give their own kind)
INT_OPS = ("sum", "prod", "min", "max", "avg", "band", "bor", "bxor")
COMPLEX_OPS = ("sum", "prod", "avg")
REFUSED_ON_COMPLEX = ("min", "max", "band", "bor", "bxor")
SENTINEL = 7  # what an out= array holds before the call
SHAPE = (2, 8)  # 16 elements: each of value()'s eight integer forms twice


def cases(dtypes=WIDE_DTYPES, kinds=KINDS, modes=("plain",)):
    """(kind, dtype, mode) triples: torch only where this torch has the dtype, DLPack objects in
    plain calls only (no inplace, out or async)."""
    return [(kind, dtype, mode) for dtype in dtypes for kind in kinds for mode in modes
            if (kind != "torch" or hasattr(torch, dtype)) and (kind != "dlpack" or mode == "plain")]


def kind_dtypes(dtypes=WIDE_DTYPES, kinds=HOST_KINDS):
    return [(kind, dtype) for kind, dtype, _ in cases(dtypes, kinds)]


def ops_of(dtype):
    return COMPLEX_OPS if dtype in COMPLEX_DTYPES else INT_OPS


def op_cases(kinds):
    return [(kind, dtype, op) for kind, dtype, _ in cases(kinds=kinds) for op in ops_of(dtype)]


def pick_root(root_pos, size):
    return 0 if root_pos == "first" else size - 1


both_roots = pytest.mark.parametrize("root_pos", ["first", "last"])


# --------------------------------------------------------------------------- closed forms


def bits(dtype):
    return np.iinfo(dtype).bits


def wrap(value, dtype):
    """A Python int as `dtype` stores it: modulo 2^bits, two's complement for signed types."""
    value %= 1 << bits(dtype)
    signed = np.iinfo(dtype).min < 0
    return value - (1 << bits(dtype)) if signed and value >= 1 << (bits(dtype) - 1) else value


def _mix(a, b):
    """A 64-bit pseudo-random word of (a, b) (splitmix64's finalizer), as a Python int."""
    z = (a * 0x9E3779B97F4A7C15 + (b + 1) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)


def _gaussian(rank, k):
    """A Gaussian integer with parts in [-3, 3] and [-2, 2]: products of four stay exact."""
    return complex((3 * rank + 2 * k) % 7 - 3, (5 * rank + k + 1) % 5 - 2)


def value(rank, k, dtype, op=None, n=1):
    """Element k of group rank `rank`'s input (of a group of n) for `op` (None: data movement).

    Integers: k % 8 picks all bits set (less the rank), the top bit alone, the largest signed
    value, a small number, or (4 to 7) a pseudo-random full-width word; uint64 avg instead keeps
    every rank below 2^60 and adds 2^63 to rank 0's even elements, so its sums exceed 2^63 but not
    2^64. Complex: Gaussian integers (plus halves and quarters for sums and movement); for avg the
    last rank evens each part's sum out to a multiple of n, so the average is exact."""
    if dtype in COMPLEX_DTYPES:
        z = _gaussian(rank, k)
        if op == "avg":
            if rank == n - 1:
                total = sum(_gaussian(r, k) for r in range(n))
                z -= complex(total.real % n, total.imag % n)
            return z
        return z if op == "prod" else z + complex(0.5 * (k % 2), -0.25 * (rank % 2))
    top = 1 << (bits(dtype) - 1)
    if op == "avg" and dtype == "uint64":
        return _mix(rank, k) % (1 << 60) + (top if rank == 0 and k % 2 == 0 else 0)
    form = k % 8
    if form < 4:
        return wrap((-1 - rank, top + rank, top - 1 - rank, 3 * rank + k)[form], dtype)
    return wrap(_mix(rank, k), dtype)


def inputs(rank, count, dtype, op=None, n=1):
    return [value(rank, k, dtype, op, n) for k in range(count)]


def reduce_one(op, column, dtype):
    """The reduction of one element's values over the ranks, in Python arithmetic."""
    n = len(column)
    if dtype in COMPLEX_DTYPES:
        total = sum(column)
        if op == "avg":
            return complex(total.real / n, total.imag / n)
        return {"sum": total, "prod": math.prod(column)}[op]
    if op == "avg":
        if dtype == "uint64":  # summed modulo 2^64, then divided unsigned
            return (sum(column) % 2**64) // n
        quotient = abs(sum(column)) // n  # summed exactly, truncated toward zero
        return quotient if sum(column) >= 0 else -quotient
    bitwise = {"band": operator.and_, "bor": operator.or_, "bxor": operator.xor}
    if op in bitwise:
        return wrap(functools.reduce(bitwise[op], column), dtype)
    return wrap({"sum": sum, "prod": math.prod, "min": min, "max": max}[op](column), dtype)


def reduced(op, per_rank, dtype):
    """Element-wise reduction of `per_rank` (one list of values per rank)."""
    return [reduce_one(op, list(column), dtype) for column in zip(*per_rank)]


def as_array(values, dtype, shape):
    return np.array(values, dtype=dtype).reshape(shape)


# --------------------------------------------------------------------------- arrays


def make(kind, values, dtype, shape):
    array = as_array(values, dtype, shape)
    if kind == "torch":
        return torch.from_numpy(array)
    return DlpackOnly(array) if kind == "dlpack" else array


def sentinel(kind, dtype, shape):
    return make(kind, [SENTINEL] * int(np.prod(shape)), dtype, shape)


def snapshot(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    return np.array(x.array if isinstance(x, DlpackOnly) else x, copy=True)


def assert_unchanged(x, before):
    if isinstance(x, torch.Tensor):
        assert torch.equal(x, before), "input was modified"
    else:
        inner = x.array if isinstance(x, DlpackOnly) else x
        np.testing.assert_array_equal(inner, before, err_msg="input was modified")


def check(result, kind, dtype, expected, shape):
    """`result` is an array of `kind` (DLPack objects give NumPy arrays) and `dtype` holding
    `expected` (values, or an array) in `shape`, bit for bit."""
    if kind == "torch":
        assert isinstance(result, torch.Tensor), f"expected a torch.Tensor, got {type(result)}"
        assert result.device.type == "cpu", result.device
        assert result.dtype == getattr(torch, dtype), f"dtype {result.dtype} != {dtype}"
        got = result.numpy()
    else:
        assert isinstance(result, np.ndarray), f"expected np.ndarray, got {type(result)}"
        got = result
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype} != {dtype}"
    assert tuple(got.shape) == tuple(shape), f"shape {tuple(got.shape)} != {tuple(shape)}"
    np.testing.assert_array_equal(got, as_array(expected, dtype, shape))


def call(function, x, mode, out=None, **kwargs):
    """function(x, **kwargs) as `mode` says: "plain", "inplace", "out" (into `out`), each also
    as "async_..." (async_op=True, then wait())."""
    if "inplace" in mode:
        kwargs["inplace"] = True
    if "out" in mode:
        kwargs["out"] = out
    if mode.startswith("async"):
        work = function(x, async_op=True, **kwargs)
        assert hasattr(work, "wait"), f"async_op=True gave {type(work)}, not a handle"
        return work.wait()
    return function(x, **kwargs)


def check_returned(result, x, out, mode):
    """inplace= returns x itself, out= returns out itself."""
    if "inplace" in mode:
        assert result is x, "inplace=True did not return the input itself"
    if "out" in mode:
        assert result is out, "out= did not return out itself"


def check_world_works(rank, size):
    """An allreduce of one of the first nine dtypes: the world is still usable."""
    got = chorus.allreduce(np.full(3, rank + 1, np.int32))
    np.testing.assert_array_equal(got, np.full(3, size * (size + 1) // 2, np.int32))


# --------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("kind,dtype,op", op_cases(KINDS), ids=case_id)
def test_allreduce_every_op(rank, size, kind, dtype, op):
    x = make(kind, inputs(rank, 16, dtype, op, size), dtype, SHAPE)
    before = snapshot(x)
    result = chorus.allreduce(x, op)
    expected = reduced(op, [inputs(r, 16, dtype, op, size) for r in range(size)], dtype)
    check(result, kind, dtype, expected, SHAPE)
    assert_unchanged(x, before)


REDUCE_MODES = ("async", "inplace", "async_inplace", "out", "async_out")


@pytest.mark.parametrize("kind,dtype,mode", cases(kinds=HOST_KINDS, modes=REDUCE_MODES),
                         ids=case_id)
def test_allreduce_async_inplace_out(rank, size, kind, dtype, mode):
    x = make(kind, inputs(rank, 16, dtype), dtype, SHAPE)
    before = snapshot(x)
    out = sentinel(kind, dtype, SHAPE)
    result = call(chorus.allreduce, x, mode, out, op="sum")
    check_returned(result, x, out, mode)
    check(result, kind, dtype, reduced("sum", [inputs(r, 16, dtype) for r in range(size)], dtype),
          SHAPE)
    if "inplace" not in mode:
        assert_unchanged(x, before)


@both_roots
@pytest.mark.parametrize("kind,dtype,op", op_cases(HOST_KINDS), ids=case_id)
def test_reduce_every_op(rank, size, kind, dtype, op, root_pos):
    root = pick_root(root_pos, size)
    mine = inputs(rank, 16, dtype, op, size)
    x = make(kind, mine, dtype, SHAPE)
    before = snapshot(x)
    result = chorus.reduce(x, root=root, op=op)
    if rank == root:
        expected = reduced(op, [inputs(r, 16, dtype, op, size) for r in range(size)], dtype)
    else:  # other ranks get their input back
        expected = mine
    check(result, kind, dtype, expected, SHAPE)
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype,mode", cases(kinds=HOST_KINDS, modes=REDUCE_MODES),
                         ids=case_id)
def test_reduce_async_inplace_out(rank, size, kind, dtype, mode):
    root = size - 1
    mine = inputs(rank, 16, dtype, "avg", size)
    x = make(kind, mine, dtype, SHAPE)
    before = snapshot(x)
    out = sentinel(kind, dtype, SHAPE)
    result = call(chorus.reduce, x, mode, out, root=root, op="avg")
    check_returned(result, x, out, mode)
    if rank == root:
        expected = reduced("avg", [inputs(r, 16, dtype, "avg", size) for r in range(size)], dtype)
    else:  # the input (inplace: untouched; out: a copy of it)
        expected = mine
    check(result, kind, dtype, expected, SHAPE)
    if "inplace" not in mode or rank != root:
        assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype,op", op_cases(HOST_KINDS), ids=case_id)
def test_reduce_scatter_every_op(rank, size, kind, dtype, op):
    # Chunks of 8 elements: each rank's chunk holds every integer form of value().
    x = make(kind, inputs(rank, 8 * size, dtype, op, size), dtype, (2 * size, 4))
    before = snapshot(x)
    result = chorus.reduce_scatter(x, op)
    full = reduced(op, [inputs(r, 8 * size, dtype, op, size) for r in range(size)], dtype)
    check(result, kind, dtype, full[8 * rank:8 * rank + 8], (2, 4))
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype,mode",
                         cases(kinds=HOST_KINDS, modes=("async", "out", "async_out")),
                         ids=case_id)
def test_reduce_scatter_async_out_and_list(rank, size, kind, dtype, mode):
    x = make(kind, inputs(rank, 8 * size, dtype, "prod"), dtype, (2 * size, 4))
    out = sentinel(kind, dtype, (2, 4))
    result = call(chorus.reduce_scatter, x, mode, out, op="prod")
    check_returned(result, x, out, mode)
    full = reduced("prod", [inputs(r, 8 * size, dtype, "prod") for r in range(size)], dtype)
    check(result, kind, dtype, full[8 * rank:8 * rank + 8], (2, 4))
    # A list of group-size items (item i: elements 3i to 3i + 2): this rank's item, reduced.
    mine = inputs(rank, 3 * size, dtype)
    xs = [make(kind, mine[3 * i:3 * i + 3], dtype, (3,)) for i in range(size)]
    out = sentinel(kind, dtype, (3,))
    result = call(chorus.reduce_scatter, xs, mode, out, op="sum")
    check_returned(result, xs, out, mode)
    full = reduced("sum", [inputs(r, 3 * size, dtype) for r in range(size)], dtype)
    check(result, kind, dtype, full[3 * rank:3 * rank + 3], (3,))


def test_integer_inputs_hold_the_patterns_that_tell_signed_from_unsigned():
    """The closed forms themselves: uint64 inputs hold values above 2^63, int16 negative ones."""
    assert value(0, 0, "uint64") == 2**64 - 1 and value(1, 1, "uint64") == 2**63 + 1
    assert value(0, 0, "int16") == -1 and value(0, 1, "int16") == -32768
    assert value(0, 2, "uint32") == 2**31 - 1 and value(0, 1, "uint16") == 2**15
    assert max(value(0, k, "uint64", "avg", 4) for k in range(16)) >= 2**63
    assert sum(max(value(r, k, "uint64", "avg", 4) for k in range(16)) for r in range(4)) < 2**64


def avg_edges(dtype, rank, n):
    """Rank `rank`'s values for the integer average's edges (of a group of n)."""
    if dtype == "int16":  # the extremes on every rank; negative sums truncated toward zero
        return [32767, -32768, 32767 - rank, -32768 + rank, -(rank + 1), -1 if rank == 0 else 0,
                1 if rank == 0 else 0]
    if dtype in ("uint16", "uint32"):
        top = 1 << (bits(dtype) - 1)
        return [2 * top - 1, 2 * top - 1 - rank, top + rank, 1 if rank == 0 else 0]
    # uint64 sums in its own type: sums stay below 2^64, some above 2^63.
    return [(2**64 - 1) // n - rank, 2**63 + 1 if rank == 0 else 0, 2**63 // n + rank, rank]


@pytest.mark.parametrize("operation", ["allreduce", "reduce_scatter", "reduce"])
@pytest.mark.parametrize("kind,dtype", kind_dtypes(WIDE_INT_DTYPES), ids=case_id)
def test_integer_average_does_not_overflow(rank, size, kind, dtype, operation):
    """int16 32767 on every rank averages to 32767, uint32 4294967295 to 4294967295; uint64
    divides its sum unsigned."""
    edges = [avg_edges(dtype, r, size) for r in range(size)]
    expected = reduced("avg", edges, dtype)
    width = len(expected)
    if operation == "allreduce":
        x = make(kind, edges[rank], dtype, (width,))
        result = chorus.allreduce(x, "avg")
    elif operation == "reduce_scatter":  # every rank's chunk holds the edges
        x = make(kind, edges[rank] * size, dtype, (width * size,))
        result = chorus.reduce_scatter(x, "avg")
    else:
        x = make(kind, edges[rank], dtype, (width,))
        result = chorus.reduce(x, root=0, op="avg")
        if rank != 0:
            expected = edges[rank]
    check(result, kind, dtype, expected, (width,))


def wrap_edges(dtype, rank):
    info = np.iinfo(dtype)
    half = 1 << (bits(dtype) // 2)
    return [int(info.max), int(info.max) - rank, int(info.min) + rank, half + rank,
            wrap(-1 - rank, dtype), 3 + rank]


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("kind,dtype", kind_dtypes(WIDE_INT_DTYPES), ids=case_id)
def test_sum_and_prod_wrap_around_like_numpy(rank, size, kind, dtype, op):
    stack = np.array([wrap_edges(dtype, r) for r in range(size)], dtype=dtype)
    expected = stack.sum(axis=0, dtype=dtype) if op == "sum" else stack.prod(axis=0, dtype=dtype)
    x = make(kind, wrap_edges(dtype, rank), dtype, (6,))
    check(chorus.allreduce(x, op), kind, dtype, expected, (6,))
    result = chorus.reduce(x, root=size - 1, op=op, async_op=True).wait()
    check(result, kind, dtype, expected if rank == size - 1 else stack[rank], (6,))


@pytest.mark.parametrize("operation", ["allreduce", "reduce", "reduce_scatter"])
@pytest.mark.parametrize("op", REFUSED_ON_COMPLEX)
@pytest.mark.parametrize("kind,dtype", kind_dtypes(COMPLEX_DTYPES), ids=case_id)
def test_complex_refuses_min_max_and_bitwise_ops_on_every_rank(rank, size, kind, dtype, op,
                                                                operation):
    x = make(kind, inputs(rank, 2 * size, dtype), dtype, (2 * size,))
    before = snapshot(x)
    run = {"allreduce": lambda: chorus.allreduce(x, op),
           "reduce": lambda: chorus.reduce(x, root=size - 1, op=op),
           "reduce_scatter": lambda: chorus.reduce_scatter(x, op)}[operation]
    with pytest.raises(chorus.InvalidArgumentError) as info:  # also a ValueError
        run()
    message = str(info.value)
    assert f"rank {rank} (this process)" in message, message
    assert f"'{op}'" in message and dtype in message, message
    assert_unchanged(x, before)
    check_world_works(rank, size)


# --------------------------------------------------------------------------- data movement

MOVE_MODES = ("plain", "async", "out", "async_out")


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("kind,dtype,mode", cases(modes=MOVE_MODES), ids=case_id)
def test_allgather(rank, size, kind, dtype, mode, axis):
    x = make(kind, inputs(rank, 6, dtype), dtype, (2, 3))
    before = snapshot(x)
    shape = (2 * size, 3) if axis == 0 else (2, 3 * size)
    out = sentinel(kind, dtype, shape)
    result = call(chorus.allgather, x, mode, out, axis=axis)
    check_returned(result, x, out, mode)
    expected = np.concatenate([as_array(inputs(r, 6, dtype), dtype, (2, 3)) for r in range(size)],
                              axis=axis)
    check(result, kind, dtype, expected, shape)
    assert_unchanged(x, before)


@both_roots
@pytest.mark.parametrize("kind,dtype,mode", cases(modes=("plain",) + REDUCE_MODES), ids=case_id)
def test_broadcast(rank, size, kind, dtype, mode, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, inputs(rank, 15, dtype), dtype, (3, 5))
    before = snapshot(x)
    out = sentinel(kind, dtype, (3, 5))
    result = call(chorus.broadcast, x, mode, out, root=root)
    check_returned(result, x, out, mode)
    check(result, kind, dtype, inputs(root, 15, dtype), (3, 5))
    if "inplace" not in mode:
        assert_unchanged(x, before)


@both_roots
@pytest.mark.parametrize("kind,dtype,mode", cases(modes=MOVE_MODES), ids=case_id)
def test_gather(rank, size, kind, dtype, mode, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, inputs(rank, 6, dtype), dtype, (2, 3))
    before = snapshot(x)
    out = sentinel(kind, dtype, (2 * size, 3))
    result = call(chorus.gather, x, mode, out, root=root)
    if rank == root:
        check_returned(result, x, out, mode)
        expected = [v for r in range(size) for v in inputs(r, 6, dtype)]
        check(result, kind, dtype, expected, (2 * size, 3))
    else:  # x back (x itself when out= is given, and out is left alone; a DLPack object too)
        check(result.array if kind == "dlpack" else result, kind, dtype, inputs(rank, 6, dtype),
              (2, 3))
        if "out" in mode:
            assert result is x
            check(out, kind, dtype, [SENTINEL] * 6 * size, (2 * size, 3))
    assert_unchanged(x, before)


@both_roots
@pytest.mark.parametrize("kind,dtype,mode", cases(modes=MOVE_MODES), ids=case_id)
def test_scatter(rank, size, kind, dtype, mode, root_pos):
    # Every rank passes an array of the full shape; only the root's content matters.
    root = pick_root(root_pos, size)
    x = make(kind, inputs(rank, 6 * size, dtype), dtype, (2 * size, 3))
    before = snapshot(x)
    out = sentinel(kind, dtype, (2, 3))
    result = call(chorus.scatter, x, mode, out, root=root)
    check_returned(result, x, out, mode)
    check(result, kind, dtype, inputs(root, 6 * size, dtype)[6 * rank:6 * rank + 6], (2, 3))
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype,mode", cases(modes=MOVE_MODES), ids=case_id)
def test_all_to_all(rank, size, kind, dtype, mode):
    x = make(kind, inputs(rank, 6 * size, dtype), dtype, (2 * size, 3))
    before = snapshot(x)
    out = sentinel(kind, dtype, (2 * size, 3))
    result = call(chorus.all_to_all, x, mode, out)
    check_returned(result, x, out, mode)
    expected = [v for r in range(size) for v in inputs(r, 6 * size, dtype)[6 * rank:6 * rank + 6]]
    check(result, kind, dtype, expected, (2 * size, 3))
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype", kind_dtypes(), ids=case_id)
def test_all_to_all_split_along_axis_1(rank, size, kind, dtype):
    x = make(kind, inputs(rank, 6 * size, dtype), dtype, (2, 3 * size))
    result = chorus.all_to_all(x, split_axis=1, concat_axis=0)
    expected = np.concatenate(
        [as_array(inputs(r, 6 * size, dtype), dtype, (2, 3 * size))[:, 3 * rank:3 * rank + 3]
         for r in range(size)], axis=0)
    check(result, kind, dtype, expected, (2 * size, 3))


# --------------------------------------------------------------------------- point to point


def ring(rank, size, send, receive):
    """Even ranks send first, odd ranks receive first (test_04_p2p.py's ring): neither order waits
    on itself, whether or not a send waits for its receive."""
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    if rank % 2 == 0:
        first = send(nxt)
        return first, receive(prv)
    got = receive(prv)
    return send(nxt), got


def dtype_spelling(kind, dtype):
    """recv's dtype= as each kind's user writes it: the name (NumPy result), a NumPy dtype (NumPy
    result), a torch dtype (torch result)."""
    return {"numpy": dtype, "dlpack": np.dtype(dtype), "torch": getattr(torch, dtype, None)}[kind]


@pytest.mark.parametrize("kind,dtype,mode", cases(modes=("plain", "out", "async")), ids=case_id)
def test_send_recv_around_a_ring(multi_rank, rank, size, kind, dtype, mode):
    """recv by shape and dtype (plain), into out= (out), and isend/irecv (async_op=True on both,
    waited for after both are issued)."""
    x = make(kind, inputs(rank, 12, dtype), dtype, (3, 4))
    before = snapshot(x)
    out = sentinel(kind, dtype, (3, 4))
    is_async = mode == "async"

    def send(peer):
        return chorus.send(x, peer, tag=39, async_op=is_async)

    def receive(peer):
        if mode == "out":
            return chorus.recv(peer, out=out, tag=39)
        return chorus.recv(peer, (3, 4), dtype_spelling(kind, dtype), tag=39, async_op=is_async)

    sent, got = ring(rank, size, send, receive)
    if is_async:
        assert sent.wait() is None
        got = got.wait()
    else:
        assert sent is None
    if mode == "out":
        assert got is out
    check(got, kind, dtype, inputs((rank - 1) % size, 12, dtype), (3, 4))
    assert_unchanged(x, before)


# --------------------------------------------------------------------------- uneven forms


@pytest.fixture(params=["native", "padded"])
def rows_path(request, monkeypatch):
    """Host rows take the native all_to_all_v, CUDA rows one padded even all_to_all (run here on
    host arrays too), as in test_31_uneven_collectives.py."""
    monkeypatch.setattr(_uneven, "_PADDED_ON_HOST", request.param == "padded")
    return request.param


def rows_between(q, p):
    return (q + 2 * p) % 3  # some pairs send none


def cell(q, p, k, c, dtype):
    """Column c of row k that group rank q sends group rank p."""
    if dtype in COMPLEX_DTYPES:
        return complex(10 * q + p + 0.5, 10 * k + c - 0.25)
    return wrap(_mix(16 * q + p, 4 * k + c), dtype)


def rows(pairs, dtype, width):
    """The rows of the (sender, receiver) pairs, in order, flat."""
    return [cell(q, p, k, c, dtype) for q, p in pairs for k in range(rows_between(q, p))
            for c in range(width)]


@pytest.mark.parametrize("kind,dtype,mode", cases(kinds=HOST_KINDS, modes=("plain", "async")),
                         ids=case_id)
def test_all_to_all_with_splits(rank, size, rows_path, kind, dtype, mode):
    splits = [rows_between(rank, p) for p in range(size)]
    x = make(kind, rows([(rank, p) for p in range(size)], dtype, 3), dtype, (sum(splits), 3))
    before = snapshot(x)
    y, received = call(chorus.all_to_all, x, mode, splits=splits)
    expected_splits = [rows_between(q, rank) for q in range(size)]
    assert list(received) == expected_splits
    expected = rows([(q, rank) for q in range(size)], dtype, 3)
    check(y, kind, dtype, expected, (sum(expected_splits), 3))
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype,mode", cases(kinds=HOST_KINDS, modes=("plain", "async")),
                         ids=case_id)
def test_uneven_allgather(rank, size, kind, dtype, mode):
    """Rank r gives r + 1 rows of two columns."""
    def mine(r):
        return [cell(r, 0, k, c, dtype) for k in range(r + 1) for c in range(2)]

    x = make(kind, mine(rank), dtype, (rank + 1, 2))
    result = call(chorus.allgather, x, mode, uneven=True)
    total = size * (size + 1) // 2
    check(result, kind, dtype, [v for r in range(size) for v in mine(r)], (total, 2))


# --------------------------------------------------------------------------- groups, nests


def parity_groups(size):
    return [g for g in (list(range(0, size, 2)), list(range(1, size, 2))) if g]


def check_group(kind, dtype, results, g, n):
    """What test_*_groups get in a group of n, this rank being group rank g: the average over the
    group, group rank n - 1's input, every member's input in group-rank order."""
    average, broadcast, gathered = results
    check(average, kind, dtype,
          reduced("avg", [inputs(h, 8, dtype, "avg", n) for h in range(n)], dtype), (8,))
    check(broadcast, kind, dtype, inputs(n - 1, 8, dtype), (8,))
    check(gathered, kind, dtype, [v for h in range(n) for v in inputs(h, 8, dtype)], (8 * n,))


@pytest.mark.parametrize("kind,dtype", kind_dtypes(), ids=case_id)
def test_rank_list_groups(rank, size, kind, dtype):
    """rank_list= (even and odd ranks; at 2 ranks each alone, which gets its input back). Inputs
    are closed forms of the group rank; roots are world ranks."""
    groups = parity_groups(size)
    group = next(members for members in groups if rank in members)
    g, n = group.index(rank), len(group)
    results = (
        chorus.allreduce(make(kind, inputs(g, 8, dtype, "avg", n), dtype, (8,)), "avg",
                         rank_list=groups),
        chorus.broadcast(make(kind, inputs(g, 8, dtype), dtype, (8,)), root=group[-1],
                         rank_list=groups, async_op=True).wait(),
        chorus.allgather(make(kind, inputs(g, 8, dtype), dtype, (8,)), rank_list=groups))
    check_group(kind, dtype, results, g, n)


@pytest.mark.parametrize("kind,dtype", kind_dtypes(), ids=case_id)
def test_new_group(rank, size, kind, dtype):
    """group=dist.new_group(members): the world rotated by one (at 2 ranks the world's own order:
    the reversed one, shared by every test that makes it, is aborted by test_37). Roots and the
    gather order are group ranks."""
    members = [size - 1] + list(range(size - 1)) if size != 2 else [0, 1]
    group = dist.new_group(members)
    g, n = group.rank, group.size
    assert g == members.index(rank)
    results = (
        chorus.allreduce(make(kind, inputs(g, 8, dtype, "avg", n), dtype, (8,)), "avg",
                         group=group, async_op=True).wait(),
        chorus.broadcast(make(kind, inputs(g, 8, dtype), dtype, (8,)), root=n - 1, group=group),
        chorus.allgather(make(kind, inputs(g, 8, dtype), dtype, (8,)), group=group))
    check_group(kind, dtype, results, g, n)


@pytest.mark.parametrize("kind,dtype", kind_dtypes(), ids=case_id)
def test_allreduce_of_a_list_is_fused(rank, size, kind, dtype):
    xs = [make(kind, inputs(rank, 3, dtype, "prod"), dtype, (3,)),
          make(kind, inputs(rank + size, 4, dtype, "prod"), dtype, (2, 2))]
    results = chorus.allreduce(xs, "prod")
    assert isinstance(results, list) and len(results) == 2
    check(results[0], kind, dtype,
          reduced("prod", [inputs(r, 3, dtype, "prod") for r in range(size)], dtype), (3,))
    check(results[1], kind, dtype,
          reduced("prod", [inputs(r + size, 4, dtype, "prod") for r in range(size)], dtype),
          (2, 2))


def test_a_nest_of_every_new_dtype(rank, size):
    """A dict nest of all six (one fused message per dtype), summed."""
    shapes = {"int16": (3,), "uint16": (2, 2), "uint32": (5,), "uint64": (4,), "complex64": (3,),
              "complex128": (2,)}
    counts = {d: int(np.prod(s)) for d, s in shapes.items()}
    leaves = {d: make("numpy", inputs(rank, counts[d], d), d, s) for d, s in shapes.items()}
    nest = {"ints": [leaves["int16"], leaves["uint16"]], "wide": (leaves["uint32"],),
            "u64": leaves["uint64"], "c": {"64": leaves["complex64"], "128": leaves["complex128"]}}
    result = chorus.allreduce(nest)
    got = {"int16": result["ints"][0], "uint16": result["ints"][1], "uint32": result["wide"][0],
           "uint64": result["u64"], "complex64": result["c"]["64"],
           "complex128": result["c"]["128"]}
    for dtype, shape in shapes.items():
        expected = reduced("sum", [inputs(r, counts[dtype], dtype) for r in range(size)], dtype)
        check(got[dtype], "numpy", dtype, expected, shape)


# --------------------------------------------------------------------------- mismatches

# (world rank 0's dtype, the other ranks' dtype): signedness only; the same byte count.
DIFFERING = [("int16", "uint16"), ("complex64", "float64"), ("uint64", "int64")]


@pytest.mark.parametrize("mine,theirs", DIFFERING, ids=case_id)
def test_uneven_forms_and_nests_of_different_dtypes_fail_on_every_rank(multi_rank, rank, size,
                                                                       mine, theirs):
    """Checked before anything moves: the world goes on."""
    dtype = mine if rank == 0 else theirs
    with pytest.raises(chorus.MismatchError, match="different dtypes, devices or dimensions"):
        chorus.all_to_all(np.ones((size, 2), dtype), splits=[1] * size)
    with pytest.raises(chorus.MismatchError, match="different dtypes"):
        chorus.allgather(np.ones((rank + 1, 2), dtype), uneven=True)
    with pytest.raises(chorus.MismatchError,
                       match=rf"rank 0 has x\['w'\]: {mine} \(2,\) and rank 1 has x\['w'\]: "
                             rf"{theirs} \(2,\)"):
        chorus.allreduce({"w": np.ones(2, dtype)})
    check_world_works(rank, size)


@contextlib.contextmanager
def fresh_group():
    """Every rank, reversed: a communicator of its own, destroyed afterwards (a mismatch ends it
    for good, and it would repeat its first error to every later call)."""
    size = dist.get_communicator().size
    group = dist.new_group(list(reversed(range(size))))
    try:
        yield group
    finally:
        dist.destroy_group(group)


@pytest.mark.parametrize("mine,theirs,operation", [
    ("int16", "uint16", "allreduce"),
    ("complex64", "float64", "allreduce"),
    ("uint64", "int64", "all_to_all"),
], ids=case_id)
def test_dtypes_that_differ_across_ranks_are_a_mismatch_on_every_rank(multi_rank, rank, size,
                                                                      mine, theirs, operation):
    x = np.ones((2 * size, 2), mine if rank == 0 else theirs)
    with fresh_group() as group:
        run = {"allreduce": lambda: chorus.allreduce(x, group=group),
               "all_to_all": lambda: chorus.all_to_all(x, group=group)}[operation]
        either = f"({mine}|{theirs})"
        with pytest.raises(chorus.MismatchError, match=rf"dtype is {either} here but {either} on"):
            run()
    check_world_works(rank, size)
