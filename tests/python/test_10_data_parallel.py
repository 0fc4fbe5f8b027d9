"""chorus.torch.DistributedDataParallel: N ranks with per-rank batches end with the same parameters
as one process trained on the concatenated batch (the reference, computed on every rank by plain
torch with no communication). Runs at every world size of the suite (1 to 4 ranks).

Tolerances: float32 within 1e-5 relative (max |dp - ref| / max |ref|, per parameter); bfloat16
within 2e-2 (the reference rounds the full-batch gradient to bfloat16 once, data parallel rounds
each rank's gradient and then their average; one bfloat16 step is 2**-8 = 0.4 %).
"""

import pytest
import torch
import torch.utils.dlpack

import chorus
import chorus.distributed as dist
import chorus.torch as ct
from training_reference import (assert_same_parameters, make_model, train_data_parallel,
                                train_reference)


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_matches_one_process_on_the_concatenated_batch(comm, optimizer_name):
    model, _ = train_data_parallel(optimizer_name, comm)
    reference = train_reference(optimizer_name, comm.size)
    assert_same_parameters(model, reference, 1e-5)
    # The unused layer got no gradient anywhere: untouched, as in one process.
    assert model.unused.weight.grad is None
    assert torch.equal(model.unused.weight, make_model(0).unused.weight)


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_gradient_accumulation_under_no_sync(comm, optimizer_name):
    model, _ = train_data_parallel(optimizer_name, comm, micro=3)
    reference = train_reference(optimizer_name, comm.size, micro=3)
    assert_same_parameters(model, reference, 1e-5)


def test_gradients_set_to_none_and_many_small_buckets(comm):
    model, ddp = train_data_parallel("adam", comm, set_to_none=True, bucket_cap_mb=0.001)
    reference = train_reference("adam", comm.size, set_to_none=True)
    assert_same_parameters(model, reference, 1e-5)
    assert ddp.reducer.num_buckets >= 3
    # Backward produced second's gradients before extra's (registered later): after the first
    # step the buckets were rebuilt in that order, and training went on with the moved views.
    assert ddp.reducer.generation == 1


def test_bfloat16_parameters_and_gradients(comm):
    model, _ = train_data_parallel("sgd", comm, dtype=torch.bfloat16)
    reference = train_reference("sgd", comm.size, dtype=torch.bfloat16)
    assert model.first.weight.grad.dtype == torch.bfloat16
    assert_same_parameters(model, reference, 2e-2)


def test_gradients_are_views_into_the_buckets(comm):
    model, ddp = train_data_parallel("sgd", comm)
    reducer = ddp.reducer
    owned = []
    for b in range(reducer.num_buckets):
        owned.extend(reducer.bucket_gradients(b))
    params = list(model.parameters())
    assert sorted(owned) == list(range(len(params)))
    for index, p in enumerate(params):
        if p is model.unused.weight or p is model.unused.bias:
            assert p.grad is None
            continue
        # .grad is the bucket's memory itself, not a copy of it.
        view = torch.utils.dlpack.from_dlpack(reducer.gradient(index))
        assert p.grad.data_ptr() == view.data_ptr()


def test_no_sync_keeps_gradients_local(comm):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1, bias=False)
    ddp = ct.DistributedDataParallel(model)
    x = torch.full((1, 4), float(comm.rank + 1))
    with ddp.no_sync():
        ddp(x).sum().backward()
    assert torch.equal(model.weight.grad, x)  # this rank's own gradient
    model.weight.grad = None
    ddp(x).sum().backward()
    mean = (comm.size + 1) / 2.0  # the average of 1..size
    assert torch.allclose(model.weight.grad, torch.full((1, 4), mean))


def test_buffers_are_broadcast_from_rank_zero_at_each_forward(comm):
    model = torch.nn.BatchNorm1d(3)
    ddp = ct.DistributedDataParallel(model)
    ddp.train()
    x = torch.full((4, 3), float(comm.rank)) + torch.arange(4.0)[:, None]
    ddp(x)  # running_mean = 0.1 * mean(x) = 0.1 * (rank + 1.5), after the broadcast of zeros
    ddp(x)  # starts from rank 0's 0.15 (broadcast), then takes this rank's batch in again
    expected = 0.9 * 0.15 + 0.1 * (comm.rank + 1.5)  # without the broadcast: 0.19 * (rank + 1.5)
    assert torch.allclose(model.running_mean, torch.full((3,), expected))


def test_bad_arguments_are_refused():
    with pytest.raises(chorus.InvalidArgumentError, match="bucket_cap_mb"):
        ct.DistributedDataParallel(torch.nn.Linear(2, 2), bucket_cap_mb=0)
    complex_model = torch.nn.Module()
    complex_model.z = torch.nn.Parameter(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(chorus.InvalidArgumentError, match="parameter z has dtype"):
        ct.DistributedDataParallel(complex_model)


def test_distribute_follows_the_config(comm):
    config = dist.get_config()
    saved = config.enable_data_parallel, config.zero_opt_level
    try:
        model = torch.nn.Linear(2, 2)
        config.enable_data_parallel = False
        assert ct.distribute(model)[0] is model
        config.enable_data_parallel = True
        wrapped, optimizer = ct.distribute(model, "the optimizer")
        assert isinstance(wrapped, ct.DistributedDataParallel) and wrapped.module is model
        assert optimizer == "the optimizer"
    finally:
        config.enable_data_parallel, config.zero_opt_level = saved


@pytest.mark.parametrize("length", [40, 41])
def test_sampler_splits_the_data_set_across_ranks(comm, length):
    sampler = ct.DistributedSampler(range(length), shuffle=True, seed=3)
    sampler.set_epoch(2)
    mine = torch.tensor(list(sampler), dtype=torch.int64)
    every = chorus.allgather(mine)
    per_rank = -(-length // comm.size)  # rounded up; the first indices pad
    assert len(mine) == per_rank
    assert set(every.tolist()) == set(range(length))
    assert len(every) == per_rank * comm.size
