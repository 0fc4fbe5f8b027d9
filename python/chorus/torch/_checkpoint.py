"""Files of ZeRO sharded checkpoints: one file per rank, read back at any world size.

Each file (safetensors-like, plain data only: reading one never runs code) is
    8 bytes   little-endian unsigned length H of the header
    H bytes   UTF-8 JSON header, padded with spaces to a multiple of 8 bytes
    the rest  raw little-endian float32 data
A rank's file `shard-RRRRR-of-NNNNN.chorus` has the header {"format": "chorus-zero-shard",
"version": 1, "rank", "world_size", "parameters": [{"name", "shape", "dtype"}], "pieces":
[[parameter_index, parameter_offset, numel], ...], "meta": {...}, "arrays": {name: {"offset":
byte offset in the data section, "numel"}}}; each array holds the pieces' values back to back.
Reading at another world size intersects the caller's pieces with the stored ones, parameter by
parameter, through numpy.memmap (only the bytes needed are touched). consolidate() writes one
"chorus-state-dict" file in the same container: full tensors under the parameter names, and
optimizer state X under "X/<name>", each array entry with its "shape" too.
"""

import bisect
import collections
import json
import math
import os
import re
import struct
import tempfile

import numpy as np

try:
    from .. import _chorus

    _InvalidArgument = _chorus.InvalidArgumentError
except ImportError:  # the extension is not built: the pure-Python file format still works
    _InvalidArgument = ValueError

SHARD_FORMAT = "chorus-zero-shard"
STATE_DICT_FORMAT = "chorus-state-dict"
VERSION = 1
_SHARD_NAME = re.compile(r"^shard-(\d+)-of-(\d+)\.chorus$")
_LENGTH = struct.Struct("<Q")
_FLOAT32 = np.dtype("<f4")


def _error(message):
    """The exception for a bad argument or a bad checkpoint: chorus.InvalidArgumentError (also a
    ValueError), or ValueError when the chorus extension is not importable."""
    return _InvalidArgument(message)


def shard_filename(rank, world_size):
    """The file name of `rank`'s shard in a checkpoint written by `world_size` ranks."""
    return f"shard-{rank:05d}-of-{world_size:05d}.chorus"


def remove_shards(directory):
    """Removes every shard file (of any world size) from `directory`, if it exists: a save calls it
    on one rank first, so a checkpoint never mixes files of two saves."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if _SHARD_NAME.match(name):
                os.remove(os.path.join(directory, name))


def _check_parameters(parameters):
    """Returns the table as [{"name", "shape", "dtype"}] with int shapes, and each numel."""
    table, seen = [], set()
    for index, entry in enumerate(parameters):
        try:
            name, shape, dtype = entry["name"], [int(d) for d in entry["shape"]], entry["dtype"]
        except (KeyError, TypeError, ValueError) as e:
            raise _error(f"parameter {index} ({entry!r}) needs a name, an int shape and a "
                         f"dtype: {e}")
        if not isinstance(name, str) or name in seen or any(d < 0 for d in shape):
            raise _error(f"parameter {index} ({entry!r}): names must be distinct strings and "
                         "shapes non-negative")
        seen.add(name)
        table.append({"name": name, "shape": shape, "dtype": str(dtype)})
    return table, [math.prod(entry["shape"]) for entry in table]


def _check_pieces(pieces, numels, where):
    """Returns `pieces` as int triples, each inside its parameter; `where` names their owner."""
    checked = []
    for number, piece in enumerate(pieces):
        try:
            index, offset, numel = (int(v) for v in piece)
        except (TypeError, ValueError):
            raise _error(f"{where}: piece {number} ({piece!r}) is not a (parameter_index, "
                         "parameter_offset, numel) triple")
        if not (0 <= index < len(numels) and offset >= 0 and numel >= 0
                and offset + numel <= numels[index]):
            bound = numels[index] if 0 <= index < len(numels) else None
            raise _error(f"{where}: piece {number} ({index}, {offset}, {numel}) is outside its "
                         f"parameter ({len(numels)} parameters; that one has {bound} elements)")
        checked.append((index, offset, numel))
    return checked


def _check_arrays(arrays, total):
    if not arrays:
        raise _error("arrays is empty: a shard needs at least one array (e.g. 'param')")
    for name, array in arrays.items():
        if not isinstance(name, str) or not name:
            raise _error(f"array name {name!r} is not a non-empty string")
        if not isinstance(array, np.ndarray) or array.dtype.kind != "f" or array.itemsize != 4:
            kind = getattr(array, "dtype", type(array).__name__)
            raise _error(f"array {name!r} is {kind}, not a float32 numpy array")
        if array.ndim != 1 or array.shape[0] != total:
            raise _error(f"array {name!r} has shape {list(array.shape)}; it must be 1-D with the "
                         f"pieces' total numel, {total}")


def _write_atomically(path, header, array_for):
    """Writes the header, then array_for(name) for each name in header["arrays"], to a temporary
    file beside `path`, then renames it over `path`: readers see the old file or the whole new
    one, never a part of one."""
    encoded = json.dumps(header).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                                     suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_LENGTH.pack(len(encoded)))
            f.write(encoded)
            for name in header["arrays"]:
                np.ascontiguousarray(array_for(name), dtype=_FLOAT32).tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path


def _array_entries(numels):
    """{name: {"offset", "numel"}} for arrays of `numels` ({name: numel}) stored back to back."""
    entries, offset = {}, 0
    for name, numel in numels.items():
        entries[name] = {"offset": offset, "numel": numel}
        offset += numel * _FLOAT32.itemsize
    return entries


def write_shard(directory, rank, world_size, parameters, pieces, arrays, meta):
    """Writes rank `rank`'s shard of a `world_size`-rank checkpoint to `directory` (created if
    needed) as shard_filename(rank, world_size), atomically, and returns its path.

    parameters: the model's parameter table [{"name", "shape", "dtype"}], the same on every rank.
    pieces: this rank's (parameter_index, parameter_offset, numel) runs, in array order.
    arrays: {name: 1-D float32 array of sum(numel of pieces)}, the same names on every rank.
    meta: JSON-serialisable dict (optimizer, stage, step, hyperparameters), the same on every rank.
    Raises ValueError (chorus.InvalidArgumentError) naming what is wrong with an argument."""
    integers = (int, np.integer)
    if not (isinstance(world_size, integers) and isinstance(rank, integers)
            and 0 <= rank < world_size):
        raise _error(f"rank {rank!r} and world_size {world_size!r}: need ints, 0 <= rank < "
                     "world_size")
    rank, world_size = int(rank), int(world_size)
    table, numels = _check_parameters(parameters)
    checked = _check_pieces(pieces, numels, f"rank {rank}")
    total = sum(numel for _, _, numel in checked)
    _check_arrays(arrays, total)
    if not isinstance(meta, dict):
        raise _error(f"meta is {type(meta).__name__}, not a dict")
    header = {"format": SHARD_FORMAT, "version": VERSION, "rank": rank, "world_size": world_size,
              "parameters": table, "pieces": [list(piece) for piece in checked], "meta": meta,
              "arrays": _array_entries({name: total for name in arrays})}
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise _error(f"meta is not JSON-serialisable: {e}")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, shard_filename(rank, world_size))
    return _write_atomically(path, header, arrays.__getitem__)


_REQUIRED_KEYS = {SHARD_FORMAT: ("rank", "world_size", "parameters", "pieces", "meta", "arrays"),
                  STATE_DICT_FORMAT: ("parameters", "meta", "arrays")}


def _read_header(path, expected_format):
    """Returns (header, data_start) of a chorus file, checking format, version and length."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            raise _error(f"{path}: {size} bytes, too short for the 8-byte header length: the file "
                         "is truncated")
        (length,) = _LENGTH.unpack(head)
        if length > size - _LENGTH.size:
            raise _error(f"{path}: header length {length} exceeds the file's {size} bytes: the "
                         "file is truncated or not a chorus checkpoint")
        try:
            header = json.loads(f.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _error(f"{path}: the header is not UTF-8 JSON ({e}): not a chorus checkpoint")
    found = header.get("format") if isinstance(header, dict) else None
    if found != expected_format:
        raise _error(f"{path}: format {found!r}, expected {expected_format!r}: not a file of this "
                     "kind (a bad or foreign file)")
    if header.get("version") != VERSION:
        raise _error(f"{path}: format version {header.get('version')!r} is unknown; this chorus "
                     f"reads version {VERSION} (use the chorus that wrote it)")
    missing = [key for key in _REQUIRED_KEYS[expected_format] if key not in header]
    if missing or not isinstance(header["arrays"], dict):
        raise _error(f"{path}: the header lacks {missing or 'an arrays dict'}: a corrupt file")
    data_start = _LENGTH.size + length
    for name, entry in header["arrays"].items():
        end = data_start + entry["offset"] + entry["numel"] * _FLOAT32.itemsize
        if end > size:
            raise _error(f"{path}: array {name!r} ends at byte {end} but the file has {size} "
                         "bytes: the file is truncated (was the save interrupted?)")
    return header, data_start


def _discover(directory):
    """The paths of the one checkpoint's shard files in `directory`, in rank order."""
    if not os.path.isdir(directory):
        raise _error(f"checkpoint directory {directory} does not exist")
    found = collections.defaultdict(dict)
    for name in os.listdir(directory):
        match = _SHARD_NAME.match(name)
        if match:
            found[int(match.group(2))][int(match.group(1))] = os.path.join(directory, name)
    if not found:
        raise _error(f"{directory} holds no shard files (shard-RRRRR-of-NNNNN.chorus)")
    if len(found) > 1:
        raise _error(f"{directory} holds shard files of world sizes {sorted(found)} that "
                     "disagree: it must hold one checkpoint; remove the stale files")
    (world_size, by_rank), = found.items()
    for rank in range(world_size):
        if rank not in by_rank:
            raise _error(f"{directory}: rank {rank}'s file {shard_filename(rank, world_size)} is "
                         f"missing (found ranks {sorted(by_rank)}); the save did not finish")
    if len(by_rank) != world_size:
        raise _error(f"{directory}: rank files {sorted(set(by_rank) - set(range(world_size)))} "
                     f"are beyond world size {world_size}: remove the stray files")
    return world_size, [by_rank[rank] for rank in range(world_size)]


class _ShardSet:
    """The shard files of one checkpoint directory, indexed by parameter for range lookups."""

    def __init__(self, directory):
        self.directory = directory
        world_size, self.paths = _discover(directory)
        self.headers, self.starts = [], []
        for rank, path in enumerate(self.paths):
            header, start = _read_header(path, SHARD_FORMAT)
            if header["rank"] != rank or header["world_size"] != world_size:
                raise _error(f"{path}: the header says rank {header['rank']} of world size "
                             f"{header['world_size']}, disagreeing with the file name")
            self.headers.append(header)
            self.starts.append(start)
        self.meta = self.headers[0]["meta"]
        self.parameters = self.headers[0]["parameters"]
        self.names = list(self.headers[0]["arrays"])
        self._check_agreement()
        self._index = self._build_index()
        self._maps = {}

    def _check_agreement(self):
        first = self.paths[0]
        for path, header in zip(self.paths[1:], self.headers[1:]):
            for key, what in (("meta", "meta"), ("parameters", "parameter table")):
                if header[key] != self.headers[0][key]:
                    raise _error(f"{path}: its {what} disagrees with {first}'s")
            if sorted(header["arrays"]) != sorted(self.names):
                raise _error(f"{path} holds arrays {sorted(header['arrays'])}, {first} holds "
                             f"{sorted(self.names)}")

    def _build_index(self):
        """Per parameter: sorted [(offset, numel, rank, position in the rank's arrays)]."""
        numels = [math.prod(entry["shape"]) for entry in self.parameters]
        index = [[] for _ in numels]
        for rank, (path, header) in enumerate(zip(self.paths, self.headers)):
            position = 0
            for parameter, offset, numel in _check_pieces(header["pieces"], numels, path):
                if numel:
                    index[parameter].append((offset, numel, rank, position))
                position += numel
            for name, entry in header["arrays"].items():
                if entry["numel"] != position:
                    raise _error(f"{path}: array {name!r} has {entry['numel']} elements, its "
                                 f"pieces {position}: a corrupt header")
        for parameter, runs in enumerate(index):
            runs.sort()
            for (offset, numel, rank, _), following in zip(runs, runs[1:]):
                if offset + numel > following[0]:
                    raise _error(f"{self.directory}: parameter {parameter} elements "
                                 f"{following[0]}.. are stored twice (ranks {rank} and "
                                 f"{following[2]}): a corrupt checkpoint")
        return [([run[0] for run in runs], runs) for runs in index]

    def check_parameters(self, parameters):
        """Raises unless the caller's table matches the stored one in count, names and shapes."""
        table, _ = _check_parameters(parameters)
        stored, path = self.parameters, self.paths[0]
        if len(table) != len(stored):
            raise _error(f"{path} has {len(stored)} parameters, the caller has {len(table)}: a "
                         "checkpoint of a different model")
        for index, (mine, theirs) in enumerate(zip(table, stored)):
            for key in ("name", "shape"):
                if mine[key] != theirs[key]:
                    raise _error(f"parameter {index}: {key} {theirs[key]!r} in {path}, "
                                 f"{mine[key]!r} in the caller's model: a different model")

    def _sources(self, parameter, offset, numel):
        """Yields (rank, position in its arrays, count) covering [offset, offset + numel)."""
        starts, runs = self._index[parameter]
        cursor, end = offset, offset + numel
        while cursor < end:
            i = bisect.bisect_right(starts, cursor) - 1
            if i < 0 or runs[i][0] + runs[i][1] <= cursor:
                name = self.parameters[parameter]["name"]
                raise _error(f"{self.directory}: element {cursor} of parameter {parameter} "
                             f"({name!r}) is not covered by any stored piece")
            start, stored, rank, position = runs[i]
            count = min(end, start + stored) - cursor
            yield rank, position + cursor - start, count
            cursor += count

    def _array(self, rank, name):
        """A read-only memmap of one stored array: pages are read only when touched."""
        if (rank, name) not in self._maps:
            entry = self.headers[rank]["arrays"][name]
            self._maps[rank, name] = np.memmap(
                self.paths[rank], dtype=_FLOAT32, mode="r", shape=(entry["numel"],),
                offset=self.starts[rank] + entry["offset"]) if entry["numel"] else np.empty(0)
        return self._maps[rank, name]

    def fill(self, pieces, names):
        """{name: float32 array} of the values of `pieces` (checked triples), back to back."""
        for name in names:
            if name not in self.names:
                raise _error(f"{self.paths[0]}: no array {name!r} is stored (it holds "
                             f"{self.names})")
        total = sum(numel for _, _, numel in pieces)
        out = {name: np.empty(total, dtype=np.float32) for name in names}
        written = 0
        for parameter, offset, numel in pieces:
            for rank, position, count in self._sources(parameter, offset, numel):
                for name in names:
                    source = self._array(rank, name)[position:position + count]
                    out[name][written:written + count] = source
                written += count
        return out


def read_pieces(directory, parameters, pieces, names=None):
    """Reads the checkpoint in `directory` (written at any world size) for the caller's pieces.

    Returns ({name: 1-D float32 array of sum(numel of pieces)}, meta); names=None reads every
    stored array. Raises chorus.InvalidArgumentError (a ValueError) naming the file and the
    problem: missing directory or rank file, disagreeing world sizes, an unknown format or
    version, a truncated file, a parameter table differing in count, name or shape (dtypes may
    differ), a missing array, or a requested element no stored piece covers."""
    shards = _ShardSet(directory)
    shards.check_parameters(parameters)
    numels = [math.prod(entry["shape"]) for entry in shards.parameters]
    checked = _check_pieces(pieces, numels, "the caller's pieces")
    wanted = shards.names if names is None else list(names)
    return shards.fill(checked, wanted), shards.meta


def consolidate(directory, output_path):
    """Writes the checkpoint in `directory` as one "chorus-state-dict" file at `output_path`
    (atomically) and returns output_path: each parameter's full float32 tensor under its name,
    each other array X under "X/<name>", with the meta and parameter table in the header. Reads
    one tensor at a time, so memory holds the largest tensor, not the model."""
    shards = _ShardSet(directory)
    if "param" not in shards.names:
        raise _error(f"{shards.paths[0]} holds no 'param' array (it holds {shards.names})")
    sources = {}  # tensor name -> (array name, parameter index), in file order
    for array in ["param"] + [name for name in shards.names if name != "param"]:
        for index, entry in enumerate(shards.parameters):
            tensor = entry["name"] if array == "param" else f"{array}/{entry['name']}"
            sources[tensor] = (array, index)
    shapes = {tensor: shards.parameters[index]["shape"] for tensor, (_, index) in sources.items()}
    entries = _array_entries({tensor: math.prod(shape) for tensor, shape in shapes.items()})
    for tensor, entry in entries.items():
        entry["shape"] = shapes[tensor]
    header = {"format": STATE_DICT_FORMAT, "version": VERSION, "parameters": shards.parameters,
              "meta": shards.meta, "arrays": entries}

    def whole_tensor(tensor):
        array, index = sources[tensor]
        return shards.fill([(index, 0, entries[tensor]["numel"])], [array])[array]

    return _write_atomically(output_path, header, whole_tensor)


def load_state_dict(path, with_optimizer_state=False, cast=True):
    """Reads a consolidate()d file into an OrderedDict name -> torch tensor of the recorded shape:
    parameters cast to their recorded dtype (float32 master values when cast is false), then,
    when with_optimizer_state, the "X/<name>" optimizer entries in float32. For
    model.load_state_dict(load_state_dict(path), strict=False) in one process."""
    import torch

    header, data_start = _read_header(path, STATE_DICT_FORMAT)
    dtypes = {entry["name"]: entry["dtype"] for entry in header["parameters"]}
    result = collections.OrderedDict()
    with open(path, "rb") as f:
        for name, entry in header["arrays"].items():
            is_parameter = name in dtypes
            if not is_parameter and not with_optimizer_state:
                continue
            f.seek(data_start + entry["offset"])
            values = np.fromfile(f, dtype=_FLOAT32, count=entry["numel"])
            tensor = torch.from_numpy(values.astype(np.float32)).reshape(entry["shape"])
            if is_parameter and cast:
                dtype = getattr(torch, dtypes[name], None)
                if not isinstance(dtype, torch.dtype):
                    raise _error(f"{path}: parameter {name!r} has dtype {dtypes[name]!r}, which "
                                 "is not a torch dtype")
                tensor = tensor.to(dtype)
            result[name] = tensor
    return result
