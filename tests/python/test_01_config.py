"""DistConfig, communicator attributes, the op namespace and pmap (DESIGN §4)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import chorus
import chorus.distributed as dist
from helpers import ALL_OPS


def test_config_matches_communicator(comm):
    cfg = dist.get_config()
    assert cfg.rank == comm.rank
    assert cfg.size == comm.size
    assert cfg.root_rank == 0
    assert 0 <= cfg.local_rank < cfg.local_size
    # chorusrun starts every rank on this one machine.
    assert cfg.local_rank == cfg.rank
    assert cfg.local_size == cfg.size


def test_config_training_switches_default_and_settable():
    cfg = dist.get_config()
    assert cfg.enable_data_parallel is False
    assert cfg.zero_opt_level == 0
    try:
        cfg.zero_opt_level = 2
        assert dist.get_config().zero_opt_level == 2
        cfg.enable_data_parallel = True
        assert dist.get_config().enable_data_parallel is True
    finally:
        cfg.zero_opt_level = 0
        cfg.enable_data_parallel = False
    assert dist.get_config().zero_opt_level == 0
    assert dist.get_config().enable_data_parallel is False


def test_config_dumps_names_fields():
    cfg = dist.get_config()
    text = cfg.dumps()
    assert isinstance(text, str)
    flat = text.lower().replace("_", "")
    for field in ("rank", "size", "localrank", "localsize", "rootrank", "enabledataparallel",
                  "zerooptlevel"):
        assert field in flat, f"{field!r} missing from dumps():\n{text}"
    assert str(cfg) == text  # print(cfg) prints the same lines


def test_communicator_attributes(comm, rank, size):
    assert comm.rank == rank
    assert comm.size == size
    assert comm.world_rank == rank
    assert comm.world_size == size
    assert comm.local_rank == rank
    assert comm.local_size == size
    assert comm.root_rank == 0
    # include/chorus/communicator.h: group_id is the index of this group in the rank_list and
    # group_size the number of groups; the world is one group.
    assert comm.group_size == 1
    assert comm.group_id == 0
    assert 0 <= comm.rank < comm.size


def test_get_communicator_is_stable(comm):
    again = dist.get_communicator()
    assert (again.rank, again.size, again.group_id) == (comm.rank, comm.size, comm.group_id)


COLLECTIVES = ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "gather",
               "scatter", "all_to_all", "send", "recv", "barrier"]


def test_op_namespace_lists_operators():
    # DESIGN §4: dir(chorus.distributed.op) "lists the operators above", i.e. the operations of the
    # code block, each the same callable as chorus.<name>.
    names = set(dir(dist.op))
    for name in COLLECTIVES:
        assert name in names, f"{name!r} missing from dir(chorus.distributed.op): {sorted(names)}"
        assert getattr(dist.op, name) is getattr(chorus, name)


def test_reduce_op_names_are_exported():
    # The reduction names of DESIGN §4 are the ones every reducing call accepts.
    assert set(ALL_OPS) <= set(getattr(chorus, "REDUCE_OPS", ALL_OPS))


def test_error_hierarchy():
    for name in ("InvalidArgumentError", "TimeoutError", "PeerError", "MismatchError",
                 "UnsupportedError"):
        cls = getattr(chorus, name)
        assert issubclass(cls, chorus.Error), name
    assert issubclass(chorus.InvalidArgumentError, ValueError)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_pmap_splits_applies_and_gathers(size, kind):
    full = np.arange(size * 3 * 2, dtype=np.float32).reshape(size * 3, 2)
    x = full if kind == "numpy" else torch.from_numpy(full.copy())
    seen_rows = []

    def fn(part):
        seen_rows.append(tuple(part.shape))
        return part * 2 + 1

    result = chorus.pmap(fn)(x)
    assert seen_rows == [(3, 2)], f"fn should see this rank's (3, 2) slice, saw {seen_rows}"
    got = result.numpy() if isinstance(result, torch.Tensor) else np.asarray(result)
    np.testing.assert_array_equal(got, full * 2 + 1)


def test_config_device_defaults_to_the_local_gpu_and_reads_chorus_device():
    cfg = dist.get_config()
    assert cfg.device == f"cuda:{cfg.local_rank}"
    assert f"device: cuda:{cfg.local_rank}" in cfg.dumps()
    # A fresh one-rank process reads CHORUS_DEVICE, and refuses a malformed one, naming it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    read = "import chorus.distributed as d; print(d.get_config().device)"
    for given, expected in (("cuda:3", "cuda:3"), ("cpu", "cpu")):
        out = subprocess.run([sys.executable, "-c", read], env={**env, "CHORUS_DEVICE": given},
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == expected, out.stderr
    bad = subprocess.run([sys.executable, "-c", read], env={**env, "CHORUS_DEVICE": "gpu1"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "CHORUS_DEVICE must be 'cpu' or 'cuda:N'" in bad.stderr


def test_a_malformed_variable_is_reported_once():
    """An uncaught error about a malformed CHORUS_* variable: the excepthook's abort and the atexit
    shutdown made a context to act on, which read the environment again, and raised the same error
    twice more (an audit found three copies). With no live context they now do nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    read = "import chorus.distributed as d; d.get_config()"
    out = subprocess.run([sys.executable, "-c", read], env={**env, "CHORUS_TIMEOUT": "abc"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert out.stderr.count('CHORUS_TIMEOUT="abc" is not a non-negative number') == 1, out.stderr


def test_gpu_backend_says_whether_the_build_has_nccl():
    built = os.environ.get("CHORUS_TEST_WITH_NCCL")  # the build's CHORUS_WITH_NCCL, set by ctest
    if built is None:
        pytest.skip("run outside ctest: the build's CHORUS_WITH_NCCL is unknown here")
    assert chorus._chorus.gpu_backend == (built.upper() in ("ON", "1", "TRUE", "YES")), built
