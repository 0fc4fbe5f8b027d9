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
import ctypes
import functools
import os

import pytest
import torch
import torch.utils.checkpoint

import chorus
import chorus.distributed
import chorus.torch as ct

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
