"""edge_results.py: edge inputs give the results chorus documents, under every launcher and backend.

    edge_results.py --run                    (under a launcher: chorusrun or mpirun, any backend)
    edge_results.py --compare CHORUSRUN N    (runs the above under chorusrun with CHORUS_BACKEND
                                              shm, tcp and hierarchical, and under mpirun with mpi
                                              and mpi_algorithms, and compares what they printed)

--run reduces edge inputs in every valid (dtype, op): NaN (both signs), +-inf, +-0, subnormals,
the largest finite values (float16 sums that overflow, and 2048 + 1 + 1 in float16 or 256 + 1 + 1
in bfloat16, which only one rounding gets right), the extremes of every integer type, bool bytes
other than 0 and 1, and complex numbers with NaN, infinite and huge parts. Rank r's input is column
r of a table that holds every combination of one dtype's edge values across the ranks (k^size rows,
padded to a multiple of 12), so each value meets each other in every position and at every rank.
Each reduction runs as allreduce (a sample of rows, the whole table, a table tiled past the
algorithms' and the shm slots' size thresholds, a list of two arrays, in place), reduce (to rank
0 and to the last rank), reduce_scatter, the same through rank_list groups, torch tensors, and
through the other ways in: async_op, out=, a nest, reduce_scatter of a list, group= of a group
whose ranks are listed in reverse, empty and 0-d arrays.

Expected values are closed forms of chorus/types.h, chorus/communicator.h and core/reduce_kernels.h,
computed here with NumPy and Python integers, never with chorus: integer sums and products wrap;
int8..uint32 averages are exact sums truncated toward zero, int64/uint64 averages wrapped sums
truncated toward zero; bool is "or" (sum, max, bor), "and" (prod, min, band) or "xor" (bxor) of
non-zero bytes, written 0 or 1; float min and max propagate NaN; float16 and bfloat16 accumulate in
float32 and round once (round to nearest even); avg is one division of the sum by the group size;
complex products are the textbook formula (NumPy's), and complex averages divide each part. Where
the semantics leave a choice, any choice passes and prints the same digest:
  - the order and association of a float sum or product (every binary tree of the ranks' values is
    allowed: max + max - max may be inf or max);
  - the sign of a zero that min or max picks among +0 and -0;
  - the sign and payload of a NaN (each NaN part compares equal to any NaN);
  - for float16/bfloat16 avg, whether the float32 quotient or the exact one is rounded.
Also checked: inputs are not modified, and a reduce's non-roots and standalone ranks get their input
back unchanged (bool bytes included). Invalid (op, dtype) pairs must raise on every backend.

Every rank prints "result <case> r<rank> <digest of the canonical result>" (each element that
matched an allowed value counts as the first allowed value, so the choices above do not change it),
"FAIL ..." lines with examples, and "edge_results: rank R PASSED" or "FAILED (n)"; with EDGE_OUT=DIR
(as --compare sets it: mpirun may cut long lines of several ranks) the result lines and the verdict
go to DIR/rank<R>.txt instead. EDGE_DTYPES=float16,bool runs only those dtypes. --compare prints
"edge_results: OK" only when every run passed and printed the same lines (about 11 s on 2 ranks,
18 s on 3 and 34 s on 4, on the 2-core machine).
"""

import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

MPI_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader", "--mca",
             "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"]

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
COMPLEX = ["complex64", "complex128"]
DTYPES = FLOATS + INTS + ["bool"] + COMPLEX
# (dtype, op) pairs that chorus/types.h calls invalid: every backend must raise.
INVALID = [("bool", "avg"), ("float32", "band"), ("float64", "bxor"), ("bfloat16", "bor"),
           ("complex64", "min"), ("complex128", "max"), ("complex64", "band")]
# Big enough for the ring allreduce and the pipelined-chain reduce (over 64 KiB per rank) and for
# more than one 512 KiB shm chunk slot.
BIG_BYTES = 576 * 1024
TORCH_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64",
                "bool", "complex64", "complex128"]  # bfloat16 always goes through torch


def ops_of(dtype):
    if dtype in FLOATS:
        return ["sum", "prod", "min", "max", "avg"]
    if dtype in COMPLEX:
        return ["sum", "prod", "avg"]
    if dtype == "bool":
        return ["sum", "prod", "min", "max", "band", "bor", "bxor"]
    return ["sum", "prod", "min", "max", "avg", "band", "bor", "bxor"]


def storage(dtype):
    """The NumPy dtype holding `dtype`'s bytes: bfloat16 as its bits, bool as its bytes."""
    return {"bfloat16": np.uint16, "bool": np.uint8}.get(dtype, np.dtype(dtype))


def widen_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_bf16(values):
    """float32 -> bfloat16 bits, round to nearest even (NaN -> a quiet NaN)."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def edges(dtype):
    if dtype == "bfloat16":
        ordinary = np.array([-0.0, 0.0, 1.0, 256.0, -3.0, 0.5], np.float32)
        special = [0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x7F7F, 0xFF7F, 0x0001]  # NaN, -NaN, inf,
        return np.concatenate([np.array(special, np.uint16),  # -inf, +-max, least subnormal
                               (ordinary.view(np.uint32) >> 16).astype(np.uint16)])
    if dtype in FLOATS:
        info = np.finfo(dtype)
        values = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -3.0, 0.5, info.max,
                           -info.max, info.smallest_subnormal], dtype)
        bits = values.view(f"u{values.itemsize}")
        bits[1] |= bits.dtype.type(1) << bits.dtype.type(8 * values.itemsize - 1)  # sign of NaN
        if dtype == "float16":
            values = np.append(values, np.float16(2048.0))
        return values
    if dtype in INTS:
        info = np.iinfo(dtype)
        if info.min < 0:
            values = [info.min, info.min + 1, -3, -1, 0, 1, info.max - 1, info.max]
        else:
            values = [0, 1, 2, 3, info.max // 2, info.max // 2 + 1, info.max - 1, info.max]
        return np.array(values, dtype)
    if dtype == "bool":
        return np.array([0, 1, 2, 128, 255], np.uint8)
    big = 3e38 if dtype == "complex64" else 1e308
    inf, nan = np.inf, np.nan
    parts = [(1, 1), (-2, 0.5), (inf, 0), (0, inf), (inf, inf), (nan, 0), (0, nan), (-0.0, -0.0),
             (big, big), (-inf, 2)]
    values = np.zeros(len(parts), dtype)
    values.real = [p[0] for p in parts]
    values.imag = [p[1] for p in parts]
    return values


def table(dtype, size):
    """Column r: rank r's input. Every combination of edge values across the ranks, padded to a
    multiple of 12 rows (any group size here divides it)."""
    values = edges(dtype)
    k = len(values)
    rows = np.arange(-(-k ** size // 12) * 12) % k ** size
    return [values[(rows // k ** r) % k] for r in range(size)]


# -- Expected values -------------------------------------------------------------------------

def trees(values, combine):
    """The results of every way to combine `values` pairwise (every binary tree; the combination
    is commutative, so child order does not matter)."""
    if len(values) == 1:
        return [values[0]]
    out = []
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            rest = [v for m, v in enumerate(values) if m not in (i, j)]
            out += trees(rest + [combine(values[i], values[j])], combine)
    return out


def complex_product(a, b):
    """The textbook product, each operation rounded (NumPy's ufunc; written out here)."""
    out = np.empty_like(a)
    out.real = a.real * b.real - a.imag * b.imag
    out.imag = a.real * b.imag + a.imag * b.real
    return out


def integer_result(op, dtype, cols):
    info = np.iinfo(dtype)
    bits = 8 * np.dtype(dtype).itemsize
    ints = [c.astype(object) for c in cols]
    n = len(cols)

    def wrap(v):
        v %= 1 << bits
        return v - (1 << bits) if v > info.max else v

    def each(fn):
        return np.array([fn(vals) for vals in zip(*ints)], dtype=object)

    if op == "sum":
        out = each(lambda v: wrap(sum(v)))
    elif op == "prod":
        out = each(lambda v: wrap(math.prod(v)))
    elif op == "min":
        out = each(min)
    elif op == "max":
        out = each(max)
    elif op == "avg":  # exact in int64 for 8..32 bits; int64 and uint64 sums wrap first
        def average(v):
            s = sum(v) if bits <= 32 else wrap(sum(v))
            return abs(s) // n * (1 if s >= 0 else -1)
        out = each(average)
    else:
        fn = {"band": lambda a, b: a & b, "bor": lambda a, b: a | b, "bxor": lambda a, b: a ^ b}
        out = each(lambda v: wrap(_fold(fn[op], v)))
    return [out.astype(dtype)]


def _fold(fn, values):
    acc = values[0]
    for v in values[1:]:
        acc = fn(acc, v)
    return acc


def bool_result(op, cols):
    truth = np.array([c != 0 for c in cols])
    if op in ("sum", "max", "bor"):
        out = truth.any(axis=0)
    elif op in ("prod", "min", "band"):
        out = truth.all(axis=0)
    else:
        out = truth.sum(axis=0) % 2 == 1
    return [out.astype(np.uint8)]


def float_result(op, dtype, cols):
    n = len(cols)
    half = dtype in ("float16", "bfloat16")
    if dtype == "bfloat16":
        wide = [widen_bf16(c) for c in cols]
    else:
        wide = [c.astype(np.float32) if half else c for c in cols]

    def narrow(v):
        return round_bf16(v) if dtype == "bfloat16" else v.astype(dtype)

    if op in ("min", "max"):
        stacked = np.array(wide)
        nan = np.isnan(stacked).any(axis=0)
        pick = stacked.min(axis=0) if op == "min" else stacked.max(axis=0)
        pick = np.where(nan, np.nan, pick).astype(stacked.dtype)
        zeros = stacked == 0
        signs = np.signbit(stacked)
        mixed = (zeros & signs).any(axis=0) & (zeros & ~signs).any(axis=0) & (pick == 0)
        return [narrow(pick), narrow(np.where(mixed, -pick, pick).astype(stacked.dtype))]
    combine = np.add if op in ("sum", "avg") else np.multiply
    results = trees(wide, combine)
    if op != "avg":
        return [narrow(r) for r in results]
    out = [narrow((r / r.dtype.type(n)).astype(r.dtype)) for r in results]
    if half:
        out += [narrow((r.astype(np.float64) / n).astype(np.float32)) for r in results]
    return out


def complex_result(op, cols):
    n = len(cols)
    combine = complex_product if op == "prod" else np.add
    results = trees(list(cols), combine)
    if op == "avg":
        for r in results:
            part = r.real.dtype.type(n)
            r.real, r.imag = r.real / part, r.imag / part
    return results


def expected_alternatives(op, dtype, cols):
    """The allowed results of reducing `cols` (storage arrays) with `op`: a list of arrays."""
    with np.errstate(all="ignore"):
        if len(cols) == 1:
            return [cols[0].copy()]
        if dtype in INTS:
            return integer_result(op, dtype, cols)
        if dtype == "bool":
            return bool_result(op, cols)
        found = complex_result(op, cols) if dtype in COMPLEX else float_result(op, dtype, cols)
    distinct = {}
    for alternative in found:
        distinct.setdefault(alternative.tobytes(), alternative)
    return list(distinct.values())


# -- Comparison ------------------------------------------------------------------------------

def parts(array, dtype):
    """(values as floats, their bits): one column, or two for complex; None for integers."""
    if dtype in INTS or dtype == "bool":
        return None
    if dtype == "bfloat16":
        values = widen_bf16(array).reshape(-1, 1)
    elif dtype in COMPLEX:
        values = array.view(array.real.dtype).reshape(-1, 2)
    else:
        values = array.reshape(-1, 1)
    return values, values.view(f"u{values.itemsize}")


def match(got, alternatives, dtype):
    """Per element, the index of the first alternative that `got` equals (NaN parts equal any NaN;
    bits otherwise), or -1."""
    which = np.full(got.shape[0], -1)
    mine = parts(got, dtype)
    for index in reversed(range(len(alternatives))):
        alt = alternatives[index]
        if mine is None:
            same = got.view(f"u{got.itemsize}") == alt.view(f"u{alt.itemsize}")
        else:
            theirs = parts(alt, dtype)
            same = ((mine[1] == theirs[1]) | (np.isnan(mine[0]) & np.isnan(theirs[0]))).all(axis=1)
        which = np.where(same, index, which)
    return which


def canonical(got, alternatives, which, dtype):
    """`got` with each element that matched an allowed value replaced by the first allowed value,
    NaN parts by one quiet NaN: what the digest is of."""
    out = np.where(which >= 0, alternatives[0], got)
    split = parts(out, dtype)
    if split is not None:
        values, bits = split
        if dtype == "bfloat16":
            out = np.where(np.isnan(values[:, 0]), np.uint16(0x7FC0), out)
        else:
            quiet = np.array([np.nan], values.dtype).view(bits.dtype)[0]
            bits[np.isnan(values)] = quiet
    return out


def digest(array):
    return hashlib.sha256(array.dtype.str.encode() + array.tobytes()).hexdigest()[:16]


def show(array, dtype):
    if dtype == "bfloat16":
        array = widen_bf16(array)
    elif dtype == "bool":
        return [int(v) for v in array]
    return [v.item() if hasattr(v, "item") else v for v in array]


# -- The run ---------------------------------------------------------------------------------

class Runner:
    def __init__(self):
        import chorus
        import chorus.distributed as dist
        import torch

        self.chorus, self.torch = chorus, torch
        cfg = dist.get_config()
        self.rank, self.size = cfg.rank, cfg.size
        self.failures = 0
        self.lines = []
        self.cache = {}
        # Groups that exercise rank_list: a 2-rank group and a standalone rank where possible.
        self.groups = {2: [[0, 1]], 3: [[0, 2], [1]], 4: [[0, 2, 3], [1]]}.get(
            self.size, [list(range(self.size))])
        self.group = next(g for g in self.groups if self.rank in g)
        self.reversed_group = None

    def fail(self, text):
        self.failures += 1
        print(f"FAIL rank {self.rank}: {text}", flush=True)

    def to_input(self, array, dtype, framework):
        torch = self.torch
        if dtype == "bfloat16":
            return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        array = array.view(np.bool_) if dtype == "bool" else array
        return torch.from_numpy(array.copy()) if framework == "torch" else array.copy()

    def from_output(self, result, dtype):
        torch = self.torch
        if isinstance(result, torch.Tensor):
            if dtype == "bfloat16":
                return result.view(torch.int16).numpy().view(np.uint16).copy()
            result = result.numpy()
        result = np.ascontiguousarray(result)
        return result.view(np.uint8).copy() if dtype == "bool" else result.copy()

    def expect(self, op, dtype, members, variant, cols):
        key = (op, dtype, tuple(members), variant)
        if key not in self.cache:
            if variant == "big":  # the full table's, tiled
                full = self.expect(op, dtype, members, "full", self.full)
                self.cache[key] = [np.tile(a, len(cols[0]) // len(a)) for a in full]
            else:
                self.cache[key] = expected_alternatives(op, dtype, [cols[m] for m in members])
        return self.cache[key]

    def check(self, name, dtype, got, alternatives, inputs):
        if got.shape != alternatives[0].shape or got.dtype != alternatives[0].dtype:
            self.fail(f"{name}: shape/dtype {got.shape} {got.dtype}, expected "
                      f"{alternatives[0].shape} {alternatives[0].dtype}")
            self.lines.append(f"result {name} r{self.rank} bad-shape")
            return
        which = match(got, alternatives, dtype)
        bad = np.flatnonzero(which < 0)
        if dtype == "bool":  # examples wrong as truth values first
            bad = bad[np.argsort((got[bad] != 0) == (alternatives[0][bad] != 0), kind="stable")]
        if bad.size:
            examples = []
            for i in bad[:3]:
                ins = [show(c[i:i + 1], dtype)[0] for c in inputs]
                allowed = sorted({str(show(a[i:i + 1], dtype)[0]) for a in alternatives})
                examples.append(f"[{i}] inputs {ins} got {show(got[i:i + 1], dtype)[0]} "
                                f"allowed {', '.join(allowed)}")
            truth = ""
            if dtype == "bool":  # how many are wrong as truth values, not only as bytes
                wrong = ((got != 0) != (alternatives[0] != 0)).sum()
                truth = f" ({wrong} of them as truth values)"
            self.fail(f"{name}: {bad.size} of {got.size} elements differ{truth}; " +
                      "; ".join(examples))
        self.lines.append(f"result {name} r{self.rank} "
                          f"{digest(canonical(got, alternatives, which, dtype))}")

    def attempt(self, name, fn):
        try:
            return fn()
        except Exception as error:  # noqa: BLE001 - recorded as the case's result
            self.lines.append(f"result {name} r{self.rank} error:{type(error).__name__}")
            self.fail(f"{name}: raised {type(error).__name__}: {str(error)[:300]}")
            return None

    def case(self, name, dtype, op, cols, variant, call, members, expect_input=False,
             framework="numpy", split=1):
        """Runs call(x) on this rank's column; checks the result against the reduction of
        `members`' columns (or this rank's own input), cut to chunk `split` ways."""
        mine = cols[self.rank]
        x = self.to_input(mine, dtype, framework)
        result = self.attempt(name, lambda: call(x))
        if result is None:
            return
        if not np.array_equal(self.from_output(x, dtype).view(np.uint8), mine.view(np.uint8)):
            self.fail(f"{name}: the input was modified")
        got = (np.concatenate([self.from_output(r, dtype) for r in result])
               if isinstance(result, list) else self.from_output(result, dtype))
        if expect_input:
            alternatives = [mine]
        else:
            alternatives = self.expect(op, dtype, members, variant, cols)
        if split > 1:
            step = len(mine) // split
            at = members.index(self.rank) * step
            alternatives = [a[at:at + step] for a in alternatives]
        self.check(name, dtype, got, alternatives, [cols[m][:len(got)] if split == 1 else
                                                    cols[m][at:at + step] for m in members])

    def run_dtype(self, dtype):
        chorus, size, rank = self.chorus, self.size, self.rank
        full = self.full = table(dtype, size)
        self.cache = {}
        rows = len(full[0])
        sample = np.sort(np.random.default_rng(7).choice(rows, min(rows, 96), replace=False))
        short = [c[sample] for c in full]
        reps = -(-BIG_BYTES // (rows * full[0].itemsize))
        big = [np.tile(c, reps) for c in full]
        everyone, last = list(range(size)), size - 1
        group, groups = self.group, self.groups
        framework = "torch" if dtype == "bfloat16" else "numpy"
        for op in ops_of(dtype):
            def name(what):
                return f"{what}.{op}.{dtype}"

            def case(what, cols, variant, call, members=everyone, **kw):
                kw.setdefault("framework", framework)
                self.case(name(what), dtype, op, cols, variant, call, members, **kw)

            case("allreduce.short", short, "short", lambda x: chorus.allreduce(x, op))
            case("allreduce.full", full, "full", lambda x: chorus.allreduce(x, op))
            case("allreduce.big", big, "big", lambda x: chorus.allreduce(x, op))
            case("allreduce.list", full, "full",
                 lambda x: chorus.allreduce([x[:rows // 3], x[rows // 3:]], op))
            case("allreduce.inplace", full, "full",
                 lambda x: chorus.allreduce(x.clone() if framework == "torch" else x.copy(), op,
                                            inplace=True))
            for root in (0, last):
                case(f"reduce.root{root}", full, "full",
                     lambda x: chorus.reduce(x, root=root, op=op), expect_input=rank != root)
            case("reduce.big.root0", big, "big", lambda x: chorus.reduce(x, root=0, op=op),
                 expect_input=rank != 0)
            case("reduce_scatter.full", full, "full", lambda x: chorus.reduce_scatter(x, op),
                 split=size)
            case("allreduce.rank_list", full, "full",
                 lambda x: chorus.allreduce(x, op, rank_list=groups), members=group)
            case("reduce.rank_list", full, "full",
                 lambda x: chorus.reduce(x, root=group[-1], op=op, rank_list=groups),
                 members=group, expect_input=rank != group[-1])
            case("reduce_scatter.rank_list", full, "full",
                 lambda x: chorus.reduce_scatter(x, op, rank_list=groups), members=group,
                 split=len(group))
            if dtype in TORCH_DTYPES:
                case("allreduce.torch", full, "full", lambda x: chorus.allreduce(x, op),
                     framework="torch")
                case("reduce_scatter.torch", full, "full", lambda x: chorus.reduce_scatter(x, op),
                     framework="torch", split=size)

    def run_paths(self, dtype):
        """The same reductions through the other ways in: async_op, out=, a group of world ranks in
        reverse order (group= and its group ranks), a nest, reduce_scatter of a list, empty and
        0-d arrays."""
        chorus, size, rank = self.chorus, self.size, self.rank
        full = self.full = table(dtype, size)
        rows = len(full[0])
        everyone = list(range(size))
        framework = "torch" if dtype == "bfloat16" else "numpy"
        ranks = self.groups[0][::-1]  # world ranks, group rank order reversed
        if self.reversed_group is None:
            import chorus.distributed as dist
            self.reversed_group = dist.new_group(ranks)
        group = self.reversed_group
        for op in ops_of(dtype):
            def case(what, call, cols=full, members=everyone, **kw):
                variant = "full" if cols is full else what  # names the expected values' cache
                self.case(f"{what}.{op}.{dtype}", dtype, op, cols, variant, call, members,
                          framework=framework, **kw)

            def into(x):
                out = x.clone() if framework == "torch" else x.copy()
                result = chorus.allreduce(x, op, out=out)
                if result is not out:
                    self.fail(f"allreduce.out.{op}.{dtype}: did not return out")
                return out

            case("allreduce.async", lambda x: chorus.allreduce(x, op, async_op=True).wait())
            case("allreduce.out", into)
            case("allreduce.nest", lambda x: [*(lambda d: [d["a"], *d["b"]])(chorus.allreduce(
                {"a": x[:5], "b": [x[5:rows // 2], x[rows // 2:]]}, op))])
            step = rows // size
            case("reduce_scatter.list", lambda x: chorus.reduce_scatter(
                [x[i * step:(i + 1) * step] for i in range(size)], op), split=size)
            empty = [c[:0] for c in full]
            case("allreduce.empty", lambda x: chorus.allreduce(x, op), cols=empty)
            if rank in ranks:
                case("allreduce.group", lambda x: chorus.allreduce(x, op, group=group),
                     members=ranks)
                case("reduce_scatter.group", lambda x: chorus.reduce_scatter(x, op, group=group),
                     members=ranks, split=len(ranks))
                case("reduce.group", lambda x: chorus.reduce(x, root=0, op=op, group=group),
                     members=ranks, expect_input=rank != ranks[0])
            scalar = [c[:1] for c in full]  # as 0-d arrays
            case("allreduce.scalar", lambda x: chorus.allreduce(x.reshape(()), op).reshape(1),
                 cols=scalar)

    def run_invalid(self):
        for dtype, op in INVALID:
            x = self.to_input(edges(dtype), dtype, "torch" if dtype == "bfloat16" else "numpy")
            try:
                self.chorus.allreduce(x, op)
                self.fail(f"invalid.{op}.{dtype}: did not raise")
                outcome = "returned"
            except Exception as error:  # noqa: BLE001 - the outcome is the result
                outcome = f"raised:{type(error).__name__}"
            self.lines.append(f"result invalid.{op}.{dtype} r{self.rank} {outcome}")

    def run(self):
        only = os.environ.get("EDGE_DTYPES")
        for dtype in only.split(",") if only else DTYPES:
            self.run_dtype(dtype)
            self.run_paths(dtype)
        self.run_invalid()
        self.chorus.barrier()
        verdict = "PASSED" if self.failures == 0 else f"FAILED ({self.failures})"
        folder = os.environ.get("EDGE_OUT")  # --compare's: mpirun may cut lines of many ranks
        if folder:
            with open(os.path.join(folder, f"rank{self.rank}.txt"), "w") as out:
                out.write("".join(f"{line}\n" for line in self.lines))
                out.write(f"edge_results: rank {self.rank} {verdict}\n")
        else:
            for line in self.lines:
                print(line, flush=True)
        print(f"edge_results: rank {self.rank} {verdict}", flush=True)
        return 0 if self.failures == 0 else 1


# -- Launching and comparing -----------------------------------------------------------------

def launch(command, env_extra, n):
    folder = tempfile.mkdtemp(prefix="edge_results.")
    env = dict(os.environ, CHORUS_TIMEOUT="60", PYTHONUNBUFFERED="1", EDGE_OUT=folder,
               **env_extra)
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=900)
        text, code = done.stdout, done.returncode
    except subprocess.TimeoutExpired as expired:
        text, code = (expired.stdout or b"").decode(errors="replace") + "\n(timed out)", -1
    lines = [line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line
             for line in text.splitlines()]
    failures = [line for line in lines if line.startswith(("FAIL ", "Traceback", "chorusrun:"))]
    written = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            written += f.read().splitlines()
    shutil.rmtree(folder, ignore_errors=True)
    results = sorted(line for line in written if line.startswith("result "))
    passed = code == 0 and sum(line.startswith("edge_results: rank") and line.endswith("PASSED")
                               for line in written) == n
    return passed, results, failures, text, time.monotonic() - start


def compare(chorusrun, n):
    script = os.path.abspath(__file__)
    python = "/usr/bin/python3"
    runs = []
    for backend in ["shm", "tcp", "hierarchical"]:
        runs.append((f"chorusrun (CHORUS_BACKEND={backend})",
                     [chorusrun, "-np", str(n), python, script, "--run"],
                     {"CHORUS_BACKEND": backend}))
    for backend in ["mpi", "mpi_algorithms"]:
        runs.append((f"mpirun (CHORUS_BACKEND={backend})",
                     ["mpirun", *MPI_FLAGS, "-np", str(n), python, script, "--run"],
                     {"CHORUS_BACKEND": backend}))
    outcomes, ok = [], True
    for name, command, env_extra in runs:
        passed, results, failures, text, seconds = launch(command, env_extra, n)
        print(f"{name}: {'passed' if passed else 'FAILED'}, {len(results)} results, "
              f"{seconds:.0f} s", flush=True)
        for line in failures[:40]:
            print(f"  {line}", flush=True)
        if not results:
            print(text[-3000:], flush=True)
        ok = ok and passed
        outcomes.append((name, dict(line.rsplit(" ", 1) for line in results)))
    reference_name, reference = outcomes[0]
    for name, results in outcomes[1:]:
        for key in sorted(set(results) | set(reference)):
            if results.get(key) != reference.get(key):
                ok = False
                print(f"DIFFERENT under {name}: {key} {results.get(key)} vs "
                      f"{reference.get(key)} under {reference_name}", flush=True)
    print(f"edge_results: {'OK' if ok else 'FAILED'} on {n} ranks", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        sys.exit(Runner().run())
    if sys.argv[1:2] == ["--compare"] and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], int(sys.argv[3])))
    sys.exit(__doc__)
