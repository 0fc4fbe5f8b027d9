"""What DistributedDataParallel and ZeroOptimizer share to follow backward: the parameters that
take part, a hook on each parameter's gradient accumulator, and a callback at the end of backward.
"""

import torch

from .. import _chorus


def check_parameters(named_parameters, who):
    """The (name, parameter) pairs that get gradients, each once (shared parameters appear once);
    parameters chorus cannot train are refused, naming them."""
    params, seen = [], set()
    for name, p in named_parameters:
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if p.device.type != "cpu":
            raise _chorus.UnsupportedError(
                f"{who}: parameter {name} is on {p.device}; chorus was built without a GPU "
                "backend, move the module to the CPU")
        if p.layout != torch.strided:
            raise _chorus.UnsupportedError(
                f"{who}: parameter {name} is {p.layout}; only dense parameters are supported")
        if not p.is_floating_point():
            raise _chorus.InvalidArgumentError(
                f"{who}: parameter {name} has dtype {p.dtype}; gradients must be floating point")
        params.append((name, p))
    return params


def hook_accumulators(params, make_hook):
    """Registers make_hook(i) on parameter i's gradient accumulator, which runs once the gradient
    is accumulated into .grad. Returns the accumulators: keep them, the hooks live with them."""
    accumulators = []
    for index, p in enumerate(params):
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
        accumulator.register_hook(make_hook(index))
        accumulators.append(accumulator)
    return accumulators


class EndOfBackward:
    """Runs `callback` once when the current backward pass ends; arm() from inside backward."""

    def __init__(self, callback):
        self._callback = callback
        self._armed = False

    def arm(self):
        if not self._armed:
            torch.autograd.Variable._execution_engine.queue_callback(self._run)
            self._armed = True

    def _run(self):
        self._armed = False
        self._callback()
