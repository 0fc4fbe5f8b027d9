"""A reference for the tests: chorus's plain-data format (chorus/_plain_data.py describes it)
written out in plain Python, one tag at a time, as chorus itself encoded and decoded objects
before python/src/plain_data.cc took over the walk. test_41_plain_data.py compares the two: the
same bytes for every object, and the same answer (a ValueError, or an equal object) for every
corrupted payload. It is slow (4-150 us an object), and it is not used outside the tests.
"""

import math
import re
import struct
import sys

import numpy as np

MAX_DEPTH = 100
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_C128 = struct.Struct("<dd")
_ARRAY_KINDS = "biufc"  # bool, signed, unsigned, float, complex: no object or string dtypes
_DTYPE_STR = re.compile(r"[<>|=][biufc](?:1|2|4|8|16)")
_WHAT_TRAVELS = ("None, bool, int, float, complex, str, bytes, list, tuple, dict, NumPy arrays "
                 "and scalars, and torch tensors")


def _torch():
    return sys.modules.get("torch")


def encode(obj, prefix=b""):
    """`prefix`, then `obj`, as one bytearray; TypeError for what does not travel (see the module
    doc)."""
    out = bytearray(prefix)
    _encode(obj, out, "the object", 0)
    return out


def _encode(obj, out, path, depth):
    if depth > MAX_DEPTH:
        raise TypeError(f"{path} is nested more than {MAX_DEPTH} deep")
    kind = type(obj)
    if obj is None:
        out += b"N"
    elif kind is bool:
        out += b"T" if obj else b"F"
    elif kind is int:
        if -(1 << 63) <= obj < (1 << 63):
            out += b"i" + _I64.pack(obj)
        else:
            _encode_bytes(b"I", obj.to_bytes(obj.bit_length() // 8 + 1, "little", signed=True),
                          out)
    elif kind is float:
        out += b"f" + _F64.pack(obj)
    elif kind is complex:
        out += b"c" + _C128.pack(obj.real, obj.imag)
    elif kind is str:
        _encode_bytes(b"s", obj.encode("utf-8", "surrogatepass"), out)
    elif kind in (bytes, bytearray):
        _encode_bytes(b"b", obj, out)
    elif kind in (list, tuple):
        out += (b"l" if kind is list else b"t") + _U64.pack(len(obj))
        for i, item in enumerate(obj):
            _encode(item, out, f"{path}[{i}]", depth + 1)
    elif kind is dict:
        out += b"d" + _U64.pack(len(obj))
        for key, value in obj.items():
            _encode(key, out, f"a key of {path}", depth + 1)
            _encode(value, out, f"{path}[{key!r}]", depth + 1)
    elif isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in _ARRAY_KINDS:
        array = np.asarray(obj)  # a scalar as a 0-d array (ascontiguousarray would make it 1-d)
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        out += b"a" if isinstance(obj, np.ndarray) else b"g"
        _encode_bytes(b"", array.dtype.str.encode(), out)
        _encode_shape(array.shape, out)
        _encode_bytes(b"", memoryview(array).cast("B") if array.size else b"", out)
    elif _torch() is not None and isinstance(obj, _torch().Tensor) and obj.layout == \
            _torch().strided and not obj.is_quantized:
        tensor = obj.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
        _encode_bytes(b"p", str(tensor.dtype).replace("torch.", "").encode(), out)
        _encode_shape(tuple(tensor.shape), out)
        _encode_bytes(b"", tensor.reshape(-1).view(_torch().uint8).numpy().tobytes()
                      if tensor.numel() else b"", out)
    else:
        raise TypeError(f"{path} is a {kind.__module__}.{kind.__qualname__}, which chorus does "
                        f"not send: objects travel as plain data ({_WHAT_TRAVELS}), never "
                        "pickled (DESIGN §8)")


def _encode_bytes(tag, data, out):
    out += tag + _U64.pack(len(data))
    out += data


def _encode_shape(shape, out):
    out += _U64.pack(len(shape))
    for extent in shape:
        out += _U64.pack(extent)


def decode(data):
    """The object that encode() wrote into `data` (bytes-like); ValueError if it is malformed."""
    reader = _Reader(memoryview(data).cast("B"))
    obj = reader.value(0)
    if reader.at != len(reader.data):
        raise ValueError(f"malformed object: {len(reader.data) - reader.at} bytes after its end")
    return obj


class _Reader:
    __slots__ = ("data", "at")

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n, what):
        if n > len(self.data) - self.at:
            left = len(self.data) - self.at
            raise ValueError(f"malformed object: {what} needs {n} bytes, {left} are left")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def unpack(self, layout, what):
        return layout.unpack(self.take(layout.size, what))

    def count(self, what):
        return self.unpack(_U64, what)[0]

    def blob(self, what):
        return self.take(self.count(what), what)

    def shape(self):
        dims = self.count("a shape")
        if dims > 64:
            raise ValueError(f"malformed object: an array of {dims} dimensions")
        return tuple(self.count("an extent") for _ in range(dims))

    def value(self, depth):
        if depth > MAX_DEPTH:
            raise ValueError(f"malformed object: nested more than {MAX_DEPTH} deep")
        tag = bytes(self.take(1, "a tag"))
        simple = {b"N": None, b"T": True, b"F": False}
        if tag in simple:
            return simple[tag]
        if tag == b"i":
            return self.unpack(_I64, "an int")[0]
        if tag == b"I":
            raw = bytes(self.blob("an int"))
            if not raw:
                raise ValueError("malformed object: an int of no bytes")
            return int.from_bytes(raw, "little", signed=True)
        if tag == b"f":
            return self.unpack(_F64, "a float")[0]
        if tag == b"c":
            return complex(*self.unpack(_C128, "a complex"))
        if tag == b"s":
            return str(self.blob("a str"), "utf-8", "surrogatepass")
        if tag == b"b":
            return bytes(self.blob("bytes"))
        if tag in (b"l", b"t"):
            items = [self.value(depth + 1) for _ in range(self.count("a list"))]
            return items if tag == b"l" else tuple(items)
        if tag == b"d":
            return self.mapping(depth)
        if tag in (b"a", b"g"):
            return self.array(tag == b"g")
        if tag == b"p":
            return self.tensor()
        raise ValueError(f"malformed object: unknown tag {tag!r}")

    def mapping(self, depth):
        result = {}
        for _ in range(self.count("a dict")):
            key = self.value(depth + 1)
            try:
                result[key] = self.value(depth + 1)
            except TypeError as error:  # an unhashable key (a list)
                raise ValueError(f"malformed object: a dict key: {error}") from None
        return result

    def array(self, scalar):
        name = str(self.blob("a dtype"), "ascii")
        # Only a plain dtype.str ("<f4", "|b1"): NumPy's parser takes much more (subarrays, field
        # lists) and raises other errors on what it does not take.
        if not _DTYPE_STR.fullmatch(name):
            raise ValueError(f"malformed object: an array of dtype {name!r}")
        dtype = np.dtype(name)
        if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
            raise ValueError(f"malformed object: an array of dtype {dtype}")
        shape = self.shape()
        raw = self.blob("an array's values")
        if len(raw) != dtype.itemsize * math.prod(shape):
            raise ValueError("malformed object: an array whose bytes do not fill its shape")
        array = np.frombuffer(raw, dtype).reshape(shape).copy()  # the one copy, out of `data`
        return array[()] if scalar else array

    def tensor(self):
        import torch  # a tensor was sent, so the sender had torch
        name = str(self.blob("a tensor dtype"), "ascii")
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"malformed object: a tensor of dtype {name!r}")
        shape = self.shape()
        raw = bytes(self.blob("a tensor's values"))
        if len(raw) != torch.empty((), dtype=dtype).element_size() * math.prod(shape):
            raise ValueError("malformed object: a tensor whose bytes do not fill its shape")
        empty = torch.empty(shape, dtype=dtype)
        if raw:
            values = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            empty.view(-1).view(torch.uint8).copy_(values)
        return empty
