"""The "chorus" torch.distributed backend on CUDA tensors (issue 20): torch's API on torch.cuda
tensors runs on chorus's nccl backend, ordered after torch's current stream as torch's NCCL
backend is, and torch's DistributedDataParallel and FullyShardedDataParallel train CUDA models on
it. Needs a GPU and a torch >= 2.3 (the extension takes CUDA tensors only then); skipped without.

Expected values are closed forms of (rank, index), or one process trained on every rank's rows,
never chorus's own results. Every rank runs every test in the same order.
"""

import numpy as np
import pytest
import torch
import torch.distributed as tdist

import chorus.torch._backend as backend
from helpers import CUDA, cuda_device
from torch_backend_common import Net, train, values

pytestmark = pytest.mark.skipif(
    not (CUDA and backend._c10d is not None and backend._c10d.takes_cuda_tensors),
    reason="needs a CUDA GPU, chorus built with NCCL, and the torch backend built against "
           "torch >= 2.3")


def on_gpu(tensor):
    return tensor.to(cuda_device())


def expected_sum(size, n, dtype=torch.float64):
    return sum(values(r, n, dtype) for r in range(size))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_all_reduce_sum_and_avg(world, size, rank, dtype):
    n = 1000
    tensor = on_gpu(values(rank, n, dtype))
    tdist.all_reduce(tensor)
    tolerance = 1e-2 if dtype == torch.bfloat16 else 0
    np.testing.assert_allclose(tensor.cpu().double().numpy(), expected_sum(size, n).numpy(),
                               rtol=tolerance)
    if dtype.is_floating_point:
        tensor = on_gpu(values(rank, n, dtype))
        tdist.all_reduce(tensor, op=tdist.ReduceOp.AVG)
        np.testing.assert_allclose(tensor.cpu().double().numpy(),
                                   (expected_sum(size, n) / size).numpy(), rtol=tolerance or 1e-6)


@pytest.mark.parametrize("side_stream", [False, True], ids=["current", "side"])
def test_a_collective_waits_for_a_slow_producer_on_the_callers_stream(world, size, rank,
                                                                      side_stream):
    """The input is written by the caller's stream after a deliberately slow kernel (0.2 s): a
    collective that did not wait for that stream would read the zeros underneath."""
    device = cuda_device()
    stream = torch.cuda.Stream(device) if side_stream else torch.cuda.current_stream(device)
    tensor = torch.zeros(4096, device=device)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)
        tensor.fill_(rank + 1)
        tdist.all_reduce(tensor)  # no host wait; the result is safe to use on this stream
        doubled = tensor * 2
    torch.cuda.synchronize(device)
    expected = size * (size + 1) / 2
    np.testing.assert_array_equal(tensor.cpu().numpy(), np.full(4096, expected, np.float32))
    np.testing.assert_array_equal(doubled.cpu().numpy(), np.full(4096, 2 * expected, np.float32))


def test_data_movement(world, size, rank):
    n = 24
    dtype = torch.float32
    mine = on_gpu(values(rank, n, dtype))
    every = [values(r, n, dtype) for r in range(size)]

    tensor = mine.clone() if rank == size - 1 else torch.zeros_like(mine)
    tdist.broadcast(tensor, src=size - 1)
    np.testing.assert_array_equal(tensor.cpu().numpy(), every[-1].numpy())

    gathered = [torch.zeros_like(mine) for _ in range(size)]
    tdist.all_gather(gathered, mine)
    for r in range(size):
        np.testing.assert_array_equal(gathered[r].cpu().numpy(), every[r].numpy())

    flat = torch.empty(size * n, device=mine.device)
    tdist.all_gather_into_tensor(flat, mine)
    np.testing.assert_array_equal(flat.cpu().numpy(), torch.cat(every).numpy())

    # reduce_scatter: rank r's input is every[r] repeated size times; block q sums to the sum
    # over ranks of every[r].
    out = torch.empty(n, device=mine.device)
    tdist.reduce_scatter_tensor(out, mine.repeat(size))
    np.testing.assert_allclose(out.cpu().numpy(), expected_sum(size, n).numpy())
    listed = torch.empty(n, device=mine.device)
    tdist.reduce_scatter(listed, [mine.clone() for _ in range(size)])
    np.testing.assert_allclose(listed.cpu().numpy(), expected_sum(size, n).numpy())

    # all_to_all_single, even: rank r sends [r * size + q] * 3 to rank q.
    sent = on_gpu(torch.arange(size, dtype=dtype).repeat_interleave(3) + rank * size)
    received = torch.empty_like(sent)
    tdist.all_to_all_single(received, sent)
    expected = torch.tensor([[q * size + rank] * 3 for q in range(size)], dtype=dtype).reshape(-1)
    np.testing.assert_array_equal(received.cpu().numpy(), expected.numpy())

    # all_to_all of lists, uneven: rank r sends q + r + 1 values of (10 r + q) to rank q.
    sends = [on_gpu(torch.full((q + rank + 1,), 10.0 * rank + q)) for q in range(size)]
    receives = [on_gpu(torch.zeros(rank + q + 1)) for q in range(size)]
    tdist.all_to_all(receives, sends)
    for q in range(size):
        np.testing.assert_array_equal(receives[q].cpu().numpy(),
                                      np.full(rank + q + 1, 10.0 * q + rank, np.float32))


def test_gather_scatter_send_recv_and_barrier(world, size, rank):
    n = 10
    mine = on_gpu(values(rank, n, torch.float32))
    root = size - 1
    gathered = [torch.zeros_like(mine) for _ in range(size)] if rank == root else None
    tdist.gather(mine, gathered, dst=root)
    if rank == root:
        for r in range(size):
            np.testing.assert_array_equal(gathered[r].cpu().numpy(),
                                          values(r, n, torch.float32).numpy())
    out = torch.zeros_like(mine)
    pieces = [on_gpu(values(q, n, torch.float32)) for q in range(size)] if rank == 0 else None
    tdist.scatter(out, pieces, src=0)
    np.testing.assert_array_equal(out.cpu().numpy(), values(rank, n, torch.float32).numpy())
    if size > 1:  # a ring: rank r sends its values to r + 1
        received = torch.zeros_like(mine)
        send = tdist.isend(mine, (rank + 1) % size)
        tdist.recv(received, (rank - 1) % size)
        send.wait()
        np.testing.assert_array_equal(received.cpu().numpy(),
                                      values((rank - 1) % size, n, torch.float32).numpy())
    tdist.barrier()


def test_async_works_futures_and_callbacks(world, size, rank):
    tensors = [on_gpu(values(rank, 50 + k, torch.float32)) for k in range(4)]
    works = [tdist.all_reduce(t, async_op=True) for t in tensors]
    futures = [w.get_future() for w in works]
    chained = futures[0].then(lambda f: f.value()[0] * 2)
    for work in reversed(works):  # out of order
        work.wait()
    for k, (tensor, future) in enumerate(zip(tensors, futures)):
        expected = expected_sum(size, 50 + k)
        np.testing.assert_array_equal(tensor.cpu().double().numpy(), expected.numpy())
        assert torch.equal(future.wait()[0], tensor)
    np.testing.assert_array_equal(chained.wait().cpu().double().numpy(),
                                  (2 * expected_sum(size, 50)).numpy())
    torch.cuda.synchronize(cuda_device())
    assert all(work.is_completed() for work in works)


def test_dropped_works_keep_their_inputs_until_the_gpu_is_done(world, size, rank):
    """Each allgather's input is a temporary that the program drops at once, with the work: the
    caching allocator would hand its memory to the next allocation on the stream (filled with -1
    here) while NCCL may still be reading it. The outputs, read after a synchronize, are right."""
    device = cuda_device()
    n = 1 << 16
    outputs = []
    for _ in range(8):
        output = torch.empty(size * n, device=device)
        tdist.all_gather_into_tensor(output, on_gpu(values(rank, n, torch.float32)),
                                     async_op=True)  # the work and the input are dropped here
        torch.empty(n, device=device).fill_(-1.0)  # may take the input's memory
        outputs.append(output)
    torch.cuda.synchronize(device)
    expected = torch.cat([values(r, n, torch.float32) for r in range(size)]).numpy()
    for output in outputs:
        np.testing.assert_array_equal(output.cpu().numpy(), expected)


def test_host_and_cuda_tensors_share_the_group(world, size, rank):
    host = values(rank, 7, torch.float32)
    cuda = on_gpu(values(rank, 7, torch.float32))
    tdist.all_reduce(host)
    tdist.all_reduce(cuda)
    np.testing.assert_array_equal(host.numpy(), cuda.cpu().numpy())
    np.testing.assert_array_equal(host.double().numpy(), expected_sum(size, 7).numpy())


def test_a_dtype_chorus_does_not_reduce_is_refused_on_the_gpu_too(world):
    with pytest.raises(RuntimeError, match="torch.int16"):
        tdist.all_reduce(on_gpu(torch.ones(3, dtype=torch.int16)))


def test_ddp_on_cuda_matches_one_process(world, size, rank):
    torch.manual_seed(0)
    reference = Net().to(cuda_device())
    model = Net().to(cuda_device())
    model.load_state_dict(reference.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[cuda_device()],
                                                    process_group=world)
    expected = train(reference, None, size, rank, device=cuda_device())
    got = train(ddp, world, size, rank, device=cuda_device())
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_fsdp_on_cuda_matches_one_process(world, size, rank):
    from torch.distributed.fsdp import FullyShardedDataParallel

    torch.manual_seed(0)
    reference = Net().to(cuda_device())
    model = Net().to(cuda_device())
    model.load_state_dict(reference.state_dict())
    sharded = FullyShardedDataParallel(model, process_group=world, device_id=cuda_device(),
                                       use_orig_params=True)

    def full_parameters():
        with FullyShardedDataParallel.summon_full_params(sharded):
            return [p.detach().clone() for p in sharded.parameters()]

    expected = train(reference, None, size, rank, device=cuda_device())
    got = train(sharded, world, size, rank, device=cuda_device(), parameters=full_parameters)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_a_dropped_list_form_work_still_fills_its_outputs(world, size, rank):
    """all_gather into a list, dropped without a wait: its copies were queued when it was
    issued, in the caller's stream order, so the list is right once the stream has run."""
    n = 300
    mine = on_gpu(values(rank, n, torch.float32))
    lists = []
    for _ in range(4):
        gathered = [torch.full_like(mine, -1.0) for _ in range(size)]
        tdist.all_gather(gathered, mine, async_op=True)  # the work is dropped here
        lists.append(gathered)
    torch.cuda.synchronize(cuda_device())
    for gathered in lists:
        for r in range(size):
            np.testing.assert_array_equal(gathered[r].cpu().numpy(),
                                          values(r, n, torch.float32).numpy())


def test_list_forms_on_two_devices_are_refused(world, size, rank):
    mine = on_gpu(values(rank, 5, torch.float32))
    outputs = [torch.zeros(5) for _ in range(size)]  # on the host
    with pytest.raises(RuntimeError, match="device"):  # ours, or torch's own check first
        tdist.all_gather(outputs, mine)
