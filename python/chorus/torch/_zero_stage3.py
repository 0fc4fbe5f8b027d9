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
A parameter is gathered with the module that registers it: using it from another module's forward
is not supported.
"""

import copy

import torch
from torch.utils import dlpack as _dlpack


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
