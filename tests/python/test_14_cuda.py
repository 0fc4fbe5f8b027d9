"""CUDA tensors (issue 18): what the grids of test_02 to test_05 do not show on their "torch_cuda"
kind. The order of a collective after a slow producer on torch's current stream, an async handle,
NCCL's missing bitwise reductions, host and CUDA tensors mixed in one call, and synchronize=True.
The whole module skips on a machine without a GPU or with a chorus built without NCCL.
"""

import numpy as np
import pytest
import torch

import chorus
from helpers import CUDA, cuda_device

pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA device and chorus built with NCCL")


def test_a_slow_producer_is_waited_for_and_the_result_is_ready_on_the_stream(rank, size):
    device = cuda_device()
    x = torch.zeros(1 << 20, device=device)
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on torch's current stream, then:
    x.fill_(rank + 1)               # the producer's write, still queued when allreduce is called
    y = chorus.allreduce(x)         # no host wait inside; y is ready on the current stream
    assert y.device == device
    z = y * 2                       # consumed on the current stream right away
    expected = 2.0 * size * (size + 1) / 2
    assert torch.all(z == expected).item(), f"got {z[:4].tolist()}, expected {expected}"


def test_an_async_handle_returns_the_result_on_wait(rank, size):
    x = torch.full((1000,), float(rank), device=cuda_device())
    work = chorus.allreduce(x, "max", async_op=True)
    y = work.wait()
    assert torch.all(y == size - 1).item()
    torch.cuda.synchronize()
    assert work.is_completed()


def test_bitwise_reductions_nccl_lacks_are_a_clear_error(rank, size):
    x = torch.ones(4, dtype=torch.int32, device=cuda_device())
    with pytest.raises(chorus.UnsupportedError, match="NCCL has no bitwise reductions"):
        chorus.allreduce(x, "bxor")


def test_host_and_cuda_tensors_in_one_call_are_a_value_error(rank, size):
    with pytest.raises(ValueError, match="mixes host and CUDA tensors"):
        chorus.allreduce([torch.ones(2), torch.ones(2, device=cuda_device())])
    chorus.barrier()  # the communicator still works


def test_results_keep_kind_dtype_and_device(rank, size):
    for dtype in (torch.float16, torch.bfloat16, torch.int64):
        x = torch.full((3, 2), rank, dtype=dtype, device=cuda_device())
        y = chorus.allgather(x, axis=1)
        assert (y.dtype, y.device, tuple(y.shape)) == (dtype, x.device, (3, 2 * size))
        expected = np.repeat(np.arange(size), 2)
        assert np.array_equal(y[0].cpu().to(torch.float64).numpy(), expected)


def test_a_blocking_call_waits_on_the_host_only_with_synchronize(rank, size):
    device = cuda_device()
    x = torch.ones(1 << 20, device=device)
    stream = torch.cuda.current_stream(device)
    torch.cuda._sleep(1_000_000_000)  # ~0.5 s of GPU time ahead of the collective
    y = chorus.allreduce(x)
    assert not stream.query(), "a blocking call without synchronize=True waited for the GPU"
    torch.cuda._sleep(1_000_000_000)
    y = chorus.allreduce(x, synchronize=True)
    assert stream.query(), "synchronize=True returned before the GPU finished the collective"
    assert torch.all(y == size).item()


def test_an_async_handle_synchronizes_on_the_host(rank, size):
    device = cuda_device()
    x = torch.full((1000,), float(rank + 1), device=device)
    torch.cuda._sleep(200_000_000)
    work = chorus.allreduce(x, async_op=True)
    y = work.synchronize()
    assert work.is_completed()
    assert torch.all(y == size * (size + 1) / 2).item()


def test_every_wait_orders_its_own_stream(rank, size):
    """A handle waited for on one stream, then on another: the second stream is ordered after the
    collective too (torch's Work.wait() does the same). Without that, the side stream reads x
    before the collective, which itself waits behind ~0.5 s of GPU time on the default stream."""
    device = cuda_device()
    x = torch.zeros(1 << 20, device=device)
    torch.cuda._sleep(1_000_000_000)
    x.fill_(rank + 1)
    work = chorus.allreduce(x, async_op=True, inplace=True)
    work.wait()  # orders the default stream
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        work.wait()  # orders the side stream, which never waited for the default one
        doubled = x * 2
    side.synchronize()
    expected = size * (size + 1)
    assert torch.all(doubled == expected).item(), f"got {doubled[:4].tolist()}, expected {expected}"
