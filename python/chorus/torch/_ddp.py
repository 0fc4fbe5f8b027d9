"""chorus.torch.DistributedDataParallel: data-parallel training for any torch.nn.Module.

The C++ GradientReducer (src/parallel/) does the work: gradients live as views into its bucket
buffers, each bucket's allreduce (avg) starts the moment its last gradient is produced, while
backward goes on, and the end of backward waits for them all. This file only connects it to
autograd: a hook on each parameter's gradient accumulator marks the gradient ready, and a callback
at the end of backward finalizes.
"""

import contextlib
import weakref

import torch
from torch.utils import dlpack as _dlpack

from .. import _arrays, _chorus, _groups, _nested, _ops
from . import hooks as _hooks
from ._autograd_hooks import (EndOfBackward, adopt_gradient_view, bucket_limits,
                              check_parameters, hook_accumulators)
from ._device_buckets import DeviceBuckets
from ._join import UnevenInputs

# Whether host models take the CUDA path too (DeviceBuckets and a hook per bucket): for tests.
_DEVICE_BUCKETS_ON_HOST = False


class DistributedDataParallel(torch.nn.Module):
    """Wraps `module` so that backward averages its gradients across every rank.

    - At construction, rank 0's parameters and buffers are broadcast, so every rank starts equal
      (collective: every rank must construct it, with the same module structure).
    - Gradients are packed into buckets of bucket_cap_mb (default: get_config().bucket_bytes,
      CHORUS_BUCKET_MB, 25 MB) in reverse registration order, with a small first bucket; after the
      first iteration the buckets follow the order gradients actually became ready on rank 0.
      Each parameter's .grad becomes a view into its bucket, so nothing is copied.
    - When backward returns, every .grad holds the average over ranks. A parameter that got no
      gradient on a rank contributes zero there; one that got none on any rank keeps .grad None,
      exactly as in a single process.
    - broadcast_buffers: buffers (e.g. BatchNorm statistics) are broadcast from rank 0 at every
      forward, as torch's DistributedDataParallel does.
    - no_sync(): backward inside it only accumulates local gradients; the first backward after it
      averages the accumulated sum.
    - Works with any torch optimizer: optimizer.step() reads the averaged .grad.
    - float16 and bfloat16 gradients are averaged with float32 accumulation on the host; on CUDA
      NCCL adds them in their own dtype.
    - CUDA models (chorus built with the GPU backend): the buckets live in device memory (torch's
      allocator) and each bucket's allreduce runs on NCCL, queued as soon as its gradients are
      ready, after an event on the stream that produced them, never a host wait; the end of
      backward orders the current stream (the optimizer's) after the last bucket. Every parameter
      must be on one device; a module split between host and GPU is a ValueError.
    - find_unused_parameters is accepted for torch compatibility and changes nothing: parameters
      without a gradient are always handled (one tiny allreduce per step says which).
    - register_comm_hook(state, hook): each bucket is reduced by hook(state, bucket) instead, with
      torch's contract (chorus.torch.hooks: allreduce, fp16 and bf16 compression, PowerSGD; a
      hook written for torch's DDP works unchanged where it uses only the bucket's methods).
    - join(): training on uneven inputs, ranks running out of batches at different iterations
      (torch's DistributedDataParallel.join(); see chorus/torch/_join.py).
    """

    def __init__(self, module, bucket_cap_mb=None, broadcast_buffers=True,
                 find_unused_parameters=False):
        super().__init__()
        self.module = module
        self.broadcast_buffers = bool(broadcast_buffers)
        self._comm = _groups.get(None)
        named = check_parameters(module.named_parameters(), "DistributedDataParallel", cuda=True)
        self._names = [name for name, _ in named]
        self._params = [p for _, p in named]
        # CUDA models hold their buckets in DeviceBuckets (the tests run that path on host
        # tensors too, through _DEVICE_BUCKETS_ON_HOST).
        self._held_buckets = bool(self._params) and (self._params[0].is_cuda
                                                     or _DEVICE_BUCKETS_ON_HOST)
        # As torch's DDP: every rank's parameters, frozen ones too, must agree in name, dtype and
        # shape (a MismatchError on every rank, the world still usable), and then all of them take
        # rank 0's values (frozen ones too: they were left as each rank made them, an audit found).
        every = list(module.named_parameters())
        _nested.check_same_structure([(repr(name), p) for name, p in every], None,
                                     "DistributedDataParallel", "of a model: the parameters differ")
        self._broadcast_from_rank_zero([p.detach() for _, p in every])
        for p in self._params:
            p._chorus_data_parallel = weakref.ref(self)  # what ZeroOptimizer refuses to take
        self._broadcast_from_rank_zero(self._buffers_to_sync())
        bucket_bytes, first_bucket_bytes = bucket_limits(bucket_cap_mb, "DistributedDataParallel")
        specs = [(p.numel(), _arrays.torch_dtype_name(p.dtype)) for p in self._params]
        self._reducer_arguments = (self._comm._native, specs, bucket_bytes, first_bucket_bytes)
        self._comm_hook = None  # (state, hook) once registered
        self._make_reducer()
        # A CUDA model's buckets are device memory, each reduced by a hook: allreduce_hook unless
        # the user registers another.
        self._default_hook = self._held_buckets
        if self._held_buckets:
            self._comm_hook = (None, _hooks.allreduce_hook)
        self._hook_futures = []  # (bucket index, future) of this backward
        self._backward_done = False
        self._views = []
        self._views_generation = None
        self._sync = True
        self._join = None  # the UnevenInputs context this rank is training in
        self._join_averaging = True  # inside join(): whether the last forward's backward averages
        self._end_of_backward = EndOfBackward(self._finalize)
        # Keeps the autograd nodes (and so their hooks) alive.
        self._accumulators = hook_accumulators(self._params, self._make_hook)

    def _make_reducer(self, issue_buckets=True):
        """The C++ GradientReducer; for a CUDA model it keeps the plan only, and DeviceBuckets the
        memory (see _device_buckets.py)."""
        if self._held_buckets:
            self._reducer = _chorus.GradientReducer(*self._reducer_arguments, issue_buckets=False,
                                                    owns_memory=False)
            self._device_buckets = DeviceBuckets(self._reducer, self._params)
        else:
            self._reducer = _chorus.GradientReducer(*self._reducer_arguments,
                                                    issue_buckets=issue_buckets)
            self._device_buckets = None
        self._views_generation = None

    def _buffers_to_sync(self):
        if not self.broadcast_buffers:
            return []
        return [b for b in self.module.buffers() if b.device.type in ("cpu", "cuda")]

    def _broadcast_from_rank_zero(self, tensors):
        self._broadcast_from(0, tensors)

    def _broadcast_from(self, root, tensors):
        """Every rank takes group rank `root`'s values of `tensors`."""
        if self._comm.size == 1:
            return
        # One fused broadcast per kind: one call takes host or CUDA tensors, not both.
        for kind in ("cpu", "cuda"):
            same = [t for t in tensors if t.device.type == kind]
            if same:
                _ops.broadcast(same, root=self._comm.members[root], inplace=True)

    def _broadcast_buffers_from(self, root):
        self._broadcast_from(root, self._buffers_to_sync())

    def forward(self, *inputs, **kwargs):
        root = 0
        if self._join is not None:
            # Inside join() the forward decides whether its backward averages (as torch's DDP
            # does): the joined ranks shadow what the agreement said.
            self._join_averaging = torch.is_grad_enabled() and self._sync
            root = self._join.before_forward(self._join_averaging)
        self._broadcast_buffers_from(root)
        return self.module(*inputs, **kwargs)

    def join(self, divide_by_initial_world_size=True, enable=True,
             throw_on_early_termination=False):
        """A context manager for training on uneven inputs: run each rank's training loop inside
        `with ddp.join():`. A rank whose loop ends early shadows the others' collectives (with
        zero gradients) until every rank's loop has ended; then every rank takes the model of the
        highest rank that trained to the end. Every forward inside it must be followed by its
        backward (or run under torch.no_grad()), as with torch's join; and, as in torch's, the
        forward decides whether its backward averages (no_sync() around the forward). Only this
        model's collectives are shadowed: other collectives in the loop (another model, a
        ZeroOptimizer, SyncBatchNorm) are not matched on the joined ranks.

        divide_by_initial_world_size (default True): gradients are divided by the world size even
        when fewer ranks train; False divides by the number still training.
        throw_on_early_termination: when any rank runs out of inputs, every rank raises
        chorus.Error instead. enable=False: an ordinary loop."""
        return UnevenInputs(self, divide_by_initial_world_size, enable,
                            throw_on_early_termination)

    def _attach_join(self, context):
        if self._join is not None:
            raise _chorus.InvalidArgumentError(
                "DistributedDataParallel.join: this model is already inside a join() context")
        self._join = context

    def _detach_join(self):
        self._join = None

    def _shadow_backward(self):
        """A joined rank's part in the backward of the ranks still training: every gradient is
        absent here, so it contributes zeros to each bucket's average."""
        self._finalize(shadow=True)

    def _adopt_model_of(self, root):
        """The end of join(): every rank takes group rank `root`'s parameters and buffers."""
        self._broadcast_from(root, [p.detach() for p in self._params] + self._buffers_to_sync())

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside only accumulates gradients locally (gradient accumulation)."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    @property
    def reducer(self):
        """The C++ GradientReducer (num_buckets, bucket_bytes(b), bucket_gradients(b), ...)."""
        return self._reducer

    def _view(self, index):
        """Gradient `index`'s view into its bucket, shaped like the parameter."""
        if self._device_buckets is not None:
            return self._device_buckets.view(index)
        if self._views_generation != self._reducer.generation:
            self._views = [
                _dlpack.from_dlpack(self._reducer.gradient(i)).view(p.shape)
                for i, p in enumerate(self._params)]
            self._views_generation = self._reducer.generation
        return self._views[index]

    def _adopt(self, index):
        """Makes the parameter's .grad its bucket view (copying a gradient that lives elsewhere)."""
        adopt_gradient_view(self._params[index], self._view(index))

    def register_comm_hook(self, state, hook):
        """Reduces each gradient bucket with hook(state, bucket) (torch's contract; see
        chorus.torch.hooks). Call it on every rank before the first backward, at most once."""
        if self._comm_hook is not None and not self._default_hook:
            raise _chorus.InvalidArgumentError(
                "register_comm_hook: a communication hook is already registered")
        if self._backward_done:
            raise _chorus.InvalidArgumentError(
                "register_comm_hook must be called before the first backward")
        if not callable(hook):
            raise _chorus.InvalidArgumentError(
                f"register_comm_hook needs a callable hook, not {type(hook).__name__}")
        self._make_reducer(issue_buckets=False)
        self._comm_hook = (state, hook)
        self._default_hook = False

    def _make_hook(self, index):
        def on_gradient_accumulated(*_):
            if not (self._sync if self._join is None else self._join_averaging):
                return
            self._end_of_backward.arm()
            self._adopt(index)
            self._reducer.mark_ready(index)
            if self._comm_hook is not None:
                self._run_hooks()
        return on_gradient_accumulated

    def _run_hooks(self):
        """Hands each bucket that became ready to the communication hook, in bucket order (the
        default hook, allreduce_hook, through DeviceBuckets' shorter path to the same call)."""
        state, hook = self._comm_hook
        for b in self._reducer.take_ready_buckets():
            if self._default_hook:
                future = self._device_buckets.allreduce_average(b, self._comm)
            else:
                future = hook(state, GradBucket(self, b))
            self._hook_futures.append((b, future))

    def _bucket_buffer(self, b):
        if self._device_buckets is not None:
            return self._device_buckets.bucket(b)
        return _dlpack.from_dlpack(self._reducer.bucket(b))

    def _wait_for_hooks(self):
        """End of backward with a hook: the absent gradients' buckets go to the hook too; then each
        bucket's future is waited for, in order, and its result copied into the bucket."""
        if self._device_buckets is not None:
            self._device_buckets.zero_absent()
        self._reducer.mark_absent()
        self._run_hooks()
        futures, self._hook_futures = self._hook_futures, []
        for b, future in futures:
            result = future.wait()
            if isinstance(result, (list, tuple)):
                result = result[0]
            buffer = self._bucket_buffer(b)
            if result.data_ptr() != buffer.data_ptr():
                buffer.copy_(result.reshape(-1))

    def _finalize(self, shadow=False):
        """End of backward: gradients present but not produced by this backward (accumulated under
        no_sync, or left from earlier) count too; then wait for the averages. A shadow (a joined
        rank's part) counts none of this rank's gradients."""
        for index, p in enumerate(self._params):
            if not shadow and p.grad is not None and not self._reducer.is_ready(index):
                self._adopt(index)
                self._reducer.mark_ready(index)
        self._backward_done = True
        if self._comm_hook is not None:
            self._wait_for_hooks()
        used = self._reducer.finalize()
        if self._device_buckets is not None:
            self._device_buckets.follow_rebuild()  # moves the values, if the buckets moved
        for index, p in enumerate(self._params):
            if used[index] and self._device_buckets is not None:
                p.grad = self._device_buckets.view(index)
            elif used[index]:
                self._adopt(index)  # averaged, and possibly moved by the bucket rebuild
        if self._join is not None and self._join.gradient_scale != 1.0:
            for index, p in enumerate(self._params):
                if used[index]:
                    p.grad.mul_(self._join.gradient_scale)


class GradBucket:
    """A gradient bucket as a communication hook sees it (torch's GradBucket methods)."""

    __slots__ = ("_ddp", "_index")

    def __init__(self, ddp, index):
        self._ddp, self._index = ddp, index

    def index(self):
        return self._index

    def buffer(self):
        """The bucket's flat gradients (with the alignment padding between them, zeros)."""
        return self._ddp._bucket_buffer(self._index)

    def is_last(self):
        return self._index == self._ddp._reducer.num_buckets - 1

    def gradients(self):
        """Each parameter's gradient in this bucket, shaped like the parameter (views)."""
        return [self._ddp._view(i) for i in self._ddp._reducer.bucket_gradients(self._index)]

    def parameters(self):
        return [self._ddp._params[i] for i in self._ddp._reducer.bucket_gradients(self._index)]

    def set_buffer(self, tensor):
        """Replaces the bucket's contents with `tensor` (same number of elements)."""
        self.buffer().copy_(tensor.reshape(-1))
