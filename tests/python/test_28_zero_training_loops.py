"""ZeroOptimizer with the models and training loops people write, against one process on the
whole batch (test_13's models, batches and reference, on test_13's device; test_24 reruns these
on the torch engine, and on a GPU where there is one): parameters shared between modules (tied
weights, ParameterLists, a declared external use) at stage 3, frozen parts and buffers, two
gradients in one backward, torch's learning-rate schedulers, gradient clipping over the whole
model, parameter groups, and checkpoints that resume a schedule."""

import copy
import math

import pytest
import torch
import torch.utils.checkpoint

import chorus
import chorus.distributed
import chorus.torch as ct
import test_13_zero
from chorus.torch._zero_stage3 import as_torch
from test_13_zero import (BATCH, FP32_TOLERANCE, HIDDEN, IN, OPTIMIZERS, OUT, STEPS,
                          assert_matches, global_batch, loss_of, make_model, relative_error,
                          train_reference, train_zero)


VOCABULARY = 11


class SharedWeights(torch.nn.Module):
    """Parameters used by more than one module: the embedding's weight is the head's (a tied
    language model), two layers of a Sequential share a weight, two layers of a ModuleList (which
    has no forward) share one, and the model's own forward uses the gate's parameters, which the
    gate registers but never runs."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCABULARY, HIDDEN)
        self.body = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                                        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh())
        self.body[2].weight = self.body[0].weight
        self.extras = torch.nn.ModuleList([torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(2)])
        self.extras[1].weight = self.extras[0].weight
        self.gate = torch.nn.Linear(HIDDEN, 1)
        self.head = torch.nn.Linear(HIDDEN, VOCABULARY, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.body(self.embed(tokens))
        for layer in self.extras:
            h = h + torch.tanh(layer(h))
        h = h * torch.sigmoid(torch.nn.functional.linear(h, self.gate.weight, self.gate.bias))
        return self.head(h)


def train_shared_weights(size, rank=None, stage=None):
    """Three SGD steps on token batches: one process on the whole batch (rank None), or this
    rank's rows under ZeroOptimizer."""
    torch.manual_seed(0 if rank is None else rank)
    model = SharedWeights().to(test_13_zero.DEVICE)
    if rank is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        rows = slice(None)
    else:
        ct.register_external_parameter(model, model.gate.weight)
        ct.register_external_parameter(model, model.gate.bias)
        optimizer = ct.ZeroOptimizer(model, stage=stage, optim="sgd", lr=0.2, momentum=0.9)
        rows = slice(rank * BATCH, (rank + 1) * BATCH)
    for step in range(3):
        generator = torch.Generator().manual_seed(3000 + step)
        tokens = torch.randint(0, VOCABULARY, (size * BATCH,), generator=generator)
        targets = torch.randint(0, VOCABULARY, (size * BATCH,), generator=generator)
        optimizer.zero_grad()
        logits = model(tokens[rows].to(test_13_zero.DEVICE))
        torch.nn.functional.cross_entropy(logits, targets[rows].to(test_13_zero.DEVICE)).backward()
        optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_parameters_shared_between_modules_train_as_in_one_process(comm, stage):
    """Tied weights, and a parameter that another module's forward uses (declared with
    register_external_parameter): stage 3 gathers such a parameter with the lowest common
    ancestor of its users that has a forward, which encloses every use. It used to gather each
    with the first module that registers it, so the head found the tied weight released."""
    model, zero = train_shared_weights(comm.size, comm.rank, stage)
    if stage == 3:
        names = [name for name, _ in model.named_parameters()]
        units = [[names[i] for i in zero.engine.unit_parameters(u)]
                 for u in range(zero.engine.num_units)]
        # Worked out by hand: module order, each parameter with the module that gathers it.
        assert units == [["embed.weight", "extras.0.weight", "gate.weight", "gate.bias"],
                         ["body.0.weight"], ["body.0.bias"], ["body.2.bias"],
                         ["extras.0.bias"], ["extras.1.bias"]]
    reference, _ = train_shared_weights(comm.size)
    assert_matches(zero, reference, FP32_TOLERANCE)


class WithFrozenPartsAndBuffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.frozen = torch.nn.Linear(IN, HIDDEN).requires_grad_(False)
        self.norm = torch.nn.BatchNorm1d(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, OUT)
        # One row shown twice, as HuggingFace's position_ids: nothing can be written into it.
        self.register_buffer("rows", torch.arange(float(HIDDEN)).expand(2, -1))

    def forward(self, x):
        return self.head(self.norm(self.frozen(x)))


@pytest.mark.parametrize("stage", [1, 3])
def test_construction_broadcasts_frozen_parameters_and_buffers(comm, stage):
    """Every rank starts from rank 0's model: the parameters it trains, and also its frozen
    parameters and its buffers (BatchNorm's statistics and its int64 count), as torch's DDP
    broadcasts module states. Before, those stayed as each rank made them."""
    def make(seed):
        torch.manual_seed(seed)
        model = WithFrozenPartsAndBuffers().to(test_13_zero.DEVICE)
        model.norm.running_mean.uniform_()
        model.norm.num_batches_tracked.fill_(seed + 3)
        return model
    model = make(comm.rank)
    ct.ZeroOptimizer(model, stage=stage, optim="sgd", lr=0.1)
    rank_zeros = make(0)
    for name, expected in [(n, b) for n, b in rank_zeros.named_buffers() if n != "rows"] + [
            ("frozen.weight", rank_zeros.frozen.weight), ("frozen.bias", rank_zeros.frozen.bias)]:
        actual = dict(model.named_buffers()).get(name)
        actual = actual if actual is not None else dict(model.named_parameters())[name]
        assert torch.equal(actual, expected), name


class ParametersOutsideAForward(torch.nn.Module):
    """Scales in a ParameterList and a bias in a ParameterDict, which have no forward: the
    model's own forward uses them."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(IN, OUT)
        self.scales = torch.nn.ParameterList([torch.nn.Parameter(torch.rand(OUT) + 0.5)])
        self.extra = torch.nn.ParameterDict({"bias": torch.nn.Parameter(torch.rand(OUT))})

    def forward(self, x):
        return self.lin(x) * self.scales[0] + self.extra["bias"]


def test_stage_three_gathers_parameter_lists_with_the_module_that_runs(comm, monkeypatch):
    """A ParameterList's or ParameterDict's parameters go to the nearest module above with a
    forward (here the model). They used to stay in units of their own that nothing gathered, so
    the forward found them empty. A model with no forward anywhere is refused at construction."""
    def make(seed):
        torch.manual_seed(seed)
        return ParametersOutsideAForward().to(test_13_zero.DEVICE)
    monkeypatch.setattr(test_13_zero, "make_model", make)
    model, zero = train_zero(comm, "sgd", 3)
    names = [name for name, _ in model.named_parameters()]
    assert [[names[i] for i in zero.engine.unit_parameters(u)]
            for u in range(zero.engine.num_units)] == [["scales.0", "extra.bias"],
                                                       ["lin.weight", "lin.bias"]]
    assert_matches(zero, train_reference("sgd", comm.size), FP32_TOLERANCE)
    halves = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 2), "b": torch.nn.Linear(2, 2)})
    halves["b"].weight = halves["a"].weight
    with pytest.raises(chorus.InvalidArgumentError, match="has a forward: the model is a ModuleDict"):
        ct.ZeroOptimizer(halves, stage=3)


class SharedAcrossACheckpoint(torch.nn.Module):
    """`shared` is used inside a reentrant torch.utils.checkpoint region and outside it: it then
    gets two gradients in one backward (torch's own DDP refuses this too)."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(IN, IN)
        self.second = torch.nn.Linear(IN, OUT)
        self.shared = torch.nn.Parameter(torch.ones(IN))

    def forward(self, x):
        inner = torch.utils.checkpoint.checkpoint(
            lambda h: self.first(h) * self.shared, x, use_reentrant=True)
        return self.second(inner * self.shared)


@pytest.mark.parametrize("stage", [1, 2])
def test_two_gradients_in_one_backward_are_refused_with_the_cause(comm, stage):
    """A parameter used inside and outside a reentrant checkpoint gets two gradients in one
    backward; every rank raises an error that names the cause and the remedy."""
    torch.manual_seed(0)
    model = SharedAcrossACheckpoint().to(test_13_zero.DEVICE)
    zero = ct.ZeroOptimizer(model, stage=stage, optim="sgd", lr=0.1)
    x, y = global_batch(comm.size, 0)
    with pytest.raises(chorus.InvalidArgumentError, match="use_reentrant=False"):
        loss_of(model, x.requires_grad_(), y).backward()
    del zero


SCHEDULES = {
    # lr changes at every step.
    "lambda": lambda optimizer: torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 / (1 + 2 * step)),
    # lr and momentum (SGD) or beta1 (Adam, AdamW) change at every step, and at construction.
    "one-cycle": lambda optimizer: torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=0.05, total_steps=STEPS, pct_start=0.5),
}


def train_clipped_and_scheduled(optim, size, rank=None, stage=None, schedule=None,
                                max_norm=None, norm_type=2.0):
    """STEPS steps with a learning-rate schedule and gradient clipping, each optional: torch.optim
    and torch's clip_grad_norm_ on one process on the whole batch (rank None), or ZeroOptimizer
    on this rank's rows. Returns (model, optimizer, the norms clipping saw, the lrs used)."""
    model = make_model(0 if rank is None else rank)
    if rank is None:
        optimizer = OPTIMIZERS[optim][1](model.parameters())
        rows = slice(None)
    else:
        optimizer = ct.ZeroOptimizer(model, stage=stage, **OPTIMIZERS[optim][0])
        rows = slice(rank * BATCH, (rank + 1) * BATCH)
    scheduler = SCHEDULES[schedule](optimizer) if schedule else None
    norms, lrs = [], []
    for step in range(STEPS):
        x, y = global_batch(size, step)
        optimizer.zero_grad()
        loss_of(model, x[rows], y[rows]).backward()
        if max_norm is not None:
            if rank is None:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type)
            else:
                norm = optimizer.clip_grad_norm_(max_norm, norm_type)
            norms.append(float(norm))
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return model, optimizer, norms, lrs


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("optim", ["sgd", "adamw"])
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_learning_rate_schedulers_drive_it(comm, stage, optim, schedule):
    """A torch.optim.lr_scheduler on the ZeroOptimizer changes its updates as on torch.optim's
    optimizer on one process (OneCycleLR also moves SGD's momentum and Adam's beta1)."""
    _, zero, _, lrs = train_clipped_and_scheduled(optim, comm.size, comm.rank, stage, schedule)
    reference, _, _, reference_lrs = train_clipped_and_scheduled(optim, comm.size,
                                                                 schedule=schedule)
    assert lrs == pytest.approx(reference_lrs)
    assert len(set(lrs)) == STEPS  # the schedule moved the learning rate at every step
    assert_matches(zero, reference, FP32_TOLERANCE)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_clip_grad_norm_clips_the_whole_model(comm, stage, norm_type):
    """clip_grad_norm_ sees the norm of the whole averaged gradient, which no rank holds at stages
    2 and 3, and clips as torch.nn.utils.clip_grad_norm_ does on one process."""
    max_norm = 0.05
    # SGD: Adam would turn the rounding noise of near-zero gradient entries into whole steps.
    model, zero, norms, _ = train_clipped_and_scheduled("sgd", comm.size, comm.rank, stage,
                                                        max_norm=max_norm, norm_type=norm_type)
    reference, _, reference_norms, _ = train_clipped_and_scheduled(
        "sgd", comm.size, max_norm=max_norm, norm_type=norm_type)
    assert norms == pytest.approx(reference_norms, rel=1e-5)
    assert min(norms) > max_norm  # every step was clipped
    assert_matches(zero, reference, FP32_TOLERANCE)
    if stage == 1:  # .grad holds the whole clipped average, as torch's function leaves it
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            error = relative_error(p.grad, q.grad)
            assert error <= FP32_TOLERANCE, f"{name}.grad: relative error {error:.3g}"


def no_decay_groups(model, **options):
    """The usual split: no weight decay for biases and norms, and its own learning rate for the
    head (torch.optim's parameter groups; the other hyperparameters are the optimizer's)."""
    decay = [p for name, p in model.named_parameters()
             if name.endswith("weight") and not name.startswith(("norm", "head"))]
    no_decay = [p for name, p in model.named_parameters()
                if not name.endswith("weight") or name.startswith("norm")]
    return [dict({"params": decay}, **options), {"params": no_decay, "weight_decay": 0.0},
            {"params": [model.head.weight], "lr": 0.02}]


@pytest.mark.parametrize("optim", ["sgd", "adamw"])
@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("through", ["constructor", "distribute"])
def test_parameter_groups_train_as_in_one_process(comm, stage, optim, through):
    """Parameter groups (each its own weight decay or learning rate), each group stepped by its
    own lambda of a LambdaLR, as torch.optim and its scheduler do on one process. distribute()
    takes them from the torch optimizer it replaces."""
    lambdas = [lambda step: 1.0, lambda step: 1.0 / (1 + step), lambda step: 0.5 ** step]

    def train(rank):
        model = make_model(0 if rank is None else rank)
        torch_optimizer = OPTIMIZERS[optim][1](no_decay_groups(model, weight_decay=0.05))
        rows = slice(None)
        optimizer = torch_optimizer
        if rank is not None:
            rows = slice(rank * BATCH, (rank + 1) * BATCH)
            if through == "constructor":
                optimizer = ct.ZeroOptimizer(no_decay_groups(model, weight_decay=0.05),
                                             module=model, stage=stage, **OPTIMIZERS[optim][0])
            else:
                config = chorus.distributed.get_config()
                saved, config.zero_opt_level = config.zero_opt_level, stage
                try:
                    _, optimizer = ct.distribute(model, torch_optimizer)
                finally:
                    config.zero_opt_level = saved
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
        for step in range(STEPS):
            x, y = global_batch(comm.size, step)
            optimizer.zero_grad()
            loss_of(model, x[rows], y[rows]).backward()
            optimizer.step()
            scheduler.step()
        return model, optimizer

    _, zero = train(comm.rank)
    reference, torch_optimizer = train(None)
    assert len(zero.param_groups) == 3
    assert [g["lr"] for g in zero.param_groups] == pytest.approx(
        [g["lr"] for g in torch_optimizer.param_groups])
    assert_matches(zero, reference, FP32_TOLERANCE)


@pytest.mark.parametrize("stage", [2, 3])
def test_checkpoint_resumes_the_learning_rate_schedule(comm, shared_directory, stage):
    """load_checkpoint restores what a schedule had set in every parameter group; the
    scheduler's own state_dict() restores the scheduler. Training then goes on as if it had not
    stopped (an ExponentialLR computes each lr from the last one)."""
    def make(seed):
        model = make_model(seed)
        zero = ct.ZeroOptimizer(no_decay_groups(model), module=model, stage=stage,
                                **OPTIMIZERS["adam"][0])
        return model, zero, torch.optim.lr_scheduler.ExponentialLR(zero, gamma=0.5)

    rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)

    def run(model, zero, scheduler, steps):
        for step in steps:
            x, y = global_batch(comm.size, step)
            zero.zero_grad()
            loss_of(model, x[rows], y[rows]).backward()
            zero.step()
            scheduler.step()

    model, zero, scheduler = make(comm.rank)
    run(model, zero, scheduler, range(2))
    zero.save_checkpoint(shared_directory)
    saved_scheduler = scheduler.state_dict()
    run(model, zero, scheduler, range(2, 4))
    model, resumed, scheduler = make(comm.rank + 7)
    resumed.load_checkpoint(shared_directory)
    scheduler.load_state_dict(saved_scheduler)
    assert [g["lr"] for g in resumed.param_groups] == pytest.approx([0.0025, 0.0025, 0.005])
    run(model, resumed, scheduler, range(2, 4))
    expected, actual = zero.gathered_parameters(), resumed.gathered_parameters()
    for name in expected:
        assert torch.equal(actual[name], expected[name]), name
    # torch.optim's other way to resume: a scheduler made after the load, with last_epoch, which
    # needs the initial_lr the checkpoint kept and goes on from the lr it restored, as it does on
    # a torch optimizer holding the same values (what construction does differs between torch
    # versions).
    model = make_model(comm.rank)
    again = ct.ZeroOptimizer(no_decay_groups(model), module=model, stage=stage,
                             **OPTIMIZERS["adam"][0])
    again.load_checkpoint(shared_directory)
    torch.optim.lr_scheduler.ExponentialLR(again, gamma=0.5, last_epoch=1)
    plain = OPTIMIZERS["adam"][1](no_decay_groups(make_model(0)))
    for group, lr, initial_lr in zip(plain.param_groups, [0.0025, 0.0025, 0.005],
                                     [0.01, 0.01, 0.02]):
        group.update(lr=lr, initial_lr=initial_lr)  # what the checkpoint holds, worked by hand
    torch.optim.lr_scheduler.ExponentialLR(plain, gamma=0.5, last_epoch=1)
    assert [g["lr"] for g in again.param_groups] == pytest.approx(
        [g["lr"] for g in plain.param_groups])


def test_named_parameters_name_the_parameter_table(comm):
    """Parameters given with their names (torch 2.6's named parameters for optimizers), also
    inside a group, are known by those names (gathered_parameters, checkpoints)."""
    model = make_model(0)
    named = list(model.named_parameters())
    for params in (named, [{"params": named[:2]}, {"params": named[2:], "lr": 0.5}]):
        zero = ct.ZeroOptimizer(params, stage=2)
        assert list(zero.gathered_parameters()) == [name for name, _ in named]


def test_load_refuses_sgd_state_of_the_other_momentum(comm, shared_directory):
    """SGD saved with momentum cannot be loaded into an SGD without it: its momentum buffer has
    nowhere to go, and the saved momentum would stop every later step."""
    with_momentum = ct.ZeroOptimizer(make_model(0), stage=2, optim="sgd", lr=0.1, momentum=0.9)
    with_momentum.save_checkpoint(shared_directory)
    without = ct.ZeroOptimizer(make_model(0), stage=2, optim="sgd", lr=0.1)
    with pytest.raises(chorus.InvalidArgumentError, match="momentum"):
        without.load_checkpoint(shared_directory)


@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_a_nan_gradient_on_one_rank_makes_every_ranks_norm_nonfinite(comm, norm_type):
    """One rank's shard holds a NaN: every rank's total norm is non-finite (inf for the inf norm,
    whose maximum NCCL could otherwise take from the other operand), and error_if_nonfinite raises
    on every rank."""
    model = make_model(0)
    zero = ct.ZeroOptimizer(model, stage=2, optim="sgd", lr=0.1)
    x, y = global_batch(comm.size, 0)
    for error_if_nonfinite in (False, True):
        zero.zero_grad()
        loss_of(model, x, y).backward()
        if comm.rank == 0:  # the first element of rank 0's shard is a parameter's, not padding
            as_torch(zero.engine.owned_gradients(0))[0] = float("nan")
        if error_if_nonfinite:
            with pytest.raises(RuntimeError, match="non-finite"):
                zero.clip_grad_norm_(1.0, norm_type, error_if_nonfinite=True)
        else:
            assert not math.isfinite(float(zero.clip_grad_norm_(1.0, norm_type)))


def test_scheduler_and_clipping_misuse_is_refused(comm):
    model = make_model(0)
    zero = ct.ZeroOptimizer(model, stage=2, optim="sgd", lr=0.1)
    with pytest.raises(chorus.UnsupportedError, match="save_checkpoint"):
        zero.state_dict()
    with pytest.raises(chorus.UnsupportedError, match="parameter groups"):
        zero.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
    with pytest.raises(chorus.InvalidArgumentError, match="norm_type"):
        zero.clip_grad_norm_(1.0, norm_type=0)
    x, y = global_batch(comm.size, 0)
    zero.param_groups[0]["momentum"] = 0.9  # SGD made without momentum has no buffer for it
    loss_of(model, x, y).backward()
    with pytest.raises(chorus.InvalidArgumentError, match="momentum cannot change"):
        zero.step()
    zero.param_groups[0]["momentum"] = 0.0
    zero.param_groups[0]["lr"] = -1.0
    with pytest.raises(chorus.InvalidArgumentError, match="learning rate|Invalid learning rate"):
        zero.step()
    with pytest.raises(chorus.InvalidArgumentError, match="does not exist"):
        zero.engine.set_hyperparameters(dict(zero.hyperparameters, lr=100.0), group=1)
    zero.param_groups[0]["lr"] = 0.0
    before = zero.gathered_parameters()
    zero.step()  # neither refused change reached the engine: lr 0 leaves the parameters
    after = zero.gathered_parameters()
    assert all(torch.equal(before[name], after[name]) for name in before)
    with pytest.raises(chorus.UnsupportedError, match="copied or pickled"):
        copy.deepcopy(zero)
