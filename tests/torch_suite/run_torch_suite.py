"""Runs PyTorch's own distributed test suite against a backend, as third-party backends do:

    BACKEND=chorus WORLD_SIZE=2 /usr/bin/python3 tests/torch_suite/run_torch_suite.py [-k PATTERN]
    BACKEND=gloo   WORLD_SIZE=2 /usr/bin/python3 tests/torch_suite/run_torch_suite.py [-k PATTERN]
    BACKEND=chorus-as-gloo ...


The suite is torch/testing/_internal/distributed/distributed_test.py (TestDistBackend with
DistributedTest._DistTestBase); every test spawns WORLD_SIZE processes, which rendezvous through a
file:// store. For chorus, its name joins DistTestCases.backend_feature "plugin", "ddp" and
"subgroup" before the suite is imported (spawned processes import this file again, so they see the
same). `chorus-as-gloo` runs the suite as if for gloo (BACKEND=gloo, so every test torch gates to
gloo by name runs too) while every process group it creates is a chorus one: init_process_group
and new_group are wrapped to ask for "chorus" where the suite asks for "gloo". Arguments go to torch's run_tests (unittest: -k PATTERN, -v...). stand_ins/ holds a minimal
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
if BACKEND == "chorus-as-gloo":  # the spawned ranks inherit BACKEND=gloo and the marker
    os.environ["BACKEND"] = BACKEND = "gloo"
    os.environ["CHORUS_SUITE_AS_GLOO"] = "1"
AS_GLOO = os.environ.get("CHORUS_SUITE_AS_GLOO") == "1"
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

if AS_GLOO:
    import torch.distributed as dist  # noqa: E402

    def asking_for_chorus(create):
        def create_chorus_instead_of_gloo(*args, **kwargs):
            if kwargs.get("backend") in ("gloo", dist.Backend.GLOO):
                kwargs["backend"] = "chorus"
            return create(*args, **kwargs)
        return create_chorus_instead_of_gloo

    dist.init_process_group = asking_for_chorus(dist.init_process_group)
    dist.new_group = asking_for_chorus(dist.new_group)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
