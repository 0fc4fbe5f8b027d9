"""Array adapters: NumPy arrays, PyTorch tensors and any object with ``__dlpack__``.

Each input is turned into a :class:`Buffer`: a C-contiguous array of the input's framework (a copy
when the input was not contiguous, native-endian or writable), its chorus dtype name, and a way to
export it as a DLPack capsule for the C++ core. Results are allocated with the same framework, so
an operation returns what it was given. Objects that only speak ``__dlpack__`` are imported as
NumPy arrays, and their results are NumPy arrays.
"""

import sys
import threading

import numpy as np

from . import _chorus

_NUMPY_DTYPES = {
    np.dtype(np.float16): "float16",
    np.dtype(np.float32): "float32",
    np.dtype(np.float64): "float64",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.bool_): "bool",
    np.dtype(np.int16): "int16",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.complex64): "complex64",
    np.dtype(np.complex128): "complex128",
}
SUPPORTED_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16",
                    "uint16", "int32", "uint32", "int64", "uint64", "bool", "complex64",
                    "complex128")
_BOOL = _chorus.DataType.bool  # the dtype override of a bool array exported as uint8
_TORCH_DTYPE_NAMES = None  # torch.dtype -> chorus name, built on first torch input


def _torch():
    return sys.modules.get("torch")


def _torch_dtypes(torch):
    global _TORCH_DTYPE_NAMES
    if _TORCH_DTYPE_NAMES is None:
        names = {
            torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
            torch.float64: "float64", torch.int8: "int8", torch.uint8: "uint8",
            torch.int16: "int16", torch.int32: "int32", torch.int64: "int64", torch.bool: "bool",
            torch.complex64: "complex64", torch.complex128: "complex128",
        }
        for name in ("uint16", "uint32", "uint64"):  # torch >= 2.3
            if isinstance(getattr(torch, name, None), torch.dtype):
                names[getattr(torch, name)] = name
        _TORCH_DTYPE_NAMES = names
    return _TORCH_DTYPE_NAMES


def torch_dtype_name(dtype):
    """chorus's name of a torch dtype (InvalidArgumentError if chorus does not support it)."""
    name = _torch_dtypes(_torch()).get(dtype)
    if name is None:
        raise _unsupported_dtype("the tensor", str(dtype).replace("torch.", ""))
    return name


def _unsupported_dtype(what, name):
    return _chorus.InvalidArgumentError(
        f"{what} has dtype {name}, which chorus does not support; supported dtypes: "
        + ", ".join(SUPPORTED_DTYPES))


class Buffer:
    """A contiguous array ready for the C++ core.

    original: what the caller passed; array: the contiguous array of the same framework (the
    original itself when it already qualified); torch: whether it is a torch tensor; dtype: the
    chorus dtype name; shares: whether array is another view of the original's memory (a detached
    tensor), so that what is written into it is already in the original.
    """

    __slots__ = ("original", "array", "torch", "dtype", "shares")

    def __init__(self, original, array, is_torch, dtype, shares=False):
        self.original = original
        self.array = array
        self.torch = is_torch
        self.dtype = dtype
        self.shares = shares

    @property
    def shape(self):
        return tuple(self.array.shape)

    @property
    def cuda(self):
        """Whether the array is a CUDA tensor (its copies are torch's, on the current stream)."""
        return self.torch and self.array.is_cuda

    @property
    def is_copy(self):
        return self.array is not self.original and not self.shares

    def capsule(self):
        """A DLPack capsule of the array (bool exported as uint8; see export_dtype)."""
        a = self.array
        if self.torch:
            torch = _torch()
            if a.is_cuda:
                # The collective follows torch's current stream (chorus/stream.h): it reads what
                # was queued there, and wait() orders that stream after it.
                _chorus.set_current_stream(torch.cuda.current_stream(a.device).cuda_stream)
                _issued.device = a.device
            # to_dlpack is __dlpack__ without its Python-level checks (the tensor is detached).
            return torch.utils.dlpack.to_dlpack(a.view(torch.uint8) if self.dtype == "bool" else a)
        return (a.view(np.uint8) if self.dtype == "bool" else a).__dlpack__()

    @property
    def export_dtype(self):
        """The dtype override for C++: DataType.bool when the capsule carries bool as uint8, else
        None."""
        return _BOOL if self.dtype == "bool" else None

    def empty(self, shape):
        """A new uninitialized array of this buffer's framework and dtype."""
        if self.torch:
            return _torch().empty(shape, dtype=self.array.dtype, device=self.array.device)
        return np.empty(shape, dtype=self.array.dtype)

    def copy(self):
        """A Buffer holding a new copy of this host array; C++ copies large ones (giving them huge
        pages first)."""
        a = self.array
        if (a.numel() * a.element_size() if self.torch else a.nbytes) < _chorus.huge_pages_bytes:
            return self.like(a.clone() if self.torch else a.copy())
        copy = self.like(self.empty(self.shape))
        _chorus.copy([self.capsule()], [copy.capsule()], self.export_dtype)
        return copy

    def like(self, array):
        """A Buffer for `array`, a new contiguous array of this buffer's framework and dtype."""
        return Buffer(array, array, self.torch, self.dtype)

    def write_back(self, result):
        """Copies `result` into the caller's original array (used by inplace=True on a copy)."""
        if self.torch:
            with _torch().no_grad():
                self.original.copy_(result)
        else:
            np.copyto(self.original, result)


# The CUDA device of the last array this thread exported for a collective (take_cuda_device()).
_issued = threading.local()


def take_cuda_device():
    """The CUDA device of the tensors of the call this thread just made (None for host arrays),
    and forgets it: a Work keeps it, so that its wait() orders that device's current stream."""
    device = getattr(_issued, "device", None)
    _issued.device = None
    return device


def follow_current_stream(device=None):
    """Tells chorus the calling thread's current CUDA stream (torch's) on `device` (None: the
    current device), which a DeviceWork's wait() orders after the collective, as torch's
    Work.wait() orders the current stream of the work's device; nothing when no GPU backend or
    CUDA was never initialized."""
    if not _chorus.gpu_backend:
        return
    torch = _torch()
    if torch is not None and torch.cuda.is_initialized():
        _chorus.set_current_stream(torch.cuda.current_stream(device).cuda_stream)


def prepare(x, name="x", writable=False):
    """Wraps `x` as a Buffer. `writable`: the caller's array will be written (inplace=True)."""
    if isinstance(x, np.ndarray):
        return _prepare_numpy(x, x, name, writable)
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return _prepare_torch(torch, x, name)
    if isinstance(x, np.generic):
        if writable:
            raise _chorus.InvalidArgumentError(
                f"{name} is a NumPy scalar, which cannot be modified; inplace=True needs an array")
        return _prepare_numpy(x, np.asarray(x), name, False)
    if hasattr(x, "__dlpack__"):
        try:
            array = np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError) as error:
            device = getattr(x, "__dlpack_device__", lambda: None)()
            if device is not None and device[0] != 1:
                why = ("chorus takes GPU arrays from torch, CuPy and JAX only" if
                       _chorus.gpu_backend else "chorus was built without a GPU backend")
                raise _chorus.UnsupportedError(
                    f"{name} ({type(x).__name__}) lives on DLPack device {device}; {why}: move "
                    "it to the CPU first") from error
            raise _chorus.InvalidArgumentError(f"{name} could not be imported through DLPack: "
                                               f"{error}") from error
        if writable:
            raise _chorus.InvalidArgumentError(
                f"{name} ({type(x).__name__}) is imported as NumPy; inplace=True needs a NumPy "
                "array or a torch tensor")
        return _prepare_numpy(array, array, name, False)
    raise _not_an_array(x, name)


def check(x, name):
    """Raises the error that prepare(x, name) raises for what is not an array chorus takes (of
    another kind, or of a dtype or device it does not support), without wrapping x: a nest checks
    all its leaves first, naming each by its path. Objects with __dlpack__ are prepare's to judge.
    """
    if isinstance(x, (np.ndarray, np.generic)):
        _numpy_dtype(x.dtype, name)
        return
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        _torch_dtype(torch, x, name)
        return
    if not hasattr(x, "__dlpack__"):
        raise _not_an_array(x, name)


def _not_an_array(x, name):
    return _chorus.InvalidArgumentError(
        f"{name} must be a NumPy array, a torch tensor or an object with __dlpack__, not "
        f"{type(x).__name__}")


def _numpy_dtype(dtype, name):
    """chorus's name of a NumPy dtype, or of its native-endian twin; an error naming `name` for
    the others."""
    chorus_name = _NUMPY_DTYPES.get(dtype)
    if chorus_name is None:
        chorus_name = None if dtype.isnative else _NUMPY_DTYPES.get(dtype.newbyteorder("="))
        if chorus_name is None:
            raise _unsupported_dtype(name, dtype.name)
    return chorus_name


def _prepare_numpy(original, array, name, writable):
    dtype = _numpy_dtype(array.dtype, name)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if writable and not original.flags.writeable:
        raise _chorus.InvalidArgumentError(
            f"{name} is read-only; chorus writes the result into it (inplace=True or out=), so "
            "it must be writable")
    if not array.flags.c_contiguous or not array.flags.writeable:
        # DLPack cannot export read-only arrays; a contiguous copy also fixes strides.
        array = np.array(array, order="C", copy=True)
    return Buffer(original, array, False, dtype)


def _torch_dtype(torch, x, name):
    """chorus's name of the tensor x's dtype; an error naming `name` for a device or dtype chorus
    does not take."""
    if x.device.type != "cpu" and not (x.device.type == "cuda" and _chorus.gpu_backend):
        raise _chorus.UnsupportedError(
            f"{name} is a {x.device} tensor; this chorus was built without a GPU backend "
            "(CHORUS_WITH_NCCL), so only CPU tensors are supported (use .cpu())")
    dtype = _torch_dtypes(torch).get(x.dtype)
    if dtype is None:
        raise _unsupported_dtype(name, str(x.dtype).replace("torch.", ""))
    return dtype


def _prepare_torch(torch, x, name):
    dtype = _torch_dtype(torch, x, name)
    array = x.detach()  # the same memory
    if array.is_conj() or array.is_neg():
        # A lazy conjugation (x.conj()) or negation: its memory holds other values than it reads
        # as, and torch 1.13 exports that memory through DLPack as it is.
        return Buffer(x, array.resolve_conj().resolve_neg(), True, dtype)
    if array.is_contiguous():
        return Buffer(x, array, True, dtype, shares=True)
    return Buffer(x, array.contiguous(), True, dtype)


def dtype_of(spec):
    """(framework, framework dtype, chorus name) for a dtype given as a string, NumPy dtype or
    torch dtype; used by recv."""
    torch = _torch()
    if torch is not None and isinstance(spec, torch.dtype):
        name = _torch_dtypes(torch).get(spec)
        if name is None:
            raise _unsupported_dtype("dtype", str(spec))
        return "torch", spec, name
    if spec is None:  # np.dtype(None) is float64: a default the caller did not ask for
        raise _chorus.InvalidArgumentError(
            "dtype None is not a dtype; use one of " + ", ".join(SUPPORTED_DTYPES))
    if spec == "bfloat16":
        raise _chorus.InvalidArgumentError(
            "dtype bfloat16 needs a torch dtype (NumPy has no bfloat16): pass torch.bfloat16")
    try:
        dt = np.dtype(spec)
    except TypeError as error:
        raise _chorus.InvalidArgumentError(
            f"dtype {spec!r} is not a dtype; use one of " + ", ".join(SUPPORTED_DTYPES)) from error
    name = _NUMPY_DTYPES.get(dt)
    if name is None:
        raise _unsupported_dtype("dtype", dt.name)
    return "numpy", dt, name


def stack(buffers):
    """Stacks equal-shape buffers along a new axis 0 (same framework as the first)."""
    if buffers[0].torch:
        return _torch().stack([b.array for b in buffers])
    return np.stack([b.array for b in buffers])
