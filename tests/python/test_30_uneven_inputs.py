"""DistributedDataParallel.join(): ranks with different numbers of batches train together.

The reference is one process, computed on every rank by plain torch with no communication: at
step t, the ranks that still have a batch each give the gradient of their own mean loss; their sum
is divided by the world size (torch's divide_by_initial_world_size=True: a joined rank counts as
zeros) or by their number (False); then the optimizer steps. After join() every rank must hold
that model (the model of the rank that trained longest). Runs at every world size of the suite.
"""

import contextlib
import copy

import pytest
import torch

import chorus
import chorus.torch as ct
import chorus.torch._ddp as ddp_module
from helpers import CUDA, cuda_device
from training_reference import (BATCH, assert_same_parameters, global_batch, loss_of,
                                make_model, make_optimizer)

# How many batches rank r of n has: each pattern ends with a different rank training alone.
SCHEDULES = {
    "higher_ranks_longer": lambda r, n: 2 + r,
    "rank_zero_longest": lambda r, n: 1 + n - r,
    "rank_one_has_none": lambda r, n: 0 if r == 1 else 3,
    "rank_zero_has_none": lambda r, n: 0 if r == 0 else 3,  # it shadows the first step's rebuild
}


def rows_of(rank, size, step):
    x, y, special = global_batch(size, step)
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    return x[mine], y[mine], special[mine]


def train_reference(schedule, size, optimizer_name, divide_by_world=True):
    model = make_model(0)
    optimizer = make_optimizer(optimizer_name, model.parameters())
    steps = [schedule(r, size) for r in range(size)]
    for step in range(max(steps)):
        training = [r for r in range(size) if step < steps[r]]
        optimizer.zero_grad(set_to_none=True)
        total = sum(loss_of(model, *rows_of(r, size, step)) for r in training)
        (total / (size if divide_by_world else len(training))).backward()
        optimizer.step()
    return model


def train_joined(comm, schedule, optimizer_name, divide_by_world=True, hook=None, micro=1,
                 no_sync_holds="both", device="cpu"):
    # Different on every rank: the wrapper broadcasts rank 0's.
    model = make_model(comm.rank, device=device)
    ddp = ct.DistributedDataParallel(model)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    optimizer = make_optimizer(optimizer_name, ddp.parameters())
    with ddp.join(divide_by_initial_world_size=divide_by_world):
        for step in range(schedule(comm.rank, comm.size)):
            x, y, special = (t.to(device) for t in rows_of(comm.rank, comm.size, step))
            optimizer.zero_grad(set_to_none=True)
            part = BATCH // micro
            for m in range(micro):  # gradient accumulation: all but the last under no_sync
                rows = slice(m * part, (m + 1) * part)
                local = ddp.no_sync() if m < micro - 1 else contextlib.nullcontext()
                forward = lambda: loss_of(ddp, x[rows], y[rows], special[rows]) / micro
                if no_sync_holds == "both":
                    with local:
                        forward().backward()
                elif no_sync_holds == "forward":  # inside join() the forward decides
                    with local:
                        loss = forward()
                    loss.backward()
                else:
                    loss = forward()
                    with local:
                        loss.backward()
            optimizer.step()
    return model


def assert_equal_on_every_rank(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]
                     + [b.reshape(-1).float() for b in model.buffers()])
    every = chorus.allgather(flat[None])
    assert torch.equal(every, flat.expand_as(every)), "the ranks ended with different models"


@pytest.mark.parametrize("schedule_name", sorted(SCHEDULES))
@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_uneven_batches_train_as_one_process_would(comm, schedule_name, optimizer_name):
    schedule = SCHEDULES[schedule_name]
    model = train_joined(comm, schedule, optimizer_name)
    reference = train_reference(schedule, comm.size, optimizer_name)
    assert_same_parameters(model, reference, 1e-5)
    assert_equal_on_every_rank(model)


def test_dividing_by_the_ranks_still_training(comm):
    schedule = SCHEDULES["higher_ranks_longer"]
    model = train_joined(comm, schedule, "sgd", divide_by_world=False)
    assert_same_parameters(model, train_reference(schedule, comm.size, "sgd", False), 1e-5)
    if comm.size > 1:  # the other divisor gives another model
        other = train_reference(schedule, comm.size, "sgd", True)
        with pytest.raises(AssertionError):
            assert_same_parameters(model, other, 1e-5)


def train_reference_micro(schedule, size, averages_each):
    """The reference for two micro-batches a step, with SGD: each rank accumulates its gradient
    locally; an averaging backward replaces every rank's accumulated gradient by the sum over the
    ranks training divided by the world size (a joined rank gives zeros). averages_each: both
    micro-batches average (else only the second)."""
    model = make_model(0)
    optimizer = make_optimizer("sgd", model.parameters())
    params = list(model.parameters())
    steps = [schedule(r, size) for r in range(size)]
    for step in range(max(steps)):
        training = [r for r in range(size) if step < steps[r]]
        local = {r: [torch.zeros_like(p) for p in params] for r in training}
        for m in range(2):
            for r in training:
                x, y, special = rows_of(r, size, step)
                rows = slice(m * BATCH // 2, (m + 1) * BATCH // 2)
                loss = loss_of(model, x[rows], y[rows], special[rows]) / 2
                grads = torch.autograd.grad(loss, params, allow_unused=True)
                for acc, g in zip(local[r], grads):
                    if g is not None:
                        acc += g
            if averages_each or m == 1:
                mean = [sum(local[r][i] for r in training) / size for i in range(len(params))]
                local = {r: [t.clone() for t in mean] for r in training}
        present = [any(bool(local[r][i].any()) for r in training) for i in range(len(params))]
        for i, p in enumerate(params):
            p.grad = local[training[0]][i] if present[i] else None
        optimizer.step()
    return model


@pytest.mark.parametrize("no_sync_holds", ["both", "forward", "backward"])
def test_gradient_accumulation_under_no_sync(comm, no_sync_holds):
    """Inside join(), a forward under no_sync() accumulates locally and one outside it averages,
    wherever its backward runs (torch's rule): with no_sync() around the backward only, both
    micro-batches average (and the first one's average, held by the training ranks only, counts
    again in the second). Every form must match its reference, without a mismatch on the way."""
    schedule = SCHEDULES["rank_zero_longest"]
    model = train_joined(comm, schedule, "sgd", micro=2, no_sync_holds=no_sync_holds)
    reference = train_reference_micro(schedule, comm.size, no_sync_holds == "backward")
    assert_same_parameters(model, reference, 1e-5)
    if no_sync_holds == "both":  # the plain reference agrees
        assert_same_parameters(model, train_reference(schedule, comm.size, "sgd"), 1e-5)


@pytest.mark.parametrize("divide_by_world", [True, False])
@pytest.mark.parametrize("path", ["hook", "device_buckets"])
def test_communication_hooks_and_device_buckets(comm, monkeypatch, path, divide_by_world):
    """The joined rank hands zero buckets to the hook (torch's allreduce hook contract), and the
    CUDA models' path (DeviceBuckets, run here on host tensors) shadows the same way."""
    hook = None
    if path == "hook":
        hook = ct.hooks.allreduce_hook
    else:
        monkeypatch.setattr(ddp_module, "_DEVICE_BUCKETS_ON_HOST", True)
    schedule = SCHEDULES["higher_ranks_longer"]
    model = train_joined(comm, schedule, "sgd", divide_by_world=divide_by_world, hook=hook)
    reference = train_reference(schedule, comm.size, "sgd", divide_by_world)
    assert_same_parameters(model, reference, 1e-5)


@pytest.mark.parametrize("longest", ["rank_zero", "highest_rank"])
def test_buffers_follow_the_highest_rank_still_training(comm, longest):
    """BatchNorm's running statistics: at each forward every rank takes the buffers of the highest
    rank still training, then takes its own batch in; after join() every rank has the buffers of
    the highest rank that trained in the last step."""
    if longest == "rank_zero":
        steps = [3 + (comm.size - 1 - r) for r in range(comm.size)]
    else:
        steps = [3 + r for r in range(comm.size)]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    replicas = [copy.deepcopy(model) for _ in range(comm.size)]  # each rank's, simulated
    ddp = ct.DistributedDataParallel(model)

    def batch(rank, step):
        generator = torch.Generator().manual_seed(100 * rank + step)
        return torch.randn(5, 4, generator=generator) * (rank + 1) + step

    with ddp.join():
        for step in range(steps[comm.rank]):
            ddp(batch(comm.rank, step)).sum().backward()
    last = None
    for step in range(max(steps)):
        training = [r for r in range(comm.size) if step < steps[r]]
        taken = copy.deepcopy(replicas[training[-1]].state_dict())
        for r in training:
            replicas[r].load_state_dict(taken)
            replicas[r](batch(r, step))  # updates the running statistics
        last = training[-1]
    reference = replicas[last][1]
    assert torch.allclose(model[1].running_mean, reference.running_mean, atol=1e-6)
    assert torch.allclose(model[1].running_var, reference.running_var, atol=1e-6)
    assert int(model[1].num_batches_tracked) == max(steps)
    assert_equal_on_every_rank(model)


def test_throw_on_early_termination_raises_on_every_rank(comm):
    torch.manual_seed(0)
    ddp = ct.DistributedDataParallel(torch.nn.Linear(3, 1))
    steps = 2 + comm.rank  # rank 0 runs out first
    done = 0
    with pytest.raises(chorus.Error, match="rank 0 ran out of inputs") if comm.size > 1 else \
            contextlib.nullcontext():
        with ddp.join(throw_on_early_termination=True):
            for _ in range(steps):
                ddp(torch.ones(2, 3)).sum().backward()
                done += 1
    # Every rank finished the steps that every rank had, and raised at the first one it lacked.
    assert done == (2 if comm.size > 1 else steps)
    # The model trains on afterwards, without join.
    ddp.module.weight.grad = None
    ddp(torch.ones(2, 3)).sum().backward()
    assert torch.allclose(ddp.module.weight.grad, torch.full((1, 3), 2.0))


def test_an_exception_in_the_loop_leaves_without_shadowing(comm):
    ddp = ct.DistributedDataParallel(torch.nn.Linear(3, 1))
    with pytest.raises(KeyError):
        with ddp.join():
            ddp(torch.ones(2, 3)).sum().backward()
            raise KeyError("every rank's loop fails")
    ddp.module.weight.grad = None
    with ddp.join():  # not left inside the first context
        ddp(torch.ones(2, 3)).sum().backward()
    assert torch.allclose(ddp.module.weight.grad, torch.full((1, 3), 2.0))


def test_join_refuses_nesting_and_does_nothing_when_disabled(comm):
    ddp = ct.DistributedDataParallel(torch.nn.Linear(3, 1))
    with ddp.join():
        with pytest.raises(chorus.InvalidArgumentError, match="already inside a join"):
            with ddp.join():
                pass
    # enable=False: an ordinary loop, so every rank must run the same number of steps.
    with ddp.join(enable=False):
        assert ddp._join is None
        ddp(torch.ones(2, 3)).sum().backward()
    assert ddp._join is None


def test_forward_without_grad_needs_no_shadow_backward(comm):
    """An evaluation forward under torch.no_grad() inside join(): the joined ranks take part in
    the agreement and the buffer broadcast only (a shadow backward there would meet the next
    agreement, a MismatchError)."""
    model = torch.nn.Linear(3, 1)
    model.register_buffer("seen", torch.zeros(1))  # broadcast at every forward
    ddp = ct.DistributedDataParallel(model)
    grads = []
    with ddp.join():
        for step in range(1 + comm.rank):  # ranks r >= step train at step `step`
            model.weight.grad = None
            ddp(torch.ones(2, 3)).sum().backward()
            grads.append(model.weight.grad.clone())
            with torch.no_grad():
                ddp(torch.ones(1, 3))
            model.seen += 1
    # d(sum of outputs)/dW is [2, 2, 2] on each rank training; joined ranks add zeros.
    for step, grad in enumerate(grads):
        expected = 2.0 * (comm.size - step) / comm.size
        assert torch.allclose(grad, torch.full((1, 3), expected)), (step, grad)
    # The highest rank trained last, one step per forward pair, and its count is everyone's.
    assert float(model.seen) == comm.size


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device and chorus built with NCCL")
@pytest.mark.parametrize("divide_by_world", [True, False])
def test_a_cuda_model_trains_on_uneven_inputs(comm, divide_by_world):
    """The CUDA path (DeviceBuckets on NCCL): joined ranks shadow with zero buckets on the GPU.
    float32 on the GPU against the host reference: within 1e-4 relative."""
    schedule = SCHEDULES["higher_ranks_longer"]
    model = train_joined(comm, schedule, "sgd", divide_by_world=divide_by_world,
                         device=cuda_device())
    reference = train_reference(schedule, comm.size, "sgd", divide_by_world)
    assert_same_parameters(model.cpu(), reference, 1e-4)
    assert_equal_on_every_rank(model)
