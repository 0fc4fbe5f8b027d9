"""chorus.torch.nn (issue 23): differentiable collectives and tensor-parallel layers.

Collectives: the backward of each distributed function is compared with central finite
differences of that distributed function itself. Every rank holds an input x_r and a fixed random
weighting w_r of its output; the objective is S = sum_r <w_r, f(x)_r>, which every rank computes
(chorus.allreduce of its own term). Each rank's autograd gradient of its own term, through the
adjoint collectives, must equal dS/dx_r: all ranks step through one perturbation loop in
lockstep, in which one rank at a time perturbs one element of its input.

Layers: forward and gradients equal those of the unsplit torch module (float64; sharded parameters
against their part of the unsplit gradient, replicated tensors summed over the group first, and a
replicated loss divided by the group size: chorus.torch.nn.functional's gradient convention), and
a few training steps of examples/python/tensor_parallel_mlp.py's mesh equal those of the unsplit
model in one process.

Group cases: "world" (rank_list None), "all_but_last" (from 3 ranks: [[0, .., size-2]], the last
rank standalone), "pairs" (4 ranks: [[0, 1], [2, 3]]); which cases exist depends on the world size
only, as do the skips.
"""

import importlib.util
import os

import pytest
import torch

import chorus
import chorus.distributed as dist
import chorus.torch.nn as cnn
import chorus.torch.nn.functional as cf

SIZE = dist.get_config().size
RANK = dist.get_config().rank
F64 = torch.float64
EXACT = dict(rtol=1e-10, atol=1e-10)  # float64 against the unsplit module (required: 1e-5)


# The group cases this world size has (collected alike on every rank).
GROUP_CASES = ["world"] + (["all_but_last"] if SIZE >= 3 else []) + (["pairs"] if SIZE == 4 else [])


def rank_list_of(case):
    return {"world": None, "all_but_last": [list(range(SIZE - 1))],
            "pairs": [[0, 1], [2, 3]]}[case]


def group_of(rank_list):
    """World ranks of the caller's group (collective the first time: every rank calls it)."""
    return list(dist.get_communicator(rank_list).members)


def rank_random(shape, seed):
    """Random float64 values that differ from rank to rank."""
    generator = torch.Generator().manual_seed(1000 * seed + RANK)
    return torch.randn(shape, generator=generator, dtype=F64)


def shared_random(shape, seed):
    """Random float64 values, the same on every rank."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def check_gradient(fn, x, eps=1e-5, tol=1e-7):
    """fn maps this rank's input to this rank's output and is collective (every rank calls it)."""
    with torch.no_grad():
        weight = rank_random(fn(x).shape, seed=7)

    def objective(xv):
        with torch.no_grad():
            mine = (weight * fn(xv)).sum().reshape(1)
        return float(chorus.allreduce(mine)[0])

    leaf = x.clone().requires_grad_(True)
    (weight * fn(leaf)).sum().backward()
    assert leaf.grad is not None, "no gradient reached the input"
    count = int(chorus.allreduce(torch.tensor([x.numel()]), "max")[0])
    numeric = torch.zeros_like(x)
    for r in range(SIZE):
        for i in range(count):
            ends = []
            for step in (eps, -eps):
                xv = x.clone()
                if RANK == r and i < x.numel():
                    xv.view(-1)[i] += step
                ends.append(objective(xv))
            if RANK == r and i < x.numel():
                numeric.view(-1)[i] = (ends[0] - ends[1]) / (2 * eps)
    torch.testing.assert_close(leaf.grad, numeric, rtol=tol, atol=tol)


# --------------------------------------------------------------------------- collectives


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_all_reduce_gradient(case, op):
    rank_list = rank_list_of(case)
    group_of(rank_list)
    # The local factor x makes each rank's output gradient differ: the adjoint must sum them.
    check_gradient(lambda x: cf.all_reduce(torch.sin(x), op, rank_list=rank_list) * x,
                   rank_random((3, 4), seed=1))


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_all_gather_gradient(case, dim):
    rank_list = rank_list_of(case)
    group_of(rank_list)
    check_gradient(lambda x: cf.all_gather(torch.sin(x), dim=dim, rank_list=rank_list) ** 2,
                   rank_random((2, 3), seed=2))


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_reduce_scatter_gradient(case, dim, op):
    rank_list = rank_list_of(case)
    n = len(group_of(rank_list))
    shape = [3, 3]
    shape[dim] = 2 * n
    check_gradient(lambda x: cf.reduce_scatter(torch.sin(x), dim=dim, op=op,
                                               rank_list=rank_list) * 1.5,
                   rank_random(shape, seed=3))


@pytest.mark.parametrize("case", GROUP_CASES)
def test_broadcast_gradient(case):
    rank_list = rank_list_of(case)
    src = group_of(rank_list)[-1]  # a world rank of the caller's group
    # Non-roots' x reaches the output only through the local term.
    check_gradient(lambda x: cf.broadcast(torch.sin(x), src, rank_list=rank_list) + x * x,
                   rank_random((3, 2), seed=4))


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("split_dim,concat_dim", [(0, 0), (0, 1), (1, 0)])
def test_all_to_all_gradient(case, split_dim, concat_dim):
    rank_list = rank_list_of(case)
    n = len(group_of(rank_list))
    shape = [3, 3]
    shape[split_dim] = n
    check_gradient(lambda x: cf.all_to_all(torch.sin(x), split_dim, concat_dim,
                                           rank_list=rank_list) ** 2,
                   rank_random(shape, seed=5))


def _pair_exchange(x, group, tag, rank_list):
    """Members 2k and 2k+1 of the group form a pair: the first sends sin(x), the second receives
    it; an unpaired rank computes alone."""
    me = group.index(RANK)
    if me % 2 == 0 and me + 1 < len(group):
        token = cf.send(torch.sin(x), group[me + 1], tag=tag, rank_list=rank_list)
        return torch.cos(x) + token.sum()
    if me % 2 == 1:
        y = cf.recv(x, group[me - 1], tag=tag, rank_list=rank_list)
        return y * y + x
    return torch.sin(x)


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("tag", [0, 7])
def test_send_recv_gradient(case, tag):
    rank_list = rank_list_of(case)
    group = group_of(rank_list)
    check_gradient(lambda x: _pair_exchange(x, group, tag, rank_list),
                   rank_random((2, 3), seed=6))


def test_recv_without_gradient_and_integers(multi_rank):
    if RANK < 2:
        if RANK == 0:
            cf.send(torch.arange(4), 1, tag=3)
            cf.send(torch.ones(2, dtype=F64), 1, tag=4)
        else:
            ints = cf.recv(4, 0, tag=3, dtype="int64")
            floats = cf.recv((2,), 0, tag=4, dtype=F64, requires_grad=False)
            assert torch.equal(ints, torch.arange(4)) and not ints.requires_grad
            assert torch.equal(floats, torch.ones(2, dtype=F64)) and not floats.requires_grad


def test_errors_are_value_errors():
    x = torch.ones(2, 3, dtype=F64)
    for op in ("max", "prod", "band"):
        with pytest.raises(ValueError, match="not differentiable"):
            cf.all_reduce(x, op)
    with pytest.raises(ValueError, match="unknown op 'mean'"):
        cf.reduce_scatter(x, op="mean")
    with pytest.raises(ValueError, match="tag must be"):
        cf.send(x, 0, tag=cf.GRAD_TAG_OFFSET)
    with pytest.raises(ValueError, match="tag must be"):
        cf.recv(x, 0, tag=-1)
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        cf.all_gather(x, dim=2)
    with pytest.raises(ValueError, match="needs a torch.Tensor"):
        cf.all_gather([1.0, 2.0])


def test_uneven_splits_name_both_numbers(multi_rank):
    with pytest.raises(ValueError, match=rf"dimension 1 \({SIZE + 1}\).*group size \({SIZE}\)"):
        cf.reduce_scatter(torch.ones(2, SIZE + 1), dim=1)
    with pytest.raises(ValueError, match=rf"out_features \({SIZE + 1}\).*\({SIZE}\)"):
        cnn.ColumnParallelLinear(4, SIZE + 1)
    with pytest.raises(ValueError, match=rf"in_features \({SIZE + 1}\).*\({SIZE}\)"):
        cnn.RowParallelLinear(SIZE + 1, 4)


# --------------------------------------------------------------------------- layers


def unsplit_linear(in_features, out_features, seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(in_features, out_features).double()


def reference(module, x, weight):
    """(output, input gradient) of the unsplit module for the loss <weight, module(x)>; the
    module's parameters keep their gradients."""
    leaf = x.clone().requires_grad_(True)
    y = module(leaf)
    (weight * y).sum().backward()
    return y.detach(), leaf.grad


def close(actual, expected):
    torch.testing.assert_close(actual, expected, **EXACT)


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("gather_output", [True, False])
def test_column_parallel_linear(case, gather_output):
    rank_list = rank_list_of(case)
    tp = len(group_of(rank_list))
    full = unsplit_linear(12, 24, seed=11)
    x, weight = shared_random((5, 12), 12), shared_random((5, 24), 13)
    y_ref, x_grad_ref = reference(full, x, weight)
    layer = cnn.ColumnParallelLinear.from_linear(full, gather_output=gather_output,
                                                 rank_list=rank_list)
    leaf = x.clone().requires_grad_(True)
    y = layer(leaf)
    if gather_output:  # replicated output: the group's tp equal losses count once
        close(y, y_ref)
        ((weight * y).sum() / tp).backward()
    else:  # this rank's features: the group's losses add up to the whole
        close(y, y_ref[:, layer.shard])
        (weight[:, layer.shard] * y).sum().backward()
    close(layer.weight.grad, full.weight.grad[layer.shard])
    close(layer.bias.grad, full.bias.grad[layer.shard])
    close(chorus.allreduce(leaf.grad, rank_list=rank_list), x_grad_ref)  # replicated input


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("input_is_parallel", [True, False])
def test_row_parallel_linear(case, input_is_parallel):
    rank_list = rank_list_of(case)
    tp = len(group_of(rank_list))
    full = unsplit_linear(24, 12, seed=21)
    x, weight = shared_random((5, 24), 22), shared_random((5, 12), 23)
    y_ref, x_grad_ref = reference(full, x, weight)
    layer = cnn.RowParallelLinear.from_linear(full, input_is_parallel=input_is_parallel,
                                              rank_list=rank_list)
    leaf = (x[:, layer.shard] if input_is_parallel else x).clone().requires_grad_(True)
    y = layer(leaf)
    close(y, y_ref)
    ((weight * y).sum() / tp).backward()
    close(layer.weight.grad, full.weight.grad[:, layer.shard])
    close(chorus.allreduce(layer.bias.grad, rank_list=rank_list), full.bias.grad)  # replicated
    if input_is_parallel:
        close(leaf.grad, x_grad_ref[:, layer.shard])
    else:
        close(chorus.allreduce(leaf.grad, rank_list=rank_list), x_grad_ref)


@pytest.mark.parametrize("case", GROUP_CASES)
def test_parallel_embedding(case):
    rank_list = rank_list_of(case)
    tp = len(group_of(rank_list))
    torch.manual_seed(31)
    full = torch.nn.Embedding(13, 5).double()  # 13 rows: uneven parts at 2, 3 and 4 ranks
    ids = torch.tensor([[0, 12, 3, 7], [6, 6, 1, 11], [9, 2, 4, 12]])
    weight = shared_random((3, 4, 5), 32)
    y_ref, _ = reference(lambda i: full(i.long()), ids.double(), weight)
    layer = cnn.ParallelEmbedding.from_embedding(full, rank_list=rank_list)
    y = layer(ids)
    close(y, y_ref)
    ((weight * y).sum() / tp).backward()
    close(layer.weight.grad, full.weight.grad[layer.start:layer.end])
    rows = chorus.allgather(torch.tensor([layer.end - layer.start]), rank_list=rank_list)
    assert int(rows.sum()) == 13
    with pytest.raises(IndexError, match=r"\[0, 13\)"):
        layer(torch.tensor([13]))


@pytest.mark.parametrize("case", GROUP_CASES)
def test_layer_chain_matches_unsplit(case):
    """Embedding -> Column -> gelu -> Row -> Column(gather): the replicated inputs of the Column
    layers are made by all_reduce, whose backward sums their gradients; every shard's gradient
    and the summed Row bias equal the unsplit ones."""
    rank_list = rank_list_of(case)
    tp = len(group_of(rank_list))
    torch.manual_seed(41)
    full = torch.nn.ModuleList([torch.nn.Embedding(13, 12), torch.nn.Linear(12, 24),
                                torch.nn.Linear(24, 12), torch.nn.Linear(12, 24)]).double()
    parallel = torch.nn.ModuleList([
        cnn.ParallelEmbedding.from_embedding(full[0], rank_list=rank_list),
        cnn.ColumnParallelLinear.from_linear(full[1], gather_output=False, rank_list=rank_list),
        cnn.RowParallelLinear.from_linear(full[2], rank_list=rank_list),
        cnn.ColumnParallelLinear.from_linear(full[3], rank_list=rank_list)])
    ids = torch.tensor([[1, 5, 12], [0, 8, 8]])
    weight = shared_random((2, 3, 24), 42)

    def run(m):
        return m[3](m[2](torch.nn.functional.gelu(m[1](m[0](ids)))))

    y_ref = run(full)
    (weight * y_ref).sum().backward()
    y = run(parallel)
    close(y, y_ref.detach())
    ((weight * y).sum() / tp).backward()
    emb, col1, row, col2 = parallel
    close(emb.weight.grad, full[0].weight.grad[emb.start:emb.end])
    close(col1.weight.grad, full[1].weight.grad[col1.shard])
    close(col1.bias.grad, full[1].bias.grad[col1.shard])
    close(row.weight.grad, full[2].weight.grad[:, row.shard])
    close(chorus.allreduce(row.bias.grad, rank_list=rank_list), full[2].bias.grad)
    close(col2.weight.grad, full[3].weight.grad[col2.shard])
    close(col2.bias.grad, full[3].bias.grad[col2.shard])


# --------------------------------------------------------------------------- training


def _example():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "python", "tensor_parallel_mlp.py")
    spec = importlib.util.spec_from_file_location("tensor_parallel_mlp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("tp", [1, 2, 3, 4])
def test_mesh_training_matches_unsplit_model(tp):
    """examples/python/tensor_parallel_mlp.py's dp x tp mesh (4 ranks, tp 2: 2 x 2) trained for 3
    SGD steps equals the unsplit model trained on the whole batch in one process."""
    if SIZE % tp != 0:
        pytest.skip(f"tp={tp} does not divide {SIZE} ranks")
    example = _example()
    model, losses = example.train_parallel(3, tp)
    reference_model, reference_losses = example.train_reference(3)
    assert example.max_difference(model, reference_model) < 1e-10
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference_losses), **EXACT)
    assert losses[-1] < losses[0]
