"""One rank of a soak job: a long random program of chorus operations, every result checked.

    chorusrun -np N /usr/bin/python3 soak_rank.py --seed S --seconds T [options]
    mpirun ... -np N /usr/bin/python3 soak_rank.py --seed S --seconds T [options]

Every rank draws the same program from `--seed` (random.Random(seed)): each step picks an operation
(allreduce of a tensor, a list or a dict nest, allgather, reduce_scatter, broadcast, reduce,
gather, scatter, all_to_all, send/recv pairs, barrier, and the uneven all_to_all and allgather of
soak_uneven.py), a dtype, a reduce op, a size (0 to
--max-bytes, weighted towards small ones, with counts at and around the shm backend's 32 KiB and
512 KiB slot sizes), roots, a rank_list partition (several pools are alive at once), blocking or
async_op=True (waited later, in a random local order), inplace or not, NumPy or torch.

Inputs are a function of (seed, step, item, group rank, element index): small integers chosen so
that every reduction is exact in every dtype (fp16/bf16 included): sums of values in [-3, 3],
products of values in {1, -1, 2} with at most 6 factors of 2, avg only of values whose sum is a
multiple of the group size; complex values are two of those, one per part (sum, prod and avg only;
uint16, uint32 and uint64 through NumPy only, which torch 1.13 lacks). Each rank computes every
group member's input again and reduces them in int64, or complex128 (the closed form); a result
that differs is a WRONG line and the run goes on.

Every --sync-every steps the ranks agree (allreduce max) whether rank's --seconds are up.

Faults: --kill-rank K --kill-step I: rank K prints a KILL line (with time.monotonic()) and
SIGKILLs itself before step I. Every other rank must then raise a chorus.Error naming rank K.

Lines (flushed at once; the driver, soak.py, parses them; "[rank] " prefixes are chorusrun's):
    SOAK-START rank=R size=N backend=B pid=P features=...
    SOAK-WRONG rank=R step=I op=NAME dtype=D shape=S group=G detail=TEXT
    SOAK-KILL rank=R step=I t=MONOTONIC
    SOAK-ERROR rank=R step=I t=MONOTONIC type=NAME peer=K message=TEXT
    SOAK-TERM rank=R step=I t=MONOTONIC                (SIGTERM from the launcher)
    SOAK-SUMMARY rank=R ops=N bytes=B wrong=W seconds=S
The exit status is 0 when nothing failed, 3 on wrong results; an exception (a chorus.Error, or any
other: a harness bug) is re-raised after its ERROR line, as a user program would let it go.
"""

import argparse
import inspect
import os
import random
import signal
import sys
import time
import traceback

import numpy as np

import chorus
import chorus.distributed as dist
from closed_forms import bool_form, group_values, reduced, values
from soak_uneven import UnevenOps

torch = None  # imported in main() unless --no-torch

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
COMPLEX = ("complex64", "complex128")
DTYPES = FLOATS + INTS + COMPLEX + ("bool",)
NUMPY_ONLY = ("uint16", "uint32", "uint64")  # torch 1.13 has none of them
NUMPY = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8,
         "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
         "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64, "complex64": np.complex64,
         "complex128": np.complex128, "bool": np.bool_}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
            "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
            "complex64": 8, "complex128": 16, "bool": 1}
SMALL_SLOT, CHUNK_SLOT = 32 << 10, 512 << 10  # the shm backend's slot sizes

# Relative weights of the operations in the program.
OPERATIONS = {"allreduce": 20, "allreduce_list": 6, "allreduce_dict": 3, "allgather": 8,
              "reduce_scatter": 7, "reduce_scatter_list": 3, "broadcast": 8, "reduce": 8,
              "gather": 6, "scatter": 6, "all_to_all": 6, "sendrecv": 8, "barrier": 3,
              "all_to_all_splits": 4, "allgather_uneven": 3}
UNEVEN = {"all_to_all_splits", "allgather_uneven"}  # soak_uneven.py
REDUCING = {"allreduce", "allreduce_list", "allreduce_dict", "reduce_scatter",
            "reduce_scatter_list", "reduce"}
MAX_WRONG_LINES = 20

state = {"rank": -1, "step": -1}


def say(line):
    sys.stdout.write(line.replace("\n", " | ") + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- tensors


def make_tensor(logical, dtype, use_torch, shape):
    logical = logical.reshape(shape)
    if use_torch:
        if dtype == "bool":
            return torch.from_numpy(logical != 0)
        return torch.from_numpy(logical).to(getattr(torch, dtype))
    if dtype == "bool":
        return logical != 0
    return logical.astype(NUMPY[dtype])


def as_logical(result, dtype):
    """A result as float64 (floats), complex128 (complex) or int64 (integers, bool) NumPy values,
    to compare."""
    wide = "float64" if dtype in FLOATS else "complex128" if dtype in COMPLEX else "int64"
    if torch is not None and isinstance(result, torch.Tensor):
        return result.to(getattr(torch, wide)).numpy()
    return np.asarray(result).astype(wide)


# --------------------------------------------------------------------------- the program


def pick_count(rng, itemsize, cap_bytes, big):
    """An element count: mostly small, often at or around the shm slot sizes, rarely large
    (`big`: the fraction above 1 MiB; a tenth of those go up to 16 MiB)."""
    r = rng.random()
    if r < big * 0.1:
        count = rng.randint(4 << 20, 16 << 20) // itemsize
    elif r < big:
        count = rng.randint(1 << 20, 4 << 20) // itemsize
    elif r < 0.25:
        count = rng.randint(0, 17)
    elif r < 0.50:
        count = rng.randint(1, 4096 // itemsize)
    elif r < 0.70:
        boundary = rng.choice((SMALL_SLOT, 2 * SMALL_SLOT, 3 * SMALL_SLOT, SMALL_SLOT // 2))
        count = boundary // itemsize + rng.choice((-3, -1, 0, 0, 1, 2))
    elif r < 0.88:
        count = rng.randint(1, (256 << 10) // itemsize)
    else:
        boundary = rng.choice((CHUNK_SLOT, 2 * CHUNK_SLOT, 3 * CHUNK_SLOT))
        count = boundary // itemsize + rng.choice((-3, -1, 0, 0, 1, 2))
    return max(0, min(count, cap_bytes // itemsize))


class Program:
    """Draws steps; identical on every rank (same seed, same draws)."""

    def __init__(self, args, size, features):
        self.rng = random.Random(args.seed)
        self.size = size
        self.args = args
        self.features = features
        self.partitions = [self._partition() for _ in range(args.partitions)]
        names = [name for name in OPERATIONS
                 if (name != "allreduce_dict" or features["dict"]) and
                 (name not in UNEVEN or features["uneven"])]
        self.names = names
        self.weights = [OPERATIONS[name] for name in names]

    def _partition(self):
        ranks = list(range(self.size))
        self.rng.shuffle(ranks)
        groups, i = [], 0
        while i < len(ranks):
            take = self.rng.randint(1, len(ranks) - i)
            groups.append(ranks[i:i + take])
            i += take
        return groups

    def step(self, index):
        rng = self.rng
        name = rng.choices(self.names, self.weights)[0]
        dtypes = [d for d in DTYPES if d != "bfloat16" or self.features["torch"]]
        spec = {"name": name, "index": index, "dtype": rng.choice(dtypes)}
        spec["torch"] = spec["dtype"] == "bfloat16" or (self.features["torch"] and
                                                        rng.random() < 0.25 and
                                                        spec["dtype"] not in NUMPY_ONLY)
        if name in REDUCING:
            spec["op"] = rng.choice(valid_ops(spec["dtype"]))
        r = rng.random()
        if r < 0.5:
            spec["partition"] = None
        else:
            spec["partition"] = rng.randrange(len(self.partitions))
        groups = self.groups_of(spec)
        spec["roots"] = [rng.choice(group) for group in groups]
        spec["async"] = rng.random() < self.args.async_fraction
        spec["inplace"] = rng.random() < 0.3
        spec["out"] = self.features["out"] and rng.random() < 0.2
        spec["two_d"] = rng.random() < 0.2
        spec["cols"] = rng.choice((1, 3, 4, 7, 16))
        spec["axis"] = rng.choice((0, 1, -1)) if spec["two_d"] else 0
        spec["concat_axis"] = rng.choice((0, 1)) if spec["two_d"] else 0
        spec["items"] = rng.randint(1, 4)
        itemsize = ITEMSIZE[spec["dtype"]]
        n_max = max(len(g) for g in groups)
        cap = self.args.max_bytes
        if name in ("allgather", "gather"):
            cap //= n_max
        if name.endswith("_list") or name == "allreduce_dict":
            cap //= 4
        spec["counts"] = [pick_count(rng, itemsize, cap, self.args.big_fraction) for _ in range(4)]
        spec["per_chunk"] = rng.random() < 0.5
        spec["tag"] = rng.randint(0, 1000)
        spec["pairing"] = rng.random()
        spec["p2p_mode"] = rng.choice(("oneway", "ordered", "ordered_async", "mixed"))
        spec["recv_out"] = rng.random() < 0.5
        spec["shuffle"] = rng.random()
        return spec

    def groups_of(self, spec):
        if spec["partition"] is None:
            return [list(range(self.size))]
        return self.partitions[spec["partition"]]


def valid_ops(dtype):
    if dtype in COMPLEX:
        return ("sum", "prod", "avg")
    if dtype in FLOATS:
        return ("sum", "prod", "min", "max", "avg")
    if dtype == "bool":
        return ("sum", "prod", "min", "max", "band", "bor", "bxor")
    return ("sum", "prod", "min", "max", "avg", "band", "bor", "bxor")


def shape_for(spec, count, n, divisible):
    """A shape of about `count` elements; dimension 0 (and 1 when split along it) divisible by
    n when `divisible`."""
    if spec["two_d"]:
        cols = spec["cols"]
        rows = count // cols
        if divisible:
            rows -= rows % n
            if spec["name"] == "all_to_all" and cols % n:
                cols = n * max(1, cols // n)
        return (rows, cols)
    if divisible:
        if spec["per_chunk"]:
            return ((count // n) * n,) if count >= n else (count * n,)
        return (count - count % n,)
    return (count,)


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.wrong = 0

    def expect(self, spec, got, want, dtype, group, what="", same_object=None):
        """Compares `got` with the logical `want`; records a WRONG line if they differ."""
        problem = None
        want = np.asarray(want)
        if got is None:
            problem = "no result"
        elif same_object is not None and got is not same_object:
            problem = "the result is not the object that was passed in"
        elif (torch is not None and isinstance(got, torch.Tensor)) != spec["torch"]:
            problem = f"result kind {type(got).__name__} differs from the input's"
        else:
            values_got = as_logical(got, dtype)
            if tuple(values_got.shape) != tuple(want.shape):
                problem = f"shape {tuple(values_got.shape)}, expected {tuple(want.shape)}"
            elif not np.array_equal(values_got, want.astype(values_got.dtype)):
                bad = np.flatnonzero(values_got.reshape(-1) != want.reshape(-1).astype(
                    values_got.dtype))
                first = int(bad[0])
                problem = (f"{len(bad)} of {want.size} elements differ; first at flat index "
                           f"{first}: got {values_got.reshape(-1)[first]}, expected "
                           f"{want.reshape(-1)[first]}")
        if problem is None:
            return
        self.wrong += 1
        if self.wrong <= MAX_WRONG_LINES:
            say(f"SOAK-WRONG rank={self.rank} step={spec['index']} op={spec['name']}"
                f"{'/' + spec['op'] if 'op' in spec else ''} dtype={dtype} "
                f"shape={tuple(want.shape)} torch={spec['torch']} async={spec['async']} "
                f"inplace={spec['inplace']} group={group} {what} detail={problem}")


class Runner(UnevenOps):
    """Executes steps for this rank and keeps async handles until they are waited for."""

    def __init__(self, args, rank, size, features):
        self.args = args
        self.rank = rank
        self.size = size
        self.features = features
        self.checker = Checker(rank)
        self.pending = []  # (work, check(result))
        self.local = random.Random(args.seed * 7919 + rank)
        self.ops = 0
        self.bytes = 0

    # ----- plumbing

    def launch(self, spec, call, check):
        """Runs `call(async_op)`; checks the result now, or later for async steps."""
        if spec["async"]:
            work = call(True)
            self.pending.append((work, check))
            if len(self.pending) > self.args.max_pending:
                self.wait_some(force=True)
        else:
            check(call(False))

    def wait_some(self, force=False):
        if not self.pending:
            return
        if not force and self.local.random() < 0.6:
            return
        order = list(range(len(self.pending)))
        self.local.shuffle(order)
        take = len(order) if self.local.random() < 0.3 else self.local.randint(1, len(order))
        chosen = set(order[:take])
        for i in order[:take]:
            work, check = self.pending[i]
            check(work.wait())
        self.pending = [p for i, p in enumerate(self.pending) if i not in chosen]

    def wait_all(self):
        while self.pending:
            work, check = self.pending.pop(self.local.randrange(len(self.pending)))
            check(work.wait())

    # ----- one step

    def run(self, spec, program):
        groups = program.groups_of(spec)
        gi = next(i for i, g in enumerate(groups) if self.rank in g)
        members = groups[gi]
        spec["rank_list"] = None if spec["partition"] is None else groups
        spec["members"] = members
        spec["g"] = members.index(self.rank)
        spec["root"] = spec["roots"][gi]
        spec["key"] = f"{self.args.seed}/{spec['index']}/{gi}"
        getattr(self, "do_" + spec["name"])(spec)
        self.ops += 1

    def tensor(self, spec, key, op, g, n, shape):
        count = int(np.prod(shape)) if shape else 1
        logical = values(key, op, spec["dtype"], g, n, count).reshape(shape)
        return logical, make_tensor(logical, spec["dtype"], spec["torch"], shape)

    def count_bytes(self, *shapes):
        itemsize = ITEMSIZE[self.spec_dtype]
        self.bytes += sum(int(np.prod(s)) for s in shapes) * itemsize

    def maybe_out(self, spec, shape):
        if not spec["out"]:
            return {}
        return {"out": make_tensor(np.zeros(int(np.prod(shape)), np.int64), spec["dtype"],
                                   spec["torch"], shape)}

    def input_kept(self, spec, x, logical, what):
        if not spec["inplace"] and logical.size <= 65536:
            self.checker.expect(spec, x, logical, spec["dtype"], spec["members"],
                                what=f"{what} (input modified)")

    # ----- reductions

    def do_allreduce(self, spec, items=None):
        members, g, n, dtype, op = spec["members"], spec["g"], len(spec["members"]), \
            spec["dtype"], spec["op"]
        self.spec_dtype = dtype
        count = spec["counts"][0]
        shape = shape_for(spec, count, n, False)
        logical, x = self.tensor(spec, spec["key"], op, g, n, shape)
        want = bool_form(op, dtype, reduced(op, group_values(spec["key"], op, dtype, n,
                                                             logical.size), n).reshape(shape))
        out = {} if spec["inplace"] else self.maybe_out(spec, shape)
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members,
                                same_object=x if spec["inplace"] else out.get("out"))
            self.input_kept(spec, x, logical, "allreduce")

        self.launch(spec, lambda a: chorus.allreduce(x, op, rank_list=spec["rank_list"],
                                                     async_op=a, inplace=spec["inplace"],
                                                     **out), check)

    def _items(self, spec, count_list):
        g, n, dtype, op = spec["g"], len(spec["members"]), spec["dtype"], spec["op"]
        self.spec_dtype = dtype
        xs, wants, logicals = [], [], []
        for k, count in enumerate(count_list):
            shape = (count,) if not spec["two_d"] else shape_for(spec, count, n, False)
            key = f"{spec['key']}/item{k}"
            logical, x = self.tensor(spec, key, op, g, n, shape)
            want = bool_form(op, dtype, reduced(op, group_values(key, op, dtype, n,
                                                                 logical.size), n))
            xs.append(x)
            logicals.append(logical)
            wants.append(want.reshape(shape))
            self.count_bytes(shape)
        return xs, wants, logicals

    def do_allreduce_list(self, spec):
        members, dtype = spec["members"], spec["dtype"]
        xs, wants, logicals = self._items(spec, spec["counts"][:spec["items"]])

        def check(results):
            if not isinstance(results, list) or len(results) != len(xs):
                self.checker.expect(spec, None, np.zeros(0), dtype, members,
                                    what=f"list result {type(results).__name__}")
                return
            for k, (result, want) in enumerate(zip(results, wants)):
                self.checker.expect(spec, result, want, dtype, members, what=f"item {k}",
                                    same_object=xs[k] if spec["inplace"] else None)
                self.input_kept(spec, xs[k], logicals[k], f"item {k}")

        self.launch(spec, lambda a: chorus.allreduce(xs, spec["op"], rank_list=spec["rank_list"],
                                                     async_op=a, inplace=spec["inplace"]), check)

    def do_allreduce_dict(self, spec):
        members, dtype = spec["members"], spec["dtype"]
        xs, wants, _ = self._items(spec, spec["counts"][:3])
        nest = {"w": xs[0], "b": [xs[1], xs[2]]}

        def check(result):
            try:
                got = [result["w"], result["b"][0], result["b"][1]]
            except (TypeError, KeyError, IndexError) as error:
                self.checker.expect(spec, None, np.zeros(0), dtype, members,
                                    what=f"dict nest result {error!r}")
                return
            for k, (item, want) in enumerate(zip(got, wants)):
                self.checker.expect(spec, item, want, dtype, members, what=f"nest item {k}")

        self.launch(spec, lambda a: chorus.allreduce(nest, spec["op"],
                                                     rank_list=spec["rank_list"], async_op=a,
                                                     inplace=spec["inplace"]), check)

    def do_reduce_scatter(self, spec):
        members, g, n, dtype, op = spec["members"], spec["g"], len(spec["members"]), \
            spec["dtype"], spec["op"]
        self.spec_dtype = dtype
        shape = shape_for(spec, spec["counts"][0], n, True)
        logical, x = self.tensor(spec, spec["key"], op, g, n, shape)
        total = bool_form(op, dtype, reduced(op, group_values(spec["key"], op, dtype, n,
                                                              logical.size), n).reshape(shape))
        chunk = shape[0] // n
        want = total[g * chunk:(g + 1) * chunk]
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members)
            self.input_kept(spec, x, logical, "reduce_scatter")

        self.launch(spec, lambda a: chorus.reduce_scatter(x, op, rank_list=spec["rank_list"],
                                                          async_op=a), check)

    def do_reduce_scatter_list(self, spec):
        members, g, n, dtype, op = spec["members"], spec["g"], len(spec["members"]), \
            spec["dtype"], spec["op"]
        uneven = spec["shuffle"] < 0.5
        counts = [spec["counts"][k % 4] // 4 if uneven else spec["counts"][0] // 4
                  for k in range(n)]
        spec = dict(spec, two_d=False)
        xs, wants, _ = self._items(spec, counts)

        def check(result):
            self.checker.expect(spec, result, wants[g], dtype, members,
                                what=f"uneven={uneven}")

        self.launch(spec, lambda a: chorus.reduce_scatter(xs, op, rank_list=spec["rank_list"],
                                                          async_op=a), check)

    def do_reduce(self, spec):
        members, g, n, dtype, op = spec["members"], spec["g"], len(spec["members"]), \
            spec["dtype"], spec["op"]
        self.spec_dtype = dtype
        shape = shape_for(spec, spec["counts"][0], n, False)
        logical, x = self.tensor(spec, spec["key"], op, g, n, shape)
        is_root = self.rank == spec["root"]
        if is_root:
            want = bool_form(op, dtype, reduced(op, group_values(spec["key"], op, dtype, n,
                                                                 logical.size), n).reshape(shape))
        else:
            want = logical if dtype != "bool" else (logical != 0).astype(np.int64)
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members, what=f"root={spec['root']}",
                                same_object=x if spec["inplace"] else None)
            self.input_kept(spec, x, logical, "reduce")

        self.launch(spec, lambda a: chorus.reduce(x, root=spec["root"], op=op,
                                                  rank_list=spec["rank_list"], async_op=a,
                                                  inplace=spec["inplace"]), check)

    # ----- data movement

    def do_broadcast(self, spec):
        members, g, n, dtype = spec["members"], spec["g"], len(spec["members"]), spec["dtype"]
        self.spec_dtype = dtype
        shape = shape_for(spec, spec["counts"][0], n, False)
        logical, x = self.tensor(spec, spec["key"], None, g, n, shape)
        root_g = members.index(spec["root"])
        want = values(spec["key"], None, dtype, root_g, n, logical.size).reshape(shape)
        want = bool_form("sum", dtype, want)
        out = {} if spec["inplace"] else self.maybe_out(spec, shape)
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members, what=f"root={spec['root']}",
                                same_object=x if spec["inplace"] else out.get("out"))
            self.input_kept(spec, x, logical, "broadcast")

        self.launch(spec, lambda a: chorus.broadcast(x, root=spec["root"],
                                                     rank_list=spec["rank_list"], async_op=a,
                                                     inplace=spec["inplace"], **out), check)

    def do_allgather(self, spec):
        members, g, n, dtype = spec["members"], spec["g"], len(spec["members"]), spec["dtype"]
        self.spec_dtype = dtype
        count = max(1, spec["counts"][0]) if spec["two_d"] else spec["counts"][0]
        shape = shape_for(spec, count, n, False)
        axis = spec["axis"] if len(shape) > 1 else 0
        logical, x = self.tensor(spec, spec["key"], None, g, n, shape)
        size = logical.size
        want = np.concatenate([v.reshape(shape) for v in group_values(spec["key"], None, dtype,
                                                                      n, size)], axis=axis)
        want = bool_form("sum", dtype, want)
        out_shape = want.shape
        out = self.maybe_out(spec, out_shape)
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members, what=f"axis={axis}",
                                same_object=out.get("out"))

        self.launch(spec, lambda a: chorus.allgather(x, axis=axis, rank_list=spec["rank_list"],
                                                     async_op=a, **out), check)

    def do_gather(self, spec):
        members, g, n, dtype = spec["members"], spec["g"], len(spec["members"]), spec["dtype"]
        self.spec_dtype = dtype
        shape = shape_for(spec, spec["counts"][0], n, False)
        axis = spec["axis"] if len(shape) > 1 else 0
        logical, x = self.tensor(spec, spec["key"], None, g, n, shape)
        is_root = self.rank == spec["root"]
        if is_root:
            want = np.concatenate([v.reshape(shape) for v in group_values(
                spec["key"], None, dtype, n, logical.size)], axis=axis)
        else:
            want = logical
        want = bool_form("sum", dtype, want)
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members,
                                what=f"root={spec['root']} axis={axis}",
                                same_object=None if is_root else x)

        self.launch(spec, lambda a: chorus.gather(x, root=spec["root"], axis=axis,
                                                  rank_list=spec["rank_list"], async_op=a), check)

    def do_scatter(self, spec):
        members, g, n, dtype = spec["members"], spec["g"], len(spec["members"]), spec["dtype"]
        self.spec_dtype = dtype
        shape = shape_for(spec, spec["counts"][0], n, True)
        root_g = members.index(spec["root"])
        # Non-roots pass their own content (only root's is read).
        logical, x = self.tensor(spec, spec["key"], None, g, n, shape)
        source = values(spec["key"], None, dtype, root_g, n, logical.size).reshape(shape)
        chunk = shape[0] // n
        want = bool_form("sum", dtype, source[g * chunk:(g + 1) * chunk])
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members, what=f"root={spec['root']}")

        self.launch(spec, lambda a: chorus.scatter(x, root=spec["root"],
                                                   rank_list=spec["rank_list"], async_op=a),
                    check)

    def do_all_to_all(self, spec):
        members, g, n, dtype = spec["members"], spec["g"], len(spec["members"]), spec["dtype"]
        self.spec_dtype = dtype
        split = spec["axis"] % 2 if spec["two_d"] else 0
        concat = spec["concat_axis"] if spec["two_d"] else 0
        if spec["two_d"]:
            cols = spec["cols"]
            rows = max(1, spec["counts"][0] // cols)
            if split == 0:
                rows = n * max(1, rows // n)
            else:
                cols = n * max(1, cols // n)
            shape = (rows, cols)
        else:
            shape = shape_for(spec, spec["counts"][0], n, True)
        logical, x = self.tensor(spec, spec["key"], None, g, n, shape)
        pieces = [np.array_split(v.reshape(shape), n, axis=split)[g]
                  for v in group_values(spec["key"], None, dtype, n, logical.size)]
        want = bool_form("sum", dtype, np.concatenate(pieces, axis=concat))
        self.count_bytes(shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members,
                                what=f"split={split} concat={concat}")

        self.launch(spec, lambda a: chorus.all_to_all(x, split_axis=split, concat_axis=concat,
                                                      rank_list=spec["rank_list"], async_op=a),
                    check)

    def do_barrier(self, spec):
        self.launch(spec, lambda a: chorus.barrier(rank_list=spec["rank_list"], async_op=a),
                    lambda result: None)

    # ----- point to point

    def do_sendrecv(self, spec):
        """Members of the group pair up (a, b); each pair exchanges tensors in one of four ways."""
        members, dtype = spec["members"], spec["dtype"]
        self.spec_dtype = dtype
        order = list(members)
        random.Random(int(spec["pairing"] * 1e9)).shuffle(order)
        pairs = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
        mine = next((p for p in pairs if self.rank in p), None)
        if mine is None:
            return
        a, b = mine
        peer = b if self.rank == a else a
        shape = (spec["counts"][0],)
        n = len(members)
        mode = spec["p2p_mode"]
        tag = spec["tag"]

        def payload(sender):
            key = f"{spec['key']}/p2p{min(a, b)}:{sender}"
            return self.tensor(spec, key, None, members.index(sender), n, shape)

        def receive(is_async):
            want = bool_form("sum", dtype, payload(peer)[0])
            if spec["recv_out"]:
                target = make_tensor(np.zeros(shape, np.int64), dtype, spec["torch"], shape)
                kwargs = {"out": target}
            else:
                target = None
                kwargs = {"shape": shape,
                          "dtype": getattr(torch, dtype) if spec["torch"] else dtype}

            def check(result):
                self.checker.expect(spec, result, want, dtype, members,
                                    what=f"recv from {peer} tag={tag} mode={mode}",
                                    same_object=target)

            call = lambda x: chorus.recv(peer, tag=tag, rank_list=spec["rank_list"],
                                         async_op=x, **kwargs)
            if is_async:
                self.pending.append((call(True), check))
            else:
                check(call(False))

        def send(is_async):
            _, x = payload(self.rank)
            self.count_bytes(shape)
            call = lambda y: chorus.send(x, peer, tag=tag, rank_list=spec["rank_list"],
                                         async_op=y)
            if is_async:
                self.pending.append((call(True), lambda result: None))
            else:
                call(False)

        # Operations of a communicator run one at a time in call order (chorus/communicator.h),
        # async ones too, so each side issues in an order that completes when run that way.
        first, second = (send, receive) if self.rank == a else (receive, send)
        if mode == "oneway":
            send(False) if self.rank == a else receive(False)
        elif mode == "ordered":  # a sends then receives; b receives then sends
            first(False)
            second(False)
        elif mode == "ordered_async":
            first(True)
            second(True)
        else:  # "mixed": a's send is async, the rest blocking
            first(self.rank == a)
            second(False)


# --------------------------------------------------------------------------- main


def detect_features(use_torch):
    with_out = all("out" in inspect.signature(f).parameters
                   for f in (chorus.allreduce, chorus.broadcast, chorus.allgather))
    uneven = "splits" in inspect.signature(chorus.all_to_all).parameters
    features = {"torch": use_torch, "out": with_out, "dict": False, "uneven": uneven}
    try:  # a dict nest: either refused before any communication on every rank, or run by all
        chorus.allreduce({"probe": np.zeros(1, np.float32)})
        features["dict"] = True
    except (chorus.InvalidArgumentError, ValueError, TypeError):
        pass
    return features


def describe(spec):
    keys = ("index", "name", "dtype", "op", "torch", "partition", "roots", "async", "inplace",
            "out", "two_d", "counts", "p2p_mode", "tag")
    return " ".join(f"{k}={spec[k]}".replace(" ", "") for k in keys if k in spec)


def on_sigterm(signum, frame):
    say(f"SOAK-TERM rank={state['rank']} step={state['step']} t={time.monotonic():.6f}")
    os._exit(143)


def main():
    global torch
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many (0: none)")
    parser.add_argument("--max-bytes", type=int, default=16 << 20)
    parser.add_argument("--big-fraction", type=float, default=0.01,
                        help="fraction of sizes above 1 MiB")
    parser.add_argument("--sync-every", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--async-fraction", type=float, default=0.3)
    parser.add_argument("--max-pending", type=int, default=4)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--trace", action="store_true", help="print each step before it runs")
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-step", type=int, default=-1)
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, on_sigterm)
    if not args.no_torch:
        import torch as torch_module
        torch = torch_module
        torch.set_num_threads(1)
    comm = dist.get_communicator()
    rank, size = comm.rank, comm.size
    state["rank"] = rank
    features = detect_features(torch is not None)
    say(f"SOAK-START rank={rank} size={size} backend={comm.backend} pid={os.getpid()} "
        f"features={','.join(k for k, v in features.items() if v) or 'none'}")
    program = Program(args, size, features)
    say(f"SOAK-PARTITIONS rank={rank} " + " ".join(
        f"{i}={str(p).replace(' ', '')}" for i, p in enumerate(program.partitions)))
    for partition in program.partitions:  # made collectively now, not by a step some skip
        dist.get_communicator(rank_list=partition)
    runner = Runner(args, rank, size, features)
    began = time.monotonic()
    step = 0
    try:
        while True:
            state["step"] = step
            if rank == args.kill_rank and step == args.kill_step:
                say(f"SOAK-KILL rank={rank} step={step} t={time.monotonic():.6f}")
                os.kill(os.getpid(), signal.SIGKILL)
            if step % args.sync_every == 0 and step > 0:
                runner.wait_some()
                up = time.monotonic() - began >= args.seconds and step > args.kill_step
                if args.max_steps and step >= args.max_steps:
                    up = True
                flag = chorus.allreduce(np.array([int(up)], np.int32), "max")
                runner.ops += 1
                if flag[0]:
                    break
            spec = program.step(step)
            if args.trace:
                say(f"SOAK-STEP rank={rank} " + describe(spec))
            runner.run(spec, program)
            runner.wait_some()
            step += 1
        runner.wait_all()
        chorus.barrier()
    except chorus.Error as error:
        say(f"SOAK-ERROR rank={rank} step={state['step']} t={time.monotonic():.6f} "
            f"type={type(error).__name__} peer={getattr(error, 'peer_rank', '')} "
            f"missing={','.join(map(str, getattr(error, 'missing_ranks', None) or []))} "
            f"message={error}")
        raise  # as a user's program would: chorus's excepthook aborts, peers hear why
    except Exception as error:  # a harness bug or an error that is not a chorus.Error
        say(f"SOAK-ERROR rank={rank} step={state['step']} t={time.monotonic():.6f} "
            f"type=NOT-CHORUS:{type(error).__name__} peer= missing= message={error!r} "
            f"traceback={traceback.format_exc()}")
        raise
    say(f"SOAK-SUMMARY rank={rank} ops={runner.ops} bytes={runner.bytes} "
        f"wrong={runner.checker.wrong} seconds={time.monotonic() - began:.1f}")
    return 3 if runner.checker.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
