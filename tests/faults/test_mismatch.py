"""Inconsistent calls across ranks, with real processes: chorusrun runs mismatch.py on 3 ranks and
the last rank calls the collective differently in one field. Every rank must raise MismatchError
naming the field and ranks, with both values in its message, on both backends: in the mismatched
call, or (a rank whose part of it could complete, e.g. a broadcast leaf) at its next operation.

Run by ctest as (see CMakeLists.txt)
    CHORUSRUN=<build>/bin/chorusrun PYTHONPATH=<build>/python /usr/bin/python3 -m pytest test_mismatch.py
"""

import os
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHORUSRUN = os.environ.get("CHORUSRUN", "chorusrun")
RANKS = 3
ODD = RANKS - 1

# field -> (the values each side's message must show: (normal ranks', the odd rank's))
CASES = {
    "collective": ("allreduce", "allgather"),
    "dtype": ("float32", "float64"),
    "count": ("1000", "1001"),
    "root": ("0", "1"),
    "reduce_op": ("sum", "max"),
    "rank_list": ("allreduce", "group setup"),
    "rank_list_groups": ("[[0, 1], [2]]", "[[0, 2], [1]]"),
}


def run(field, backend):
    env = dict(os.environ, CHORUS_BACKEND=backend, CHORUS_TIMEOUT="30", PYTHONUNBUFFERED="1")
    done = subprocess.run([CHORUSRUN, "-np", str(RANKS), "/usr/bin/python3",
                           os.path.join(HERE, "mismatch.py"), field],
                          env=env, capture_output=True, text=True, timeout=120)
    results = {}
    for line in done.stdout.splitlines():
        line = re.sub(r"^\[\d+\] ", "", line)
        if line.startswith("RESULT "):
            head, _, message = line.partition(" message=")
            fields = dict(item.split("=", 1) for item in head.split()[1:])
            fields["message"] = message
            results[int(fields["rank"])] = fields
    return done, results


@pytest.mark.parametrize("backend", ["shm", "tcp"])
@pytest.mark.parametrize("field", sorted(CASES))
def test_mismatch_raises_on_every_rank(field, backend):
    done, results = run(field, backend)
    describe = f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.returncode == 1, describe
    normal, odd = CASES[field]
    expected_field = "rank_list" if field.startswith("rank_list") else field
    for rank in range(RANKS):
        result = results.get(rank)
        assert result is not None and result["outcome"] == "error", describe
        assert result["type"] == "MismatchError", describe
        assert result["field"] == expected_field, describe
        ranks = {int(r) for r in result["ranks"].split(",")}
        # The ranks whose calls disagreed (this rank's pair, or the pair quoted from the rank that
        # noticed first): always the odd one and someone else.
        assert ODD in ranks and len(ranks) >= 2, describe
        assert normal in result["message"] and odd in result["message"], describe
