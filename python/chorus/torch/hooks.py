"""chorus.torch.hooks: communication hooks for chorus.torch.DistributedDataParallel, with torch's
contract (issue 24):

    model = chorus.torch.DistributedDataParallel(net)
    model.register_comm_hook(None, chorus.torch.hooks.bf16_compress_hook)

A hook is called as hook(state, bucket) once per gradient bucket per backward, as soon as the
bucket's gradients are ready, in bucket order (the same on every rank). `bucket` has torch's
GradBucket methods: buffer() (the flat gradients), index(), is_last(), gradients(), parameters(),
set_buffer(t). The hook returns a future whose wait() gives the bucket's reduced flat tensor (the
average over the ranks): a torch.futures.Future (what torch.distributed's async work gives, so a
hook written for torch's DDP works unchanged, over chorus's torch backend or gloo), or this module's
WorkFuture over a chorus operation. DDP waits for every bucket's future at the end of backward and
copies each result into its bucket.

`state` of the hooks here: None (the world), a rank_list, or a chorus Group.

- allreduce_hook: the average, as chorus's DDP computes it without a hook.
- fp16_compress_hook, bf16_compress_hook: cast the bucket to float16 / bfloat16, divide by the group
  size, allreduce (sum), and cast back: half the bytes on the wire. On host tensors chorus's
  reduction of half precision accumulates in float32 (the shm backend's half-precision path), so
  compression costs no accuracy beyond the casts; on CUDA, NCCL adds in the half-precision dtype,
  rounding at each step. The arithmetic is torch's own hooks', step by step, so over the same
  backend the results are bit for bit torch's (tested).
- PowerSGDState, powerSGD_hook: rank-r PowerSGD with error feedback and warm start
  (chorus/torch/_powersgd.py).
"""

import torch

from .. import _groups, _ops


class WorkFuture:
    """A future over a chorus async Work: wait() and value() give `finish(result)`."""

    __slots__ = ("_work", "_finish", "_value", "_done", "_finished")

    def __init__(self, work, finish=lambda result: result):
        self._work, self._finish = work, finish
        self._value, self._done, self._finished = None, False, None

    def wait(self):
        # For CUDA tensors every wait orders the current stream: after the Work (its own wait())
        # and after `finish`, which ran on the first waiter's stream (an event recorded there).
        result = self._work.wait()
        if not self._done:
            self._value, self._done = self._finish(result), True
            if torch.is_tensor(self._value) and self._value.is_cuda:
                self._finished = torch.cuda.Event()
                self._finished.record(torch.cuda.current_stream(self._value.device))
        elif self._finished is not None:
            torch.cuda.current_stream(self._value.device).wait_event(self._finished)
        return self._value

    value = wait

    def done(self):
        return self._done or self._work.is_completed()


def _group_of(state):
    """(rank_list, group) for a hook's state: None, a rank_list, or a chorus Group."""
    if isinstance(state, _groups.Group):
        return None, state
    return state, None


def _group_size(rank_list, group):
    return group.size if group is not None else _groups.get(rank_list).size


def allreduce_hook(state, bucket):
    """The average of the bucket over the group."""
    rank_list, group = _group_of(state)
    # In place on the bucket, as the reducer's own allreduce: no copy, and the same reduction.
    work = _ops.allreduce(bucket.buffer(), "avg", rank_list=rank_list, group=group, async_op=True,
                          inplace=True)
    return WorkFuture(work)


def _compress_hook(state, bucket, dtype):
    rank_list, group = _group_of(state)
    buffer = bucket.buffer()
    compressed = buffer.to(dtype).div_(_group_size(rank_list, group))
    work = _ops.allreduce(compressed, "sum", rank_list=rank_list, group=group, async_op=True,
                          inplace=True)

    def decompress(reduced):
        buffer.copy_(reduced)
        if reduced.is_cuda:  # freed later, but read here, on this stream
            reduced.record_stream(torch.cuda.current_stream(reduced.device))
        return buffer

    return WorkFuture(work, decompress)


def fp16_compress_hook(state, bucket):
    """The average, carried in float16 (see the module doc)."""
    return _compress_hook(state, bucket, torch.float16)


def bf16_compress_hook(state, bucket):
    """The average, carried in bfloat16 (see the module doc)."""
    return _compress_hook(state, bucket, torch.bfloat16)


try:  # the PowerSGD hook lives in its own module
    from ._powersgd import PowerSGDState, powerSGD_hook  # noqa: F401
except ImportError:  # pragma: no cover - absent in a partial install
    pass

__all__ = ["WorkFuture", "allreduce_hook", "fp16_compress_hook", "bf16_compress_hook",
           "PowerSGDState", "powerSGD_hook"]
