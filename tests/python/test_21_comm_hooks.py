"""Communication hooks on chorus.torch.DistributedDataParallel (issue 24, part 1): torch's contract,
chorus's built-in hooks against torch's own hooks on the same gradients, and the default results
unchanged. Run at 1 to 4 ranks under chorusrun; expected values come from closed forms of the rank
or from torch's hooks (torch.distributed.algorithms.ddp_comm_hooks) over the "chorus" backend.
"""

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import chorus
import chorus.torch
import chorus.torch.hooks as hooks
from helpers import rank_size


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.Tanh(), torch.nn.Linear(40, 3))


def gradients(hook=None, state=None, steps=2, bucket_cap_mb=0.0005):
    """Each step's gradients (a list of tensors per step) of a DDP model whose rank r trains on
    data seeded by r, with `hook` registered (or none)."""
    rank, _ = rank_size()
    ddp = chorus.torch.DistributedDataParallel(model(), bucket_cap_mb=bucket_cap_mb)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    found = []
    for step in range(steps):
        generator = torch.Generator().manual_seed(100 * rank + step)
        x = torch.randn(8, 12, generator=generator)
        ddp.zero_grad()
        ddp(x).square().sum().backward()
        found.append([p.grad.detach().clone() for p in ddp.parameters()])
    return found


def test_the_allreduce_hook_gives_the_default_results():
    default, hooked = gradients(), gradients(hooks.allreduce_hook)
    for step_default, step_hooked in zip(default, hooked):
        for a, b in zip(step_default, step_hooked):
            assert torch.equal(a, b)


@pytest.mark.parametrize("ours, theirs, dtype", [
    (hooks.fp16_compress_hook, default_hooks.fp16_compress_hook, torch.float16),
    (hooks.bf16_compress_hook, default_hooks.bf16_compress_hook, torch.bfloat16)],
    ids=["fp16", "bf16"])
def test_compression_hooks_match_torchs_own_bit_for_bit(world, ours, theirs, dtype):
    mine, torchs, exact = gradients(ours), gradients(theirs), gradients()
    tolerance = 2.0 ** -8 if dtype == torch.float16 else 2.0 ** -5  # the casts' relative error
    for step_mine, step_torchs, step_exact in zip(mine, torchs, exact):
        for a, b, c in zip(step_mine, step_torchs, step_exact):
            assert torch.equal(a, b)
            scale = c.abs().max().item() + 1e-12
            assert (a - c).abs().max().item() <= 3 * tolerance * scale


def test_a_hook_sees_every_bucket_once_in_order_and_its_result_is_used():
    rank, size = rank_size()
    seen = []

    def hook(state, bucket):
        seen.append((bucket.index(), bucket.is_last(), len(bucket.gradients()),
                     len(bucket.parameters())))
        assert state == "my state"
        for g, p in zip(bucket.gradients(), bucket.parameters()):
            assert g.shape == p.shape
        future = torch.futures.Future()
        future.set_result(torch.full_like(bucket.buffer(), float(bucket.index() + 1)))
        return future

    ddp = chorus.torch.DistributedDataParallel(model(), bucket_cap_mb=0.0005)
    ddp.register_comm_hook("my state", hook)
    ddp(torch.ones(2, 12)).sum().backward()
    buckets = ddp.reducer.num_buckets
    assert buckets > 1
    assert [b for b, _, _, _ in seen] == list(range(buckets))
    assert [last for _, last, _, _ in seen] == [False] * (buckets - 1) + [True]
    assert sum(n for _, _, n, _ in seen) == len(list(ddp.parameters()))
    # The hook's result replaced each bucket: every gradient of bucket b holds b + 1.
    for b in range(buckets):
        for i in ddp.reducer.bucket_gradients(b):
            assert torch.all(list(ddp.parameters())[i].grad == b + 1)


def test_register_comm_hook_refuses_late_or_repeated_registration():
    ddp = chorus.torch.DistributedDataParallel(model())
    ddp.register_comm_hook(None, hooks.allreduce_hook)
    with pytest.raises(ValueError, match="already registered"):
        ddp.register_comm_hook(None, hooks.allreduce_hook)
    late = chorus.torch.DistributedDataParallel(model())
    late(torch.ones(2, 12)).sum().backward()
    with pytest.raises(ValueError, match="before the first backward"):
        late.register_comm_hook(None, hooks.allreduce_hook)


def test_hooks_work_on_a_group_state():
    rank, size = rank_size()
    group = chorus.distributed.new_group(list(range(size)))
    default, hooked = gradients(), gradients(hooks.bf16_compress_hook, group)
    for a, b in zip(default[-1], hooked[-1]):
        assert (a - b).abs().max().item() <= 0.05 * (a.abs().max().item() + 1e-12)


def test_powersgd_through_ddp_keeps_training_close_to_the_average():
    """The PowerSGD hook (tested against the paper's algorithm in test_20) through the real DDP:
    before start_powerSGD_iter it is the average (up to float32 rounding: the hook reduces its own
    buffer, whose sums may be taken in another order); after, a rank-2 approximation."""
    state = hooks.PowerSGDState(matrix_approximation_rank=2, start_powerSGD_iter=2)
    # One bucket for the whole model: its gradients sit at aligned offsets with padding between.
    default = gradients(steps=3, bucket_cap_mb=1)
    hooked = gradients(hooks.powerSGD_hook, state, steps=3, bucket_cap_mb=1)
    for a, b in zip(default[0], hooked[0]):
        assert (a - b).abs().max().item() <= 1e-5 * (a.abs().max().item() + 1e-12)
    assert state.iteration == 3
    for a, b in zip(default[2], hooked[2]):
        assert torch.isfinite(b).all() and b.shape == a.shape
        if a.dim() < 2:  # vectors travel uncompressed: the plain average, at the bucket's offsets
            assert (a - b).abs().max().item() <= 1e-5 * (a.abs().max().item() + 1e-12)
