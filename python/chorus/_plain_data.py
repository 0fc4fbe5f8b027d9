"""Plain data to bytes and back, for the object collectives (_objects.py).

DESIGN §8: nothing is unpickled. A pickle runs code while it loads, so a rank that took pickles
from its peers would run whatever a peer (or anyone who reached the job's sockets) sent. Objects
travel in this format instead: it carries data only, and decode() checks every tag, length and
count against the bytes it has, so a malformed payload is a ValueError, never code.

What travels: None, bool, int (any size), float, complex, str, bytes (bytearray arrives as bytes),
list, tuple, dict (keys of these types), NumPy arrays and scalars of bool, integer, float and
complex dtypes, and torch tensors (their values, as CPU tensors of the same dtype and shape).
Only these exact types: a subclass (an IntEnum, an OrderedDict, a namedtuple) does not travel.
Anything else is a TypeError naming where in the object it stands and its type. Nesting deeper
than MAX_DEPTH is refused both ways.

Format: one tag byte per value, then its fields, little-endian: counts and lengths are uint64;
an int is an int64 ('i') or, past int64, its two's complement in as many bytes as it takes
('I', a length and the bytes); an array, a NumPy scalar or a tensor ('a', 'g', 'p') is its dtype
(NumPy's dtype.str, or torch's name), its shape (a count and the extents), and its values.

The walk over the containers and scalars is C++ (_chorus.encode_plain and decode_plain,
python/src/plain_data.cc: about 10-50 times faster than it was in Python). Arrays and tensors are
the leaves, described and built here (_describe and _build). tests/python/plain_data_reference.py
is the format written out in Python, which the tests compare against.
"""

import math
import re
import sys

import numpy as np

from . import _chorus

MAX_DEPTH = 100  # plain_data.cc's kMaxDepth
_ARRAY_KINDS = "biufc"  # bool, signed, unsigned, float, complex: no object or string dtypes
_DTYPE_STR = re.compile(r"[<>|=][biufc](?:1|2|4|8|16)")


def _torch():
    return sys.modules.get("torch")


def encode(obj, prefix=b""):
    """`prefix`, then `obj`, as one bytearray; TypeError for what does not travel (see the module
    doc)."""
    return _chorus.encode_plain(obj, bytes(prefix), _describe)


def decode(data):
    """The object that encode() wrote into `data` (bytes-like); ValueError if it is malformed."""
    return _chorus.decode_plain(data, _build)


def _describe(obj):
    """(tag, dtype name, shape, values) of an array, NumPy scalar or tensor; for one of a dtype
    that does not travel, why (the end of the TypeError's message); None for anything else."""
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind not in _ARRAY_KINDS:
        what = "a NumPy array" if isinstance(obj, np.ndarray) else "a NumPy scalar"
        return (f"{what} of dtype {obj.dtype}, which chorus does not send: arrays travel with "
                "bool, integer, float and complex dtypes (send a string array as a list of str, "
                "a datetime64 one as int64 with .view('int64'), a structured one field by field)")
    if isinstance(obj, (np.ndarray, np.generic)):
        array = np.asarray(obj)  # a scalar as a 0-d array (ascontiguousarray would make it 1-d)
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        values = memoryview(array).cast("B") if array.size else b""
        return ("a" if isinstance(obj, np.ndarray) else "g", array.dtype.str.encode(),
                array.shape, values)
    torch = _torch()
    if torch is not None and isinstance(obj, torch.Tensor) and obj.layout == torch.strided \
            and not obj.is_quantized:
        name = str(obj.dtype).replace("torch.", "")
        if name not in _TENSOR_DTYPES:
            return f"a torch tensor of dtype {name}, which chorus does not send"
        tensor = obj.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
        values = tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else b""
        return "p", name.encode(), tuple(tensor.shape), values
    return None


def _build(tag, name, shape, values):
    """The array (tag 'a'), NumPy scalar ('g') or tensor ('p') of dtype `name` (bytes), `shape`
    and `values` (a memoryview of the payload, copied here); ValueError if they do not fit."""
    if tag == "p":
        return _tensor(name, shape, values)
    name = str(name, "ascii", "replace")
    # Only a plain dtype.str ("<f4", "|b1"): NumPy's parser takes much more (subarrays, field
    # lists) and raises other errors on what it does not take.
    if not _DTYPE_STR.fullmatch(name):
        raise ValueError(f"malformed object: an array of dtype {name!r}")
    dtype = np.dtype(name)
    if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
        raise ValueError(f"malformed object: an array of dtype {dtype}")
    if len(values) != dtype.itemsize * math.prod(shape):
        raise ValueError("malformed object: an array whose bytes do not fill its shape")
    array = np.frombuffer(values, dtype).reshape(shape).copy()  # the one copy, out of the payload
    return array[()] if tag == "g" else array


# The dtypes a tensor travels with (quantized ones are refused when sent; their names here would
# reach torch.empty, which asserts).
_TENSOR_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
                  "float16", "bfloat16", "float32", "float64", "complex32", "complex64",
                  "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                  "float8_e5m2fnuz")


def _tensor(name, shape, values):
    try:
        import torch  # a tensor was sent, so the sender had torch
    except ImportError:
        raise ValueError("malformed object: a torch tensor, and torch cannot be imported "
                         "here") from None
    name = str(name, "ascii", "replace")
    dtype = getattr(torch, name, None) if name in _TENSOR_DTYPES else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"malformed object: a tensor of dtype {name!r}")
    if len(values) != torch.empty((), dtype=dtype).element_size() * math.prod(shape):
        raise ValueError("malformed object: a tensor whose bytes do not fill its shape")
    tensor = torch.empty(shape, dtype=dtype)
    if len(values):
        tensor.view(-1).view(torch.uint8).numpy()[:] = np.frombuffer(values, np.uint8)
    return tensor
