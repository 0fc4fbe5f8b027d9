"""torch 2's composable parallelism on the "chorus" backend: what torch 2 programs build on top of
torch.distributed, unchanged but for the backend's name. A DeviceMesh over chorus's group,
functional collectives (torch.distributed._functional_collectives, which torch.compile and
DTensor use) with their coalesced forms, DTensor, FSDP2's `fully_shard`, tensor parallel's
`parallelize_module`, and torch.distributed.pipelining's schedules. On CPU tensors here; on CUDA
ones too where there is a GPU.

Needs torch >= 2.6 (public DTensor and `fully_shard`); skipped on Debian's torch 1.13.

Expected values are closed forms of (rank, index), or the same model on one process trained on
every rank's rows, never chorus's own results. Every rank runs every test in the same order; skips
depend on the size and the machine only.
"""

import datetime
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as tdist

import chorus.torch._backend as backend
from helpers import CUDA, cuda_device
from torch_backend_common import Net, batches, train, values

try:
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
except ImportError:  # torch 1.13
    fully_shard = None

pytestmark = [
    pytest.mark.skipif(fully_shard is None or backend._c10d is None,
                       reason="needs torch >= 2.6 and the torch backend built against it"),
    # torch 2.14 renamed several functional collectives (all_gather_tensor: all_gather_single);
    # the old names, which torch 2.6 already has, still work and warn.
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

CUDA_BACKEND = CUDA and backend._c10d is not None and backend._c10d.takes_cuda_tensors
DEVICES = ["cpu"] + (["cuda"] if CUDA_BACKEND else [])


@pytest.fixture(scope="module")
def meshes(world, size):
    """One 1-D mesh over every rank per device type, made once (a mesh is collective)."""
    return {device: init_device_mesh(device, (size,)) for device in DEVICES}


def on(device, tensor):
    return tensor.to(cuda_device()) if device == "cuda" else tensor


def plain(tensor):
    """A functional collective's result as a CPU tensor (it may be an AsyncCollectiveTensor)."""
    if hasattr(tensor, "wait"):
        tensor = tensor.wait()
    return torch.as_tensor(tensor).cpu()


@pytest.mark.parametrize("device", DEVICES)
def test_functional_collectives_match_closed_forms(meshes, size, rank, device):
    mesh, n = meshes[device], 6
    mine = on(device, values(rank, n, torch.float32))
    every = [values(r, n, torch.float32) for r in range(size)]
    np.testing.assert_array_equal(plain(funcol.all_reduce(mine, "sum", mesh)).numpy(),
                                  sum(every).numpy())
    np.testing.assert_array_equal(plain(funcol.all_reduce(mine, "max", mesh)).numpy(),
                                  every[-1].numpy())
    np.testing.assert_array_equal(plain(funcol.all_gather_tensor(mine, 0, mesh)).numpy(),
                                  torch.cat(every).numpy())
    # Gathered along dimension 1: torch gathers along 0 and moves the pieces itself.
    rows = mine.reshape(2, 3)
    np.testing.assert_array_equal(
        plain(funcol.all_gather_tensor(rows, 1, mesh)).numpy(),
        torch.cat([e.reshape(2, 3) for e in every], dim=1).numpy())
    # Rank r's input: (r + 1) * (i % 5 + 1) over size * n elements; it keeps the sum of chunk r.
    long = on(device, values(rank, size * n, torch.float32))
    summed = sum(values(r, size * n, torch.float32) for r in range(size))
    np.testing.assert_array_equal(plain(funcol.reduce_scatter_tensor(long, "sum", 0, mesh)).numpy(),
                                  summed[rank * n:(rank + 1) * n].numpy())
    np.testing.assert_array_equal(plain(funcol.broadcast(mine, size - 1, mesh)).numpy(),
                                  every[-1].numpy())
    # all_to_all_single, even splits: chunk j of rank r's input lands in chunk r of rank j's output.
    swapped = plain(funcol.all_to_all_single(long, None, None, mesh))
    expected = torch.cat([values(r, size * n, torch.float32)[rank * n:(rank + 1) * n]
                          for r in range(size)])
    np.testing.assert_array_equal(swapped.numpy(), expected.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_coalesced_flat_collectives_run_every_pair(meshes, size, rank, device):
    """all_gather_into_tensor_coalesced and reduce_scatter_tensor_coalesced (torch 2's coalesced
    flat forms, which FSDP2 and DTensor issue): pairs of different dtypes and sizes."""
    mesh = meshes[device]
    inputs = [on(device, values(rank, 4, torch.float32)), on(device, values(rank, 7, torch.int64)),
              on(device, values(rank, 1, torch.bfloat16))]
    gathered = funcol.all_gather_into_tensor_coalesced(inputs, mesh)
    for got, like in zip(gathered, inputs):
        expected = torch.cat([values(r, like.numel(), like.dtype) for r in range(size)])
        np.testing.assert_array_equal(plain(got).float().numpy(), expected.float().numpy())
    longs = [on(device, values(rank, size * k, dtype))
             for k, dtype in [(3, torch.float32), (5, torch.int32), (2, torch.float64)]]
    scattered = funcol.reduce_scatter_tensor_coalesced(longs, "sum", [0, 0, 0], mesh)
    for got, long in zip(scattered, longs):
        k = long.numel() // size
        summed = sum(values(r, long.numel(), long.dtype) for r in range(size))
        np.testing.assert_array_equal(plain(got).numpy(), summed[rank * k:(rank + 1) * k].numpy())


def test_coalesced_sizes_that_differ_across_ranks_fail_on_every_rank(meshes, size, rank,
                                                                     multi_rank):
    """Rank 0's second pair is longer than the others': every rank gets chorus's mismatch error,
    none hangs or computes on mismatched data. The failure ends the group (as an NCCL error ends a
    communicator), so it runs on a group of its own; the world goes on."""
    group = tdist.new_group(list(range(size)))
    length = size * (6 if rank == 0 else 5)
    longs = [values(rank, size * 2, torch.float32), values(rank, length, torch.float32)]
    failures = []
    for got in funcol.reduce_scatter_tensor_coalesced(longs, "sum", [0, 0], group):
        try:  # every output is waited for, the failed ones too
            plain(got)
        except RuntimeError as error:
            failures.append(str(error))
    assert failures and all("does not match rank" in failure for failure in failures), failures
    total = plain(funcol.all_reduce(torch.ones(2), "sum", meshes["cpu"]))
    np.testing.assert_array_equal(total.numpy(), np.full(2, size, dtype=np.float32))


def test_a_bad_pair_fails_the_coalesced_call_before_anything_runs(world, size, rank):
    """Every pair is checked before any is issued: a later pair's wrong size or layout fails the
    call on every rank (the same local check everywhere), and nothing of it is left running."""
    group = tdist.new_group(list(range(size)))
    untouched = [torch.full((3 * size,), -1.0), torch.full((3,), -1.0), torch.full((3,), -1.0)]
    with pytest.raises(RuntimeError, match="must hold group size x input"):
        group.allgather_into_tensor_coalesced([untouched[0], torch.zeros(3 * size + 1)],
                                              [torch.ones(3), torch.ones(3)])
    with pytest.raises(RuntimeError, match="must hold group size x output"):
        group.reduce_scatter_tensor_coalesced([untouched[1], torch.zeros(2)],
                                              [torch.ones(3 * size), torch.ones(2 * size + 1)])
    with pytest.raises(RuntimeError, match="differs from the input's"):
        group.reduce_scatter_tensor_coalesced([untouched[1], torch.zeros(2, dtype=torch.float64)],
                                              [torch.ones(3 * size), torch.ones(2 * size)])
    strided = torch.ones(3 * size, 2)[:, 0]  # a column: not contiguous
    with pytest.raises(RuntimeError, match="contiguous"):
        group.reduce_scatter_tensor_coalesced([untouched[2], torch.zeros(3)],
                                              [torch.ones(3 * size), strided])
    # The group runs in issue order: once this is done, anything issued before would be too.
    gathered = torch.zeros(3 * size)
    group.allgather_into_tensor_coalesced([gathered], [torch.full((3,), float(rank + 1))]).wait()
    expected = torch.cat([torch.full((3,), float(r + 1)) for r in range(size)])
    np.testing.assert_array_equal(gathered.numpy(), expected.numpy())
    for tensor in untouched:  # the first pairs of the failed calls never ran
        np.testing.assert_array_equal(tensor.numpy(), np.full(tensor.numel(), -1.0,
                                                              dtype=np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_dtensors_shard_redistribute_and_compute(meshes, size, rank, device):
    mesh = meshes[device]
    full = torch.arange(12.0 * 4).reshape(12, 4)  # 12 rows divide among 1 to 4 ranks
    rows = distribute_tensor(on(device, full), mesh, [Shard(0)])
    per = 12 // size
    np.testing.assert_array_equal(rows.to_local().cpu().numpy(),
                                  full[rank * per:(rank + 1) * per].numpy())
    np.testing.assert_array_equal(rows.full_tensor().cpu().numpy(), full.numpy())
    # Shard(0) -> Replicate is an all_gather; Shard(0) -> Shard(1) an all_to_all.
    columns = rows.redistribute(mesh, [Shard(1)])
    np.testing.assert_array_equal(columns.full_tensor().cpu().numpy(), full.numpy())
    # A row-sharded matrix times a replicated one: the product, sharded by rows.
    right = distribute_tensor(on(device, torch.ones(4, 3)), mesh, [Replicate()])
    product = (rows @ right).full_tensor().cpu()
    np.testing.assert_array_equal(product.numpy(), (full @ torch.ones(4, 3)).numpy())
    # A sum over the sharded dimension: a partial sum on each rank, all-reduced.
    np.testing.assert_array_equal(rows.sum(dim=0).full_tensor().cpu().numpy(),
                                  full.sum(dim=0).numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_fully_shard_trains_as_one_process(meshes, size, rank, device):
    """FSDP2 (`fully_shard` on each layer and the root) on chorus: after 5 SGD steps on this
    rank's rows, the full parameters equal one process's trained on every rank's rows."""
    where = cuda_device() if device == "cuda" else "cpu"
    torch.manual_seed(0)
    reference = Net().to(where)
    model = Net().to(where)
    model.load_state_dict(reference.state_dict())
    fully_shard(model.hidden, mesh=meshes[device])
    fully_shard(model.out, mesh=meshes[device])
    fully_shard(model, mesh=meshes[device])
    sharded = [p for p in model.parameters()]
    assert all(p.placements == (Shard(0),) for p in sharded)

    def full_parameters():
        return [p.full_tensor() for p in model.parameters()]

    expected = train(reference, None, size, rank, device=where)
    got = train(model, tdist.group.WORLD, size, rank, device=where,
                parameters=full_parameters)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(6, 12)  # 12: divides among 1 to 4 ranks
        self.down = torch.nn.Linear(12, 6)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_parallel_mlp_matches_the_unsplit_one(meshes, size, rank, device):
    """`parallelize_module` with a column-parallel up and a row-parallel down projection: the
    forward, the input's gradient and every weight's gradient equal the unsplit model's."""
    where = cuda_device() if device == "cuda" else "cpu"
    torch.manual_seed(0)
    reference = MLP().to(where)
    model = MLP().to(where)
    model.load_state_dict(reference.state_dict())
    parallelize_module(model, meshes[device], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x, _ = batches(0, 1)  # the same 8 rows on every rank, as tensor parallel takes them
    x_ref = x.to(where).requires_grad_()
    x_tp = x.to(where).requires_grad_()
    expected = reference(x_ref)
    got = model(x_tp)
    np.testing.assert_allclose(got.detach().cpu().numpy(), expected.detach().cpu().numpy(),
                               rtol=1e-5, atol=1e-6)
    expected.square().sum().backward()
    got.square().sum().backward()
    np.testing.assert_allclose(x_tp.grad.cpu().numpy(), x_ref.grad.cpu().numpy(), rtol=1e-5,
                               atol=1e-6)
    for name, parameter in model.named_parameters():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full = parameter.grad.full_tensor()
        np.testing.assert_allclose(full.cpu().numpy(),
                                   reference.get_parameter(name).grad.cpu().numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("schedule", ["ScheduleGPipe", "Schedule1F1B"])
def test_pipeline_schedules_match_the_unsplit_model(world, size, rank, multi_rank, device,
                                                    schedule):
    """torch.distributed.pipelining: one Linear layer per rank, 4 microbatches, activations and
    their gradients sent between stages over chorus. The last stage's output and losses, and
    every stage's weight gradient, equal the unsplit model's on one process (the gradient of the
    microbatches' mean loss, which the schedules accumulate)."""
    from torch.distributed import pipelining

    where = torch.device(cuda_device() if device == "cuda" else "cpu")
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(6, 6) for _ in range(size)]).to(where)
    reference = torch.nn.Sequential(*[torch.nn.Linear(6, 6) for _ in range(size)]).to(where)
    reference.load_state_dict(layers.state_dict())
    stage = pipelining.PipelineStage(layers[rank], rank, size, where)

    def loss_fn(output, target):
        return (output - target).square().mean()

    runner = getattr(pipelining, schedule)(stage, n_microbatches=4, loss_fn=loss_fn)
    x, _ = batches(0, 1)
    x, target = x.to(where), torch.cos(x).to(where)
    losses = []
    if rank == 0:
        runner.step(x)
    elif rank == size - 1:
        output = runner.step(target=target, losses=losses)
    else:
        runner.step()
    expected_losses = [loss_fn(reference(x[2 * m:2 * m + 2]), target[2 * m:2 * m + 2])
                       for m in range(4)]
    (sum(expected_losses) / 4).backward()
    if rank == size - 1:
        np.testing.assert_allclose(output.detach().cpu().numpy(),
                                   reference(x).detach().cpu().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose([float(v) for v in losses],
                                   [float(v) for v in expected_losses], rtol=1e-5)
    for name in ("weight", "bias"):
        np.testing.assert_allclose(getattr(layers[rank], name).grad.cpu().numpy(),
                                   getattr(reference[rank], name).grad.cpu().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)


def test_a_group_made_by_its_members_only_leaves_later_groups_matched(world, size, rank):
    """new_group(use_local_synchronization=True) is called by its members alone, and advances
    torch's group counter on them only: every group made afterwards is named differently on the
    ranks outside it. chorus names its groups by their members, so a 2-D DeviceMesh made next
    (groups over every rank) still connects and reduces."""
    if size % 2 or size < 4:
        pytest.skip("needs a rank outside the group and a 2 x (size / 2) mesh")
    if rank < 2:
        pair = tdist.new_group([0, 1], use_local_synchronization=True)
        total = torch.ones(1)
        tdist.all_reduce(total, group=pair)
        assert total.item() == 2
    half = size // 2  # mesh[i][j] is rank i * half + j
    mesh = init_device_mesh("cpu", (2, half), mesh_dim_names=("replicate", "shard"))
    for dim, members in [("replicate", [r for r in range(size) if r % half == rank % half]),
                         ("shard", [r for r in range(size) if r // half == rank // half])]:
        mine = torch.tensor([float(rank + 1)])
        tdist.all_reduce(mine, group=mesh.get_group(dim))
        assert mine.item() == sum(r + 1 for r in members), dim
    # torch's own group counter still differs across ranks, and torch's later new_group calls
    # over every rank would hang in torch's store barrier (the other tests of this process make
    # some): the other ranks make a group of their own the same way, which evens the counts.
    if rank >= 2:
        tdist.new_group(list(range(2, size)), use_local_synchronization=True)


def test_two_dimensional_tensor_parallel_and_fully_shard_train_as_one_process(world, size, rank):
    """The 2-D layout of large-model training: tensor parallel inside each row of a
    2 x (size / 2) mesh, FSDP2 across the rows (each row its own 8 samples). After 3 SGD steps
    the full parameters equal one process's trained on both rows' 16 samples."""
    if size % 2 or size < 4:
        pytest.skip("needs a 2 x (size / 2) mesh with at least 2 ranks in a row")
    half = size // 2
    mesh = init_device_mesh("cpu", (2, half), mesh_dim_names=("data", "tensor"))
    torch.manual_seed(0)
    reference = MLP()
    model = MLP()
    model.load_state_dict(reference.state_dict())
    parallelize_module(model, mesh["tensor"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(model, mesh=mesh["data"])
    row = rank // half
    for trained, rows in [(reference, slice(0, 16)), (model, slice(8 * row, 8 * row + 8))]:
        optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
        for step in range(3):
            x, _ = batches(step, 2)
            optimizer.zero_grad()
            (trained(x[rows]) - torch.cos(x[rows])).square().mean().backward()
            optimizer.step()
    for name, parameter in model.named_parameters():
        np.testing.assert_allclose(parameter.full_tensor().detach().numpy(),
                                   reference.get_parameter(name).detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)


@pytest.mark.skipif(not hasattr(tdist.ProcessGroup, "split_group"),
                    reason="needs torch >= 2.8 (ProcessGroup.split_group)")
def test_split_group_makes_groups_of_the_given_ranks(world, size, rank):
    """ProcessGroup.split_group, which torch's split_group and a DeviceMesh on a device-bound
    group call, on the world and on the group of ranks 1, 2, ... (split ranks are the parent's
    ranks): the even and the odd parent ranks each get a group of their own, twice (two
    groups of the same ranks are two groups), each reducing over its members only. A rank in no
    split gets no group."""
    assert world._get_backend(torch.device("cpu")).supports_splitting
    tail = tdist.new_group(list(range(1, size))) if size > 2 else None  # group rank g: rank g + 1
    parents = [(world, lambda g: g)] + ([(tail, lambda g: g + 1)] if rank > 0 and tail else [])
    for parent, global_rank_of in parents:
        me = parent.rank()
        mine = [g for g in range(parent.size()) if g % 2 == me % 2]
        groups = [parent.split_group(mine, datetime.timedelta(seconds=60)) for _ in range(2)]
        for scale, group in zip((1.0, 10.0), groups):
            assert (group.size(), group.rank()) == (len(mine), mine.index(me))
            total = torch.tensor([scale * (rank + 1)])
            group.allreduce([total]).wait()
            assert total.item() == scale * sum(global_rank_of(g) + 1 for g in mine)
    # Only ranks 0 and 1 in a split (torch hands the others split_ranks[0]).
    pair = world.split_group([0, 1] if size > 1 else [0], datetime.timedelta(seconds=60))
    if rank < 2:
        total = torch.ones(1)
        pair.allreduce([total]).wait()
        assert total.item() == min(size, 2)
    else:
        assert pair is None
