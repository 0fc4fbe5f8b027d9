"""pytest configuration for the chorus Python tests.

Run under chorusrun (`chorusrun -np N python3 -m pytest -q -x tests/python`): every rank collects and
runs the same tests in the same order, so their collectives line up. Skips depend only on the world
size, never on the rank, for the same reason.
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chorus.distributed as dist  # noqa: E402

# Two cores are shared by all ranks: keep torch's own thread pool out of the way.
torch.set_num_threads(1)
# JAX (the grid's "jax_cuda" kind, helpers.py) would take 75% of the GPU in every rank at its
# first use; the ranks of a test share one GPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# The shared-GPU switch (issue 18): ranks that share a GPU need NCCL to see each one as a host of
# its own, talking over loopback sockets; set before NCCL starts (the first CUDA collective).
# CHORUS_TEST_SHARED_GPU=1 forces it; it is on by itself when there are fewer GPUs than ranks.
if torch.cuda.is_available() and (
        os.environ.get("CHORUS_TEST_SHARED_GPU") == "1"
        or torch.cuda.device_count() < int(os.environ.get("CHORUS_LOCAL_SIZE", "1"))):
    os.environ.setdefault("NCCL_HOSTID", "chorus-test-rank-" + os.environ.get("CHORUS_RANK", "0"))
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


@pytest.fixture(scope="session")
def comm():
    return dist.get_communicator()


@pytest.fixture(scope="session")
def rank(comm):
    return comm.rank


@pytest.fixture(scope="session")
def size(comm):
    return comm.size


@pytest.fixture
def multi_rank(size):
    if size == 1:
        pytest.skip("needs more than one rank")
