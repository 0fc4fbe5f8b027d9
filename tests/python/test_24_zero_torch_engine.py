"""ZeroOptimizer's torch engine (DeviceZeroEngine, chorus/torch/_zero_device.py), which CUDA models
get (issue 21), through test_13's tests: here on host tensors (the engine forced for them), and on
the GPU where there is one (test_13's models and batches moved there). The assertions are
test_13's own, every one of its tests: the same parameters as one process on the concatenated
batch (SGD, Adam, AdamW; stages 1 to 3; micro-batches; bfloat16 mixed precision; compressed
gradients), the paper's memory formulas, stage 2's few buckets, stage 3's release and prefetch,
and the checkpoint round trip; and test_28's (shared parameters, schedulers, clipping, parameter
groups).

Added: checkpoints cross between the engines both ways (so between device and host) and training
goes on as it would have, a prefetch left open does not outlive new parameters, the issue order
follows rank 0's, and on a GPU the engine's memory report agrees with torch.cuda.memory_allocated().
"""

import gc

import pytest
import torch

import chorus
import chorus.torch as ct
import chorus.torch._zero as zero_module
import chorus.torch._zero_device as zero_device_module
import test_13_zero
import test_28_zero_training_loops
from helpers import CUDA, cuda_device

# test_13's and test_28's tests, collected here again under the fixture below.
RERUN = ["test_bad_arguments_are_refused", "test_bfloat16_mixed_precision",
         "test_checkpoint_round_trip_continues_exactly",
         "test_compressed_gradients_train_close_to_float32",
         "test_distribute_follows_zero_opt_level", "test_distribute_refuses_what_zero_cannot_shard",
         "test_stage_one_gradients_are_averages_that_travelled_in_half_precision",
         "test_gradient_accumulation_over_micro_batches",
         "test_matches_one_process_on_the_concatenated_batch",
         "test_memory_report_follows_the_formulas", "test_stage_three_prefetches_the_next_module",
         "test_stage_three_releases_parameters_between_uses",
         "test_stage_two_holds_gradient_shards_and_few_buckets",
         "test_stage_three_modules_may_return_dicts_and_named_tuples",
         "test_stage_three_released_units_cost_no_memory_while_autograd_views_them",
         "test_stage_three_with_units_of_many_pages_matches_one_process",
         "test_stage_three_load_releases_what_a_forward_left_gathered",
         "test_parameters_shared_between_modules_train_as_in_one_process",
         "test_learning_rate_schedulers_drive_it", "test_clip_grad_norm_clips_the_whole_model",
         "test_scheduler_and_clipping_misuse_is_refused",
         "test_parameter_groups_train_as_in_one_process",
         "test_checkpoint_resumes_the_learning_rate_schedule",
         "test_construction_broadcasts_frozen_parameters_and_buffers",
         "test_stage_three_gathers_parameter_lists_with_the_module_that_runs",
         "test_two_gradients_in_one_backward_are_refused_with_the_cause",
         "test_a_nan_gradient_on_one_rank_makes_every_ranks_norm_nonfinite",
         "test_load_refuses_sgd_state_of_the_other_momentum",
         "test_named_parameters_name_the_parameter_table"]
globals().update({name: getattr(next(m for m in (test_13_zero, test_28_zero_training_loops)
                                     if hasattr(m, name)), name) for name in RERUN})
OPTIMIZERS = test_13_zero.OPTIMIZERS

ENGINES = ["host"] + (["cuda"] if CUDA else [])


@pytest.fixture(autouse=True, params=ENGINES)
def torch_engine(request, monkeypatch):
    """host: the torch engine on host tensors; cuda: test_13's models on this rank's GPU (which
    get the torch engine by themselves)."""
    if request.param == "host":
        monkeypatch.setattr(zero_module, "_HOST_ENGINE", "torch")
    else:
        monkeypatch.setattr(test_13_zero, "DEVICE", cuda_device())
    return request.param


def test_the_engine_is_the_torch_one(comm):
    zero = ct.ZeroOptimizer(test_13_zero.make_model(0), stage=2)
    assert type(zero.engine).__name__ == "DeviceZeroEngine"


def test_units_are_issued_in_rank_zeros_order_after_the_first_iteration(comm):
    """Stage 3's units are the modules in module order; backward completes them last first, so
    from the second iteration on they are reduced in that order (the same on every rank)."""
    _, zero = test_13_zero.train_zero(comm, "sgd", 3, steps=1)
    units = zero.engine.num_units
    assert units == 4
    assert zero.engine._issue_order == list(reversed(range(units)))


@pytest.mark.parametrize("comm_dtype", [None, "bf16"])
def test_later_iterations_reuse_the_buckets_and_reduction_outputs(comm, monkeypatch, comm_dtype):
    """Stage 2 allocates its gradient buckets and reduce-scatter outputs in the first iteration
    only (on a GPU, fresh ones per unit piled up while the GPU ran behind the host); the
    training itself is test_13's. With compression only the wire copies are new."""
    model, zero = test_13_zero.train_zero(comm, "sgd", 2, steps=1, comm_dtype=comm_dtype)
    allocations = []

    class CountingTorch:
        def __getattribute__(self, name):
            factory = getattr(torch, name)
            if name not in ("empty", "zeros"):
                return factory

            def counted(*args, **kwargs):
                allocations.append((name, args))
                return factory(*args, **kwargs)
            return counted

    monkeypatch.setattr(zero_device_module, "torch", CountingTorch())
    train_steps(comm, model, zero, range(1, 3))
    assert allocations == []


def test_a_prefetch_left_open_does_not_outlive_new_parameters(comm, shared_directory):
    """Stage 3: a module run alone leaves the next unit's gather open (the prefetch). Loading a
    checkpoint writes new parameters; the next forward must use them, not the gathered unit."""
    model, zero = test_13_zero.train_zero(comm, "sgd", 3, steps=1)
    zero.save_checkpoint(shared_directory)
    probe = torch.ones(2, test_13_zero.IN, device=test_13_zero.DEVICE)
    with torch.no_grad():
        at_save = model(probe).clone()
    x, y = test_13_zero.global_batch(comm.size, 5)
    zero.zero_grad()
    test_13_zero.loss_of(model, x, y).backward()
    zero.step()
    with torch.no_grad():
        model.first(torch.zeros(2, test_13_zero.IN, device=test_13_zero.DEVICE))  # prefetches
    zero.load_checkpoint(shared_directory)
    with torch.no_grad():
        assert torch.equal(model(probe), at_save)


def use_engine(kind, monkeypatch, torch_engine):
    """Makes test_13's helpers build for `kind`: "c++" (host parameters), or "torch" (on the GPU
    in the cuda run, on the host, forced, in the host run)."""
    torch_device = cuda_device() if torch_engine == "cuda" else torch.device("cpu")
    monkeypatch.setattr(zero_module, "_HOST_ENGINE", "torch" if kind == "torch" else "c++")
    monkeypatch.setattr(test_13_zero, "DEVICE", torch_device if kind == "torch" else
                        torch.device("cpu"))


def train_steps(comm, model, zero, steps):
    for step in steps:
        x, y = test_13_zero.global_batch(comm.size, step)
        rows = slice(comm.rank * test_13_zero.BATCH, (comm.rank + 1) * test_13_zero.BATCH)
        zero.zero_grad()
        test_13_zero.loss_of(model, x[rows], y[rows]).backward()
        zero.step()


def two_more_steps(comm, model, zero):
    train_steps(comm, model, zero, range(2, 4))
    return zero.gathered_parameters()


@pytest.mark.parametrize("stage", [1, 3])
@pytest.mark.parametrize("optim", ["adam", "sgd"])
@pytest.mark.parametrize("saver,loader", [("torch", "c++"), ("c++", "torch")])
def test_a_checkpoint_crosses_between_the_engines(comm, shared_directory, monkeypatch,
                                                  torch_engine, stage, optim, saver, loader):
    """Saved by one engine after two steps, loaded by the other (so from the GPU to the host and
    back, in the cuda run): two more steps there give what two more steps give in the saver, so
    the master weights, the optimizer state (Adam's moments, SGD's momentum) and the step count
    all crossed. The engines' arithmetic differs in order only: 1e-5 relative."""
    use_engine(saver, monkeypatch, torch_engine)
    model, zero = test_13_zero.train_zero(comm, optim, stage, steps=2)
    zero.save_checkpoint(shared_directory)
    expected = two_more_steps(comm, model, zero)
    use_engine(loader, monkeypatch, torch_engine)
    model = test_13_zero.make_model(comm.rank + 7)
    zero = ct.ZeroOptimizer(model, stage=stage, **OPTIMIZERS[optim][0])
    zero.load_checkpoint(shared_directory)
    assert zero.steps == 2
    assert ("Device" in type(zero.engine).__name__) == (loader == "torch")
    continued = two_more_steps(comm, model, zero)
    for name in expected:
        error = test_13_zero.relative_error(continued[name], expected[name])
        assert error <= test_13_zero.FP32_TOLERANCE, f"{name}: relative error {error:.3g}"


def settled_allocation(device):
    """torch.cuda.memory_allocated once nothing of earlier code is left to free: the models and
    optimizers of earlier tests (reference cycles: the garbage collector frees them whenever it
    runs), and the buffers of finished chorus calls (freed at the next chorus call, which the
    host barrier here is; _chorus's work.cc)."""
    gc.collect()
    torch.cuda.synchronize(device)
    chorus.barrier()  # a call sweeps those whose host check has ended too: the second one sweeps
    chorus.barrier()  # what the first found still checking
    return torch.cuda.memory_allocated(device)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device and chorus built with NCCL")
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_memory_report_agrees_with_torch_cuda(comm, stage, torch_engine):
    """What the engine counts is what torch's allocator holds for it: the device bytes allocated
    from before the model to after a step (gradients zeroed), within 1 % (the allocator rounds
    each block up to 512 bytes): its model states and the buffers it keeps for reuse."""
    if torch_engine != "cuda":
        pytest.skip("the GPU run checks this")
    device = cuda_device()
    # cuBLAS's workspaces (one per stream and thread, backward's too) come from torch's allocator
    # at their first use: made here first, so that they do not count.
    warm = torch.nn.Linear(256, 256).to(device)
    warm(torch.randn(8, 256, device=device)).sum().backward()
    del warm
    before = settled_allocation(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(3)]).to(device)
    zero = ct.ZeroOptimizer(model, optim="adam", stage=stage, lr=1e-3)
    x = torch.randn(8, 256, device=device)
    model(x).square().mean().backward()
    zero.step()
    zero.zero_grad()
    del x
    allocated = settled_allocation(device) - before
    report = zero.memory_report()
    measured = report["measured"]["total"] + report["buffers"]  # buckets kept for reuse
    assert abs(allocated - measured) <= 0.01 * measured, (allocated, measured)
