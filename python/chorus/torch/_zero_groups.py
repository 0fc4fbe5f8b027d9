"""ZeroOptimizer's parameters and parameter groups, as torch.optim takes them.

`params` is a module, an iterable of parameters, or an iterable of dicts (torch.optim's parameter
groups: {"params": [...], "weight_decay": 0.0, ...}). A group's hyperparameters use torch.optim's
names (lr, weight_decay; momentum, dampening, nesterov for SGD; betas, eps for Adam and AdamW) and
default to the constructor's. Other keys stay in param_groups, as torch.optim keeps them; the
flags ZeRO cannot honour (amsgrad, maximize, differentiable) are refused. The engine takes each
parameter's group and each group's hyperparameters under its own names (lr, beta1, beta2, eps,
weight_decay, momentum, dampening, nesterov).
"""

import torch

from .. import _chorus

_WHO = "ZeroOptimizer"
_REFUSED_FLAGS = ("amsgrad", "maximize", "differentiable")
# torch's own bookkeeping in a group, which ZeroOptimizer keeps itself: named parameters (torch
# 2.6+) give their names to the parameter table instead.
_DROPPED_KEYS = ("param_names",)


def torch_names(optim, hyper):
    """The engine's hyperparameters under torch.optim's names."""
    common = {"lr": hyper["lr"], "weight_decay": hyper["weight_decay"]}
    if optim == "sgd":
        return dict(common, momentum=hyper["momentum"], dampening=hyper["dampening"],
                    nesterov=bool(hyper["nesterov"]))
    return dict(common, betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"])


def engine_names(optim, group, base):
    """A parameter group's hyperparameters (torch.optim's names) under the engine's, the others
    from `base`."""
    hyper = dict(base)
    hyper.update(lr=float(group["lr"]), weight_decay=float(group["weight_decay"]))
    if optim == "sgd":
        hyper.update(momentum=float(group["momentum"]), dampening=float(group["dampening"]),
                     nesterov=float(bool(group["nesterov"])))
    else:
        beta1, beta2 = group["betas"]
        hyper.update(beta1=float(beta1), beta2=float(beta2), eps=float(group["eps"]))
    return hyper


def _as_list(params, what, names):
    """`params` as a list of tensors; (name, tensor) pairs (torch 2.6+'s named parameters) give
    their names to `names` (id -> name). A set is refused: its order, which follows addresses,
    differs between ranks, and so would the parameters' layout."""
    if isinstance(params, torch.Tensor):
        return [params]
    if isinstance(params, (set, frozenset)):
        raise _chorus.InvalidArgumentError(
            f"{_WHO}: {what} is a set, whose order differs between processes; pass a list")
    try:
        items = list(params)
    except TypeError:
        raise _chorus.InvalidArgumentError(
            f"{_WHO}: {what} must be a module, parameters or parameter groups, not "
            f"{type(params).__name__}") from None
    tensors = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            names[id(item[1])] = item[0]
            item = item[1]
        tensors.append(item)
    return tensors


def _check_flags(index, group, optim):
    for flag in _REFUSED_FLAGS:
        if group.get(flag):
            raise _chorus.UnsupportedError(
                f"{_WHO}: parameter group {index} sets {flag}=True, which ZeRO does not do")
    # torch 2.7+'s Adam takes decoupled_weight_decay (what AdamW is); ZeRO's Adam couples it.
    if optim == "adam" and group.get("decoupled_weight_decay"):
        raise _chorus.UnsupportedError(
            f"{_WHO}: parameter group {index} sets decoupled_weight_decay=True: that is AdamW; "
            "use optim=\"adamw\"")


def parameter_groups(params, module, optim):
    """(module, groups, names): `module` (params itself if it is one), the groups as
    [{"params": [...], overrides...}], each parameter once, and the names that named parameters
    gave (id -> name)."""
    names = {}
    if isinstance(params, torch.nn.Module):
        if module is not None and module is not params:
            raise _chorus.InvalidArgumentError(
                f"{_WHO}: params is a module and module= is another; give one")
        return params, [{"params": list(params.parameters())}], names
    items = _as_list(params, "params", names)  # groups (dicts) pass through as they are
    if not any(isinstance(item, dict) for item in items):
        return module, [{"params": items}], names
    if not all(isinstance(item, dict) for item in items):
        raise _chorus.InvalidArgumentError(
            f"{_WHO}: params mixes parameter groups (dicts) and parameters; put every parameter "
            "in a group")
    groups, seen = [], set()
    for index, item in enumerate(items):
        if "params" not in item:
            raise _chorus.InvalidArgumentError(f"{_WHO}: parameter group {index} has no 'params'")
        _check_flags(index, item, optim)
        group = {key: value for key, value in item.items() if key not in _DROPPED_KEYS}
        group["params"] = _as_list(item["params"], f"group {index}'s params", names)
        for p in group["params"]:
            if id(p) in seen:
                raise _chorus.InvalidArgumentError(
                    f"{_WHO}: a parameter of shape {tuple(p.shape)} is in more than one "
                    "parameter group")
            seen.add(id(p))
        groups.append(group)
    return module, groups, names


def ordered_parameters(module, groups, names):
    """[(name, parameter, group index)]: in the module's registration order when there is a
    module (the order backward produces gradients in, roughly, which the buckets follow), else
    in the groups' order; names from the module, else those given (`names`), else param.<i>."""
    group_of = {}
    for index, group in enumerate(groups):
        for p in group["params"]:
            group_of[id(p)] = index
    if module is None:
        listed = [p for group in groups for p in group["params"]]
        return [(names.get(id(p), f"param.{i}"), p, group_of[id(p)])
                for i, p in enumerate(listed)]
    named = [(name, p, group_of[id(p)]) for name, p in module.named_parameters()
             if id(p) in group_of]
    if len(named) != len(group_of):
        raise _chorus.InvalidArgumentError(
            f"{_WHO}: {len(group_of) - len(named)} of the parameters given are not the module's")
    return named
