"""allreduce with async_op=True (handle.wait() returns the result) and inplace=True (DESIGN §4)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import chorus
import chorus.distributed as dist
from helpers import (MUTABLE_KINDS, assert_unchanged, case_id, check_result, kind_dtype_cases,
                     make, reduce_exact, snapshot, values)

CASES = kind_dtype_cases(["float16", "bfloat16", "float32", "int64", "bool"])
INPLACE_CASES = kind_dtype_cases(["float16", "bfloat16", "float32", "int64", "bool"],
                                 kinds=MUTABLE_KINDS)


def expected_sum(size, shape, dtype, shift=0):
    return reduce_exact("sum", [values(r + shift, shape, dtype) for r in range(size)], dtype)


@pytest.mark.parametrize("kind,dtype", CASES, ids=case_id)
def test_async_wait_returns_result(rank, size, kind, dtype):
    x = make(kind, values(rank, (3, 5), dtype), dtype)
    before = snapshot(x)
    handle = chorus.allreduce(x, "sum", async_op=True)
    assert hasattr(handle, "wait"), f"async_op=True should return a handle, got {type(handle)}"
    result = handle.wait()
    check_result(result, kind, dtype, expected_sum(size, (3, 5), dtype))
    assert_unchanged(x, before)


@pytest.mark.parametrize("kind,inplace", [("numpy", False), ("torch", False), ("torch", True)],
                         ids=["numpy", "torch", "torch-inplace"])
def test_async_returns_before_a_late_peer_arrives(rank, size, multi_rank, kind, inplace):
    """async_op=True must hand the Work back at once, not after the collective: every rank but the
    last starts the allreduce and sees it incomplete, and only then lets the last rank call it.

    The go-ahead is a blocking barrier on a second communicator (all ranks, reversed), so it does
    not queue behind the allreduce. Were the call secretly blocking, the early ranks would be stuck
    in it while the late rank waits for them: the late rank stops waiting after a generous bound
    (its barrier stays pending on a helper thread) and calls, and every rank fails below instead of
    hanging."""
    late = size - 1
    side = [list(range(size))[::-1]]
    dist.get_communicator(side)  # collective on first use: before the allreduce occupies the world
    x = make(kind, values(rank, (3, 5), "float32"), "float32")
    expected = expected_sum(size, (3, 5), "float32")
    if rank != late:
        handle = chorus.allreduce(x, "sum", async_op=True, inplace=inplace)
        completed_early = handle.is_completed()
        chorus.barrier(rank_list=side)  # the go-ahead: the late rank calls only after this
        result = handle.wait(timeout=60)
        assert not completed_early, ("async_op=True returned a completed allreduce although the "
                                     "last rank had not called it yet: async_op blocks")
    else:
        go_ahead = threading.Thread(target=chorus.barrier, kwargs={"rank_list": side})
        go_ahead.start()
        go_ahead.join(timeout=30)
        arrived = not go_ahead.is_alive()
        handle = chorus.allreduce(x, "sum", async_op=True, inplace=inplace)
        result = handle.wait(timeout=60)
        go_ahead.join(timeout=60)
        assert arrived, ("the other ranks did not get their async_op=True allreduce back until "
                         "this (the last) rank called it: async_op blocks")
    check_result(result, kind, "float32", expected)
    if inplace:
        check_result(x, kind, "float32", expected)


def test_async_several_outstanding_waited_in_reverse(rank, size):
    shapes = [(4,), (0,), (2, 3)]
    xs = [make("numpy", values(rank + i, s, "int32"), "int32") for i, s in enumerate(shapes)]
    handles = [chorus.allreduce(x, "sum", async_op=True) for x in xs]
    results = [h.wait() for h in reversed(handles)][::-1]
    for i, (shape, result) in enumerate(zip(shapes, results)):
        check_result(result, "numpy", "int32", expected_sum(size, shape, "int32", shift=i))


def test_async_list(rank, size):
    xs = [make("torch", values(rank, (3,), "float32"), "float32"),
          make("torch", values(rank + 1, (2, 2), "float32"), "float32")]
    results = chorus.allreduce(xs, "sum", async_op=True).wait()
    assert isinstance(results, list) and len(results) == 2
    check_result(results[0], "torch", "float32", expected_sum(size, (3,), "float32"))
    check_result(results[1], "torch", "float32", expected_sum(size, (2, 2), "float32", shift=1))


@pytest.mark.parametrize("kind,dtype", INPLACE_CASES, ids=case_id)
def test_inplace_writes_input(rank, size, kind, dtype):
    x = make(kind, values(rank, (3, 5), dtype), dtype)
    result = chorus.allreduce(x, "sum", inplace=True)
    expected = expected_sum(size, (3, 5), dtype)
    check_result(x, kind, dtype, expected)
    check_result(result, kind, dtype, expected)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_inplace_async(rank, size, kind):
    x = make(kind, values(rank, (6,), "float64"), "float64")
    result = chorus.allreduce(x, "max", inplace=True, async_op=True).wait()
    expected = reduce_exact("max", [values(r, (6,), "float64") for r in range(size)], "float64")
    check_result(x, kind, "float64", expected)
    check_result(result, kind, "float64", expected)


def test_inplace_list(rank, size):
    xs = [make("numpy", values(rank, (3,), "int8"), "int8"),
          make("numpy", values(rank + 1, (4,), "int8"), "int8")]
    chorus.allreduce(xs, "sum", inplace=True)
    check_result(xs[0], "numpy", "int8", expected_sum(size, (3,), "int8"))
    check_result(xs[1], "numpy", "int8", expected_sum(size, (4,), "int8", shift=1))


def _late_allreduce(rank, size, first_rank_waits):
    """Rank 0 starts an async allreduce and runs first_rank_waits(handle) while the other ranks have
    not called it yet; they call it only after rank 0's go-ahead, a blocking barrier on a second
    communicator (all ranks, reversed), which does not queue behind the allreduce. Returns the
    allreduce's result on every rank."""
    side = [list(range(size))[::-1]]
    dist.get_communicator(side)  # collective on first use: before the allreduce occupies the world
    x = make("numpy", values(rank, (4,), "float32"), "float32")
    if rank != 0:
        chorus.barrier(rank_list=side)
        return chorus.allreduce(x, "sum")
    handle = chorus.allreduce(x, "sum", async_op=True)
    try:
        first_rank_waits(handle)
        assert not handle.is_completed(), "the allreduce completed before the other ranks called it"
    finally:
        chorus.barrier(rank_list=side)  # the go-ahead, also when an assertion failed
    return handle.wait(timeout=60)


def test_wait_timeout_expires_and_leaves_the_operation_running(rank, size, multi_rank):
    """wait(timeout) that expires raises chorus.TimeoutError (missing ranks unknown: []) and leaves
    the operation running: a later wait() returns its result."""
    def wait_briefly(handle):
        with pytest.raises(chorus.TimeoutError) as caught:
            handle.wait(timeout=0.3)
        assert caught.value.missing_ranks == []
        with pytest.raises(chorus.TimeoutError):
            handle.wait(timeout=0)  # only looks

    result = _late_allreduce(rank, size, wait_briefly)
    check_result(result, "numpy", "float32", expected_sum(size, (4,), "float32"))


def test_ctrl_c_interrupts_a_wait_and_leaves_the_operation_running(rank, size, multi_rank):
    """Ctrl-C (SIGINT) during wait() raises KeyboardInterrupt within one wait slice (0.2 s), and
    leaves the operation running with its buffers alive: a later wait() returns its result."""
    def interrupted(handle):
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        try:
            start = time.monotonic()
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                handle.wait()
            waited = time.monotonic() - start
        finally:
            timer.cancel()
            timer.join()
            signal.signal(signal.SIGINT, previous)
        assert waited < 10, f"Ctrl-C took {waited:.1f} s to interrupt wait()"

    result = _late_allreduce(rank, size, interrupted)
    check_result(result, "numpy", "float32", expected_sum(size, (4,), "float32"))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_synchronize_gives_the_result_of_blocking_and_async_calls(rank, size, kind):
    """synchronize=True (issue 18) waits on the host for the device; on host tensors a blocking
    call is complete anyway, so it must give the same result, from a call and from a handle."""
    x = make(kind, values(rank, (4, 3), "float32"), "float32")
    expected = expected_sum(size, (4, 3), "float32")
    check_result(chorus.allreduce(x, synchronize=True), kind, "float32", expected)
    check_result(chorus.allreduce(x, async_op=True).synchronize(), kind, "float32", expected)
    gathered = chorus.allgather(x, synchronize=True)
    assert tuple(gathered.shape) == (4 * size, 3)


def test_synchronize_must_be_a_bool(rank, size):
    x = np.ones(4, dtype=np.float32)
    with pytest.raises(chorus.InvalidArgumentError, match="synchronize must be True or False"):
        chorus.allreduce(x, synchronize=1)
    chorus.barrier()  # refused before anything was sent: the communicator still works
