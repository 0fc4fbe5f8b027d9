"""chorus.torch.ZeroOptimizer: stages 1, 2 and 3 on N ranks with per-rank batches end with the same
parameters as one process trained by torch.optim on the concatenated batch (the reference,
computed on every rank by plain torch with no communication); memory_report() matches the ZeRO
paper's formulas; checkpoints round-trip. Runs at every world size of the suite (1 to 4 ranks).

Tolerances: float32 within 1e-5 relative (max |zero - ref| / max |ref|, per parameter). bfloat16
mixed precision (bfloat16 forward and backward, float32 master weights and optimizer state) is
compared with a mixed-precision reference (the same, on one process and the whole batch) within
1e-2 absolute per element, 2.5 bfloat16 steps at 1.0 (2**-8 each): the ranks' bfloat16 gradients
of their own rows, averaged, round differently from the whole batch's bfloat16 gradient. Measured:
at most 4.9e-3 (4 ranks), 2.6e-3 (3), 9.7e-4 (2), 2.7e-7 (1).
"""

import collections
import copy
import ctypes
import functools
import math
import os
import secrets
import shutil
import tempfile

import numpy as np
import pytest
import torch
import torch.utils.checkpoint

import chorus
import chorus.distributed
import chorus.torch as ct
from chorus.torch._zero_stage3 import as_torch

BATCH = 5   # per rank
STEPS = 4
IN, HIDDEN, OUT = 12, 24, 5
FP32_TOLERANCE = 1e-5
BF16_ABSOLUTE_TOLERANCE = 1e-2
# Where the models and batches live: test_24 runs these tests again on its own device and engine.
DEVICE = torch.device("cpu")


class Net(torch.nn.Module):
    """Linear, LayerNorm, a residual block whose input is used twice, and a head."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(IN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.block = torch.nn.Linear(HIDDEN, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, OUT)

    def forward(self, x):
        h = torch.relu(self.norm(self.first(x)))
        h = h + torch.tanh(self.block(h))
        return self.head(h)


OPTIMIZERS = {
    "sgd": (dict(optim="sgd", lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01,
                                      nesterov=True)),
    "adam": (dict(optim="adam", lr=0.01, weight_decay=0.01),
             lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01)),
    # For bfloat16: with eps = 1e-8 Adam turns the rounding noise of near-zero gradient entries
    # into whole steps of lr; eps = 1e-3 keeps such entries' steps proportional to them.
    "adam-eps": (dict(optim="adam", lr=0.01, eps=1e-3),
                 lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-3)),
    "adamw": (dict(optim="adamw", lr=0.01, weight_decay=0.1, betas=(0.8, 0.99)),
              lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, betas=(0.8, 0.99))),
}


def make_model(seed):
    torch.manual_seed(seed)
    return Net().to(DEVICE)


def global_batch(size, step, micro=1):
    generator = torch.Generator().manual_seed(2000 + step)
    n = size * micro * BATCH
    x, y = torch.randn(n, IN, generator=generator), torch.randn(n, OUT, generator=generator)
    return x.to(DEVICE), y.to(DEVICE)


def loss_of(model, x, y):
    return ((model(x) - y) ** 2).mean()


def train_reference(optim, size, steps=STEPS):
    model = make_model(0)
    optimizer = OPTIMIZERS[optim][1](model.parameters())
    for step in range(steps):
        x, y = global_batch(size, step)
        optimizer.zero_grad()
        loss_of(model, x, y).backward()
        optimizer.step()
    return model


def train_zero(comm, optim, stage, micro=1, mixed_precision=None, bucket_cap_mb=None,
               steps=STEPS, comm_dtype=None):
    # Every rank starts from different weights: the optimizer must broadcast rank 0's.
    model = make_model(comm.rank)
    zero = ct.ZeroOptimizer(model, stage=stage, mixed_precision=mixed_precision,
                            bucket_cap_mb=bucket_cap_mb, comm_dtype=comm_dtype,
                            **OPTIMIZERS[optim][0])
    dtype = torch.bfloat16 if mixed_precision else torch.float32
    for step in range(steps):
        x, y = global_batch(comm.size, step, micro)
        zero.zero_grad()
        for m in range(micro):
            rows = slice((comm.rank * micro + m) * BATCH, (comm.rank * micro + m + 1) * BATCH)
            # Each micro-batch's loss is a mean over BATCH rows; dividing by micro makes the sum
            # the mean over the rank's micro * BATCH rows.
            loss = loss_of(model, x[rows].to(dtype), y[rows].to(dtype)) / micro
            if stage == 1 and m < micro - 1:
                with zero.no_sync():
                    loss.backward()
            else:
                loss.backward()
        zero.step()
    return model, zero


def relative_error(actual, expected):
    actual, expected = actual.float().cpu(), expected.float().cpu()
    scale = expected.abs().max().clamp_min(1e-12)
    return float((actual - expected).abs().max() / scale)


def assert_matches(zero, reference, tolerance):
    gathered = zero.gathered_parameters()
    for name, q in reference.named_parameters():
        error = relative_error(gathered[name], q.detach())
        assert error <= tolerance, f"{name}: relative error {error:.3g} > {tolerance}"


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("optim", ["sgd", "adam", "adamw"])
def test_matches_one_process_on_the_concatenated_batch(comm, stage, optim):
    model, zero = train_zero(comm, optim, stage)
    reference = train_reference(optim, comm.size)
    assert_matches(zero, reference, FP32_TOLERANCE)
    if stage < 3:  # the model's own parameters are current too
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            assert relative_error(p.detach(), q.detach()) <= FP32_TOLERANCE, name


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_gradient_accumulation_over_micro_batches(comm, stage):
    # Small units, so that several reductions are in flight during each backward. SGD: Adam turns
    # the rounding of near-zero gradient entries (micro-batch sums, in another order) into whole
    # steps of lr, which a relative tolerance on small parameters cannot absorb.
    _, zero = train_zero(comm, "sgd", stage, micro=2, bucket_cap_mb=0.0002)
    assert zero.engine.num_units > 2
    reference = make_model(0)
    optimizer = OPTIMIZERS["sgd"][1](reference.parameters())
    for step in range(STEPS):
        x, y = global_batch(comm.size, step, micro=2)
        optimizer.zero_grad()
        loss_of(reference, x, y).backward()
        optimizer.step()
    assert_matches(zero, reference, FP32_TOLERANCE)


def train_mixed_precision_reference(optim, size):
    """One process, whole batches: a bfloat16 model for forward and backward, float32 master
    weights updated by torch.optim from the bfloat16 gradients."""
    master = make_model(0)
    model = make_model(0).to(torch.bfloat16)
    optimizer = OPTIMIZERS[optim][1](master.parameters())
    for step in range(STEPS):
        x, y = global_batch(size, step)
        for p, q in zip(model.parameters(), master.parameters()):
            p.data.copy_(q.data)
            p.grad = None
        loss_of(model, x.bfloat16(), y.bfloat16()).backward()
        for p, q in zip(model.parameters(), master.parameters()):
            q.grad = p.grad.float()
        optimizer.step()
    return master


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("optim", ["sgd", "adam-eps"])
def test_bfloat16_mixed_precision(comm, stage, optim):
    model, zero = train_zero(comm, optim, stage, mixed_precision="bf16")
    reference = dict(train_mixed_precision_reference(optim, comm.size).named_parameters())
    gathered = zero.gathered_parameters()
    for name, p in model.named_parameters():
        assert p.dtype == torch.bfloat16
        error = float((gathered[name] - reference[name].detach().cpu()).abs().max())
        assert error <= BF16_ABSOLUTE_TOLERANCE, f"{name}: error {error:.3g}"
        if stage < 3:  # the model holds the master weights rounded to bfloat16
            assert torch.equal(p.detach().cpu(), gathered[name].to(torch.bfloat16)), name


def assert_memory_matches_the_paper(report):
    measured, predicted = report["measured"], report["predicted"]
    slack = 0.01 * predicted["total"] + report["padding_bytes"]
    for key in ("parameters", "gradients", "optimizer_state", "total"):
        assert abs(measured[key] - predicted[key]) <= slack, (key, measured, predicted)
    assert report["outside_engine_bytes"] == 0


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("optim,mixed,k", [("adam", "bf16", 12), ("adam", None, 8),
                                           ("sgd", None, 4)])
def test_memory_report_follows_the_formulas(comm, stage, optim, mixed, k):
    _, zero = train_zero(comm, optim, stage, mixed_precision=mixed, steps=1)
    report = zero.memory_report()
    n, psi, d = comm.size, report["numel"], 2 if mixed else 4
    assert (report["stage"], report["world_size"], report["k"]) == (stage, n, k)
    assert psi == sum(p.numel() for p in make_model(0).parameters())
    # The paper's formulas, written out independently of the code under test.
    expected_total = {1: 2 * d * psi + k * psi / n, 2: d * psi + (d + k) * psi / n,
                      3: (2 * d + k) * psi / n}[stage]
    assert report["predicted"]["total"] == pytest.approx(expected_total)
    assert_memory_matches_the_paper(report)


def test_stage_two_holds_gradient_shards_and_few_buckets(comm, multi_rank):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(8)]).to(DEVICE)
    zero = ct.ZeroOptimizer(model, stage=2, bucket_cap_mb=4 * 1056 / 2**20)  # a layer per unit
    engine = zero.engine
    assert engine.num_units == 8
    x = torch.randn(4, 32).to(DEVICE)
    for _ in range(2):
        zero.zero_grad()
        model(x).square().mean().backward()
        assert all(p.grad is None for p in model.parameters())
        zero.step()
    report = zero.memory_report()
    n, d = comm.size, 4
    full_gradients = d * report["numel"]
    assert report["measured"]["gradients"] == d * engine.shard_numel < full_gradients
    # Communication buffers: at most two buckets (a unit plus its reduce-scatter output) during
    # backward; the step's allgather runs in place.
    bucket = max(engine.padded_numel(u) * (n + 1) // n for u in range(8)) * d
    assert report["peak_buffers"] <= 2 * bucket
    assert 2 * bucket < full_gradients / 2


def test_stage_three_releases_parameters_between_uses(comm):
    model, zero = train_zero(comm, "sgd", 3, steps=1)
    assert all(p.numel() == 0 for p in model.parameters())
    # Released, each keeps its device: torch drops a parameter's gradient accumulator (and the
    # optimizer's hook on it) when its .data moves to another device.
    assert all(p.device == torch.device(DEVICE) for p in model.parameters())
    seen = []
    hook = model.block.register_forward_pre_hook(lambda m, i: seen.append(m.weight.shape))
    with torch.no_grad():
        model(torch.zeros(2, IN, device=DEVICE))
    hook.remove()
    assert seen == [torch.Size([HIDDEN, HIDDEN])]
    assert model.block.weight.numel() == 0


def test_stage_three_prefetches_the_next_module(comm):
    model, zero = train_zero(comm, "sgd", 3, steps=1)  # the first forward recorded the order
    engine = zero.engine
    norm, block = engine.unit_of(2), engine.unit_of(4)  # norm.weight, block.weight
    assert engine.unit_parameters(norm) == [2, 3] and engine.unit_parameters(block) == [4, 5]
    before = engine.memory()["buffers"]  # gradient buckets kept for reuse; nothing gathered
    during = []
    hook = model.norm.register_forward_pre_hook(
        lambda m, i: during.append(engine.memory()["buffers"] - before))
    with torch.no_grad():
        model(torch.zeros(2, IN, device=DEVICE))
    hook.remove()
    # Inside norm's forward: norm's unit is gathered and block's (next) is already being gathered.
    assert during == [4 * (engine.padded_numel(norm) + engine.padded_numel(block))]


class _CountingEngine:
    """Forwards to the engine and notes each allgather it issues: gather and wait_gathered issue
    one for a unit not gathered since its last release, and nothing for one that is."""

    def __init__(self, engine):
        self._engine, self.issued, self._held = engine, [], set()

    def gather(self, unit):
        self._note(unit)
        self._engine.gather(unit)

    def wait_gathered(self, unit):
        self._note(unit)
        self._engine.wait_gathered(unit)

    def release(self, unit, keep_address=False):
        self._held.discard(unit)
        self._engine.release(unit, keep_address=keep_address)

    def _note(self, unit):
        if unit not in self._held:
            self._held.add(unit)
            self.issued.append(unit)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_stage_three_keeps_the_last_module_gathered_for_its_backward(comm):
    model, zero = train_zero(comm, "sgd", 3, steps=1)  # the first backward fixed the order
    counting = _CountingEngine(zero._lifecycle._engine)
    zero._lifecycle._engine = counting
    units = [zero.engine.unit_of(i) for i in (0, 2, 4, 6)]  # first, norm, block, head
    x, y = global_batch(comm.size, 1)
    rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
    loss = loss_of(model, x[rows], y[rows])
    assert counting.issued == units
    # The head ran last in forward and runs first in backward: it stays gathered for it.
    assert model.head.weight.numel() > 0 and model.block.weight.numel() == 0
    loss.backward()
    assert counting.issued[len(units):] == units[-2::-1]  # block, norm, first: the head not again
    assert all(p.numel() == 0 for p in model.parameters())
    zero.step()


def test_stage_three_step_after_a_forward_without_backward_releases_and_updates(comm):
    model, zero = train_zero(comm, "sgd", 3, steps=1)  # momentum 0.9: the next step moves them
    x, _ = global_batch(comm.size, 1)
    rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
    model(x[rows])  # grad enabled, no backward: the head stays gathered
    assert model.head.weight.numel() > 0
    zero.zero_grad()
    zero.step()
    assert all(p.numel() == 0 for p in model.parameters())  # released, not left holding memory
    reference = make_model(0)
    with torch.no_grad():
        for name, value in zero.gathered_parameters().items():
            reference.get_parameter(name).copy_(value)
        expected = reference(x[rows])
        actual = model(x[rows])
    assert relative_error(actual, expected) <= FP32_TOLERANCE


def storage_of(tensor):
    return tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()


def resident_bytes(storage):
    """What `storage` costs now: on a GPU its size, on the host the bytes of its whole pages that
    are in memory (mincore(2))."""
    if storage.device.type != "cpu":
        return storage.nbytes()
    page = os.sysconf("SC_PAGE_SIZE")
    first = -(-storage.data_ptr() // page) * page
    end = (storage.data_ptr() + storage.nbytes()) // page * page
    if storage.nbytes() == 0 or end <= first:
        return 0
    pages = (ctypes.c_ubyte * ((end - first) // page))()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert libc.mincore(first, end - first, pages) == 0, os.strerror(ctypes.get_errno())
    return page * sum(flags & 1 for flags in pages)


WIDE = 512  # units of 1 MiB: whole pages, which a release can give back


class WideNet(torch.nn.Sequential):
    """Linear layers of WIDE units, so that each unit spans many pages. `middle` changes the two
    middle layers: "detached" adds a side term that uses the weight detached (its backward needs
    the weight after the weight's own gradient is done); "checkpoint" and "reentrant" run each
    through torch.utils.checkpoint, which runs the layer's forward again in backward."""

    def __init__(self, middle=None):
        layers = [torch.nn.Linear(IN, WIDE), torch.nn.Linear(WIDE, WIDE),
                  torch.nn.Linear(WIDE, WIDE), torch.nn.Linear(WIDE, OUT)]
        middles = layers[1:3]
        if middle == "detached":
            for layer in layers[1:3]:
                layer.forward = functools.partial(_with_detached_term, layer)
        elif middle in ("checkpoint", "reentrant"):
            middles = [_Checkpointed(layer, reentrant=middle == "reentrant")
                       for layer in layers[1:3]]
        super().__init__(layers[0], torch.nn.ReLU(), middles[0], torch.nn.ReLU(), middles[1],
                         torch.nn.ReLU(), layers[3])
        self.layers = layers


def _with_detached_term(layer, x):
    # The side term first: autograd runs later nodes first, so its backward comes after the
    # weight's gradient is done.
    side = 0.5 * torch.nn.functional.linear(x, layer.weight.detach())
    return torch.nn.functional.linear(x, layer.weight, layer.bias) + side


class _Checkpointed(torch.nn.Module):
    """`layer` (a unit of its own) called through torch.utils.checkpoint."""

    def __init__(self, layer, reentrant):
        super().__init__()
        self.layer, self.reentrant = layer, reentrant

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.layer, x, use_reentrant=self.reentrant)


def train_wide(comm, steps, middle=None, zero_stage=None):
    """WideNet trained with SGD (lr 0.1) for `steps` of global_batch: by ZeroOptimizer at
    `zero_stage` on this rank's rows, or (None) by torch on the whole batch in one process."""
    torch.manual_seed(0)
    model = WideNet(middle).to(DEVICE)
    if zero_stage is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        rows = slice(None)
    else:
        optimizer = ct.ZeroOptimizer(model, stage=zero_stage, optim="sgd", lr=0.1)
        rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
    for step in range(steps):
        x, y = global_batch(comm.size, step)
        optimizer.zero_grad()
        loss_of(model, x[rows], y[rows]).backward()
        optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("middle", [None, "detached", "checkpoint", "reentrant"])
def test_stage_three_with_units_of_many_pages_matches_one_process(comm, middle):
    """Units that span many pages, which a release really gives back: training still matches one
    process, also when a layer uses its weight detached too, so that backward reads it after the
    weight's gradient is done (a unit released in backward must keep its values for that), and
    when activation checkpointing runs a unit's forward again during backward (it must keep its
    unit then)."""
    _, zero = train_wide(comm, 2, middle, zero_stage=3)
    reference, _ = train_wide(comm, 2, middle)
    assert_matches(zero, reference, FP32_TOLERANCE)


def test_stage_three_released_units_cost_no_memory_while_autograd_views_them(comm):
    """Forward saves views of the weights it used (F.linear keeps weight.t()) until backward. A
    unit released after its module's forward must cost no memory all the same: between forward
    and backward, the memory behind autograd's saved views of parameters is the last module's
    only (it stays gathered for its backward), measured from the memory itself. Each unit, while
    its module runs, is seen in memory by the same measure. Backward gathers each unit again
    under those views: the step then matches one process."""
    model, zero = train_wide(comm, 1, zero_stage=3)  # the first iteration learns the order
    layers = model.layers
    x, y = global_batch(comm.size, 1)
    rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
    storages, while_running = {}, []

    def note(module, inputs):  # after ZeroOptimizer's hook has gathered the module's unit
        for p in module.parameters():  # kept: no other storage can take its address and key
            storages[storage_of(p)._cdata] = (layers.index(module), storage_of(p))
        while_running.append(resident_bytes(storage_of(module.weight)))
    hooks = [layer.register_forward_pre_hook(note) for layer in layers]
    saved = {}

    def pack(tensor):
        storage = storage_of(tensor)
        if storage._cdata in storages:
            saved[storages[storage._cdata][0]] = storage
        return tensor
    zero.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = loss_of(model, x[rows], y[rows])
    for hook in hooks:
        hook.remove()
    weight_bytes = [4 * layer.weight.numel() for layer in layers]
    page = os.sysconf("SC_PAGE_SIZE")
    assert [held >= weight - 2 * page for held, weight in zip(while_running, weight_bytes)] == \
        [True] * 4, while_running
    assert {1, 2, 3} <= set(saved)  # and the first layer's, if torch saved its weight
    held = {layer: resident_bytes(storage) for layer, storage in saved.items()}
    assert all(held[layer] == 0 for layer in saved if layer != 3), held
    assert held[3] >= weight_bytes[3] - 2 * page, held  # the last module, gathered for backward
    loss.backward()
    zero.step()
    reference, _ = train_wide(comm, 2)
    assert_matches(zero, reference, FP32_TOLERANCE)


Output = collections.namedtuple("Output", "y")


class StructuredLinear(torch.nn.Linear):
    """A Linear that returns its output inside a dict or a named tuple (`structure`)."""

    def __init__(self, structure, *sizes):
        super().__init__(*sizes)
        self.structure = structure

    def forward(self, x):
        y = super().forward(x)
        return {"y": y} if self.structure == "dict" else Output(y)


class StructuredNet(Net):
    """Net, with the block's output inside a dict or a named tuple (the same initial values)."""

    def __init__(self, structure):
        torch.nn.Module.__init__(self)
        self.first = torch.nn.Linear(IN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.block = StructuredLinear(structure, HIDDEN, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, OUT)

    def forward(self, x):
        h = torch.relu(self.norm(self.first(x)))
        out = self.block(h)
        h = h + torch.tanh(out["y"] if isinstance(out, dict) else out.y)
        return self.head(h)


@pytest.mark.parametrize("structure", ["dict", "namedtuple"])
def test_stage_three_modules_may_return_dicts_and_named_tuples(comm, monkeypatch, structure):
    """Stage 3 gathers a module's parameters again before its backward when the gradient of its
    output arrives, also for outputs inside a dict or a named tuple: what forward saved of a
    released unit has no memory until then."""
    def make_structured(seed):
        torch.manual_seed(seed)
        return StructuredNet(structure).to(DEVICE)
    monkeypatch.setitem(globals(), "make_model", make_structured)
    model, zero = train_zero(comm, "adam", 3)
    assert isinstance(model, StructuredNet)
    assert_matches(zero, train_reference("adam", comm.size), FP32_TOLERANCE)


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
    model = SharedWeights().to(DEVICE)
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
        logits = model(tokens[rows].to(DEVICE))
        torch.nn.functional.cross_entropy(logits, targets[rows].to(DEVICE)).backward()
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
        model = WithFrozenPartsAndBuffers().to(DEVICE)
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
        return ParametersOutsideAForward().to(DEVICE)
    monkeypatch.setitem(globals(), "make_model", make)
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
    model = SharedAcrossACheckpoint().to(DEVICE)
    zero = ct.ZeroOptimizer(model, stage=stage, optim="sgd", lr=0.1)
    x, y = global_batch(comm.size, 0)
    with pytest.raises(chorus.InvalidArgumentError, match="use_reentrant=False"):
        loss_of(model, x.requires_grad_(), y).backward()
    del zero


@pytest.fixture
def shared_directory(comm):
    """A fresh directory with the same name on every rank (rank 0 picks it); removed afterwards."""
    token = np.array([secrets.randbits(62) if comm.rank == 0 else 0], dtype=np.int64)
    token = chorus.broadcast(token, root=0)
    directory = os.path.join(tempfile.gettempdir(), f"chorus-zero-test-{int(token[0]):x}")
    yield directory
    chorus.barrier()
    if comm.rank == 0:
        shutil.rmtree(directory, ignore_errors=True)


def test_stage_three_load_releases_what_a_forward_left_gathered(comm, shared_directory):
    """A forward without backward leaves its last module gathered. Loading a checkpoint replaces
    the shard under it, so the parameters must not go on viewing that unit: they are released,
    and the next forward gathers the loaded values."""
    model, zero = train_zero(comm, "sgd", 3, steps=1)
    zero.save_checkpoint(shared_directory)
    probe = torch.ones(2, IN, device=DEVICE)
    with torch.no_grad():
        at_save = model(probe).clone()
    x, y = global_batch(comm.size, 1)
    rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
    loss_of(model, x[rows], y[rows]).backward()
    zero.step()  # the parameters move away from the checkpoint's
    model(x[rows])  # grad enabled, no backward: the head stays gathered
    assert model.head.weight.numel() > 0
    zero.load_checkpoint(shared_directory)
    assert all(p.numel() == 0 for p in model.parameters())
    with torch.no_grad():
        assert torch.equal(model(probe), at_save)


def test_checkpoint_round_trip_continues_exactly(comm, shared_directory):
    directory = shared_directory
    model, zero = train_zero(comm, "adam", 2, steps=2)
    zero.save_checkpoint(directory)
    continued = []
    for run in range(2):
        if run == 1:
            model = make_model(comm.rank + 7)
            zero = ct.ZeroOptimizer(model, stage=2, **OPTIMIZERS["adam"][0])
            zero.load_checkpoint(directory)
            assert zero.steps == 2
        for step in range(2, 4):
            x, y = global_batch(comm.size, step)
            rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
            zero.zero_grad()
            loss_of(model, x[rows], y[rows]).backward()
            zero.step()
        continued.append(zero.gathered_parameters())
    for name in continued[0]:
        assert torch.equal(continued[0][name], continued[1][name]), name
    # A checkpoint of another optimizer is refused on every rank, naming both.
    plain_sgd = ct.ZeroOptimizer(make_model(0), optim="sgd", stage=1, lr=0.1)
    with pytest.raises(chorus.InvalidArgumentError, match="holds 'adam' state.*'sgd'"):
        plain_sgd.load_checkpoint(directory)


HALF_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("comm_dtype", ["bf16", "fp16"])
def test_compressed_gradients_train_close_to_float32(comm, stage, comm_dtype):
    # The model stays float32; only the reductions move half-precision values.
    model, zero = train_zero(comm, "sgd", stage, comm_dtype=comm_dtype)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    reference = dict(train_reference("sgd", comm.size).named_parameters())
    for name, values in zero.gathered_parameters().items():
        error = float((values - reference[name].detach().cpu()).abs().max())
        assert error <= BF16_ABSOLUTE_TOLERANCE, f"{name}: error {error:.3g}"


@pytest.mark.parametrize("comm_dtype", ["bf16", "fp16"])
def test_stage_one_gradients_are_averages_that_travelled_in_half_precision(comm, comm_dtype):
    # After backward, stage 1's .grad hold the average widened from the wire: every element is a
    # value of the wire dtype. Uncompressed float32 averages of these gradients are not.
    wire = HALF_TYPES[comm_dtype]
    for compressed in (comm_dtype, None):
        model = make_model(0)
        # Kept: an optimizer nothing refers to may be collected (the cycle through its autograd
        # hooks) before backward, at a different moment on each rank.
        zero = ct.ZeroOptimizer(model, stage=1, optim="sgd", comm_dtype=compressed)
        x, y = global_batch(comm.size, 0)
        rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
        loss_of(model, x[rows], y[rows]).backward()
        gradients = torch.cat([p.grad.view(-1) for p in model.parameters()])
        representable = bool(torch.equal(gradients, gradients.to(wire).float()))
        assert representable == (compressed is not None), (compressed, representable)
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


def test_bad_arguments_are_refused(comm):
    model = make_model(0)
    with pytest.raises(chorus.InvalidArgumentError, match="pass the module"):
        ct.ZeroOptimizer(list(model.parameters()), stage=3)
    with pytest.raises(chorus.InvalidArgumentError, match="optim"):
        ct.ZeroOptimizer(model, optim="lamb")
    with pytest.raises(chorus.InvalidArgumentError, match="stage"):
        ct.ZeroOptimizer(model, stage=4)
    with pytest.raises(chorus.InvalidArgumentError, match="mixed_precision"):
        ct.ZeroOptimizer(model, mixed_precision="fp8")
    with pytest.raises(chorus.InvalidArgumentError, match="comm_dtype must be"):
        ct.ZeroOptimizer(model, comm_dtype="fp8")
    with pytest.raises(chorus.InvalidArgumentError, match="already travel as bfloat16"):
        ct.ZeroOptimizer(model, comm_dtype="bf16", mixed_precision="bf16")
    params = list(model.parameters())
    with pytest.raises(chorus.InvalidArgumentError, match="mixes parameter groups"):
        ct.ZeroOptimizer([{"params": params[:1]}, params[1]])
    with pytest.raises(chorus.InvalidArgumentError, match="more than one parameter group"):
        ct.ZeroOptimizer([{"params": params[:2]}, {"params": params[1:]}])
    with pytest.raises(chorus.UnsupportedError, match="amsgrad=True"):
        ct.ZeroOptimizer([{"params": params, "amsgrad": True}])
    with pytest.raises(chorus.InvalidArgumentError, match="zero in every parameter group"):
        ct.ZeroOptimizer([{"params": params[:1]}, {"params": params[1:], "momentum": 0.9}],
                         optim="sgd")
    with pytest.raises(chorus.InvalidArgumentError, match="not the module's"):
        ct.ZeroOptimizer([torch.nn.Parameter(torch.zeros(2))], module=model)
    with pytest.raises(chorus.InvalidArgumentError, match="is a set"):
        ct.ZeroOptimizer(set(params))  # its order, and so the layout, would differ by rank
    with pytest.raises(chorus.InvalidArgumentError, match="is a set"):
        ct.ZeroOptimizer([{"params": set(params)}])
    with pytest.raises(chorus.UnsupportedError, match="that is AdamW"):
        ct.ZeroOptimizer([{"params": params, "decoupled_weight_decay": True}], optim="adam")
    with pytest.raises(chorus.InvalidArgumentError, match="bucket_cap_mb must be positive"):
        ct.ZeroOptimizer(model, bucket_cap_mb=0)
    with pytest.raises(chorus.InvalidArgumentError, match="momentum"):
        ct.ZeroOptimizer(model, optim="sgd", momentum=-1.0)
    zero = ct.ZeroOptimizer(make_model(0), stage=2)
    with pytest.raises(chorus.UnsupportedError, match="no_sync"):
        with zero.no_sync():
            pass


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("optim", ["sgd", "adam", "adamw"])
def test_distribute_follows_zero_opt_level(comm, level, optim):
    config = chorus.distributed.get_config()
    saved = config.zero_opt_level
    config.zero_opt_level = level
    try:
        model = make_model(comm.rank)
        returned, zero = ct.distribute(model, OPTIMIZERS[optim][1](model.parameters()))
        assert returned is model and isinstance(zero, ct.ZeroOptimizer)
        assert (zero.stage, zero.optim) == (level, optim)
        for step in range(STEPS):
            x, y = global_batch(comm.size, step)
            rows = slice(comm.rank * BATCH, (comm.rank + 1) * BATCH)
            zero.zero_grad()
            loss_of(model, x[rows], y[rows]).backward()
            zero.step()
        # The hyperparameters were copied: training matches torch.optim's on one process.
        assert_matches(zero, train_reference(optim, comm.size), FP32_TOLERANCE)
    finally:
        config.zero_opt_level = saved


def test_distribute_refuses_what_zero_cannot_shard(comm):
    config = chorus.distributed.get_config()
    saved = config.zero_opt_level
    config.zero_opt_level = 1
    try:
        model = make_model(0)
        with pytest.raises(chorus.UnsupportedError, match="RMSprop"):
            ct.distribute(model, torch.optim.RMSprop(model.parameters()))
        with pytest.raises(chorus.UnsupportedError, match="amsgrad"):
            ct.distribute(model, torch.optim.Adam(model.parameters(), amsgrad=True))
        with pytest.raises(chorus.InvalidArgumentError, match="needs the optimizer"):
            ct.distribute(model)
    finally:
        config.zero_opt_level = saved
