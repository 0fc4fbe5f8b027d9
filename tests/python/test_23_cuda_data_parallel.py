"""chorus.torch.DistributedDataParallel of a CUDA model (issue 21): the buckets live in device memory
(DeviceBuckets) and each bucket's allreduce runs on NCCL while backward goes on. N ranks with
per-rank batches end with the same parameters as one process trained on the concatenated batch on
the same device (the reference of training_reference.py).

Each test runs on the GPU where there is one (and chorus has NCCL), and everywhere on host tensors
that take the same path (DeviceBuckets, a hook per bucket) through
chorus.torch._ddp._DEVICE_BUCKETS_ON_HOST. The overlap and the host/GPU mix need the GPU.

Tolerances as in test_10: float32 within 1e-5 relative, bfloat16 within 2e-2 (one bfloat16 step is
2**-8 = 0.4 %; the reference rounds the full-batch gradient once, data parallel each rank's and
their average).
"""

import pytest
import torch

import chorus
import chorus.torch as ct
import chorus.torch._ddp as ddp_module
import chorus.torch.hooks as hooks
from helpers import CUDA, cuda_device
from training_reference import (BATCH, STEPS, assert_same_parameters, global_batch, loss_of,
                                make_model, train_data_parallel, train_reference)

needs_gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA device and chorus built with NCCL")


@pytest.fixture(params=["host"] + (["cuda"] if CUDA else []))
def device(request, monkeypatch):
    """Where the model trains: this rank's GPU, or the host with the CUDA path forced."""
    if request.param == "host":
        monkeypatch.setattr(ddp_module, "_DEVICE_BUCKETS_ON_HOST", True)
        return torch.device("cpu")
    return cuda_device()


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam", "adamw"])
def test_matches_one_process_on_the_concatenated_batch(comm, optimizer_name, device):
    model, ddp = train_data_parallel(optimizer_name, comm, device=device)
    reference = train_reference(optimizer_name, comm.size, device=device)
    assert_same_parameters(model, reference, 1e-5)
    # The unused layer got no gradient anywhere: untouched, as in one process.
    assert model.unused.weight.grad is None
    assert torch.equal(model.unused.weight, make_model(0, device=device).unused.weight)
    # Every gradient is a view into a bucket in device memory, not a copy of it.
    assert ddp._device_buckets is not None
    for index, p in enumerate(ddp.parameters()):
        if p.grad is not None:
            assert p.grad.device == device and p.grad.data_ptr() == ddp._view(index).data_ptr()


def test_gradient_accumulation_under_no_sync(comm, device):
    model, _ = train_data_parallel("adam", comm, micro=3, device=device)
    reference = train_reference("adam", comm.size, micro=3, device=device)
    assert_same_parameters(model, reference, 1e-5)


def test_many_small_buckets_are_rebuilt_in_rank_zeros_order(comm, device):
    model, ddp = train_data_parallel("adam", comm, set_to_none=True, bucket_cap_mb=0.001,
                                     device=device)
    reference = train_reference("adam", comm.size, set_to_none=True, device=device)
    assert_same_parameters(model, reference, 1e-5)
    assert ddp.reducer.num_buckets >= 3
    # Backward produced second's gradients before extra's: after the first step the device
    # buckets were laid out anew in that order, the values moved, and training went on.
    assert ddp.reducer.generation == 1


def test_bfloat16_parameters_and_gradients(comm, device):
    model, _ = train_data_parallel("sgd", comm, dtype=torch.bfloat16, device=device)
    reference = train_reference("sgd", comm.size, dtype=torch.bfloat16, device=device)
    assert model.first.weight.grad.dtype == torch.bfloat16
    assert_same_parameters(model, reference, 2e-2)


def test_a_compression_hook_runs_on_the_device_buckets(comm, device):
    """bf16_compress_hook on CUDA buckets: the same training as without it, within bfloat16's
    rounding of each gradient (2e-2, as above)."""
    model = make_model(comm.rank, device=device)
    ddp = ct.DistributedDataParallel(model)
    ddp.register_comm_hook(None, hooks.bf16_compress_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        x, y, special = global_batch(comm.size, step, device=device)
        mine = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
        optimizer.zero_grad()
        loss_of(ddp, x[mine], y[mine], special[mine]).backward()
        optimizer.step()
    assert_same_parameters(model, train_reference("sgd", comm.size, device=device), 2e-2)


class SlowBackward(torch.autograd.Function):
    """The identity, whose backward keeps the GPU busy for ~0.2 s between two timing events."""

    marks = {}

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        SlowBackward.marks["start"].record()
        torch.cuda._sleep(400_000_000)
        SlowBackward.marks["end"].record()
        return grad


@needs_gpu
def test_the_first_bucket_is_reduced_while_backward_goes_on(comm):
    """The last layer's bucket is allreduced before the slow part of backward (the first layer's
    side) ends, by the GPU's own clock: the CUDA events' timestamps, not the host's. Were buckets
    issued only at the end of backward, its allreduce would end after the slow part."""
    device = cuda_device()
    torch.manual_seed(0)
    first, second = torch.nn.Linear(64, 64).to(device), torch.nn.Linear(64, 64).to(device)
    # second's weight and bias (16.6 KB) fill the first bucket (10 KB limit); first's the next.
    ddp = ct.DistributedDataParallel(torch.nn.ModuleList([first, second]), bucket_cap_mb=0.01)
    side = torch.cuda.Stream(device)
    reduced = {}

    def timed_allreduce(state, bucket):
        future = hooks.allreduce_hook(state, bucket)
        with torch.cuda.stream(side):  # orders the side stream only; DDP waits again itself
            future.wait()
            reduced[bucket.index()] = torch.cuda.Event(enable_timing=True)
            reduced[bucket.index()].record()
        return future

    ddp.register_comm_hook(None, timed_allreduce)
    x = torch.randn(8, 64, device=device)
    for _ in range(2):  # the first backward connects NCCL's peers (and rebuilds the buckets)
        SlowBackward.marks = {name: torch.cuda.Event(enable_timing=True)
                              for name in ("begin", "start", "end")}
        SlowBackward.marks["begin"].record()
        second(SlowBackward.apply(torch.relu(first(x)))).sum().backward()
    torch.cuda.synchronize(device)
    marks = SlowBackward.marks
    assert set(ddp.reducer.bucket_gradients(0)) == {2, 3}
    first_reduced = marks["begin"].elapsed_time(reduced[0])
    slow_start, slow_end = (marks["begin"].elapsed_time(marks[m]) for m in ("start", "end"))
    assert first_reduced < slow_end, (
        f"bucket 0 was reduced at {first_reduced:.2f} ms, after backward's slow part ended "
        f"({slow_start:.2f} to {slow_end:.2f} ms): it did not overlap with backward")
    # And the last bucket (first's gradients, produced after the slow part) came after it.
    assert marks["begin"].elapsed_time(reduced[1]) > slow_end


@needs_gpu
def test_a_module_split_between_the_cpu_and_a_gpu_is_refused(comm):
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).to(cuda_device()))
    with pytest.raises(ValueError, match="move the whole module to one device"):
        ct.DistributedDataParallel(module)
    chorus.barrier()  # nothing was communicated; the world still works
