"""pytest configuration for the chorus Python tests.

Run under chorusrun (`chorusrun -np N python3 -m pytest -q -x tests/python`): every rank collects and
runs the same tests in the same order, so their collectives line up. Skips depend only on the world
size, never on the rank, for the same reason.
"""

import datetime
import os
import secrets
import shutil
import socket
import sys
import tempfile

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chorus  # noqa: E402
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


@pytest.fixture
def shared_directory(comm):
    """A fresh directory with the same name on every rank (rank 0 picks it); removed afterwards."""
    token = np.array([secrets.randbits(62) if comm.rank == 0 else 0], dtype=np.int64)
    token = chorus.broadcast(token, root=0)
    directory = os.path.join(tempfile.gettempdir(), f"chorus-zero-test-{int(token[0]):x}")
    yield directory
    chorus.barrier()
    if comm.rank == 0:
        shutil.rmtree(directory, ignore_errors=True)


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


@pytest.fixture(scope="module")
def world(comm, size):
    """The default torch process group on chorus (test_17, test_27), made as an unchanged program
    makes it (env://, which chorusrun sets; under mpirun the variables are set here, as a user's
    script would)."""
    import torch.distributed as tdist

    import chorus
    import chorus.torch  # noqa: F401  registers the backend
    if "MASTER_PORT" not in os.environ:
        port = 0
        if comm.rank == 0:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        port = int(chorus.broadcast(np.array([port], dtype=np.int64))[0])
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(comm.rank),
                          WORLD_SIZE=str(size))
    if not tdist.is_initialized():
        tdist.init_process_group("chorus", timeout=datetime.timedelta(seconds=60))
    assert tdist.get_backend() == "chorus"
    return tdist.group.WORLD
