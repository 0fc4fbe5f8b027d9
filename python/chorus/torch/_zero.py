"""chorus.torch.ZeroOptimizer: ZeRO stages 1, 2 and 3 (arXiv 1910.02054) for a torch model.

The engine owns the memory and does the work: parameters and gradients live in its buffers, it
reduces gradients in units as backward produces them, and its optimizer updates this rank's
float32 shard. Host parameters get the C++ ZeroEngine (include/chorus/zero_engine.h), CUDA ones
DeviceZeroEngine (_zero_device.py: the same contract in torch, on the device). This file connects
the engine to autograd (the hooks of _autograd_hooks, and for stage 3 the module hooks of
_zero_stage3) and to the checkpoint files of _checkpoint.
"""

import contextlib

import torch
from torch.utils import dlpack as _dlpack

from .. import _arrays, _chorus, _groups, _ops
from . import _checkpoint
from ._autograd_hooks import (EndOfBackward, adopt_gradient_view, bucket_limits,
                              check_parameters, hook_accumulators)
from ._zero_clipping import clip_grad_norm, owned_runs
from ._zero_device import DeviceZeroEngine
from ._zero_groups import engine_names, ordered_parameters, parameter_groups, torch_names
from ._zero_stage3 import ParameterLifecycle, as_torch, stage_three_units

_WHO = "ZeroOptimizer"
# Which engine trains host parameters: "c++" (ZeroEngine), or "torch" (DeviceZeroEngine, what CUDA
# parameters always get; the tests run it on host tensors too).
_HOST_ENGINE = "c++"
_MIXED_PRECISION = {None: torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
_COMM_DTYPES = {None: None, "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16",
                "float16": "float16"}


def _invalid(message):
    return _chorus.InvalidArgumentError(f"{_WHO}: {message}")


def _repeats_elements(tensor):
    """Whether `tensor` shows one element in several places (an expand()ed buffer): nothing can
    be written into it in place, so construction leaves it as it is."""
    return any(stride == 0 and size > 1 for stride, size in zip(tensor.stride(), tensor.shape))


def _refuse_data_parallel(named):
    """ZeroOptimizer reduces the gradients itself: parameters that a live DistributedDataParallel
    also reduces trained to wrong values from the second step on (an audit found it), so they are
    refused. (torch's ZeroRedundancyOptimizer is used inside DDP; this one replaces it.)"""
    for name, p in named:
        ddp = getattr(p, "_chorus_data_parallel", None)
        if ddp is not None and ddp() is not None:
            raise _invalid(
                f"parameter {name} belongs to a chorus.torch.DistributedDataParallel; "
                "ZeroOptimizer averages the gradients itself (in place of "
                "DistributedDataParallel): give it the bare module or its parameters, and do not "
                "wrap the module")


class ZeroOptimizer(torch.optim.Optimizer):
    """Data-parallel training with ZeRO-partitioned optimizer state, gradients and parameters.

    ZeroOptimizer(params, optim="adam"|"adamw"|"sgd", stage=1|2|3, lr=..., betas=(0.9, 0.999),
    eps=1e-8, weight_decay=None (AdamW 0.01, else 0), momentum=0.0, dampening=0.0,
    nesterov=False, mixed_precision=None|"bf16", bucket_cap_mb=None,
    comm_dtype=None|"bf16"|"fp16", module=None)

    - params: the module, its parameters, or parameter groups as torch.optim takes them
      ([{"params": [...], "weight_decay": 0.0}, ...]; _zero_groups.py). Stage 3 hooks the
      module's submodules: pass the module, or module= with parameters or groups.
      Collective: every rank constructs it with the same model; rank 0's values are broadcast
      (with a module, also its frozen parameters and its buffers).
      Do not wrap the model in DistributedDataParallel: this optimizer averages the gradients.
    - The update rules are torch.optim's SGD, Adam and AdamW, run on this rank's float32 shard.
    - Stage 1: backward allreduces (avg) the gradients in units of bucket_cap_mb (default
      get_config().bucket_bytes), overlapped with backward; .grad are views into those units.
      step() updates this rank's shard of the parameters and optimizer state, then allgathers.
    - Stage 2: each unit's gradients are reduce-scattered as soon as backward completes the unit;
      this rank keeps only its gradient shard (.grad stays None).
    - Stage 3: parameters are partitioned too: a module's parameters are gathered just before its
      forward and its backward (the next module's are prefetched) and released after. The module
      that ran last in forward stays gathered for its backward, which comes next. A parameter
      that several modules register (tied weights) is gathered with their lowest common
      ancestor; one used by a module that does not register it must be declared with
      chorus.torch.register_external_parameter(module, parameter) before construction.
    - mixed_precision="bf16": the model's parameters and gradients become bfloat16 (inputs must be
      bfloat16 too); the optimizer keeps float32 master weights and state (the paper's K = 12).
    - comm_dtype="bf16" or "fp16" (float32 models): gradients travel compressed, as with torch
      DDP's bf16_compress_hook / fp16_compress_hook: each unit is cast just before its reduction
      (allreduce at stage 1, reduce-scatter at stages 2 and 3) and cast back after, moving half
      the bytes; the shm backend accumulates the average in float32.
    - Gradients accumulate over backward passes until zero_grad(). A parameter that gets no
      gradient on any rank is updated with a zero gradient (torch.optim would skip it).
    - CUDA models (chorus built with the GPU backend): every buffer is device memory from torch's
      allocator, the reductions and gathers run on NCCL without host waits, and the update is
      torch.optim's own on the float32 shard.
    - A torch.optim.Optimizer, so torch's learning-rate schedulers (torch.optim.lr_scheduler)
      drive it: step() takes each parameter group's values under torch.optim's names (lr,
      weight_decay; momentum, dampening, nesterov for SGD; betas, eps for Adam and AdamW).
      SGD's momentum is zero in every group or in none, and cannot change between the two.
    - clip_grad_norm_(max_norm) clips the whole model's gradient (see there). The state is
      sharded: save_checkpoint/load_checkpoint, not state_dict/load_state_dict.
    """

    def __init__(self, params, optim="adam", stage=1, lr=None, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=None, momentum=0.0, dampening=0.0, nesterov=False,
                 mixed_precision=None, bucket_cap_mb=None, comm_dtype=None, module=None):
        if optim not in ("sgd", "adam", "adamw"):
            raise _invalid(f'optim must be "sgd", "adam" or "adamw", not {optim!r}')
        if stage not in (1, 2, 3):
            raise _invalid(f"stage must be 1, 2 or 3, not {stage!r}")
        if mixed_precision not in _MIXED_PRECISION:
            raise _invalid(f'mixed_precision must be None or "bf16", not {mixed_precision!r}')
        if comm_dtype not in _COMM_DTYPES:
            raise _invalid(f'comm_dtype must be None, "bf16" or "fp16", not {comm_dtype!r}')
        if comm_dtype is not None and mixed_precision is not None:
            raise _invalid(f"comm_dtype={comm_dtype!r} compresses float32 gradients; with "
                           f"mixed_precision={mixed_precision!r} they already travel as bfloat16")
        if module is not None and not isinstance(module, torch.nn.Module):
            raise _invalid(f"module must be a torch.nn.Module, not {type(module).__name__}")
        module, groups, names = parameter_groups(params, module, optim)
        if stage == 3 and module is None:
            raise _invalid("stage 3 gathers each module's parameters around its forward and "
                           "backward: pass the module itself, or module= with its parameters")
        listed = ordered_parameters(module, groups, names)
        group_of = {id(p): g for _, p, g in listed}
        named = check_parameters([(name, p) for name, p, _ in listed], _WHO, cuda=True)
        if not named:
            raise _invalid("no parameters that require gradients")
        _refuse_data_parallel(named)
        self.stage, self.optim, self.mixed_precision = stage, optim, mixed_precision
        self.comm_dtype = comm_dtype
        base = {
            "lr": (0.01 if optim == "sgd" else 1e-3) if lr is None else float(lr),
            "beta1": float(betas[0]), "beta2": float(betas[1]), "eps": float(eps),
            # torch.optim's defaults: 0.01 for AdamW, none for the others
            "weight_decay": (0.01 if optim == "adamw" else 0.0) if weight_decay is None
            else float(weight_decay), "momentum": float(momentum),
            "dampening": float(dampening), "nesterov": float(bool(nesterov))}
        trained = {id(p) for _, p in named}
        self._constructing = True
        super().__init__([dict(group, params=[p for p in group["params"] if id(p) in trained])
                          for group in groups], torch_names(optim, base))
        self._constructing = False
        self._base_hyperparameters = base
        # The engine's groups: those of param_groups that hold a parameter it trains.
        self._torch_group = sorted({group_of[id(p)] for _, p in named})
        engine_group = {g: e for e, g in enumerate(self._torch_group)}
        self._engine_groups = [engine_names(optim, self.param_groups[g], base)
                               for g in self._torch_group]
        if optim == "sgd" and len({h["momentum"] > 0 for h in self._engine_groups}) > 1:
            raise _invalid("SGD's momentum must be zero in every parameter group or in none: "
                           "the groups share one momentum buffer")
        self._comm = _groups.get(None)
        self._names = [name for name, _ in named]
        self._params = [p for _, p in named]
        self._group_of = [engine_group[group_of[id(p)]] for p in self._params]
        self._shapes = [tuple(p.shape) for p in self._params]
        self._dtype = _MIXED_PRECISION[mixed_precision]
        self._sync = True
        self._end_of_backward = EndOfBackward(self._finalize)
        self._owned_runs = None  # clip_grad_norm_'s runs of this rank's shards, made at first use
        self._build_engine(module, bucket_cap_mb)

    def _build_engine(self, module, bucket_cap_mb):
        if self._comm.size > 1:  # rank 0's model: what it trains, and its frozen part and buffers
            trained = {id(p) for p in self._params}
            rest = [] if module is None else [
                t.detach() for t in [p for p in module.parameters() if id(p) not in trained] +
                list(module.buffers()) if t.numel() > 0 and not _repeats_elements(t)]
            _ops.broadcast([p.detach() for p in self._params] + rest,
                           root=self._comm.members[0], inplace=True)
        dtype_name = _arrays.torch_dtype_name(self._dtype)
        numels = [p.numel() for p in self._params]
        unit_modules = None
        if self.stage == 3:
            units, unit_modules = stage_three_units(module, self._params)
        else:
            units = _chorus.plan_zero_units(numels, dtype_name,
                                            *bucket_limits(bucket_cap_mb, _WHO))
        device = self._params[0].device
        if device.type == "cuda" or _HOST_ENGINE == "torch":
            wire = _COMM_DTYPES[self.comm_dtype]
            self._engine = DeviceZeroEngine(self._comm, numels, units, self.stage, self._dtype,
                                            self.optim, self._engine_groups, device,
                                            None if wire is None else getattr(torch, wire),
                                            self._group_of)
        else:
            self._engine = _chorus.ZeroEngine(self._comm._native, numels, units, self.stage,
                                              dtype_name, self.optim, self._engine_groups,
                                              _COMM_DTYPES[self.comm_dtype], self._group_of)
        for index, p in enumerate(self._params):
            values = p.detach().to(torch.float32).contiguous().view(-1)
            self._engine.set_parameter(index, _dlpack.to_dlpack(values))
            p.grad = None
        # Hooks go on the accumulators of the parameters in their final dtype and whole shape:
        # torch drops a parameter's accumulator when its .data changes dtype, and an accumulator
        # checks gradients against the shape its parameter had when it was made.
        if self.stage == 3:
            for p in self._params:
                p.data = p.data.to(self._dtype)
        else:
            self._adopt_parameters()
        self._accumulators = hook_accumulators(self._params, self._make_hook)
        self._lifecycle = None
        if self.stage == 3:
            self._lifecycle = ParameterLifecycle(self._engine, self._params, self._shapes,
                                                 unit_modules)
        if self.stage == 1:
            for index, p in enumerate(self._params):
                p.grad = self._gradient_view(index)

    @property
    def hyperparameters(self):
        """The first parameter group's hyperparameters under the engine's names (lr, beta1,
        beta2, eps, weight_decay, momentum, dampening, nesterov), as param_groups sets them."""
        return engine_names(self.optim, self.param_groups[self._torch_group[0]],
                            self._base_hyperparameters)

    def add_param_group(self, param_group):
        if not self._constructing:  # the engine's layout is fixed
            raise _chorus.UnsupportedError(
                f"{_WHO}: parameter groups cannot be added after construction; pass them all "
                "to the constructor")
        super().add_param_group(param_group)

    def __getstate__(self):
        raise _chorus.UnsupportedError(
            f"{_WHO} cannot be copied or pickled: its state is sharded across the ranks and "
            "lives in its engine; save it with save_checkpoint(directory)")

    def state_dict(self):
        raise _chorus.UnsupportedError(
            f"{_WHO}: the optimizer state is sharded across the ranks; save it with "
            "save_checkpoint(directory) (and a scheduler's with its own state_dict())")

    def load_state_dict(self, state_dict):
        raise _chorus.UnsupportedError(
            f"{_WHO}: the optimizer state is sharded across the ranks; load it with "
            "load_checkpoint(directory)")

    def _adopt_parameters(self):
        for index, p in enumerate(self._params):
            p.data = as_torch(self._engine.parameter(index)).view(self._shapes[index])

    def _gradient_view(self, index):
        return as_torch(self._engine.gradient(index)).view(self._shapes[index])

    # ---- backward --------------------------------------------------------------------------

    def _make_hook(self, index):
        def on_gradient_accumulated(*_):
            if not self._sync:
                return
            self._end_of_backward.arm()
            if self.stage == 1:
                self._adopt_gradient(index)
                self._engine.mark_ready(index)
                return
            p = self._params[index]
            grad = p.grad.to(self._dtype).contiguous().view(-1)
            p.grad = None
            completed = self._engine.mark_ready(index, _dlpack.to_dlpack(grad))
            if self._lifecycle is not None and completed >= 0:
                self._lifecycle.release(completed)
        return on_gradient_accumulated

    def _adopt_gradient(self, index):
        """Stage 1: .grad is the view into the engine's gradients (copying one found elsewhere)."""
        adopt_gradient_view(self._params[index], self._gradient_view(index))

    def _finalize(self):
        if self.stage == 1:
            for index, p in enumerate(self._params):
                if p.grad is not None and not self._engine.is_ready(index):
                    self._adopt_gradient(index)
                    self._engine.mark_ready(index)
        self._engine.finalize()
        if self._lifecycle is not None:
            self._lifecycle.release_all()

    @contextlib.contextmanager
    def no_sync(self):
        """Stage 1: backward inside only accumulates local gradients (the next one averages)."""
        if self.stage != 1:
            raise _chorus.UnsupportedError(
                f"{_WHO}: no_sync() needs whole gradients, which only stage 1 keeps; with stage "
                f"{self.stage} every backward reduces and the shard accumulates")
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    # ---- the step --------------------------------------------------------------------------

    def step(self, closure=None):
        """Updates this rank's shard and makes every parameter current (collective)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._lifecycle is not None:
            self._lifecycle.release_all()  # a unit gathered before the update would be stale
        self._hand_hyperparameters_on()
        self._engine.step()
        return loss

    def clip_grad_norm_(self, max_norm, norm_type=2.0, error_if_nonfinite=False):
        """Clips the gradients of the whole model as torch.nn.utils.clip_grad_norm_ does on one
        process: their total norm of order norm_type (inf: the largest |g|) over every
        parameter, and when it exceeds max_norm every gradient is scaled by
        max_norm / (norm + 1e-6). Returns the norm (a float32 tensor on the parameters' device).
        Collective: every rank calls it after backward and before step(). Stages 2 and 3 keep
        no .grad, so torch.nn.utils.clip_grad_norm_(model.parameters()) would find nothing to
        clip there; this works at every stage (FSDP's clip_grad_norm_ is the same)."""
        if self._owned_runs is None:
            self._owned_runs = owned_runs(self._engine)
        return clip_grad_norm(self._engine, self._owned_runs, self._params, max_norm, norm_type,
                              error_if_nonfinite)

    def _hand_hyperparameters_on(self):
        """Gives the engine what param_groups now holds (a learning-rate scheduler changes it)."""
        for engine_group, torch_group in enumerate(self._torch_group):
            hyper = engine_names(self.optim, self.param_groups[torch_group],
                                 self._base_hyperparameters)
            if hyper != self._engine_groups[engine_group]:
                self._engine.set_hyperparameters(hyper, group=engine_group)
                self._engine_groups[engine_group] = hyper

    def zero_grad(self, set_to_none=True):
        """Zeroes the gradients. They live in the engine's buffers, so set_to_none only zeroes."""
        self._engine.zero_gradients()

    @property
    def steps(self):
        return self._engine.steps

    @property
    def engine(self):
        """The C++ ZeroEngine (num_units, unit_parameters(u), owned_pieces(), memory(), ...)."""
        return self._engine

    def gathered_parameters(self):
        """Every parameter whole, as float32 master values {name: tensor} (collective)."""
        flat = torch.from_numpy(self._engine.gather_parameters())
        result, start = {}, 0
        for name, shape in zip(self._names, self._shapes):
            count = int(torch.Size(shape).numel())
            result[name] = flat[start:start + count].view(shape).clone()
            start += count
        return result

    def memory_report(self):
        """This rank's bytes by kind, measured from the engine's allocations, against the ZeRO
        paper's prediction for the same Ψ (parameters), N (ranks) and stage."""
        from ._zero_memory import report
        return report(self._engine, self._comm.size, self.stage, self.optim,
                      self.hyperparameters, self._dtype, self._params)

    # ---- checkpoints -----------------------------------------------------------------------

    def _parameter_table(self):
        dtype = _arrays.torch_dtype_name(self._dtype)
        return [{"name": n, "shape": list(s), "dtype": dtype}
                for n, s in zip(self._names, self._shapes)]

    def save_checkpoint(self, directory):
        """Each rank writes its shard of master weights and optimizer state into `directory`
        (collective; the directory is shared by the ranks, an earlier checkpoint there is
        replaced)."""
        arrays = {name: self._engine.export_state(name) for name in self._engine.state_names()}
        meta = {"optimizer": self.optim, "stage": self.stage, "step": self._engine.steps,
                "mixed_precision": self.mixed_precision, "hyperparameters": self.hyperparameters,
                "param_groups": [self._saved_group(group) for group in self.param_groups]}
        if self._comm.rank == 0:
            _checkpoint.remove_shards(directory)  # an earlier save's files, of any world size
        _ops.barrier()
        _checkpoint.write_shard(directory, self._comm.rank, self._comm.size,
                                self._parameter_table(), self._engine.owned_pieces(), arrays, meta)
        _ops.barrier()

    def _saved_group(self, group):
        """A group's hyperparameters under torch.optim's names, as a checkpoint keeps them, with
        the initial_lr a scheduler set (a scheduler made with last_epoch resumes from it)."""
        saved = torch_names(self.optim, engine_names(self.optim, group,
                                                     self._base_hyperparameters))
        if "initial_lr" in group:
            saved["initial_lr"] = float(group["initial_lr"])
        return saved

    def load_checkpoint(self, directory):
        """Loads a checkpoint saved by any number of ranks (collective)."""
        names = self._engine.state_names()
        arrays, meta = _checkpoint.read_pieces(directory, self._parameter_table(),
                                               self._engine.owned_pieces(), names)
        if meta.get("optimizer") != self.optim:
            raise _invalid(f"{directory} holds {meta.get('optimizer')!r} state; this optimizer "
                           f"is {self.optim!r}")
        saved_groups = meta.get("param_groups", [torch_names(self.optim,
                                                              meta["hyperparameters"])])
        if len(saved_groups) != len(self.param_groups):
            raise _invalid(f"{directory} holds {len(saved_groups)} parameter groups; this "
                           f"optimizer has {len(self.param_groups)}")
        if self.optim == "sgd" and any((saved["momentum"] > 0) != (group["momentum"] > 0)
                                       for saved, group in zip(saved_groups, self.param_groups)):
            raise _invalid(f"{directory} holds SGD state whose momentum is "
                           f"{saved_groups[0]['momentum']}; this optimizer's is "
                           f"{self.param_groups[0]['momentum']}: make it with momentum, or without, "
                           "as the checkpoint was")
        for name in names:
            self._engine.import_state(name, arrays[name])
        self._engine.steps = int(meta["step"])
        for group, saved in zip(self.param_groups, saved_groups):  # what a schedule had set
            group.update({key: tuple(value) if key == "betas" else value
                          for key, value in saved.items()})
        if self._lifecycle is not None:
            self._lifecycle.release_all()  # the parameters must not view a unit the load replaces
        self._engine.publish_parameters()
        _ops.barrier()
