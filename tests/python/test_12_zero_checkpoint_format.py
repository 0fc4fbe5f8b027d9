"""The sharded checkpoint files of chorus.torch.ZeroOptimizer (python/chorus/torch/_checkpoint.py),
in one process: shards written at 4 ranks read back at 4, 2, 3 and 1 ranks, consolidation into a
state dict, the file format, atomic writes, and every error a bad checkpoint directory gives.

Expected values are the full arrays the test generates; each rank's pieces come from a layout
written here independently of chorus (parameters grouped into units, each unit cut into N equal
chunks, the last one short)."""

import inspect
import json
import math
import os
import struct

import numpy as np
import pytest
import torch

from chorus.torch import _checkpoint

PARAMETERS = [
    {"name": "0.weight", "shape": [16, 64], "dtype": "bfloat16"},
    {"name": "0.bias", "shape": [16], "dtype": "float32"},
    {"name": "1.scale", "shape": [], "dtype": "float32"},
    {"name": "2.weight", "shape": [3, 5, 7], "dtype": "bfloat16"},
    {"name": "2.empty", "shape": [0, 4], "dtype": "float32"},
    {"name": "3.weight", "shape": [10, 3], "dtype": "float32"},
    {"name": "3.bias", "shape": [1], "dtype": "float32"},
]
UNITS = [[0, 1], [2, 3, 4], [5, 6]]  # parameter indices grouped as the optimizer might
NAMES = ["param", "exp_avg", "exp_avg_sq"]
META = {"optimizer": "adam", "stage": 2, "step": 7,
        "hyperparameters": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-08}}


def numel(parameter):
    return math.prod(parameter["shape"])


def layout(world_size, parameters=PARAMETERS, units=UNITS):
    """pieces[rank]: each unit's concatenated elements cut into world_size chunks of
    ceil(unit / world_size), rank r taking chunk r of every unit, the last chunks short."""
    pieces = [[] for _ in range(world_size)]
    for unit in units:
        total = sum(numel(parameters[i]) for i in unit)
        chunk = -(-total // world_size)
        for rank in range(world_size):
            begin, end = rank * chunk, min((rank + 1) * chunk, total)
            unit_offset = 0
            for index in unit:
                size = numel(parameters[index])
                low, high = max(begin, unit_offset), min(end, unit_offset + size)
                if low < high:
                    pieces[rank].append((index, low - unit_offset, high - low))
                unit_offset += size
    return pieces


def reference(seed=0, parameters=PARAMETERS, names=NAMES):
    """{array name: [full float32 values of each parameter, flattened]}"""
    generator = np.random.default_rng(seed)
    return {name: [generator.standard_normal(numel(p)).astype(np.float32) for p in parameters]
            for name in names}


def gather(full, pieces):
    """The values of `pieces` back to back, taken from the reference arrays."""
    return {name: np.concatenate([np.zeros(0, np.float32)] +
                                 [values[i][offset:offset + n] for i, offset, n in pieces])
            for name, values in full.items()}


def save(directory, world_size, full, parameters=PARAMETERS, meta=META):
    for rank, pieces in enumerate(layout(world_size, parameters)):
        _checkpoint.write_shard(directory, rank, world_size, parameters, pieces,
                                gather(full, pieces), meta)


def rewrite_header(path, change):
    """Rewrites the file's header through change(header), keeping the data."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    change(header)
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + data)


def shard(directory, rank, world_size):
    return os.path.join(directory, f"shard-{rank:05d}-of-{world_size:05d}.chorus")


@pytest.mark.parametrize("read_world_size", [4, 2, 3, 1])
def test_reads_back_exactly_at_any_world_size(tmp_path, read_world_size):
    full = reference()
    save(tmp_path, 4, full)
    for pieces in layout(read_world_size):
        arrays, meta = _checkpoint.read_pieces(tmp_path, PARAMETERS, pieces)
        expected = gather(full, pieces)
        assert sorted(arrays) == sorted(NAMES)
        for name in NAMES:
            assert arrays[name].dtype == np.float32
            np.testing.assert_array_equal(arrays[name], expected[name])
        assert meta == META


def test_reads_any_pieces_and_selected_names(tmp_path):
    full = reference(seed=1)
    save(tmp_path, 3, full)
    # Whole parameters in reverse, then ragged runs crossing the stored pieces' boundaries.
    pieces = [(i, 0, numel(p)) for i, p in reversed(list(enumerate(PARAMETERS)))]
    pieces += [(0, 5, 700), (0, 1000, 24), (3, 1, 100), (2, 0, 1), (5, 29, 1), (6, 0, 0)]
    arrays, _ = _checkpoint.read_pieces(tmp_path, PARAMETERS, pieces, names=["exp_avg"])
    assert list(arrays) == ["exp_avg"]
    np.testing.assert_array_equal(arrays["exp_avg"], gather(full, pieces)["exp_avg"])


def test_ranks_with_no_elements(tmp_path):
    parameters = [{"name": "a", "shape": [3], "dtype": "float32"}]
    full = reference(seed=8, parameters=parameters, names=["param"])
    for rank, pieces in enumerate(layout(5, parameters, units=[[0]])):
        _checkpoint.write_shard(tmp_path, rank, 5, parameters, pieces, gather(full, pieces), {})
    for pieces in layout(2, parameters, units=[[0]]):
        arrays, meta = _checkpoint.read_pieces(tmp_path, parameters, pieces)
        np.testing.assert_array_equal(arrays["param"], gather(full, pieces)["param"])
        assert meta == {}


def test_dtype_differences_are_allowed(tmp_path):
    full = reference(seed=2)
    save(tmp_path, 2, full)
    as_float32 = [dict(p, dtype="float32") for p in PARAMETERS]
    pieces = layout(1)[0]
    arrays, _ = _checkpoint.read_pieces(tmp_path, as_float32, pieces, names=["param"])
    np.testing.assert_array_equal(arrays["param"], gather(full, pieces)["param"])


def test_consolidate_then_load_state_dict(tmp_path):
    full = reference(seed=3)
    save(tmp_path / "shards", 4, full)
    output = _checkpoint.consolidate(tmp_path / "shards", tmp_path / "model.chorus")
    assert str(output) == str(tmp_path / "model.chorus")

    state = _checkpoint.load_state_dict(output)
    assert list(state) == [p["name"] for p in PARAMETERS]
    for index, parameter in enumerate(PARAMETERS):
        expected = torch.from_numpy(full["param"][index]).reshape(parameter["shape"])
        expected = expected.to(getattr(torch, parameter["dtype"]))
        assert state[parameter["name"]].dtype == expected.dtype
        assert torch.equal(state[parameter["name"]], expected)

    master = _checkpoint.load_state_dict(output, with_optimizer_state=True, cast=False)
    assert list(master) == [f"{prefix}{p['name']}" for prefix in ("", "exp_avg/", "exp_avg_sq/")
                            for p in PARAMETERS]
    for name in NAMES:
        for index, parameter in enumerate(PARAMETERS):
            key = parameter["name"] if name == "param" else f"{name}/{parameter['name']}"
            assert master[key].dtype == torch.float32
            assert list(master[key].shape) == parameter["shape"]
            assert torch.equal(master[key].flatten(), torch.from_numpy(full[name][index]))


def test_state_dict_loads_into_a_torch_model(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    parameters = [{"name": name, "shape": list(p.shape), "dtype": "float32"}
                  for name, p in model.named_parameters()]
    full = {"param": [p.detach().flatten().numpy().copy() for p in model.parameters()],
            "momentum_buffer": [np.ones(p.numel(), np.float32) for p in model.parameters()]}
    for rank, pieces in enumerate(layout(2, parameters, units=[[0, 1, 2, 3]])):
        _checkpoint.write_shard(tmp_path, rank, 2, parameters, pieces, gather(full, pieces),
                                {"optimizer": "sgd"})
    path = _checkpoint.consolidate(tmp_path, tmp_path / "model.chorus")
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    result = fresh.load_state_dict(_checkpoint.load_state_dict(path), strict=False)
    assert not result.missing_keys and not result.unexpected_keys
    for mine, theirs in zip(fresh.parameters(), model.parameters()):
        assert torch.equal(mine, theirs)


def test_file_is_a_json_header_and_raw_float32(tmp_path):
    full = reference(seed=4)
    save(tmp_path, 2, full)
    pieces = layout(2)[1]
    with open(shard(tmp_path, 1, 2), "rb") as f:
        contents = f.read()
    (length,) = struct.unpack("<Q", contents[:8])
    header_bytes = contents[8:8 + length]
    header_bytes.decode("ascii")  # JSON text only: no binary (serialised-object) opcodes
    header = json.loads(header_bytes)
    assert header["format"] == "chorus-zero-shard" and header["version"] == 1
    assert (header["rank"], header["world_size"], header["meta"]) == (1, 2, META)
    assert header["parameters"] == PARAMETERS
    assert [tuple(piece) for piece in header["pieces"]] == pieces
    data = contents[8 + length:]
    expected = gather(full, pieces)
    total = sum(n for _, _, n in pieces)
    assert len(data) == total * 4 * len(NAMES)
    for name in NAMES:
        entry = header["arrays"][name]
        assert entry["numel"] == total
        stored = np.frombuffer(data, dtype="<f4", count=total, offset=entry["offset"])
        np.testing.assert_array_equal(stored, expected[name])
    assert "pickle" not in inspect.getsource(_checkpoint)


def test_writes_leave_no_temporary_files(tmp_path):
    save(tmp_path, 3, reference(seed=5))
    _checkpoint.consolidate(tmp_path, tmp_path / "model.chorus")
    expected = {f"shard-{r:05d}-of-00003.chorus" for r in range(3)} | {"model.chorus"}
    assert set(os.listdir(tmp_path)) == expected


def test_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    old, new = reference(seed=6), reference(seed=7)
    save(tmp_path, 1, old)

    def crash(source, destination):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        save(tmp_path, 1, new)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["shard-00000-of-00001.chorus"]
    arrays, _ = _checkpoint.read_pieces(tmp_path, PARAMETERS, layout(1)[0])
    np.testing.assert_array_equal(arrays["param"], gather(old, layout(1)[0])["param"])


def read_error(directory, parameters=PARAMETERS, pieces=None, names=None):
    with pytest.raises(ValueError) as raised:
        _checkpoint.read_pieces(directory, parameters, layout(1)[0] if pieces is None else pieces,
                                names)
    return str(raised.value)


def test_missing_directory_and_missing_rank_file(tmp_path):
    assert "does not exist" in read_error(tmp_path / "nowhere")
    save(tmp_path, 4, reference())
    os.remove(shard(tmp_path, 2, 4))
    message = read_error(tmp_path)
    assert "rank 2" in message and "shard-00002-of-00004.chorus" in message
    assert "missing" in message


def test_world_sizes_disagreeing(tmp_path):
    save(tmp_path, 4, reference())
    save(tmp_path, 2, reference())
    message = read_error(tmp_path)
    assert "world sizes [2, 4]" in message and "disagree" in message


def test_parameter_table_differs(tmp_path):
    save(tmp_path, 2, reference())
    reshaped = [dict(p) for p in PARAMETERS]
    reshaped[3]["shape"] = [5, 3, 7]
    message = read_error(tmp_path, reshaped)
    assert "parameter 3" in message and "[3, 5, 7]" in message and "[5, 3, 7]" in message
    renamed = [dict(p) for p in PARAMETERS]
    renamed[1]["name"] = "0.beta"
    message = read_error(tmp_path, renamed)
    assert "parameter 1" in message and "'0.bias'" in message and "'0.beta'" in message
    message = read_error(tmp_path, PARAMETERS[:-1], pieces=[])
    assert "has 7 parameters, the caller has 6" in message


def test_truncated_file(tmp_path):
    save(tmp_path, 2, reference())
    path = shard(tmp_path, 1, 2)
    size = os.path.getsize(path)
    os.truncate(path, size - 4)
    message = read_error(tmp_path)
    assert "truncated" in message and "shard-00001-of-00002.chorus" in message
    os.truncate(path, 5)
    assert "truncated" in read_error(tmp_path)


def test_bad_format_and_version(tmp_path):
    save(tmp_path, 2, reference())
    path = shard(tmp_path, 0, 2)
    rewrite_header(path, lambda header: header.update(version=99))
    message = read_error(tmp_path)
    assert "version 99" in message and "shard-00000-of-00002.chorus" in message
    rewrite_header(path, lambda header: header.update(format="safetensors"))
    message = read_error(tmp_path)
    assert "'safetensors'" in message and "format" in message
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 12) + b"\x80\x04not json" + b"\0" * 64)
    assert "not a chorus checkpoint" in read_error(tmp_path)


def test_missing_array(tmp_path):
    save(tmp_path, 2, reference())
    message = read_error(tmp_path, names=["param", "momentum_buffer"])
    assert "'momentum_buffer'" in message and "no array" in message


def test_uncovered_element(tmp_path):
    full = reference()
    pieces = layout(2)
    pieces[1] = [piece for piece in pieces[1] if piece[0] != 5]  # drop rank 1's part of 3.weight
    for rank in range(2):
        _checkpoint.write_shard(tmp_path, rank, 2, PARAMETERS, pieces[rank],
                                gather(full, pieces[rank]), META)
    first_lost = min(offset for index, offset, _ in layout(2)[1] if index == 5)
    message = read_error(tmp_path, pieces=[(5, 0, 30)])
    assert f"element {first_lost} of parameter 5 ('3.weight') is not covered" in message
    arrays, _ = _checkpoint.read_pieces(tmp_path, PARAMETERS, [(5, 0, first_lost)])
    np.testing.assert_array_equal(arrays["param"], full["param"][5][:first_lost])


def test_write_shard_rejects_bad_arrays(tmp_path):
    pieces = layout(2)[0]
    arrays = gather(reference(), pieces)
    total = len(arrays["param"])
    cases = [
        (dict(arrays, exp_avg=arrays["exp_avg"][:-1]), f"'exp_avg' has shape [{total - 1}]"),
        (dict(arrays, param=arrays["param"].astype(np.float64)), "float64, not a float32"),
        (dict(arrays, param=arrays["param"].reshape(1, -1)), f"shape [1, {total}]"),
    ]
    for bad, words in cases:
        with pytest.raises(ValueError, match=words.replace("[", r"\[")):
            _checkpoint.write_shard(tmp_path, 0, 2, PARAMETERS, pieces, bad, META)
    with pytest.raises(ValueError, match="outside its parameter"):
        _checkpoint.write_shard(tmp_path, 0, 2, PARAMETERS, [(1, 10, 7)], arrays, META)
    with pytest.raises(ValueError, match="0 <= rank < world_size"):
        _checkpoint.write_shard(tmp_path, 2, 2, PARAMETERS, pieces, arrays, META)
    assert os.listdir(tmp_path) == []
