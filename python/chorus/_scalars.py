"""Python numbers in allreduce, reduce and broadcast: `total = chorus.allreduce(count)`, as
mpi4py's lowercase `comm.allreduce(count)` is written most often.

A Python bool, int, float or complex travels as a 0-d NumPy array of bool, int64, float64 or
complex128, and the result comes back as a Python number of the same type. Every rank must pass
the same type (a float on one rank and an int on another is a MismatchError naming the dtype, on
every rank). An int past int64 is refused (mpi4py would add Python ints of any size; chorus
reduces machine numbers). The result is returned, so inplace=, out= and async_op= need an array:
pass np.asarray(x). (Not here: nests and lists of Python numbers; a NumPy scalar is an array.)
"""

import numpy as np

from . import _chorus

DTYPES = {bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}
_INT64 = (-(1 << 63), 1 << 63)


def number_call(front, given):
    """`front` (allreduce, reduce or broadcast) called with `given` (its parameters by name), whose
    x is a Python number: x as a 0-d array, and the result as a number of x's type."""
    x = given["x"]
    kind, name = type(x), front.__name__
    refused = [flag for flag in ("async_op", "inplace") if given[flag] is not False]
    refused += ["out="] if given["out"] is not None else []
    if refused:
        raise _chorus.InvalidArgumentError(
            f"{name}: x is a Python {kind.__name__}, whose result is returned: "
            f"{' and '.join(refused)} {'needs' if len(refused) == 1 else 'need'} an array "
            "(pass np.asarray(x))")
    if kind is int and not _INT64[0] <= x < _INT64[1]:
        raise _chorus.InvalidArgumentError(
            f"{name}: x is a Python int past int64 ({x}); chorus reduces machine numbers (pass "
            "it as a float, or split it)")
    return kind(front(**dict(given, x=np.array(x, DTYPES[kind]))).item())
