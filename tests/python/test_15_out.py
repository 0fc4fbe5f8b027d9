"""out= on every collective (DESIGN §4): the result is written into the caller's array and that
array itself is returned; the input is never modified.

out needs x's dtype and number of elements, not its shape; a non-contiguous out is written
through. reduce's non-root ranks get a copy of their input in out; gather's non-root ranks get
x back and out is left alone. Bad outs are refused on every rank before anything is sent.
Expected values are closed forms (helpers.values, reduce_exact), never chorus's own results.
"""

import numpy as np
import pytest

import chorus
from helpers import (assert_unchanged, avg_rtol, check_result, kind_dtype_cases, make, reduce_exact,
                     snapshot, stored, values)

KINDS = ["numpy", "torch"]
OUT_CASES = kind_dtype_cases(["float32", "int64", "float16", "bfloat16"], kinds=KINDS)
SENTINEL = -7  # what an out holds before the call; exact in every dtype used here


def sentinel(kind, shape, dtype="float32"):
    return make(kind, np.full(shape, SENTINEL), dtype)


def exact(op, shape, dtype, size, shift=0):
    return reduce_exact(op, [values(r + shift, shape, dtype, op) for r in range(size)], dtype)


def pick_root(root_pos, size):
    return 0 if root_pos == "first" else size - 1


both_roots = pytest.mark.parametrize("root_pos", ["first", "last"])


# --------------------------------------------------------------------------- allreduce


@pytest.mark.parametrize("count", [0, 1, 7, (1 << 18) + 3])
@pytest.mark.parametrize("op", ["sum", "max", "avg"])
@pytest.mark.parametrize("kind,dtype", OUT_CASES)
def test_allreduce_out(rank, size, kind, dtype, op, count):
    x = make(kind, values(rank, (count,), dtype, op), dtype)
    before = snapshot(x)
    buf = sentinel(kind, (count,), dtype)
    assert chorus.allreduce(x, op, out=buf) is buf
    rtol = avg_rtol(dtype) if op == "avg" else 0.0
    check_result(buf, kind, dtype, exact(op, (count,), dtype, size), rtol)
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,dtype,big", [("numpy", "float16", 2048), ("torch", "float16", 2048),
                                            ("torch", "bfloat16", 256)])
def test_allreduce_out_half_precision_rounds_once(rank, size, kind, dtype, big):
    # Element j is `big` on rank j % size and 1 elsewhere: big + 1 is not representable, so adding
    # one rank at a time in `dtype` loses the 1s for at least one element whatever the order
    # (from 3 ranks on); accumulating in float32 and rounding once gives big + size - 1, rounded.
    n = 2 * size
    x = make(kind, np.where(np.arange(n) % size == rank, big, 1), dtype)
    buf = sentinel(kind, (n,), dtype)
    assert chorus.allreduce(x, out=buf) is buf
    check_result(buf, kind, dtype, stored(np.full(n, big + size - 1), dtype))


@pytest.mark.parametrize("kind", KINDS)
def test_allreduce_out_list(rank, size, kind):
    shapes = [(3,), (2, 2), (0,)]
    xs = [make(kind, values(rank + i, s, "float32"), "float32") for i, s in enumerate(shapes)]
    befores = [snapshot(x) for x in xs]
    outs = [sentinel(kind, s) for s in shapes]
    result = chorus.allreduce(xs, out=outs)
    assert isinstance(result, list) and len(result) == len(outs)
    assert all(r is o for r, o in zip(result, outs)), "out list elements not returned themselves"
    for i, (shape, o) in enumerate(zip(shapes, outs)):
        check_result(o, kind, "float32", exact("sum", shape, "float32", size, shift=i))
    for x, before in zip(xs, befores):
        assert_unchanged(x, before)


@pytest.mark.parametrize("kind", KINDS)
def test_allreduce_out_of_another_shape(rank, size, kind):
    x = make(kind, values(rank, (2, 3), "int64"), "int64")
    buf = sentinel(kind, (6,), "int64")
    assert chorus.allreduce(x, out=buf) is buf
    check_result(buf, kind, "int64", exact("sum", (2, 3), "int64", size).reshape(6))


@pytest.mark.parametrize("kind", KINDS)
def test_allreduce_non_contiguous_out_is_written_through(rank, size, kind):
    base = sentinel(kind, (14,))
    view = base[::2]
    x = make(kind, values(rank, (7,), "float32"), "float32")
    assert chorus.allreduce(x, "max", out=view) is view
    check_result(base[::2], kind, "float32", exact("max", (7,), "float32", size))
    check_result(base[1::2], kind, "float32", np.full(7, SENTINEL))  # the gaps untouched


@pytest.mark.parametrize("kind", KINDS)
def test_async_out_wait_returns_out(rank, size, kind):
    x = make(kind, values(rank, (5,), "float32"), "float32")
    buf = sentinel(kind, (5,))
    w = chorus.allreduce(x, out=buf, async_op=True)
    assert w.wait() is buf
    check_result(buf, kind, "float32", exact("sum", (5,), "float32", size))
    gathered = sentinel(kind, (5 * size,))
    assert chorus.allgather(x, out=gathered, async_op=True).wait() is gathered
    check_result(gathered, kind, "float32",
                 np.concatenate([values(r, (5,), "float32") for r in range(size)]))


# --------------------------------------------------------------------------- rooted


@both_roots
@pytest.mark.parametrize("kind", KINDS)
def test_broadcast_out(rank, size, kind, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, values(rank, (3, 5), "float32"), "float32")
    before = snapshot(x)
    buf = sentinel(kind, (3, 5))
    assert chorus.broadcast(x, root=root, out=buf) is buf
    check_result(buf, kind, "float32", values(root, (3, 5), "float32"))
    assert_unchanged(x, before)
    ys = [x, make(kind, values(rank + 1, (4,), "float32"), "float32")]
    outs = [sentinel(kind, (3, 5)), sentinel(kind, (4,))]
    result = chorus.broadcast(ys, root=root, out=outs)
    assert all(r is o for r, o in zip(result, outs))
    check_result(outs[1], kind, "float32", values(root + 1, (4,), "float32"))


@both_roots
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("kind,dtype", kind_dtype_cases(["float32", "bfloat16"], kinds=KINDS))
def test_reduce_out(rank, size, kind, dtype, op, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, values(rank, (3, 5), dtype, op), dtype)
    before = snapshot(x)
    buf = sentinel(kind, (3, 5), dtype)
    assert chorus.reduce(x, root=root, op=op, out=buf) is buf
    if rank == root:
        expected = exact(op, (3, 5), dtype, size)
    else:  # a copy of this rank's input
        expected = stored(values(rank, (3, 5), dtype, op), dtype)
    check_result(buf, kind, dtype, expected)
    assert_unchanged(x, before)


# --------------------------------------------------------------------------- out of place


@pytest.mark.parametrize("kind", KINDS)
def test_reduce_scatter_out(rank, size, kind):
    shape = (2 * size, 3)
    x = make(kind, values(rank, shape, "float32"), "float32")
    before = snapshot(x)
    buf = sentinel(kind, (2, 3))
    assert chorus.reduce_scatter(x, "sum", out=buf) is buf
    check_result(buf, kind, "float32", exact("sum", shape, "float32", size)[2 * rank:2 * rank + 2])
    assert_unchanged(x, before)
    # A list of group-size items (item i of rank r holds values(r + 10 i)): equal shapes, then not.
    for shapes in [[(4, 2)] * size, [(i + 1, 2) for i in range(size)]]:
        xs = [make(kind, values(rank + 10 * i, s, "float32"), "float32")
              for i, s in enumerate(shapes)]
        buf = sentinel(kind, shapes[rank])
        assert chorus.reduce_scatter(xs, "sum", out=buf) is buf
        check_result(buf, kind, "float32",
                     exact("sum", shapes[rank], "float32", size, shift=10 * rank))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
def test_allgather_out(rank, size, kind, axis):
    x = make(kind, values(rank, (2, 3), "int64"), "int64")
    before = snapshot(x)
    shape = (2 * size, 3) if axis == 0 else (2, 3 * size)
    buf = sentinel(kind, shape, "int64")
    assert chorus.allgather(x, axis=axis, out=buf) is buf
    expected = np.concatenate([values(r, (2, 3), "int64") for r in range(size)], axis=axis)
    check_result(buf, kind, "int64", expected)
    assert_unchanged(x, before)


def test_allgather_out_list(rank, size):
    shapes = [(2,), (3, 2)]
    xs = [make("numpy", values(rank + i, s, "float32"), "float32") for i, s in enumerate(shapes)]
    outs = [sentinel("numpy", (2 * size,)), sentinel("numpy", (3 * size, 2))]
    result = chorus.allgather(xs, out=outs)
    assert isinstance(result, list) and all(r is o for r, o in zip(result, outs))
    for i, (shape, o) in enumerate(zip(shapes, outs)):
        expected = np.concatenate([values(r + i, shape, "float32") for r in range(size)])
        check_result(o, "numpy", "float32", expected)


@both_roots
@pytest.mark.parametrize("kind", KINDS)
def test_gather_out(rank, size, kind, root_pos):
    root = pick_root(root_pos, size)
    x = make(kind, values(rank, (2, 3), "float32"), "float32")
    before = snapshot(x)
    buf = sentinel(kind, (2 * size, 3))
    result = chorus.gather(x, root=root, out=buf)
    if rank == root:
        assert result is buf
        expected = np.concatenate([values(r, (2, 3), "float32") for r in range(size)])
        check_result(buf, kind, "float32", expected)
    else:  # x itself back, out untouched
        assert result is x
        check_result(buf, kind, "float32", np.full((2 * size, 3), SENTINEL))
    assert_unchanged(x, before)


@both_roots
@pytest.mark.parametrize("kind", KINDS)
def test_scatter_out(rank, size, kind, root_pos):
    root = pick_root(root_pos, size)
    shape = (2 * size, 3)
    x = make(kind, values(rank, shape, "int64"), "int64")
    before = snapshot(x)
    buf = sentinel(kind, (2, 3), "int64")
    assert chorus.scatter(x, root=root, out=buf) is buf
    check_result(buf, kind, "int64", values(root, shape, "int64")[2 * rank:2 * rank + 2])
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind", KINDS)
def test_all_to_all_out(rank, size, kind):
    shape = (2, 3 * size)
    x = make(kind, values(rank, shape, "float32"), "float32")
    before = snapshot(x)
    buf = sentinel(kind, (2 * size, 3))
    assert chorus.all_to_all(x, split_axis=1, concat_axis=0, out=buf) is buf
    expected = np.concatenate(
        [values(r, shape, "float32")[:, 3 * rank:3 * rank + 3] for r in range(size)], axis=0)
    check_result(buf, kind, "float32", expected)
    assert_unchanged(x, before)


# --------------------------------------------------------------------------- bad outs


def _world_size():
    return chorus.distributed.get_config().size


def _read_only(shape):
    buf = np.zeros(shape, dtype=np.float32)
    buf.flags.writeable = False
    return buf


# Each call is refused where it is made, before anything is sent, and every rank makes it: no rank
# is left inside a collective waiting for a peer that raised.
@pytest.mark.parametrize("call,message", [
    (lambda x: chorus.allreduce(x, out=np.zeros(x.shape, np.int64)), "out has dtype"),
    (lambda x: chorus.allreduce(x, out=make("torch", np.zeros(x.shape), "float16")),
     "out has dtype"),
    (lambda x: chorus.broadcast(x, out=np.zeros(x.shape, np.float64)), "out has dtype"),
    (lambda x: chorus.allgather(x, out=np.zeros(x.shape, np.int32)), "out has dtype"),
    (lambda x: chorus.allreduce(x, out=np.zeros(x.size - 1, np.float32)),
     "must have the input's dtype and number of elements"),
    (lambda x: chorus.allreduce([x, x], out=[np.zeros_like(x), np.zeros(3, np.float32)]),
     "must have the input's dtype and number of elements"),
    (lambda x: chorus.allreduce(x, inplace=True, out=np.zeros_like(x)),
     "either inplace=True or out="),
    (lambda x: chorus.broadcast(x, inplace=True, out=np.zeros_like(x)),
     "either inplace=True or out="),
    (lambda x: chorus.allreduce([x, x], out=np.zeros_like(x)), "out must be a list of 2"),
    # A fused list copies each x into its out first: an out that partly overlaps its x is refused
    # (a copy there would read what it already overwrote).
    (lambda x: chorus.allreduce([x.reshape(-1)[:6], x.reshape(-1)[6:12]],
                                out=[np.zeros(6, np.float32), x.reshape(-1)[8:14]]),
     "overlaps its input"),
    (lambda x: chorus.allreduce([x, x], out=[np.zeros_like(x)]), "out must be a list of 2"),
    (lambda x: chorus.allreduce(x, out=_read_only(x.shape)), "read-only"),
    (lambda x: chorus.allgather([x], out=[_read_only(x.shape)]), "read-only"),
    # Rooted calls: checked on every rank, although only the root reads the input (broadcast,
    # scatter) or gets the result (gather, reduce).
    (lambda x: chorus.broadcast(x, out=np.zeros(x.size - 1, np.float32)),
     "must have the input's dtype and number of elements"),
    (lambda x: chorus.reduce(x, out=np.zeros(x.size + 1, np.float32)),
     "must have the input's dtype and number of elements"),
    (lambda x: chorus.gather(x, out=np.zeros((x.shape[0] * 2 + 1, x.shape[1]), np.float32)),
     "but must be the input"),
    (lambda x: chorus.scatter(np.zeros((2 * _world_size(), 3), np.float32),
                              out=np.zeros(5, np.float32)), "must have size"),
], ids=["dtype", "dtype-torch", "dtype-broadcast", "dtype-allgather", "count", "count-list",
        "inplace", "inplace-broadcast", "list-not-list", "list-length", "list-overlap", "read-only",
        "read-only-list", "count-broadcast", "count-reduce", "shape-gather", "count-scatter"])
def test_bad_out_is_refused_and_the_communicator_works_after(rank, size, call, message):
    x = make("numpy", values(rank, (4, 6), "float32"), "float32")
    before = snapshot(x)
    with pytest.raises(chorus.InvalidArgumentError, match=message):
        call(x)
    assert_unchanged(x, before)
    buf = sentinel("numpy", (3,), "int32")
    assert chorus.allreduce(make("numpy", values(rank, (3,), "int32"), "int32"), out=buf) is buf
    check_result(buf, "numpy", "int32", exact("sum", (3,), "int32", size))
