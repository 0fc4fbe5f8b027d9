"""DeviceBuckets: the gradient buckets of a CUDA model's DistributedDataParallel, in device memory.

The C++ GradientReducer keeps the plan and the bookkeeping (owns_memory=False and
issue_buckets=False): which gradient lives where, which buckets are ready, rank 0's ready order
after the first iteration, and which gradients were present on some rank. This file holds the memory:
one torch tensor per bucket, from torch's caching allocator (so torch.cuda.memory_allocated()
counts it), and each gradient's view into it. DistributedDataParallel reduces each bucket with a
communication hook, by default what chorus.torch.hooks.allreduce_hook does (allreduce_average
here, a shorter path to the same call): an async allreduce (avg) queued on the communicator's NCCL
stream after an event on the stream that produced the gradients, while backward goes on; the end of
backward orders the current stream after every bucket, with no host wait.
"""

import torch

from .. import _arrays, _chorus, _ops


class DeviceBuckets:
    """The buckets of `reducer`'s plan for `params` (CUDA tensors on one device), zero at first."""

    def __init__(self, reducer, params):
        self._reducer = reducer
        self._params = params
        self._device = params[0].device if params else None
        self.generation = reducer.generation
        self._buckets, self._views = self._allocate()

    def _allocate(self):
        reducer = self._reducer
        buckets = [torch.zeros(reducer.bucket_numel(b), dtype=getattr(torch, reducer.bucket_dtype(b)),
                               device=self._device)
                   for b in range(reducer.num_buckets)]
        views = []
        for index, p in enumerate(self._params):
            b, offset = reducer.location(index)
            views.append(buckets[b][offset:offset + p.numel()].view(p.shape))
        return buckets, views

    def bucket(self, b):
        """Bucket b's whole buffer, flat (alignment padding included, zero)."""
        return self._buckets[b]

    def view(self, index):
        """Gradient `index`'s view into its bucket, shaped like the parameter."""
        return self._views[index]

    def allreduce_average(self, b, comm):
        """What chorus.torch.hooks.allreduce_hook does to bucket b (an asynchronous allreduce, avg,
        in place, on the group `comm`), without the Python front end's general checks and
        conversions, which cost more than the call itself at this rate (one per bucket per
        backward). wait() on the result orders the current stream after it and gives the bucket."""
        bucket = self._buckets[b]
        if bucket.is_cuda:  # the collective follows the stream that produced the gradients
            _chorus.set_current_stream(torch.cuda.current_stream(bucket.device).cuda_stream)
        pending = _chorus.allreduce(comm._native, [torch.utils.dlpack.to_dlpack(bucket)],
                                    _AVERAGE, None, True)
        return _BucketReduction(pending, bucket)

    def zero_absent(self):
        """Zeroes the gradients not marked ready in this iteration: absent on this rank, they
        contribute nothing to the average (call before the reducer's mark_absent())."""
        for index, view in enumerate(self._views):
            if not self._reducer.is_ready(index):
                view.zero_()

    def follow_rebuild(self):
        """After the reducer's finalize(): when it rebuilt its plan, new buckets laid out as the
        plan now says, with every gradient's values moved over (on the current stream)."""
        if self._reducer.generation == self.generation:
            return
        old_views = self._views
        self._buckets, self._views = self._allocate()
        with torch.no_grad():
            for new, old in zip(self._views, old_views):
                new.copy_(old)
        self.generation = self._reducer.generation


_AVERAGE = _ops._reduce_op("avg")


class _BucketReduction:
    """The allreduce of one bucket: wait() orders the current stream of the bucket's device after
    it (every wait, as chorus's Work does) and returns the bucket."""

    __slots__ = ("_pending", "_bucket")

    def __init__(self, pending, bucket):
        self._pending, self._bucket = pending, bucket

    def wait(self):
        _arrays.follow_current_stream(self._bucket.device if self._bucket.is_cuda else None)
        self._pending.wait(None)
        return self._bucket
