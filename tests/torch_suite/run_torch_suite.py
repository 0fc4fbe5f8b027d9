"""Runs PyTorch's own distributed test suite against a backend, as third-party backends do:

    BACKEND=chorus WORLD_SIZE=2 /usr/bin/python3 tests/torch_suite/run_torch_suite.py [-k PATTERN]
    BACKEND=gloo   WORLD_SIZE=2 /usr/bin/python3 tests/torch_suite/run_torch_suite.py [-k PATTERN]

The suite is torch/testing/_internal/distributed/distributed_test.py (TestDistBackend with
DistributedTest._DistTestBase); every test spawns WORLD_SIZE processes, which rendezvous through a
file:// store. For chorus, its name joins DistTestCases.backend_feature "plugin", "ddp" and
"subgroup" before the suite is imported (spawned processes import this file again, so they see the
same). Arguments go to torch's run_tests (unittest: -k PATTERN, -v...). stand_ins/ holds a minimal
`expecttest` module, which torch's test utilities import and Debian lacks. CI is unset (below).
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
# torch's test utilities read CI (IS_CI): set, they write XML reports through `xmlrunner`, which
# Debian lacks, and change which tests run. This runner reports on stdout the same everywhere.
os.environ.pop("CI", None)
BACKEND = os.environ.setdefault("BACKEND", "chorus")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch-suite-"))

import torch  # noqa: E402

torch.set_num_threads(1)

import chorus.torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

chorus.torch._backend.register()  # done by the import already; a second call does nothing
if BACKEND == "chorus":
    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("chorus")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
