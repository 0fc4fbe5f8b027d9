"""CuPy and JAX arrays (issue 18): carried through PyTorch, both ways by DLPack, without a copy.

The C++ core and chorus._arrays know NumPy arrays and torch tensors. An array of another framework
that lives on a GPU (a CuPy array, a JAX array on a CUDA device) becomes a torch tensor sharing its
memory: torch.from_dlpack calls the array's __dlpack__(stream=torch's current stream), so whatever
the producer still has queued is ordered before that stream, which the collective follows. The
results go back to the input's framework the same way (cupy.from_dlpack, jax.dlpack.from_dlpack
call the torch result's __dlpack__ with their own stream, ordering it after the collective). No
host wait, no copy. A CuPy array shares memory with its torch view, so inplace=True writes into it;
JAX arrays are immutable, so inplace=True on one is an InvalidArgumentError. A JAX array on the
CPU goes through NumPy instead (and back with jax.numpy.asarray, a copy), so torch is needed only
for GPU arrays; without it they are an UnsupportedError that says so.

`accepts_foreign(fn)` wraps an operation: the array argument (first, or `x=`) and `out=`, each
alone or in a list, are converted on the way in. The result (or an async Work's result) goes back
to the input's framework on the way out; with out=, the caller's `out` itself is returned.
"""

import functools
import sys

import numpy as np

from . import _chorus


_FRAMEWORK_OF_TYPE = {}  # type -> "cupy" / "jax" / None: a dict lookup per call after the first


def _framework(x):
    """"cupy", "jax", or None for anything else (NumPy, torch, other DLPack objects)."""
    kind = type(x)
    if kind in _FRAMEWORK_OF_TYPE:
        return _FRAMEWORK_OF_TYPE[kind]
    module = kind.__module__.split(".", 1)[0]
    framework = None
    if module == "cupy" and "cupy" in sys.modules:
        framework = "cupy"
    elif module in ("jax", "jaxlib") and "jax" in sys.modules:
        framework = "jax" if isinstance(x, sys.modules["jax"].Array) else None
    _FRAMEWORK_OF_TYPE[kind] = framework
    return framework


def _on_gpu(x):
    device_type, _ = x.__dlpack_device__()
    return device_type in (2, 13)  # kDLCUDA, kDLCUDAManaged


def _to_native(x, framework, inplace):
    if framework == "jax" and inplace:
        raise _chorus.InvalidArgumentError(
            "inplace=True needs a mutable array, and JAX arrays are immutable; use the returned "
            "array instead")
    if not _on_gpu(x):
        return np.from_dlpack(x) if framework == "jax" else x
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811 (imported only when a GPU array needs it)
        except ImportError as error:
            raise _chorus.UnsupportedError(
                f"chorus takes {framework} GPU arrays through PyTorch's DLPack, and torch is not "
                "installed; install PyTorch (with CUDA) or pass torch tensors") from error
    return torch.from_dlpack(x)


def _to_framework(result, framework):
    if framework == "jax":
        import jax
        if isinstance(result, np.ndarray):
            return jax.numpy.asarray(result)
        return jax.dlpack.from_dlpack(result)
    import cupy
    if isinstance(result, np.ndarray):
        return result  # a CuPy array on the CPU does not exist; never reached
    return cupy.from_dlpack(result)


def _convert(value, convert):
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(item, convert) for item in value)
    return convert(value) if value is not None else None


def _framework_of(x):
    if isinstance(x, (list, tuple)):
        if not x:
            return None
        kinds = {_framework(item) for item in x}
        return kinds.pop() if len(kinds) == 1 else None
    return _framework(x)


def _wrap_result(result, framework):
    back = functools.partial(_to_framework, framework=framework)
    from ._ops import Work
    if isinstance(result, Work):
        finish = result._finish
        result._finish = lambda: _convert(finish(), back)
        return result
    return _convert(result, back)


def _returning(result, out):
    """`out` in place of the operation's result (or its Work's)."""
    from ._ops import Work
    if isinstance(result, Work):
        finish = result._finish
        result._finish = lambda: (finish(), out)[1]
        return result
    return out


def accepts_foreign(fn):
    """Lets `fn(x, ...)` (and `fn(..., out=...)`) take CuPy and JAX arrays; see the module doc."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        framework = _framework_of(args[0] if args else kwargs.get("x"))
        if framework is None and not kwargs:
            return fn(*args)  # the common case: NumPy or torch, nothing to convert
        out = kwargs.get("out")
        out_framework = None if out is None else _framework_of(out)
        if framework is None and out_framework is None:
            return fn(*args, **kwargs)
        if framework is not None:
            native = functools.partial(_to_native, framework=framework,
                                       inplace=bool(kwargs.get("inplace", False)))
            if args:
                args = (_convert(args[0], native),) + args[1:]
            else:
                kwargs["x"] = _convert(kwargs["x"], native)
        if out_framework is None:
            return _wrap_result(fn(*args, **kwargs), framework)
        # out= is written through a torch view of it; the caller gets `out` itself back.
        kwargs["out"] = _convert(out, functools.partial(_to_native, framework=out_framework,
                                                        inplace=True))
        return _returning(fn(*args, **kwargs), out)

    return call
