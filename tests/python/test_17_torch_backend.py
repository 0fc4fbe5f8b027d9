"""The "chorus" torch.distributed backend (issue 20): torch's own API, init_process_group("chorus")
with env:// as chorusrun sets it, every collective against a closed form of (rank, index), groups,
errors, and torch's DistributedDataParallel against a single process and against gloo.

Expected values are computed here from the closed forms with torch on one process (or NumPy),
never with chorus. Every rank runs every test in the same order; skips depend on the size only.
"""

import copy
import datetime
import inspect
import os
import time

import numpy as np
import pytest
import torch
import torch.distributed as tdist

from torch_backend_common import Net, batches, train, values

REDUCING = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
            torch.int16, torch.int32, torch.int64]
# Data movement copies bytes: any dtype, those chorus does not reduce included.
MOVING = REDUCING + [torch.bool, torch.complex64]


def test_init_matches_chorus(world, rank, size):
    assert tdist.get_rank() == rank and tdist.get_world_size() == size
    # torch 1.13's default group is chorus's ProcessGroup itself; torch 2's holds it as its CPU
    # backend.
    backend = world._get_backend(torch.device("cpu")) if hasattr(world, "_get_backend") else world
    assert backend.transport in ("shm", "tcp", "hierarchical", "mpi", "mpi_algorithms", "void")


@pytest.mark.parametrize("dtype", REDUCING, ids=str)
@pytest.mark.parametrize("op", ["SUM", "PRODUCT", "MIN", "MAX"])
def test_all_reduce(world, size, rank, dtype, op):
    n = 37
    tensor = values(rank, n, dtype)
    tdist.all_reduce(tensor, op=getattr(tdist.ReduceOp, op))
    per_rank = np.stack([values(r, n, torch.float64).numpy() for r in range(size)])
    expected = {"SUM": per_rank.sum(0), "PRODUCT": per_rank.prod(0), "MIN": per_rank.min(0),
                "MAX": per_rank.max(0)}[op]
    if dtype in (torch.int8, torch.uint8, torch.int16):  # the closed form wraps as the dtype does
        expected = torch.tensor(expected.astype(np.int64)).to(dtype).double().numpy()
    tolerance = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 0
    np.testing.assert_allclose(tensor.double().numpy(), expected, rtol=tolerance)


def test_sparse_all_reduce_sums_every_rank(world, size, rank):
    """Rank q holds [q + 1, 2(q + 1)] at (q % 3, q) and [1, 1] at (0, 0) (twice on rank 0, so its
    input is uncoalesced); the sum is built densely here."""
    indices = torch.tensor([[rank % 3, 0], [rank, 0]])
    entries = torch.tensor([[rank + 1.0, 2.0 * (rank + 1)], [1.0, 1.0]])
    tensor = torch.sparse_coo_tensor(indices, entries, (3, size + 1, 2))
    tdist.all_reduce(tensor)
    expected = torch.zeros(3, size + 1, 2)
    for q in range(size):
        expected[q % 3, q] += torch.tensor([q + 1.0, 2.0 * (q + 1)])
        expected[0, 0] += 1.0
    assert tensor.is_sparse
    assert torch.equal(tensor.to_dense(), expected)
    with pytest.raises(RuntimeError, match="SUM only"):
        tdist.all_reduce(tensor, op=tdist.ReduceOp.MAX)


def test_sparse_all_reduce_of_different_shapes_fails_on_every_rank(world, size, rank, multi_rank):
    group = tdist.new_group(list(range(size)))
    tensor = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (4 + rank,))
    with pytest.raises(RuntimeError, match="every rank must pass the same shape"):
        tdist.all_reduce(tensor, group=group)


@pytest.mark.parametrize("op", ["SUM", "AVG"])
def test_all_reduce_complex(world, size, rank, op):
    """torch's own layer views a complex tensor as pairs of reals for the backend; a complex
    tensor that reaches chorus whole (torch's data movement) reduces as the same numbers."""
    if op == "AVG" and not hasattr(tdist.ReduceOp, "AVG"):
        pytest.skip("torch without ReduceOp.AVG")
    tensor = values(rank, 21, torch.complex64)
    tdist.all_reduce(tensor, op=getattr(tdist.ReduceOp, op))
    expected = sum(values(r, 21, torch.complex128) for r in range(size))
    if op == "AVG":
        expected = expected / size
    np.testing.assert_allclose(tensor.numpy(), expected.numpy(), rtol=1e-6)


def test_all_reduce_coalesced(world, size, rank):
    tensors = [values(rank, n, torch.float32) for n in (3, 1000, 17)]
    tdist.all_reduce_coalesced(tensors)
    for tensor, n in zip(tensors, (3, 1000, 17)):
        expected = sum(values(r, n, torch.float64) for r in range(size))
        np.testing.assert_array_equal(tensor.double().numpy(), expected.numpy())


@pytest.mark.parametrize("dtype", MOVING, ids=str)
def test_broadcast_from_every_root(world, size, rank, dtype):
    for root in range(size):
        tensor = values(rank, 29, dtype)
        tdist.broadcast(tensor, root)
        assert torch.equal(tensor, values(root, 29, dtype))


def test_broadcast_non_contiguous(world, size, rank):
    matrix = values(rank, 24, torch.float32).reshape(4, 6).t()  # a transposed view
    tdist.broadcast(matrix, 0)
    assert torch.equal(matrix, values(0, 24, torch.float32).reshape(4, 6).t())


def test_reduce_to_every_root(world, size, rank):
    for root in range(size):
        tensor = values(rank, 11, torch.int64)
        tdist.reduce(tensor, root)
        expected = sum(values(r, 11, torch.int64) for r in range(size)) if rank == root else \
            values(rank, 11, torch.int64)
        assert torch.equal(tensor, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.complex64], ids=str)
def test_all_gather_forms(world, size, rank, dtype):
    mine = values(rank, 13, dtype)
    listed = [torch.zeros(13, dtype=dtype) for _ in range(size)]
    tdist.all_gather(listed, mine)
    flat = torch.zeros(13 * size, dtype=dtype)
    tdist.all_gather_into_tensor(flat, mine)
    for r in range(size):
        assert torch.equal(listed[r], values(r, 13, dtype))
        assert torch.equal(flat[13 * r:13 * (r + 1)], values(r, 13, dtype))


def test_all_gather_coalesced(world, size, rank):
    inputs = [values(rank, 5, torch.float64), values(rank, 8, torch.float64)]  # torch: one dtype
    outputs = [[torch.zeros_like(t) for t in inputs] for _ in range(size)]  # [from rank][input]
    tdist.all_gather_coalesced(outputs, inputs)
    for r in range(size):
        assert torch.equal(outputs[r][0], values(r, 5, torch.float64))
        assert torch.equal(outputs[r][1], values(r, 8, torch.float64))


def test_gather_and_scatter_at_every_root(world, size, rank):
    for root in range(size):
        mine = values(rank, 7, torch.float32)
        gathered = [torch.zeros(7) for _ in range(size)] if rank == root else None
        tdist.gather(mine, gathered, dst=root)
        if rank == root:
            for r in range(size):
                assert torch.equal(gathered[r], values(r, 7, torch.float32))
        pieces = [values(r + 10 * root, 7, torch.int64) for r in range(size)] if rank == root \
            else None
        out = torch.zeros(7, dtype=torch.int64)
        tdist.scatter(out, pieces, src=root)
        assert torch.equal(out, values(rank + 10 * root, 7, torch.int64))


def test_reduce_scatter_forms(world, size, rank):
    n = 6
    inputs = [values(rank + r, n, torch.float32) for r in range(size)]  # chunk r goes to rank r
    out = torch.zeros(n)
    tdist.reduce_scatter(out, inputs)
    expected = sum(values(q + rank, n, torch.float64) for q in range(size))
    np.testing.assert_array_equal(out.double().numpy(), expected.numpy())
    flat_out = torch.zeros(n)
    tdist.reduce_scatter_tensor(flat_out, torch.cat(inputs))
    assert torch.equal(flat_out, out)


def test_all_to_all_single_even_and_uneven(world, size, rank):
    # Even: row block r of every rank's input goes to rank r.
    rows = torch.arange(2 * size, dtype=torch.float32).reshape(2 * size, 1) + 100 * rank
    out = torch.zeros_like(rows)
    tdist.all_to_all_single(out, rows)
    expected = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * q
                          for q in range(size)]).reshape(-1, 1)
    assert torch.equal(out, expected)
    # Uneven: rank q sends (q + p + 1) rows to rank p, each row [q, p, k].
    send = [torch.tensor([[rank, p, k] for k in range(rank + p + 1)], dtype=torch.int64)
            for p in range(size)]
    received = torch.zeros(sum(q + rank + 1 for q in range(size)), 3, dtype=torch.int64)
    tdist.all_to_all_single(received, torch.cat(send),
                            output_split_sizes=[q + rank + 1 for q in range(size)],
                            input_split_sizes=[rank + p + 1 for p in range(size)])
    expected = torch.cat([torch.tensor([[q, rank, k] for k in range(q + rank + 1)])
                          for q in range(size)])
    assert torch.equal(received, expected)


def test_all_to_all_single_in_place_and_into_a_non_contiguous_output(world, size, rank):
    """One tensor as input and output, with split sizes; then an output that is a strided view.
    Rank q sends rank p 1 + (q + p) % 2 rows of [10q + p, 10q + p]."""
    def rows(q, p):
        return 1 + (q + p) % 2

    def outgoing():
        return torch.cat([torch.full((rows(rank, p), 2), float(10 * rank + p))
                          for p in range(size)])

    sends = [rows(rank, p) for p in range(size)]
    receives = [rows(q, rank) for q in range(size)]
    expected = torch.cat([torch.full((rows(q, rank), 2), float(10 * q + rank))
                          for q in range(size)])
    both = outgoing()
    tdist.all_to_all_single(both, both, output_split_sizes=receives, input_split_sizes=sends)
    assert torch.equal(both, expected)
    out = torch.zeros(sum(receives), 4)[:, ::2]
    tdist.all_to_all_single(out, outgoing(), output_split_sizes=receives, input_split_sizes=sends)
    assert not out.is_contiguous() and torch.equal(out, expected)


def test_all_to_all_single_splits_may_cover_fewer_rows(world, size, rank):
    """Split sizes that add up to fewer rows than the tensors have move those rows; the rows past
    them stay as they were (as gloo refuses such sizes, chorus takes them as it always did)."""
    sent = torch.cat([torch.arange(size, dtype=torch.float32) + 10 * rank, torch.tensor([-5.0])])
    out = torch.full((size + 1,), -1.0)
    tdist.all_to_all_single(out, sent, output_split_sizes=[1] * size,
                            input_split_sizes=[1] * size)
    expected = torch.cat([torch.arange(size, dtype=torch.float32) * 10 + rank, torch.tensor([-1.0])])
    assert torch.equal(out, expected)


def test_all_to_all_lists_of_any_size(world, size, rank):
    send = [torch.full((rank + p + 1,), float(10 * rank + p)) for p in range(size)]
    received = [torch.zeros(q + rank + 1) for q in range(size)]
    tdist.all_to_all(received, send)
    for q in range(size):
        assert torch.equal(received[q], torch.full((q + rank + 1,), float(10 * q + rank)))


def test_all_to_all_splits_that_disagree_fail_on_every_rank(world, size, rank, multi_rank):
    """Rank 0 sends 2 rows to rank 1, which expects 1 from it: an error on every rank naming the
    pair, not a message cut to fit. The group goes on."""
    sends = [1] * size
    if rank == 0:
        sends[1] = 2
    received = torch.zeros(size)
    with pytest.raises(RuntimeError, match="rank 0 sends 8 bytes to rank 1, which expects 4"):
        tdist.all_to_all_single(received, torch.zeros(sum(sends)),
                                output_split_sizes=[1] * size, input_split_sizes=sends)
    with pytest.raises(RuntimeError, match="rank 0 sends 8 bytes to rank 1, which expects 4"):
        tdist.all_to_all([torch.zeros(1) for _ in range(size)],
                         [torch.zeros(n) for n in sends])
    tdist.barrier()


def test_send_recv_ring_and_barrier(world, size, rank, multi_rank):
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.zeros(9, dtype=torch.float64)
    if rank % 2 == 0:
        tdist.send(values(rank, 9, torch.float64), right)
        tdist.recv(got, left)
    else:
        tdist.recv(got, left)
        tdist.send(values(rank, 9, torch.float64), right)
    assert torch.equal(got, values(left, 9, torch.float64))
    sending = tdist.isend(values(rank, 4, torch.int32), right, tag=3)
    receiving = tdist.irecv(got_i := torch.zeros(4, dtype=torch.int32), left, tag=3)
    receiving.wait()
    sending.wait()
    assert torch.equal(got_i, values(left, 4, torch.int32))
    tdist.barrier()


def test_recv_from_any_source_returns_the_sender(world, size, rank, multi_rank):
    """torch's recv(tensor) with no src: rank 0 takes every other rank's two messages in arrival
    order; recv returns each sender's world rank, also within a group whose order reverses the
    world's (torch maps the group rank the backend reports), and one sender's messages arrive in
    the order sent."""
    group = tdist.new_group(list(reversed(range(size))))
    for g in (None, group):
        if rank != 0:
            for k in range(2):
                tdist.send(torch.full((3,), 10.0 * rank + k), 0, group=g, tag=4)  # global dst
        else:
            seen = {}
            for _ in range(2 * (size - 1)):
                got = torch.zeros(3)
                source = tdist.recv(got, group=g, tag=4)
                sender = int(got[0].item()) // 10
                assert source == sender
                seen.setdefault(sender, []).append(got[0].item())
                assert torch.equal(got, torch.full((3,), got[0].item()))
            assert seen == {q: [10.0 * q, 10.0 * q + 1] for q in range(1, size)}
        tdist.barrier()


def test_receives_posted_before_their_sends_around_a_ring(world, size, rank, multi_rank):
    """irecv(left) before isend(right) on every rank, as batch_isend_irecv users write it (4 MiB:
    past any buffering). Run one after the other, every rank would wait in its receive."""
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.zeros(1 << 20, dtype=torch.float32)
    ops = [tdist.P2POp(tdist.irecv, got, left),
           tdist.P2POp(tdist.isend, values(rank, 1 << 20, torch.float32), right)]
    for work in tdist.batch_isend_irecv(ops):
        work.wait()
    assert torch.equal(got, values(left, 1 << 20, torch.float32))


def test_async_works_and_futures(world, size, rank):
    tensors = [values(rank, 50 + k, torch.float32) for k in range(4)]
    works = [tdist.all_reduce(t, async_op=True) for t in tensors]
    futures = [w.get_future() for w in works]
    for work in reversed(works):  # out of order
        work.wait()
    for k, (tensor, future) in enumerate(zip(tensors, futures)):
        expected = sum(values(r, 50 + k, torch.float64) for r in range(size))
        np.testing.assert_array_equal(tensor.double().numpy(), expected.numpy())
        assert torch.equal(future.wait()[0], tensor)
        assert works[k].is_completed()


# torch >= 2.7 tells a backend whether a call is asynchronous (the options' asyncOp).
TORCH_MARKS_ASYNC = (hasattr(tdist.AllreduceOptions(), "asyncOp")
                     or tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 7))


def native_threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not TORCH_MARKS_ASYNC,
                    reason="torch < 2.7 does not say whether a call is asynchronous")
def test_calls_without_async_op_run_on_the_calling_thread(world, size, rank, multi_rank):
    """A call without async_op=True is waited for at once: chorus runs it as a blocking call, on
    the calling thread, with no hand-off to the communicator's worker thread and back. A fresh
    group's worker starts with the first operation handed to it, so the process's thread count
    shows it: unchanged over blocking calls (after the first, which connects), one more after an
    asynchronous call. Results against closed forms."""
    group = tdist.new_group(list(range(size)))
    tensor = values(rank, 9, torch.float32)
    tdist.all_reduce(tensor, group=group)
    before = native_threads()
    for _ in range(3):
        tdist.all_reduce(tensor, group=group)
        tdist.broadcast(tensor, 0, group=group)
        tdist.barrier(group=group)
        assert native_threads() == before
    total = sum(values(r, 9, torch.float64) for r in range(size))
    expected = total * size ** 3  # each all_reduce multiplies the (equal) sums by size once more
    np.testing.assert_allclose(tensor.double().numpy(), expected.numpy(), rtol=1e-6)
    tdist.all_reduce(tensor, group=group, async_op=True).wait()
    assert native_threads() > before  # the measure sees a worker when there is one


def test_wait_with_a_timeout_raises_and_the_operation_goes_on(world, size, rank, multi_rank):
    """Rank 1 sends only after the barrier, which rank 0 reaches only once its wait(50 ms) has run
    out: the expiry is certain, not a race. The receive then completes with rank 1's values. The
    barrier is another group's: on the receive's own group it would wait for the receive."""
    signal = tdist.new_group(list(range(size)))
    if rank == 0:
        got = torch.zeros(6, dtype=torch.int64)
        receiving = tdist.irecv(got, src=1)
        with pytest.raises(RuntimeError, match="did not complete within 50 ms"):
            receiving.wait(datetime.timedelta(milliseconds=50))
        assert not receiving.is_completed()
        tdist.barrier(group=signal)
        receiving.wait()
        assert torch.equal(got, values(1, 6, torch.int64))
    else:
        tdist.barrier(group=signal)
        if rank == 1:
            tdist.send(values(1, 6, torch.int64), dst=0)


def test_new_group_of_even_ranks(world, size, rank):
    evens = list(range(0, size, 2))
    group = tdist.new_group(evens)  # every rank calls new_group; only members use it
    if rank % 2 == 0:
        tensor = torch.tensor([float(rank)])
        tdist.all_reduce(tensor, group=group)
        assert tensor.item() == sum(evens)
        assert tdist.get_rank(group) == rank // 2
    tdist.barrier()


def test_bad_input_is_a_clear_error(world, size, rank):
    with pytest.raises(RuntimeError, match="one per rank"):
        tdist.all_gather([torch.zeros(2)] * (size + 1), torch.zeros(2))
    with pytest.raises(RuntimeError, match="qint8"):
        tdist.all_reduce(torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.qint8))
    if size == 1:  # no other rank could send
        with pytest.raises(RuntimeError, match="any rank on a communicator of one rank"):
            tdist.recv(torch.zeros(1))


def test_sizes_that_differ_across_ranks_fail_on_every_rank(world, size, rank, multi_rank):
    group = tdist.new_group(list(range(size)))  # a group of its own: the failure ends it
    with pytest.raises(RuntimeError, match="does not match rank") as raised:
        tdist.all_reduce(torch.zeros(3 + rank), group=group)
    assert "rank" in str(raised.value)
    tdist.barrier()  # the world goes on


def test_ddp_matches_one_process_and_gloo(world, size, rank):
    torch.manual_seed(0)
    reference = Net()
    chorus_model = torch.nn.parallel.DistributedDataParallel(Net(), process_group=world)
    gloo = tdist.new_group(backend="gloo")
    gloo_model = torch.nn.parallel.DistributedDataParallel(Net(), process_group=gloo)
    for model in (chorus_model.module, gloo_model.module):
        model.load_state_dict(reference.state_dict())
    # One process on every rank's rows at once: the same mean loss, so the same gradients.
    expected = train(reference, None, size, rank)
    on_chorus = train(chorus_model, world, size, rank)
    on_gloo = train(gloo_model, gloo, size, rank)
    np.testing.assert_allclose(on_chorus.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(on_chorus.numpy(), on_gloo.numpy(), rtol=1e-4, atol=1e-5)


def test_a_dropped_async_work_keeps_its_tensors_until_done(world, size, rank, multi_rank):
    """torch lets a program drop an async work unwaited (DDP's join() does at every forward). Its
    tensor must outlive the operation: freed at once, its memory goes to the next tensor of that
    size, and the allreduce writes its result there. Rank 0 drops its work and makes new tensors
    before the others (told through the store) even start theirs."""
    n = 16384  # 64 KiB: freed memory of this size is handed out again at once
    store = tdist.distributed_c10d._get_default_store()
    if rank == 0:
        tdist.all_reduce(torch.ones(n), async_op=True)  # dropped at once
        fresh = [torch.full((n,), 7.0) for _ in range(4)]
        store.set("test_17/dropped_work", "made")
    else:
        store.wait(["test_17/dropped_work"])
        tdist.all_reduce(torch.ones(n))
    tdist.barrier()  # after the dropped allreduce on every rank
    if rank == 0:
        for tensor in fresh:
            assert torch.equal(tensor, torch.full((n,), 7.0)), "the allreduce wrote a new tensor"


def test_ddp_join_on_uneven_inputs_matches_one_process_and_gloo(world, size, rank):
    """torch's DistributedDataParallel.join(): rank r has 2 + r batches; the ranks that ran out
    shadow the others' allreduces with zeros until all have. The reference is one process that,
    at step t, sums the gradients of the ranks still training and divides by the world size."""
    steps = [2 + r for r in range(size)]
    torch.manual_seed(0)
    reference = Net()
    initial = copy.deepcopy(reference.state_dict())
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(max(steps)):
        x, y = batches(step, size)
        optimizer.zero_grad()
        for r in (r for r in range(size) if step < steps[r]):
            rows = slice(8 * r, 8 * (r + 1))
            (torch.nn.functional.cross_entropy(reference(x[rows]), y[rows]) / size).backward()
        optimizer.step()
    expected = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
    results = []
    for group in (world, tdist.new_group(backend="gloo")):
        model = torch.nn.parallel.DistributedDataParallel(Net(), process_group=group)
        model.module.load_state_dict(initial)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with model.join():
            for step in range(steps[rank]):
                x, y = batches(step, size)
                rows = slice(8 * rank, 8 * (rank + 1))
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
                optimizer.step()
        results.append(torch.cat([p.detach().reshape(-1) for p in model.module.parameters()]))
    # The last joiner's model is every rank's after join().
    np.testing.assert_allclose(results[0].numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(results[0].numpy(), results[1].numpy(), rtol=1e-4, atol=1e-5)


# torch 1.13 (and torch 2 releases that still check) keep monitored_barrier to gloo in Python;
# later ones ask the backend.
ASKS_THE_BACKEND = "only implemented for GLOO" not in inspect.getsource(tdist.monitored_barrier)
needs_monitored_barrier = pytest.mark.skipif(
    not ASKS_THE_BACKEND, reason="this torch runs monitored_barrier on gloo only")


@needs_monitored_barrier
def test_monitored_barrier_waits_for_every_rank(world, size, rank):
    """The last rank comes 1 s late: the others wait for it. Then rank 0 comes later than the
    others' timeout: they wait for it too, as only rank 0 keeps the call's timeout."""
    timeout = datetime.timedelta(seconds=30)
    for wait_all_ranks in (False, True):
        tdist.barrier()
        started = time.monotonic()
        if rank == size - 1:
            time.sleep(1.0)
        tdist.monitored_barrier(timeout=timeout, wait_all_ranks=wait_all_ranks)
        # The last rank's 1 s, less how much later the others left the barrier before.
        assert time.monotonic() - started >= 0.5
    tdist.barrier()
    if rank == 0:
        time.sleep(1.5)
    tdist.monitored_barrier(timeout=datetime.timedelta(seconds=1))


@needs_monitored_barrier
@pytest.mark.parametrize("wait_all_ranks", [False, True])
def test_monitored_barrier_names_the_ranks_that_did_not_come(world, size, rank, multi_rank,
                                                             wait_all_ranks):
    """The last rank stays away (waiting for all, rank 1): rank 0 names the rank missing, with
    gloo's words; the ranks that came are told at once.
    The absent ones come later and hear the same verdict; after that the group's monitored
    barriers pass and its collectives run, as nothing of the failed call was left behind."""
    group = tdist.new_group(list(range(size)))
    # Waiting for all: rank 1 stays away, so rank 0 waits out its time on rank 1 and then must
    # still count the ranks after it, which came long before, as there.
    absent = [1] if wait_all_ranks else [size - 1]
    missing = (("Ranks " if len(absent) > 1 else "Rank ") + ", ".join(map(str, absent))
               + " failed to pass monitoredBarrier in 2000 ms")
    timeout = datetime.timedelta(seconds=2)
    tdist.barrier()  # every rank arrives together: only the absent ones are late
    if rank == 0:
        with pytest.raises(RuntimeError, match=missing):
            tdist.monitored_barrier(group, timeout, wait_all_ranks=wait_all_ranks)
    elif rank not in absent:
        with pytest.raises(RuntimeError, match=f"Rank {rank} successfully reached monitoredBarrier"
                                               ", but received errors while waiting for send/recv "
                                               f"from rank 0. Rank 0 says: {missing}"):
            tdist.monitored_barrier(group, timeout, wait_all_ranks=wait_all_ranks)
    tdist.barrier()
    if rank in absent:
        with pytest.raises(RuntimeError, match=f"Rank 0 says: {missing}"):
            tdist.monitored_barrier(group, timeout, wait_all_ranks=wait_all_ranks)
    tdist.monitored_barrier(group, datetime.timedelta(seconds=30), wait_all_ranks=wait_all_ranks)
    total = torch.ones(1)
    tdist.all_reduce(total, group=group)
    assert total.item() == size


@needs_monitored_barrier
def test_monitored_barrier_with_no_time_left_says_rank_0_timed_out(world, size, rank, multi_rank):
    """Rank 0 alone calls it, with no time: it has heard from nobody when its time is spent."""
    group = tdist.new_group(list(range(size)))
    if rank == 0:
        with pytest.raises(RuntimeError, match="Rank 0 timed out in monitoredBarrier after 0 ms; "
                                               "heard from ranks none, not yet from rank 1"):
            tdist.monitored_barrier(group, datetime.timedelta(seconds=0))
    tdist.barrier()


def test_sequence_numbers_count_the_groups_collectives(world, size, rank):
    """torch reads a group's sequence number (gloo and NCCL keep one; torch 2.14 asks for it when
    a subgroup gathers objects): it starts at 0 and counts collectives, not sends and receives."""
    group = tdist.new_group(list(range(size)))
    backend = group._get_backend(torch.device("cpu")) if hasattr(group, "_get_backend") else group
    assert backend._get_sequence_number_for_group() == 0
    tdist.all_reduce(torch.ones(2), group=group)
    tdist.broadcast(torch.ones(2), src=0, group=group)
    tdist.all_gather_into_tensor(torch.zeros(2 * size), torch.ones(2), group=group)
    if size > 1:  # a ring of sends: not counted
        peer_out, peer_in = (rank + 1) % size, (rank - 1) % size
        sent = tdist.isend(torch.ones(1), peer_out, group=group)
        tdist.recv(torch.zeros(1), peer_in, group=group)
        sent.wait()
    assert backend._get_sequence_number_for_group() == 3
    gathered = [None] * size
    tdist.all_gather_object(gathered, {"rank": rank}, group=group)
    assert gathered == [{"rank": r} for r in range(size)]
