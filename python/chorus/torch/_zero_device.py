"""DeviceZeroEngine: the contract of the C++ ZeroEngine (include/chorus/zero_engine.h) for a model on
a GPU, in torch, so that ZeroOptimizer, its stage-3 hooks, its memory report and its checkpoints
work unchanged on CUDA parameters (issue 21).

The C++ engine's arithmetic (copies, casts, the optimizers) runs on host memory; here every buffer
is a torch tensor on the parameters' device, from torch's caching allocator (so
torch.cuda.memory_allocated() counts it), and the arithmetic is torch's: the optimizer is
torch.optim's own SGD, Adam or AdamW over this rank's float32 shard (one tensor per unit). The
layout is the C++ ZeroLayout's (_chorus.ZeroLayout), so shards, padding and checkpoint pieces are
the same as the host engine's.

Collectives are chorus's on device tensors: asynchronous, queued on the communicator's NCCL stream
after an event on the current stream, and a wait() orders the current stream after them without a
host wait. Units are reduced as backward completes them, in the issue order (the unit order, then
rank 0's completion order from the second iteration on): stage 1 allreduces the unit's gradients
(avg) in place; stages 2 and 3 copy them into a bucket and reduce-scatter it (avg), and at most
two buckets are filling or in flight (a third waits, on the stream, for the oldest reduction, and
adds its part to the gradient shard). Gradients that a unit did not get count as zero (stages 2 and 3) or keep what they
accumulated (stage 1). With compression (comm_dtype) each unit's gradients are divided by the rank
count and narrowed to bfloat16 or float16 before a reduction (a sum) and widened after it, as the
C++ engine does. Nothing here is CUDA-specific: the same code runs on host tensors, which is
how the host tests check it.

The buckets and the reduce-scatter outputs are reused (_ReusedBuffers), not allocated per unit and
iteration: a collective's buffers live until the GPU has finished it (chorus's Python layer keeps
them), and the host runs ahead of the GPU, so fresh ones piled up (ZeRO-2 on CUDA peaked at 442
MiB where ZeRO-1 took 156; docs/performance_gpu.md).
"""

import numpy as np
import torch

from .. import _chorus, _ops

_OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
_BUCKETS_IN_FLIGHT = 2
# torch.optim's kernels for the update: None (torch's default, foreach on CUDA), or "fused" (one
# kernel per step, CUDA only; bench/gpu_train_bench.py --zero-fused compares the two).
OPTIMIZER_KERNELS = None


def _invalid(message):
    return _chorus.InvalidArgumentError(f"ZeroOptimizer: {message}")


class _ReusedBuffers:
    """Flat buffers of `numel` elements of one dtype, handed out as views of their first `n` and
    taken back for reuse. Reuse is safe on a GPU because a buffer is given back only once the
    current stream is ordered after the last collective that used it (a wait), and whatever
    writes it next runs on that stream or, for a collective, after an event on it. Each new
    buffer is reported to `on_new` (the engine's memory count); none is ever freed."""

    def __init__(self, numel, dtype, device, on_new):
        self._numel, self._dtype, self._device, self._on_new = numel, dtype, device, on_new
        self._free = []

    def take(self, n):
        """(buffer, view of its first n elements); the contents are whatever was left there."""
        if not self._free:
            buffer = torch.empty(self._numel, dtype=self._dtype, device=self._device)
            self._on_new(buffer)
            self._free.append(buffer)
        buffer = self._free.pop()
        return buffer, buffer[:n]

    def give(self, buffer):
        self._free.append(buffer)


# Note [Gathered units keep their tensor]
# Stage 3 gathers each unit into a tensor of its own. The release after a module's forward
# (keep_address) resizes that tensor's storage to nothing, as torch's FSDP does with its flat
# parameters, and the gather before the module's backward resizes it back and allgathers into it.
# A new tensor per gather freed nothing there: autograd keeps views of the parameters that forward
# used (F.linear saves weight.t()) until backward, so every unit stayed whole from forward to
# backward and backward's gathers came on top. On a GPU, chorus's Python layer also keeps a
# collective's tensors until the GPU has finished with them, and the host runs ahead of the GPU,
# so those units piled up over several steps (ZeRO-3 peaked at 602 MiB against FSDP's 162;
# docs/performance_gpu.md). Resizing frees the memory whoever holds the tensor; the views see it
# again, refilled, once the unit is gathered for backward (_zero_stage3.py gathers it when the
# gradient of the module's output arrives, before any of the module's backward runs). Every other
# release (in backward, once the unit's gradients are reduced; at step()) gives the tensor up
# instead and leaves its memory to the views' lifetime: a node that used a weight detached, say,
# still reads it after the weight's own gradient is done. Freeing is safe on a GPU for the reason
# _ReusedBuffers' reuse is: a release comes after the current stream was ordered after the gather
# and after the compute that read the unit, and the caching allocator hands the memory out again
# only in that stream's order (forward and backward on one stream, as torch's FSDP assumes too).


def _free_memory(tensor):
    """Frees `tensor`'s memory; its storage, and every view of it, stays (with no bytes)."""
    if hasattr(tensor, "untyped_storage"):  # torch 2
        tensor.untyped_storage().resize_(0)
    else:  # torch 1.13
        tensor.storage().resize_(0)


def _restore_memory(tensor):
    """Gives `tensor` (which owns its whole storage) memory for its elements again, uninitialized."""
    if hasattr(tensor, "untyped_storage"):
        tensor.untyped_storage().resize_(tensor.numel() * tensor.element_size())
    else:
        tensor.storage().resize_(tensor.numel())


def _torch_group(name, hyper):
    """The engine's hyperparameters (lr, beta1, ...) under torch.optim's names for `name`."""
    if name == "sgd":
        return {"lr": hyper["lr"], "momentum": hyper["momentum"], "dampening": hyper["dampening"],
                "weight_decay": hyper["weight_decay"], "nesterov": bool(hyper["nesterov"])}
    return {"lr": hyper["lr"], "betas": (hyper["beta1"], hyper["beta2"]), "eps": hyper["eps"],
            "weight_decay": hyper["weight_decay"]}


def _check_hyperparameters(name, hyper):
    """torch.optim's checks of `hyper`, which it makes of constructor arguments only (not of a
    parameter group's): its refusal (a negative momentum, say) is an InvalidArgumentError, as
    the C++ engine's is."""
    try:
        _OPTIMIZERS[name]([torch.zeros(1)], **_torch_group(name, hyper))
    except ValueError as error:
        raise _invalid(str(error)) from error


def _torch_optimizer(name, groups):
    """torch.optim's optimizer `name` over `groups`, (tensors, hyperparameters) pairs."""
    for _, hyper in groups:
        _check_hyperparameters(name, hyper)
    kernels = {"fused": True} if OPTIMIZER_KERNELS == "fused" else {}
    return _OPTIMIZERS[name]([dict(_torch_group(name, hyper), params=list(tensors))
                              for tensors, hyper in groups], **kernels)


def _optimizer_runs(layout, group_of):
    """(unit, start in the unit's shard, numel, group) for each run of the shard that one group
    updates (the C++ engine's OptimizerGroups): one group, each unit's whole shard; several,
    the owned pieces, neighbours of one group merged."""
    if max(group_of, default=0) == 0:
        return [(u, 0, layout.unit_shard_numel(u), 0) for u in range(layout.num_units)]
    runs = []
    for parameter, _, numel, shard_offset in layout.owned_pieces(True):
        unit, group = layout.unit_of(parameter), group_of[parameter]
        start = shard_offset - layout.shard_offset(unit)
        if runs and runs[-1][0] == unit and runs[-1][3] == group and sum(runs[-1][1:3]) == start:
            runs[-1] = (unit, runs[-1][1], runs[-1][2] + numel, group)
        else:
            runs.append((unit, start, numel, group))
    return runs


class DeviceZeroEngine:
    """ZeroEngine's methods (see the module doc); `comm` is the chorus Group of the world."""

    def __init__(self, comm, numels, units, stage, dtype, optim, hyper, device, comm_dtype=None,
                 parameter_groups=None):
        """hyper: one dict for every group, or one per group (parameter_groups: each
        parameter's group; None: one group)."""
        self.stage, self.optimizer_name = stage, optim
        self._groups = [dict(h) for h in ([hyper] if isinstance(hyper, dict) else hyper)]
        group_of = list(parameter_groups) if parameter_groups else [0] * len(numels)
        if len(group_of) != len(numels) or sorted(set(group_of)) != list(range(len(self._groups))):
            raise _invalid(f"parameter groups {sorted(set(group_of))} do not match the "
                           f"{len(self._groups)} hyperparameter dicts")
        if len({h["momentum"] > 0 for h in self._groups}) > 1 and optim == "sgd":
            raise _invalid("SGD's momentum must be zero in every parameter group or in none: the "
                           "groups share the momentum buffer")
        self._comm, self._dtype, self._device = comm, dtype, device
        self._wire = comm_dtype  # compression: the dtype gradients travel in (float32 models)
        self._numels = list(numels)
        self._layout = _chorus.ZeroLayout(self._numels, units, comm.size, comm.rank)
        self._memory = {"parameters": 0, "gradients": 0, "optimizer_state": 0, "buffers": 0,
                        "peak_buffers": 0}
        self._steps = 0
        self._pools = {}  # (kind, dtype) -> _ReusedBuffers: the buckets and reduction outputs
        self._make_parameters()
        self._make_gradients()
        self._runs = _optimizer_runs(self._layout, group_of)
        if len(self._groups) == 1:  # a torch parameter per unit, as without groups
            self._run_masters = self._master
        else:
            self._run_masters = [self._master[u][start:start + n] for u, start, n, _ in self._runs]
        self._optimizer = _torch_optimizer(optim, [
            ([m for m, run in zip(self._run_masters, self._runs) if run[3] == g], hyper)
            for g, hyper in enumerate(self._groups)])
        self._issue_order = list(range(self.num_units))
        self._iterations = 0
        self._start_iteration()

    # ---- the layout (ZeroLayout's accessors) -----------------------------------------------------

    @property
    def num_units(self):
        return self._layout.num_units

    @property
    def total_numel(self):
        return self._layout.total_numel

    @property
    def shard_numel(self):
        return self._layout.shard_numel

    @property
    def owned_numel(self):
        return self._layout.owned_numel

    def unit_parameters(self, unit):
        return self._layout.unit_parameters(unit)

    def unit_of(self, index):
        return self._layout.unit_of(index)

    def padded_numel(self, unit):
        return self._layout.padded_numel(unit)

    def owned_pieces(self, with_shard_offset=False):
        return self._layout.owned_pieces(with_shard_offset)

    def shard_offset(self, unit):
        return self._layout.shard_offset(unit)

    def _zeros(self, numel, dtype, kind):
        tensor = torch.zeros(numel, dtype=dtype, device=self._device)
        self._memory[kind] += tensor.numel() * tensor.element_size()
        return tensor

    def _unit_shard(self, unit):
        """Where this rank's shard of `unit` lies in the unit's flat space: (start, numel)."""
        numel = self._layout.unit_shard_numel(unit)
        return self._comm.rank * numel, numel

    def _shard_slice(self, unit):
        start = self._layout.shard_offset(unit)
        return slice(start, start + self._layout.unit_shard_numel(unit))

    # ---- parameters ------------------------------------------------------------------------------

    def _make_parameters(self):
        """Stages 1 and 2: every unit whole; stage 3: this rank's shard of every unit. The float32
        master shard is the parameters' own in float32 training, separate in mixed precision."""
        layout, float32 = self._layout, self._dtype == torch.float32
        if self.stage < 3:
            self._units = [self._zeros(layout.padded_numel(u), self._dtype, "parameters")
                           for u in range(layout.num_units)]
            owned = [self._units[u][slice(*self._start_end(u))] for u in range(layout.num_units)]
        else:
            self._shard = self._zeros(layout.shard_numel, self._dtype, "parameters")
            owned = [self._shard[self._shard_slice(u)] for u in range(layout.num_units)]
            self._gathered, self._gathering = {}, {}
            self._unit_tensors = [None] * layout.num_units  # made at a unit's first gather
        self._owned = owned
        if float32:
            self._master = owned
        else:
            flat = self._zeros(layout.shard_numel, torch.float32, "optimizer_state")
            self._master = [flat[self._shard_slice(u)] for u in range(layout.num_units)]

    def _start_end(self, unit):
        start, numel = self._unit_shard(unit)
        return start, start + numel

    def _unit_view(self, unit_buffer, index):
        offset = self._layout.offset_in_unit(index)
        return unit_buffer[offset:offset + self._numels[index]]

    def set_parameter(self, index, values):
        """Loads parameter `index` (float32 values, the same on every rank)."""
        values = torch.utils.dlpack.from_dlpack(values).reshape(-1).to(self._device)
        unit = self._layout.unit_of(index)
        if self.stage < 3:
            self._unit_view(self._units[unit], index).copy_(values)
        start, end = self._start_end(unit)
        offset = self._layout.offset_in_unit(index)
        low, high = max(start, offset), min(end, offset + self._numels[index])
        if low < high:  # the part of the parameter in this rank's shard
            part = values[low - offset:high - offset]
            if self.stage == 3:
                self._owned[unit][low - start:high - start].copy_(part)
            if self._master is not self._owned:
                self._master[unit][low - start:high - start].copy_(part)

    def _check_index(self, index, what):
        if not 0 <= index < len(self._numels):
            raise _invalid(f"{what} of parameter {index}, but there are {len(self._numels)}")

    def _check_stage_three(self, what):
        if self.stage != 3:
            raise _invalid(f"{what}: stage {self.stage} keeps every parameter whole")

    def parameter(self, index):
        """Parameter `index`, flat: a view into its unit (stage 3: while the unit is gathered)."""
        self._check_index(index, "a view")
        unit = self._layout.unit_of(index)
        if self.stage < 3:
            return self._unit_view(self._units[unit], index)
        if unit not in self._gathered:
            raise _invalid(f"parameter {index} is in unit {unit}, which is not gathered")
        return self._unit_view(self._gathered[unit], index)

    def gather(self, unit):
        """Stage 3: starts the allgather of `unit` (asynchronous), into the unit's own tensor (its
        memory comes back first: Note [Gathered units keep their tensor])."""
        self._check_stage_three("gather")
        if unit in self._gathered or unit in self._gathering:
            return
        buffer = self._unit_tensors[unit]
        if buffer is None:
            buffer = torch.empty(self._layout.padded_numel(unit), dtype=self._dtype,
                                 device=self._device)
            self._unit_tensors[unit] = buffer
        else:
            _restore_memory(buffer)
        try:
            work = _ops.allgather(self._owned[unit], out=buffer, async_op=True)
        except BaseException:
            _free_memory(buffer)  # nothing was issued: the unit stays released
            raise
        self._add_buffer(buffer)
        self._gathering[unit] = (buffer, work)

    def wait_gathered(self, unit):
        if unit in self._gathered:
            return
        if unit not in self._gathering:
            self.gather(unit)
        buffer, work = self._gathering.pop(unit)
        try:
            work.wait()
        except BaseException:  # never hand out a view of an allgather that failed
            self._drop_buffer(buffer)
            self._unit_tensors[unit] = None
            raise
        self._gathered[unit] = buffer

    def release(self, unit, keep_address=False):
        """Stage 3: `unit` gives up its memory. With keep_address its tensor's storage is resized
        to nothing, and the next gather refills the same storage (only for views that nothing
        reads before then); else the unit gives the tensor up, which lives on with its values
        while views of it do (Note [Gathered units keep their tensor])."""
        self._check_stage_three("release")
        if unit in self._gathering:
            self.wait_gathered(unit)
        buffer = self._gathered.pop(unit, None)
        if buffer is not None:
            self._drop_buffer(buffer)
            if keep_address:  # the current stream is ordered after the gather (wait_gathered)
                _free_memory(buffer)
            else:
                self._unit_tensors[unit] = None

    def is_gathered(self, unit):
        return unit in self._gathered

    def _add_buffer(self, tensor):
        memory = self._memory
        memory["buffers"] += tensor.numel() * tensor.element_size()
        memory["peak_buffers"] = max(memory["peak_buffers"], memory["buffers"])

    # ---- gradients -------------------------------------------------------------------------------

    def _make_gradients(self):
        """Stage 1: every unit's gradients whole; stages 2 and 3: this rank's shard only."""
        layout = self._layout
        if self.stage == 1:
            self._grad_units = [self._zeros(layout.padded_numel(u), self._dtype, "gradients")
                                for u in range(layout.num_units)]
        else:
            self._grad_shard = self._zeros(layout.shard_numel, self._dtype, "gradients")

    def _start_iteration(self):
        layout = self._layout
        self._ready = [False] * len(self._numels)
        self._pending = [len(layout.unit_parameters(u)) for u in range(layout.num_units)]
        self._next = 0             # the next position of the issue order to launch
        self._completed = []       # units in the order backward completed them
        self._buckets = {}         # stages 2 and 3: unit -> (buffer, its bucket view) being filled
        # (unit, work, output or None, wire copy or None, reused buffers to give back), oldest first
        self._in_flight = []
        self._in_backward = False

    def gradient(self, index):
        """Stage 1: gradient `index`, flat: a view into its unit's gradients."""
        self._check_index(index, "a gradient view")
        if self.stage != 1:
            raise _invalid(f"stage {self.stage} keeps gradient shards only, not gradient {index}")
        return self._unit_view(self._grad_units[self._layout.unit_of(index)], index)

    def owned_gradients(self, unit):
        """This rank's shard of `unit`'s reduced gradients (after finalize), padding included: what
        step() reads (stage 1: a view into the unit's whole gradients)."""
        if not 0 <= unit < self.num_units:
            raise _invalid(f"owned gradients of unit {unit}, but there are {self.num_units}")
        return self._shard_gradients(unit)

    def is_ready(self, index):
        self._check_index(index, "readiness")
        return self._ready[index]

    def mark_ready(self, index, values=None):
        """Gradient `index` is complete for this backward (stages 2 and 3: its `values`); returns
        the unit this completed, or -1."""
        self._check_index(index, "markReady")
        if self._ready[index]:
            raise _invalid(f"the gradient of parameter {index} was produced twice in one backward "
                           "pass (a parameter used both inside and outside a "
                           "torch.utils.checkpoint region with use_reentrant=True gets two "
                           "gradients in one backward: use use_reentrant=False)")
        unit = self._layout.unit_of(index)
        if values is not None:
            values = torch.utils.dlpack.from_dlpack(values).reshape(-1)
            if values.dtype != self._dtype or values.numel() != self._numels[index]:
                raise _invalid(f"gradient {index} is {values.dtype} x {values.numel()}, but was "
                               f"registered as {self._dtype} x {self._numels[index]}")
            target = (self.gradient(index) if self.stage == 1
                      else self._unit_view(self._bucket(unit), index))
            if target.data_ptr() != values.data_ptr():
                target.copy_(values)
        elif self.stage != 1:
            raise _invalid(f"stage {self.stage} takes each gradient's values")
        self._in_backward = True
        self._ready[index] = True
        self._pending[unit] -= 1
        if self._pending[unit] > 0:
            return -1
        self._completed.append(unit)
        self._launch_ready()
        return unit

    def _bucket(self, unit):
        if unit not in self._buckets:  # zero: gradients the unit does not get count as zero
            # At most two buckets at a time, filling or in flight: a third waits (on the stream)
            # for the oldest reduction.
            while self._in_flight and (len(self._in_flight) + len(self._buckets)
                                       >= _BUCKETS_IN_FLIGHT):
                self._retire_oldest()
            base, bucket = self._reused("bucket", self._dtype).take(
                self._layout.padded_numel(unit))
            bucket.zero_()
            self._buckets[unit] = (base, bucket)
        return self._buckets[unit][1]

    def _reused(self, kind, dtype):
        """The reused buffers of `kind` ("bucket": a unit's gradients, "output": a unit's shard of
        them) in `dtype`, each of the largest unit's size."""
        pools = self._pools
        if (kind, dtype) not in pools:
            size = (self._layout.padded_numel if kind == "bucket"
                    else self._layout.unit_shard_numel)
            numel = max(size(u) for u in range(self._layout.num_units))
            pools[kind, dtype] = _ReusedBuffers(numel, dtype, self._device, self._add_buffer)
        return pools[kind, dtype]

    def _launch_ready(self):
        order = self._issue_order
        while self._next < len(order) and self._pending[order[self._next]] == 0:
            self._launch(order[self._next])
            self._next += 1

    def _narrow(self, gradients):
        """Compression: the gradients divided by the rank count (in float32), then narrowed to
        the wire dtype, as the C++ engine's gradient_wire does; the ranks then sum them."""
        wire = (gradients / self._comm.size).to(self._wire)
        self._add_buffer(wire)
        return wire

    def _drop_buffer(self, tensor):
        self._memory["buffers"] -= tensor.numel() * tensor.element_size()

    def _launch(self, unit):
        """Issues unit's reduction: stage 1 allreduces its gradients in place (or their wire copy),
        stages 2 and 3 reduce-scatter its bucket (or the bucket's wire copy) into an output."""
        if self.stage == 1:
            gradients = self._grad_units[unit]
            sent = gradients if self._wire is None else self._narrow(gradients)
            work = _ops.allreduce(sent, "avg" if self._wire is None else "sum", async_op=True,
                                  inplace=True)
            self._in_flight.append((unit, work, None, None if sent is gradients else sent, []))
            return
        self._bucket(unit)
        base, bucket = self._buckets.pop(unit)
        sent, reused = bucket, [("bucket", self._dtype, base)]
        if self._wire is not None:
            sent = self._narrow(bucket)  # what the reduction reads: the bucket is free again
            self._reused("bucket", self._dtype).give(base)
            reused = []
        output_base, output = self._reused("output", sent.dtype).take(
            self._layout.unit_shard_numel(unit))
        reused.append(("output", sent.dtype, output_base))
        work = _ops.reduce_scatter(sent, "avg" if self._wire is None else "sum", out=output,
                                   async_op=True)
        self._in_flight.append((unit, work, output, None if sent is bucket else sent, reused))

    def _retire_oldest(self):
        """Orders the current stream after the oldest reduction, then, on that stream: stages 2
        and 3 add its part (widened, with compression) to the gradient shard; stage 1 with
        compression makes the unit's gradients the widened sum. Its buffers go (the reused ones
        back for the next unit: what writes them next is ordered after this)."""
        unit, work, output, wire, reused = self._in_flight.pop(0)
        work.wait()
        if output is not None:
            self._grad_shard[self._shard_slice(unit)] += output.to(self._dtype)
        elif wire is not None:
            self._grad_units[unit].copy_(wire)
        if wire is not None:
            self._drop_buffer(wire)
        for kind, dtype, base in reused:
            self._reused(kind, dtype).give(base)

    def finalize(self):
        """End of backward: units not complete are reduced as they are (stage 1) or with zeros for
        the gradients they did not get (stages 2 and 3); the current stream is ordered after every
        reduction. After the first iteration the issue order becomes rank 0's completion order."""
        for unit in range(self._layout.num_units):
            if self._pending[unit] > 0:
                self._pending[unit] = 0
        self._launch_ready()
        while self._in_flight:
            self._retire_oldest()
        self._iterations += 1
        if self._iterations == 1:
            self._follow_rank_zeros_order()
        self._start_iteration()

    def _follow_rank_zeros_order(self):
        order = self._completed + [u for u in self._issue_order if u not in self._completed]
        if self._comm.size > 1:
            order = _ops.broadcast(np.array(order, dtype=np.int32), root=self._comm.members[0])
        self._issue_order = [int(u) for u in order]

    def zero_gradients(self):
        self._check_idle("zero_grad()")
        if self.stage == 1:
            for gradients in self._grad_units:
                gradients.zero_()
        else:
            self._grad_shard.zero_()

    # ---- the step, the parameters' refresh -------------------------------------------------------

    @property
    def steps(self):
        return self._steps

    @steps.setter
    def steps(self, steps):
        self._steps = int(steps)
        for tensor in self._run_masters:
            state = self._optimizer.state.get(tensor)
            if state and "step" in state:  # in place: torch.optim chose its dtype and device
                state["step"].fill_(float(self._steps))

    @property
    def parameter_groups(self):
        return len(self._groups)

    def set_hyperparameters(self, hyper, group=None):
        """Group `group`'s hyperparameters (None: every group's) for the next step (a
        learning-rate schedule), checked as at construction; SGD's momentum cannot turn on or
        off (the C++ engine's rule)."""
        self._check_idle("setting hyperparameters")
        hyper = dict(hyper)
        _check_hyperparameters(self.optimizer_name, hyper)
        before = self._groups[0]["momentum"]
        if self.optimizer_name == "sgd" and (hyper["momentum"] > 0) != (before > 0):
            raise _invalid(f"SGD's momentum cannot change between zero and non-zero (from "
                           f"{before} to {hyper['momentum']}): the momentum buffer is state made "
                           "at construction (a schedule that cycles momentum, as OneCycleLR and "
                           "CyclicLR do by default, needs an SGD made with momentum, or "
                           "cycle_momentum=False)")
        if group is not None and not 0 <= group < len(self._groups):
            raise _invalid(f"parameter group {group} does not exist; there are "
                           f"{len(self._groups)}")
        for g in range(len(self._groups)) if group is None else [group]:
            self._optimizer.param_groups[g].update(_torch_group(self.optimizer_name, hyper))
            self._groups[g] = hyper

    def _shard_gradients(self, unit):
        if self.stage == 1:
            return self._grad_units[unit][slice(*self._start_end(unit))]
        return self._grad_shard[self._shard_slice(unit)]

    def _check_idle(self, what):
        if self._in_backward:
            raise _invalid(f"{what} was called between backward's gradients and the end of "
                           "backward (finalize)")

    def _drop_gathered(self):
        """Stage 3: every gathered unit goes, and a gather still running ends first (it reads the
        shard that an update or a publish writes; on a GPU the current stream waits for it)."""
        for unit in list(self._gathering) + list(self._gathered):
            self.release(unit)

    def step(self):
        """torch.optim's update of this rank's float32 shard, then publish_parameters()."""
        self._check_idle("step()")
        if self.stage == 3:
            self._drop_gathered()
        for (unit, start, numel, _), master in zip(self._runs, self._run_masters):
            master.grad = self._shard_gradients(unit)[start:start + numel].to(torch.float32)
        self._optimizer.step()
        for master in self._run_masters:
            master.grad = None
        self._steps += 1
        self.publish_parameters()

    def publish_parameters(self):
        """Makes the model's parameters match the master shard: stages 1 and 2 allgather every
        unit, stage 3 writes its shard (the next gather reads it)."""
        self._check_idle("publish_parameters()")
        if self.stage == 3:
            self._drop_gathered()  # stale now; the next use gathers the new values
        if self._master is not self._owned:
            for owned, master in zip(self._owned, self._master):
                owned.copy_(master)
        if self.stage == 3:
            return
        # In place: each unit's owned shard is this rank's block of it.
        works = [_ops.allgather(self._owned[unit], out=self._units[unit], async_op=True)
                 for unit in range(self._layout.num_units)]
        for work in works:
            work.wait()

    def gather_parameters(self):
        """Every parameter whole in float32, in registration order, as one NumPy array
        (collective)."""
        self._check_idle("gather_parameters()")
        units = []
        for unit in range(self._layout.num_units):
            whole = torch.empty(self._layout.padded_numel(unit), dtype=torch.float32,
                                device=self._device)
            units.append(whole)
            _ops.allgather(self._master[unit].clone(), out=whole)
        pieces = [self._unit_view(units[self._layout.unit_of(i)], i)
                  for i in range(len(self._numels))]
        return torch.cat(pieces).cpu().numpy() if pieces else np.zeros(0, np.float32)

    # ---- checkpoints: the owned pieces of the master weights and optimizer state ------------------

    def state_names(self):
        if self.optimizer_name == "sgd":
            return ["param"] + (["momentum_buffer"] if self._groups[0]["momentum"] > 0 else [])
        return ["param", "exp_avg", "exp_avg_sq"]

    def _state_tensors(self, name, create):
        """This rank's float32 shard of state `name` as (offset in the shard, tensor) pairs: the
        master weights per unit for "param", else the optimizer's state per run. One the optimizer
        has not made yet (before its first step) is zeros; `create` puts it into the optimizer's
        state, with step = steps, as torch.optim would have it (for import_state: the next step
        continues it)."""
        if name == "param":
            return [(self._layout.shard_offset(u), m) for u, m in enumerate(self._master)]
        if name not in self.state_names():
            raise _invalid(f"no optimizer state {name!r}; there are {self.state_names()}")
        tensors = []
        for (unit, start, _, _), master in zip(self._runs, self._run_masters):
            offset = self._layout.shard_offset(unit) + start
            state = self._optimizer.state[master]
            if name not in state:
                if not create:
                    tensors.append((offset, torch.zeros_like(master)))
                    continue
                state[name] = torch.zeros_like(master)
                if self.optimizer_name != "sgd" and "step" not in state:
                    # Where torch.optim keeps it: on the device for its fused kernels.
                    on = master.device if OPTIMIZER_KERNELS == "fused" else "cpu"
                    state["step"] = torch.tensor(float(self._steps), dtype=torch.float32,
                                                 device=on)
            tensors.append((offset, state[name]))
        return tensors

    def _flat_shard(self, parts):
        """(offset, tensor) pairs laid into one float32 tensor of this rank's shard's size."""
        flat = torch.zeros(self._layout.shard_numel, dtype=torch.float32, device=self._device)
        for offset, tensor in parts:
            flat[offset:offset + tensor.numel()] = tensor.reshape(-1)
        return flat

    def export_state(self, name):
        """State `name` over this rank's owned pieces (padding excluded), float32, NumPy."""
        flat = self._flat_shard(self._state_tensors(name, create=False))
        pieces = [flat[offset:offset + numel]
                  for _, _, numel, offset in self._layout.owned_pieces(with_shard_offset=True)]
        return (torch.cat(pieces) if pieces else flat[:0]).float().cpu().numpy()

    def import_state(self, name, values):
        parts = self._state_tensors(name, create=True)
        values = torch.as_tensor(np.asarray(values, dtype=np.float32)).to(self._device)
        if values.numel() != self._layout.owned_numel:
            raise _invalid(f"state {name!r} has {values.numel()} values; this rank owns "
                           f"{self._layout.owned_numel}")
        flat = self._flat_shard(parts)
        taken = 0
        for _, _, numel, offset in self._layout.owned_pieces(with_shard_offset=True):
            flat[offset:offset + numel] = values[taken:taken + numel]
            taken += numel
        for offset, tensor in parts:
            tensor.copy_(flat[offset:offset + tensor.numel()].view_as(tensor))

    # ---- memory ----------------------------------------------------------------------------------

    def memory(self):
        """Bytes this rank holds by kind; optimizer_state counts the master shard (when separate)
        and the optimizer's state tensors as they are now."""
        memory = dict(self._memory)
        for master in self._run_masters:
            for key, value in self._optimizer.state.get(master, {}).items():
                if key != "step" and torch.is_tensor(value) and value.numel() == master.numel():
                    memory["optimizer_state"] += value.numel() * value.element_size()
        return memory
