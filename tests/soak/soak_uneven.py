"""The soak's uneven operations (soak_rank.py mixes them into its Runner): all_to_all with splits
(Horovod's alltoall, MPI's Alltoallv) and allgather with uneven=True (MPI's Allgatherv).

Rows are slices along axis 0 of (rows, cols) arrays. Group rank q sends group rank p
rows_between(spec, q, p, unit) rows: 0, unit // 2 or unit, so that some pairs send none and the
ranks' totals differ; unit comes from the step's drawn count, so blocks land at and around the shm
backend's slot sizes. Rank q's input is values(key, ..., q, ...) (closed_forms.py), and every rank
regenerates its peers' inputs to know what it must receive.
"""

import numpy as np

import chorus
from closed_forms import bool_form, values


def rows_between(spec, q, p, unit):
    return unit * ((q + 2 * p + spec["tag"]) % 3) // 2


def row_shape(spec, count, n):
    """(the unit of rows, the columns) for about `count` elements per rank."""
    cols = spec["cols"] if spec["two_d"] else 1
    return max(1, count // (cols * n)), cols


class UnevenOps:
    """Runner methods (uses self.tensor, self.launch, self.checker, self.count_bytes)."""

    def do_all_to_all_splits(self, spec):
        members, g, n, dtype = spec["members"], spec["g"], len(spec["members"]), spec["dtype"]
        self.spec_dtype = dtype
        unit, cols = row_shape(spec, spec["counts"][0], n)

        def input_of(q):
            rows = sum(rows_between(spec, q, p, unit) for p in range(n))
            return values(spec["key"], None, dtype, q, n, rows * cols).reshape(rows, cols)

        _, x = self.tensor(spec, spec["key"], None, g, n, input_of(g).shape)
        splits = [rows_between(spec, g, p, unit) for p in range(n)]
        pieces, received = [], []
        for q in range(n):
            start = sum(rows_between(spec, q, p, unit) for p in range(g))
            count = rows_between(spec, q, g, unit)
            pieces.append(input_of(q)[start:start + count])
            received.append(count)
        want = bool_form("sum", dtype, np.concatenate(pieces))
        recv_splits = received if spec["pairing"] < 0.5 else None
        self.count_bytes(x.shape)

        def check(result):
            y, got = result
            if list(got) != received:  # compared as a NumPy result, whatever the input's kind
                self.checker.expect({**spec, "torch": False}, np.asarray(got),
                                    np.asarray(received), "int64", members, what="received counts")
            self.checker.expect(spec, y, want, dtype, members, what=f"splits={splits}")

        self.launch(spec, lambda a: chorus.all_to_all(
            x, splits=splits, recv_splits=recv_splits, rank_list=spec["rank_list"], async_op=a),
            check)

    def do_allgather_uneven(self, spec):
        members, g, n, dtype = spec["members"], spec["g"], len(spec["members"]), spec["dtype"]
        self.spec_dtype = dtype
        unit, cols = row_shape(spec, spec["counts"][0], n)

        def input_of(q):
            rows = rows_between(spec, q, 0, unit)
            return values(spec["key"], None, dtype, q, n, rows * cols).reshape(rows, cols)

        _, x = self.tensor(spec, spec["key"], None, g, n, input_of(g).shape)
        want = bool_form("sum", dtype, np.concatenate([input_of(q) for q in range(n)]))
        self.count_bytes(x.shape, want.shape)

        def check(result):
            self.checker.expect(spec, result, want, dtype, members, what="uneven")

        self.launch(spec, lambda a: chorus.allgather(
            x, uneven=True, rank_list=spec["rank_list"], async_op=a), check)
