"""What DistributedDataParallel and ZeroOptimizer share to follow backward: the parameters that
take part, the bucket limits, a hook on each parameter's gradient accumulator, gradients that are
views into C++ buffers, and a callback at the end of backward.
"""

import torch

from .. import _chorus


def check_parameters(named_parameters, who, cuda=False):
    """The (name, parameter) pairs that get gradients, each once (shared parameters appear once);
    parameters chorus cannot train are refused, naming them. cuda: whether `who` trains CUDA
    parameters (on a build with the GPU backend); every parameter must then be on one device."""
    params, seen = [], set()
    for name, p in named_parameters:
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        _check_device(name, p, who, cuda)
        if params and p.device != params[0][1].device:
            raise _chorus.InvalidArgumentError(
                f"{who}: parameter {params[0][0]} is on {params[0][1].device} and parameter "
                f"{name} on {p.device}; move the whole module to one device")
        if p.layout != torch.strided:
            raise _chorus.UnsupportedError(
                f"{who}: parameter {name} is {p.layout}; only dense parameters are supported")
        if not p.is_floating_point():
            raise _chorus.InvalidArgumentError(
                f"{who}: parameter {name} has dtype {p.dtype}; gradients must be floating point")
        params.append((name, p))
    return params


def _check_device(name, p, who, cuda):
    if p.device.type == "cpu" or (cuda and p.is_cuda and _chorus.gpu_backend):
        return
    if p.is_cuda and not _chorus.gpu_backend:
        raise _chorus.UnsupportedError(
            f"{who}: parameter {name} is on {p.device}; chorus was built without a GPU backend, "
            "move the module to the CPU")
    kinds = "host and CUDA parameters" if cuda else "host parameters"
    raise _chorus.UnsupportedError(
        f"{who}: parameter {name} is on {p.device}; {who} trains {kinds} only")


_FIRST_BUCKET_BYTES = 1 << 20  # small, so that communication starts early in backward


def bucket_limits(bucket_cap_mb, who):
    """(bucket bytes, first bucket bytes) for bucket_cap_mb (None: get_config().bucket_bytes)."""
    if bucket_cap_mb is None:
        limit = int(_chorus.config().bucket_bytes)
    elif not bucket_cap_mb > 0:
        raise _chorus.InvalidArgumentError(
            f"{who}: bucket_cap_mb must be positive, not {bucket_cap_mb}")
    else:
        limit = max(1, int(bucket_cap_mb * (1 << 20)))
    return limit, min(_FIRST_BUCKET_BYTES, limit)


def adopt_gradient_view(p, view):
    """Makes `view` (C++-owned memory) p's .grad, copying in a gradient that lives elsewhere."""
    grad = p.grad
    if grad is None or grad.data_ptr() != view.data_ptr():
        if grad is not None:
            view.copy_(grad)
        p.grad = view


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
