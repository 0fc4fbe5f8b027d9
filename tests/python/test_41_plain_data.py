"""The plain-data format of the object collectives (chorus/_plain_data.py, walked in C++ by
python/src/plain_data.cc), against plain_data_reference.py: the same format written out in plain
Python, one tag at a time. Every object here must encode to the reference's bytes, decode back to
an equal object of the same types, and a corrupted or truncated payload must get the same answer
from both decoders: a ValueError from each, or equal objects.

These tests need one process: at more ranks they are skipped (the world size decides skips)."""

import random

import numpy as np
import pytest
import torch

import plain_data_reference as reference
from chorus import _plain_data


@pytest.fixture(autouse=True)
def one_process(size):
    if size != 1:
        pytest.skip("one process is enough for the format")


def corpus():
    """Objects of every kind the format carries, the edge cases of each among them."""
    strided = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    return [
        None, True, False, 0, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 63, -2 ** 63 - 1, 2 ** 64,
        -(2 ** 70), 2 ** 40000, -(3 ** 9000), 0.0, -0.0, float("inf"), 1e-310, 2.5, 1 - 2j,
        "", "é ü 日本", "\ud800 lone surrogate", b"", b"\x00\xff", bytearray(b"ab"),
        [], (), {}, [1, [2, [3, (4, {"k": None})]]], (None,),
        {"epoch": 3, "lr": 1e-3, (0, "k"): {3: [b"x"]}, 7: 1.5, None: True, -2 ** 70: "big"},
        np.arange(0), np.zeros((2, 0, 3)), np.float32(1.5), np.int8(-3), np.bool_(True),
        np.complex128(1 + 1j), strided, np.array(5, np.uint64),
        *[(np.arange(6) % 3).astype(dtype).reshape(2, 3) for dtype in
          (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
           np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128)],
        np.arange(4.0).astype(">f8"),
        torch.arange(6.0).reshape(2, 3), torch.ones(3, dtype=torch.bfloat16), torch.tensor(7),
        torch.empty(0, 2), torch.arange(8)[::2], torch.tensor([1 + 2j]).conj(),
        torch.tensor([True, False]),
        {"nest": [np.arange(3), torch.zeros(2), {"deep": (np.float64(2), "t")}]},
    ]


def same(got, sent):
    """Equal and of the same types, all the way down (bytearray arrives as bytes)."""
    if isinstance(sent, bytearray):
        assert type(got) is bytes and got == sent
    elif isinstance(sent, np.ndarray) or isinstance(sent, np.generic):
        assert type(got) is type(sent) and got.dtype == sent.dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)
    elif isinstance(sent, torch.Tensor):
        assert type(got) is torch.Tensor and got.dtype == sent.dtype
        assert torch.equal(got, sent.resolve_conj())
    elif isinstance(sent, (list, tuple)):
        assert type(got) is type(sent) and len(got) == len(sent)
        for g, s in zip(got, sent):
            same(g, s)
    elif isinstance(sent, dict):
        assert type(got) is dict and list(got) == list(sent)
        for key in sent:
            same(got[key], sent[key])
    elif isinstance(sent, float) and sent != sent:
        assert got != got
    else:
        assert type(got) is type(sent) and got == sent
        if isinstance(sent, float):
            assert str(got) == str(sent)  # -0.0 stays -0.0


@pytest.mark.parametrize("index", range(len(corpus())))
def test_encodes_to_the_references_bytes_and_back(index):
    obj = corpus()[index]
    encoded = _plain_data.encode(obj, b"\x07")
    assert type(encoded) is bytearray
    assert bytes(encoded) == bytes(reference.encode(obj, b"\x07"))
    same(_plain_data.decode(memoryview(encoded)[1:]), obj)
    same(reference.decode(memoryview(encoded)[1:]), obj)


def outcome(decode, data):
    """What `decode` makes of `data`: ("object", its reference encoding) or ("ValueError",)."""
    try:
        obj = decode(data)
    except ValueError:
        return ("ValueError",)
    return ("object", bytes(reference.encode(obj)))


def test_corrupted_payloads_get_the_references_answer():
    """Every truncation and many single-byte changes of a payload that holds every tag: both
    decoders raise ValueError, or both return the same object (no other exception, and no
    allocation that the bytes do not back: counts past the payload are refused first)."""
    good = bytes(_plain_data.encode(
        {"a": [1, 2 ** 80, 2.5, 1j, "xyz", b"q", np.arange(3), np.int8(4), (None, True, False)],
         "t": torch.ones(2)}))
    changed = random.Random(41)
    payloads = [good[:cut] for cut in range(len(good))]
    payloads += [good[:i] + bytes([changed.randrange(256)]) + good[i + 1:]
                 for i in range(len(good)) for _ in range(6)]
    payloads += [good + b"N", b"l" + (1 << 62).to_bytes(8, "little"),
                 b"d" + (1 << 40).to_bytes(8, "little") + b"NN", b"I" + bytes(8),
                 b"a" + (2).to_bytes(8, "little") + b"<f" + (65).to_bytes(8, "little"),
                 b"l" + (101).to_bytes(8, "little") + b"l" + (1).to_bytes(8, "little") + b"N"]
    mine = [outcome(_plain_data.decode, data) for data in payloads]
    theirs = [outcome(reference.decode, data) for data in payloads]
    differ = [(data, m, t) for data, m, t in zip(payloads, mine, theirs) if m != t]
    assert not differ, differ[:3]
    assert ("ValueError",) in mine and sum(m[0] == "object" for m in mine) > 10


def test_nesting_past_the_limit_is_refused_both_ways():
    deep = None
    for _ in range(_plain_data.MAX_DEPTH):
        deep = [deep]
    same(_plain_data.decode(_plain_data.encode(deep)), deep)  # 100 lists deep: the limit
    with pytest.raises(TypeError, match=r"the object(\[0\]){101} is nested more than 100 deep"):
        _plain_data.encode([deep])
    with pytest.raises(ValueError, match="nested more than 100 deep"):
        _plain_data.decode(b"l" + (1).to_bytes(8, "little") + bytes(reference.encode(deep)))


class Point:
    pass


@pytest.mark.parametrize("obj, where", [
    (Point(), "the object is a test_41_plain_data.Point"),
    ([1, {"k": (2, Point())}], r"the object\[1\]\['k'\]\[1\] is a test_41_plain_data.Point"),
    ({(1, Point()): 2}, r"a key of the object\[1\] is a test_41_plain_data.Point"),
    ({"a": {1.5: {Point()}}}, r"the object\['a'\]\[1.5\] is a builtins.set"),
    ([np.array(["text"])], r"the object\[0\] is a NumPy array of dtype <U4"),
    (np.arange(3).astype(object), "the object is a NumPy array of dtype object"),
    ({"t": np.datetime64("2026-12-07")}, r"the object\['t'\] is a NumPy scalar of dtype "
                                         r"datetime64\[D\]"),
    (np.zeros(2, [("a", "i4")]), r"the object is a NumPy array of dtype \[\('a', '<i4'\)\]"),
])
def test_what_does_not_travel_is_named_where_it_stands(obj, where):
    with pytest.raises(TypeError, match=where + ", which chorus does not send"):
        _plain_data.encode(obj)


def _leaf(tag, dtype, shape, values=b""):
    u64 = lambda n: n.to_bytes(8, "little")  # noqa: E731
    return tag + u64(len(dtype)) + dtype + u64(len(shape)) + b"".join(map(u64, shape)) + \
        u64(len(values)) + values


@pytest.mark.parametrize("payload", [
    _leaf(b"a", b"<f8", [0, 2 ** 64 - 1]), _leaf(b"p", b"float32", [0, 2 ** 63]),
    _leaf(b"p", b"qint8", []), _leaf(b"p", b"quint4x2", [], b"\0"),
    _leaf(b"p", b"bits8", [], b"\0"), _leaf(b"p", b"half", [1], b"\0\0"), _leaf(b"a", b"<f4", [1] * 33, b"\0" * 4),
], ids=["extent 2^64-1", "tensor extent 2^63", "qint8", "quint4x2", "bits8", "torch alias half",
        "33 dimensions"])
def test_a_malformed_leaf_is_a_value_error(payload):
    """Leaves the corruption test does not reach: before, torch.empty raised TypeError on an
    extent past int64, and asserted (RuntimeError) on a quantized dtype."""
    with pytest.raises(ValueError, match="malformed object|dimension"):
        _plain_data.decode(payload)


def test_the_garbage_collector_never_sees_a_container_half_built():
    """A tuple or list is made once its items are decoded: Python runs while they are (a leaf's
    _build), and a collection then walked every tracked object, a tuple with NULL slots among them
    (a gc callback touching one crashed the process)."""
    import gc
    payload = bytes(_plain_data.encode(tuple([np.arange(3)] * 50) + ("last",)))
    touched = []

    def walk(phase, info):
        if phase == "stop":
            for obj in gc.get_objects():
                if type(obj) is tuple and len(obj) == 51:
                    touched.append(obj[50].upper())

    threshold = gc.get_threshold()
    gc.callbacks.append(walk)
    gc.set_threshold(1, 1, 1)
    try:
        got = _plain_data.decode(payload)
    finally:
        gc.callbacks.remove(walk)
        gc.set_threshold(*threshold)
    assert got[50] == "last" and all(t == "LAST" for t in touched)


def test_a_leafs_values_hold_the_payload():
    """The values handed to a leaf's builder are a slice of a memoryview that holds the payload:
    one kept past the decode (in the traceback of a refused leaf) still reads the payload's
    bytes, and the payload cannot be resized under it."""
    payload = bytearray(_leaf(b"a", b"<f8", [3], b"SECRET__SECRET__"))
    with pytest.raises(ValueError, match="do not fill its shape") as raised:
        _plain_data.decode(payload)
    frame = raised.tb
    while frame.tb_next:
        frame = frame.tb_next
    kept = frame.tb_frame.f_locals["values"]
    with pytest.raises(BufferError):
        payload.extend(bytes(1 << 20))
    assert bytes(kept) == b"SECRET__SECRET__"
