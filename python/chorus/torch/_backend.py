"""The "chorus" torch.distributed backend: importing chorus.torch registers it, so that

    import chorus.torch
    torch.distributed.init_process_group("chorus")      # under chorusrun or mpirun

runs torch.distributed programs (DistributedDataParallel included) on chorus's collectives. Under
chorusrun chorus connects through chorusrun's store; under any other launcher (torchrun, mpirun,
torch's multiprocessing spawn) it rendezvouses through the store torch made. Each
torch process group gets a chorus communicator of its own over its members (new_group included);
the operations are those of python/src/torch/process_group.h, on CPU tensors, and on CUDA tensors
(chorus's nccl backend) when the extension was built against torch >= 2.3.
"""

import torch.distributed as dist

NAME = "chorus"

try:
    from . import _c10d
except ImportError as error:  # built without torch's C++ headers (libtorch-dev)
    _c10d = None
    _missing = error


def _create(options, pg_options=None):
    """torch's creator (extended_api=True): one ProcessGroupChorus for the group `options` names."""
    if _c10d is None:
        raise RuntimeError("chorus: this build has no torch.distributed backend (it needs torch's C++ "
                           f"headers, Debian's libtorch-dev, at build time): {_missing}")
    return _c10d.create(options.store, list(options.global_ranks_in_group), options.group_rank,
                        options.group_size, options.timeout, options.group_id)


def register():
    """Registers the backend under NAME; a second call does nothing."""
    if NAME.upper() in getattr(dist.Backend, "_plugins", {}) or hasattr(dist.Backend, NAME.upper()):
        return
    try:
        # CUDA tensors run on chorus's nccl backend where the extension takes them (torch >= 2.3).
        devices = ["cpu", "cuda"] if getattr(_c10d, "takes_cuda_tensors", False) else ["cpu"]
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=devices)
    except TypeError:  # torch 1.13: no devices
        dist.Backend.register_backend(NAME, _create, extended_api=True)
