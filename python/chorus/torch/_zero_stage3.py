"""ZeRO stage 3's parameter lifecycle: each module's parameters exist whole only while it runs.

Between uses a parameter's .data is an empty tensor and the ZeroEngine keeps this rank's shard.
- Forward: a pre-hook gathers the module's unit (allgather), gives its parameters views of the
  gathered memory, and starts gathering the unit that ran next in the first forward (prefetch); the
  post-hook releases the unit, keeping its address (what forward saved views it; the gather for
  backward refills it), and wraps the outputs in _BeforeBackward (also inside tuples, named
  tuples, lists and dicts). The unit that ran last in forward runs first in backward, so it stays
  gathered for it (DeepSpeed's reuse distance, here one unit): backward does not gather it again.
  Once backward has run, the forward order is known.
- Backward: _BeforeBackward runs when the gradient of the module's output arrives, before the
  module's own backward: it gathers the unit again and prefetches the unit that runs next in
  backward (the one before it in forward). Once every parameter of the unit has its gradient
  (ZeroOptimizer's hooks), the unit is released, its memory left to the views that still hold it
  (a detached use of a weight reads it later); the end of backward, and step(), release any left
  (a forward without a backward leaves its last unit gathered, and step() changes the shard). A
  module whose forward runs again during backward (activation checkpointing's recompute) keeps
  its unit gathered: its backward reads what the recompute saved.
Every rank runs the same modules in the same order, so every rank issues the same collectives.
A parameter is gathered with the module that registers it, or, when several modules register it
(tied weights) or declare that they use it (register_external_parameter), with their lowest common
ancestor that has a forward (stage_three_units).
"""

import copy

import torch
from torch.utils import dlpack as _dlpack

from .. import _chorus

# The attribute of a module that lists the parameters register_external_parameter declared for it.
_EXTERNAL = "_chorus_external_parameters"


def register_external_parameter(module, parameter):
    """Declares that `module`'s forward uses `parameter`, which another module registers (as
    DeepSpeed's deepspeed.zero.register_external_parameter does). ZeroOptimizer's stage 3 then
    gathers the parameter for the whole forward and backward of the lowest common ancestor of
    `module` and the module that registers it. Without it, such a use finds the parameter released.
    Call it before constructing the ZeroOptimizer. Parameters that several modules register
    (tied weights: `head.weight = embed.weight`) need no declaration."""
    if not isinstance(module, torch.nn.Module):
        raise _chorus.InvalidArgumentError(
            f"register_external_parameter: module must be a torch.nn.Module, not "
            f"{type(module).__name__}")
    if not isinstance(parameter, torch.nn.Parameter):
        raise _chorus.InvalidArgumentError(
            f"register_external_parameter: parameter must be a torch.nn.Parameter, not "
            f"{type(parameter).__name__}")
    declared = module.__dict__.setdefault(_EXTERNAL, [])
    if not any(p is parameter for p in declared):
        declared.append(parameter)


def _has_forward(module):
    return type(module).forward is not torch.nn.Module.forward  # ModuleList, ModuleDict: none


def _enclosing_module(root, paths, parameter):
    """The deepest module on every path (tuples of names from root) that has a forward: its forward
    encloses the forwards of the modules at the paths. InvalidArgumentError if not even root has
    one (a ModuleDict passed as the model)."""
    common = []
    for names in zip(*paths):
        if any(name != names[0] for name in names):
            break
        common.append(names[0])
    while True:
        module = root.get_submodule(".".join(common))
        if _has_forward(module):
            return module
        if not common:
            raise _chorus.InvalidArgumentError(
                f"ZeroOptimizer: stage 3 gathers a parameter for the forward of a module that "
                f"encloses its uses, but no module above {'.'.join(paths[0]) or 'the model'} "
                f"(which registers a parameter of shape {tuple(parameter.shape)}) has a "
                f"forward: the model is a {type(root).__name__}; pass the module that runs")
        common.pop()


def stage_three_units(root, params):
    """Stage 3's units (lists of indices into `params`) and the module that gathers each, in
    module order. A parameter belongs to the module that registers it, or to its nearest
    ancestor with a forward where it has none (ParameterList, ParameterDict). One that several
    modules register or use (register_external_parameter) belongs to their lowest common
    ancestor that has a forward, which encloses every use, as torch's FSDP places shared
    parameters. A module reached by two paths (one module called twice) is still one module."""
    index_of = {id(p): i for i, p in enumerate(params)}
    users = {}  # parameter index -> {id(module): (module, [its paths])}
    for path, module in root.named_modules(remove_duplicate=False):
        used = list(module.parameters(recurse=False)) + module.__dict__.get(_EXTERNAL, [])
        for p in used:
            if id(p) in index_of:
                entry = users.setdefault(index_of[id(p)], {}).setdefault(id(module), (module, []))
                entry[1].append(tuple(path.split(".")) if path else ())
    members = {}  # id(module) -> the indices of the parameters it gathers
    for index, by_module in sorted(users.items()):
        owner = next(iter(by_module.values()))[0]
        if len(by_module) > 1 or not _has_forward(owner):  # shared, or in a ParameterList
            paths = [path for _, module_paths in by_module.values() for path in module_paths]
            owner = _enclosing_module(root, paths, params[index])
        members.setdefault(id(owner), []).append(index)
    modules = [module for module in root.modules() if id(module) in members]
    return [members[id(module)] for module in modules], modules


def as_torch(view):
    """An engine's view as a torch tensor: the torch engine's own tensor as it is (a tensor made
    through DLPack would have a storage of its own, which a release could not free: Note [Gathered
    units keep their tensor], _zero_device.py), the C++ engine's through DLPack."""
    return view if isinstance(view, torch.Tensor) else _dlpack.from_dlpack(view)


class _BeforeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lifecycle, unit, tensor):
        ctx.lifecycle, ctx.unit = lifecycle, unit
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        ctx.lifecycle.before_backward(ctx.unit)
        return None, None, grad


class ParameterLifecycle:
    """Hooks on the modules of `units` (one module per unit) that gather and release parameters."""

    def __init__(self, engine, params, shapes, unit_modules):
        self._engine = engine
        self._params = params
        self._shapes = shapes
        self._members = [engine.unit_parameters(u) for u in range(engine.num_units)]
        # Each on its parameter's own device and dtype: a .data of another makes torch drop the
        # parameter's gradient accumulator, and with it ZeroOptimizer's hook (no gradient would
        # reach the engine; on a GPU, training then stood still).
        self._empty = [p.new_empty(0) for p in params]
        self._forward_order, self._position = [], {}
        self._order_known = False  # set by the first backward: the forward order is complete
        # Set from the first gather for backward to the end of backward (release_all): a module
        # that runs forward then (activation checkpointing recomputes it) keeps its unit.
        self._in_backward = False
        self._handles = []
        for unit, module in enumerate(unit_modules):
            self._handles.append(module.register_forward_pre_hook(self._pre_forward_hook(unit)))
            self._handles.append(module.register_forward_hook(self._post_forward_hook(unit)))
        self.release_all()

    def _materialize(self, unit):
        self._engine.wait_gathered(unit)
        for index in self._members[unit]:
            view = as_torch(self._engine.parameter(index))
            self._params[index].data = view.view(self._shapes[index])

    def release(self, unit, keep_address=False):
        """keep_address: only after the module's forward; its backward gathers the unit into the
        same memory before it reads what forward saved (the engine's release)."""
        for index in self._members[unit]:
            self._params[index].data = self._empty[index]
        self._engine.release(unit, keep_address=keep_address)

    def release_all(self):
        self._in_backward = False
        for unit in range(len(self._members)):
            self.release(unit)

    def _prefetch_after(self, unit, step):
        position = self._position.get(unit)
        if position is not None and 0 <= position + step < len(self._forward_order):
            self._engine.gather(self._forward_order[position + step])

    def _pre_forward_hook(self, unit):
        def pre_forward(module, inputs):
            if self._in_backward:  # a recompute: the unit only, released with its gradients
                self._materialize(unit)
                return
            if unit not in self._position:
                self._position[unit] = len(self._forward_order)
                self._forward_order.append(unit)
            self._materialize(unit)
            self._prefetch_after(unit, +1)
        return pre_forward

    def _post_forward_hook(self, unit):
        def post_forward(module, inputs, output):
            if self._in_backward:  # its backward reads what the recompute saved: keep the unit
                return output
            if not torch.is_grad_enabled():
                self.release(unit, keep_address=True)  # nothing saved
                return output
            if not (self._order_known and unit == self._forward_order[-1]):
                self.release(unit, keep_address=True)
            return self._wrap(output, unit)
        return post_forward

    def _wrap(self, output, unit):
        """`output` with each tensor that requires grad passed through _BeforeBackward, also
        inside tuples, named tuples, lists and dicts (as torch's FSDP finds them)."""
        if isinstance(output, torch.Tensor):
            if output.requires_grad:
                return _BeforeBackward.apply(self, unit, output)
            return output
        if isinstance(output, tuple) and hasattr(output, "_fields"):  # a named tuple
            return type(output)(*(self._wrap(item, unit) for item in output))
        if isinstance(output, (tuple, list)):
            return type(output)(self._wrap(item, unit) for item in output)
        if isinstance(output, dict):
            wrapped = copy.copy(output)  # its own type (OrderedDict, a model's output class...)
            for key, value in output.items():
                wrapped[key] = self._wrap(value, unit)
            return wrapped
        return output

    def before_backward(self, unit):
        self._order_known = True
        self._in_backward = True
        self._materialize(unit)
        self._prefetch_after(unit, -1)
