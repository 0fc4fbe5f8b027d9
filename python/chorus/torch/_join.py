"""DistributedDataParallel.join(): data-parallel training when ranks have different numbers of
batches (uneven inputs), as torch's DistributedDataParallel.join() and Horovod's hvd.join() allow.

Inside `with ddp.join():`, each forward of a rank that still has data first agrees with every
other rank, in one allreduce of one int32 per rank, on which ranks are still training and whether
this iteration's backward averages gradients (grad enabled, not under no_sync). A rank whose loop
has ended waits in the context's exit and shadows the others, one agreement at a time: it says it
has joined, takes part in their buffer broadcast, and joins each averaging backward's bucket
allreduces with zero gradients. When an agreement finds no rank training, every rank has joined;
then all take the parameters and buffers of the highest rank that trained to the end, so every
rank leaves with the same model.

Every rank calls the same collectives in the same order, so each rank sees the same sequence of
agreements and chooses the same roots without further messages.
"""

import numpy as np

from .. import _chorus, _ops

_JOINED, _TRAINING, _AVERAGING = 0, 1, 2  # what a rank says in an agreement


class Agreement:
    """The outcome of one agreement: `training`, the group ranks still training (ascending);
    `averaging`, whether their backward averages gradients."""

    __slots__ = ("training", "averaging")

    def __init__(self, states):
        self.training = [int(r) for r in np.flatnonzero(states)]
        self.averaging = bool((states == _AVERAGING).any())


class UnevenInputs:
    """The context manager that DistributedDataParallel.join() returns.

    divide_by_initial_world_size: gradients are divided by the world size even when fewer ranks
    are still training (torch's default: a joined rank counts as a zero gradient); False divides
    by the number still training, so each step averages the batches that took part.
    enable=False makes it do nothing. throw_on_early_termination: when one rank runs out of
    inputs, every rank raises chorus.Error (at its next forward, or on leaving the context)
    instead of shadowing.
    """

    def __init__(self, ddp, divide_by_initial_world_size=True, enable=True,
                 throw_on_early_termination=False):
        self._ddp = ddp
        self._divide_by_initial = bool(divide_by_initial_world_size)
        self._enable = bool(enable)
        self._throw = bool(throw_on_early_termination)
        self._last_trainer = None  # the highest group rank training in the last agreement with any
        self.gradient_scale = 1.0  # what the last agreement's backward multiplies the average by

    def __enter__(self):
        if self._enable:
            self._ddp._attach_join(self)
        return self

    def __exit__(self, kind, value, traceback):
        if not self._enable:
            return False
        try:
            if kind is None:
                self._shadow_until_every_rank_joined()
                if self._last_trainer is not None:
                    self._ddp._adopt_model_of(self._last_trainer)
        finally:
            self._ddp._detach_join()
        return False

    def before_forward(self, averaging):
        """A training rank's agreement, at the start of its forward: returns the group rank whose
        buffers every rank takes (the highest still training)."""
        agreement = self._agree(_AVERAGING if averaging else _TRAINING)
        return agreement.training[-1]

    def _shadow_until_every_rank_joined(self):
        while True:
            agreement = self._agree(_JOINED)
            if not agreement.training:
                return
            self._ddp._broadcast_buffers_from(agreement.training[-1])
            if agreement.averaging:
                self._ddp._shadow_backward()

    def _agree(self, state):
        comm = self._ddp._comm
        states = np.zeros(comm.size, dtype=np.int32)
        states[comm.rank] = state
        agreement = Agreement(_ops.allreduce(states))
        training = agreement.training
        if training:
            self._last_trainer = training[-1]
        if self._throw and 0 < len(training) < comm.size:
            out = sorted(set(range(comm.size)) - set(training))
            raise _chorus.Error(
                f"DistributedDataParallel.join(throw_on_early_termination=True): "
                f"{'ranks' if len(out) > 1 else 'rank'} {', '.join(map(str, out))} ran out of "
                f"inputs while {'ranks' if len(training) > 1 else 'rank'} "
                f"{', '.join(map(str, training))} still had some; every rank raises")
        if training and not self._divide_by_initial:
            self.gradient_scale = comm.size / len(training)
        return agreement
