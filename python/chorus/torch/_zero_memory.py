"""The ZeRO paper's memory model (arXiv 1910.02054, section 3 and Table 1) and ZeroOptimizer's
memory_report(), which sets what a rank measurably holds against it.

Model states per rank for Ψ parameters on N ranks, with d bytes per parameter and gradient element
(2 in mixed precision, 4 in float32) and K bytes of optimizer state per parameter (mixed-precision
Adam: float32 master weights, momentum and variance, K = 12; float32 Adam: K = 8; SGD with
momentum: 4, plus 4 for master weights in mixed precision):
    stage 1 (P_os):       dΨ + dΨ + KΨ/N        (mixed precision: 4Ψ + KΨ/N)
    stage 2 (P_os+g):     dΨ + (d + K)Ψ/N       (2Ψ + (2 + K)Ψ/N)
    stage 3 (P_os+g+p):   (d + d + K)Ψ/N        ((2 + 2 + K)Ψ/N)
"""

import torch
from torch.utils import dlpack as _dlpack


def predict(numel, world_size, stage, k=12, bytes_per_element=2):
    """Bytes per rank of parameters, gradients and optimizer state, and their total."""
    d, n = bytes_per_element, world_size
    prediction = {
        "parameters": d * numel if stage < 3 else d * numel / n,
        "gradients": d * numel if stage < 2 else d * numel / n,
        "optimizer_state": k * numel / n,
    }
    prediction["total"] = sum(prediction.values())
    return prediction


def optimizer_k(optim, momentum, mixed_precision):
    """K: optimizer-state bytes per parameter (master weights included in mixed precision)."""
    state = 8 if optim in ("adam", "adamw") else (4 if momentum > 0 else 0)
    return state + (4 if mixed_precision else 0)


def _outside_engine(engine, stage, params):
    """Bytes of parameters and gradients that torch holds outside the engine's memory (0 when
    every .data and .grad is an engine view, released, or None)."""
    outside = 0
    for index, p in enumerate(params):
        if stage < 3:
            engine_view = _dlpack.from_dlpack(engine.parameter(index))
            if p.data_ptr() != engine_view.data_ptr():
                outside += p.numel() * p.element_size()
        else:
            outside += p.numel() * p.element_size()
        if p.grad is not None:
            in_engine = (stage == 1 and p.grad.data_ptr()
                         == _dlpack.from_dlpack(engine.gradient(index)).data_ptr())
            if not in_engine:
                outside += p.grad.numel() * p.grad.element_size()
    return outside


def report(engine, world_size, stage, optim, hyperparameters, dtype, params):
    d = torch.tensor([], dtype=dtype).element_size()
    k = optimizer_k(optim, hyperparameters["momentum"], d != 4)
    numel = engine.total_numel
    memory = engine.memory()
    measured = {key: memory[key] for key in ("parameters", "gradients", "optimizer_state")}
    measured["total"] = sum(measured.values())
    padding_elements = world_size * engine.shard_numel - numel
    return {
        "stage": stage, "world_size": world_size, "numel": numel,
        "bytes_per_element": d, "k": k,
        "measured": measured,
        "predicted": predict(numel, world_size, stage, k, d),
        # The most the shards' padding adds to this rank's model states.
        "padding_bytes": padding_elements * (2 * d + k),
        "buffers": memory["buffers"], "peak_buffers": memory["peak_buffers"],
        "outside_engine_bytes": _outside_engine(engine, stage, params),
    }
