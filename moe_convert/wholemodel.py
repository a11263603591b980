"""Whole-model figures: one layer's conversion times the model's MoE layers, and a sleep-mode load.

A model load converts every MoE layer of a rank one after another, so its conversion time is the
per-layer time times ``moe_layers`` (``whole_model_seconds``; ``timing.LayerTiming`` derives it
from its measurement). Its memory is another matter: under
vLLM's sleep mode every layer's weights are resident in one ``torch.cuda.MemPool`` and freed
blocks stay reserved in it, while loading sets ``max_split_size_mb:20`` (vLLM #41268); whether
the load fits is decided by the caching allocator, not by peak live bytes. ``sleep_mode_load``
replays that situation on a real CUDA device (``allocator.md`` has the allocator's rules).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .allocator import MiB
from .inputs import warm_strategy
from .memory import require_cuda
from .shapes import LayerShape
from .strategies import convert

__all__ = [
    "SleepModeLoad",
    "allocator_max_split_size",
    "sleep_mode_load",
    "whole_model_seconds",
]

# PyTorch's default max_split_size is SIZE_MAX (no limit); vLLM restores it as this many MiB.
_UNLIMITED_SPLIT_MB = (2**64 - 1) // MiB


def whole_model_seconds(shape: LayerShape, per_layer_seconds: float) -> float:
    """Seconds to convert every MoE layer of ``shape``'s model on one rank (layers in sequence).

    ``shape.moe_layers`` layers of ``shape`` (with its expert count: a shape limited by
    ``with_experts`` gives the figure for a model with that many experts per layer).
    """
    return per_layer_seconds * shape.moe_layers


@contextlib.contextmanager
def allocator_max_split_size(max_split_size_mb: int) -> Iterator[None]:
    """Set the CUDA caching allocator's ``max_split_size_mb`` for the block, as vLLM's load does.

    Through ``torch._C._accelerator_setAllocatorSettings`` (torch >= 2.9; 2.13 has it), which
    resets every setting it is not given; the previous ``max_split_size`` (read from
    ``memory_stats``) is restored after, unlimited where it was. Where the setter is missing, set
    ``PYTORCH_ALLOC_CONF=max_split_size_mb:N`` before the process starts instead.
    """
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        raise RuntimeError(
            f"torch {torch.__version__} cannot change allocator settings at run time; start the "
            f"process with PYTORCH_ALLOC_CONF=max_split_size_mb:{max_split_size_mb} instead"
        )
    previous = torch.cuda.memory_stats().get("max_split_size", -1)
    # SIZE_MAX may read back as -1 (int64) or as itself: either way, unlimited.
    restore = previous // MiB if 0 < previous < 2**63 else _UNLIMITED_SPLIT_MB
    setter(f"max_split_size_mb:{max_split_size_mb}")
    try:
        yield
    finally:
        setter(f"max_split_size_mb:{restore}")


@dataclass(frozen=True)
class SleepModeLoad:
    """One simulated sleep-mode load: ``layers`` layers resident, converted one after another."""

    strategy: str
    shape: str  # LayerShape.label
    layers: int
    max_split_size_mb: int
    weights_reserved_bytes: int  # reserved once every layer's weights are allocated
    peak_reserved_bytes: int  # peak reserved above the start, weights included
    peak_allocated_bytes: int  # peak allocated above the start, weights included
    oom_layer: int | None  # index of the layer whose conversion ran out of memory, or None
    oom_message: str  # first line of the error ("" without OOM)

    @property
    def ran_out_of_memory(self) -> bool:
        return self.oom_layer is not None

    @property
    def transient_reserved_bytes(self) -> int:
        """What conversion added to reserved memory on top of the resident weights."""
        return self.peak_reserved_bytes - self.weights_reserved_bytes


def sleep_mode_load(
    shape: LayerShape, strategy: str, *, layers: int, max_split_size_mb: int = 20
) -> SleepModeLoad:
    """Convert ``layers`` resident layers of ``shape`` inside a ``MemPool``, as vLLM's sleep mode.

    All weights (bf16, uninitialised: the bytes do not matter) are allocated in a fresh
    ``torch.cuda.MemPool`` with ``max_split_size_mb`` set; then each layer is converted in turn,
    inside the pool: an out-of-place result replaces the layer's weights (the old tensors are
    freed, their blocks stay in the pool), an in-place result stays where it is. The strategy's
    index caches are warmed beforehand, outside the pool. A ``torch.OutOfMemoryError`` during a
    conversion stops the load and is reported with its layer. Peaks are device-wide, above the
    start (everything else is released first).

    ``layers`` is the number of layers to hold (``shape.moe_layers`` for a whole rank: Qwen3-235B
    TP4 is 94 layers, 105.75 GiB, which fits a GB200; fewer elsewhere). One difference from
    vLLM: a plain ``MemPool`` on a failed raw allocation may free its own stranded oversize
    segments and retry (allocator rule 6b), while vLLM's CuMem allocator reports the first failed
    allocation as an OOM. So ``peak_reserved_bytes`` is the figure to compare with the memory a
    rank has; an OOM here implies one there, not conversely. ``RuntimeError`` without CUDA.
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    device = require_cuda("sleep_mode_load")
    warm_strategy(shape, strategy, device)
    oom_layer, oom_message = None, ""
    with allocator_max_split_size(max_split_size_mb):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base_reserved = torch.cuda.memory_reserved(device)
        base_allocated = torch.cuda.memory_allocated(device)
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool, device=device):
            try:
                weights = [
                    (torch.empty(shape.w13_shape, dtype=torch.bfloat16, device=device),
                     torch.empty(shape.w2_shape, dtype=torch.bfloat16, device=device))
                    for _ in range(layers)
                ]
            except torch.OutOfMemoryError as exc:
                raise RuntimeError(
                    f"layers ({layers}) x {shape.layer_bytes / 2**30:.2f} GiB of {shape.label} "
                    f"weights do not fit on {device}; hold fewer layers"
                ) from exc
            weights_reserved = torch.cuda.memory_reserved(device) - base_reserved
            for index in range(layers):
                w13, w2 = weights[index]
                try:
                    weights[index] = convert(w13, w2, strategy=strategy, gated=shape.gated)
                except torch.OutOfMemoryError as exc:
                    oom_layer, oom_message = index, str(exc).splitlines()[0]
                    break
                finally:
                    del w13, w2
            torch.cuda.synchronize(device)
            del weights
        peak_reserved = torch.cuda.max_memory_reserved(device) - base_reserved
        peak_allocated = torch.cuda.max_memory_allocated(device) - base_allocated
        del pool
        torch.cuda.empty_cache()
    return SleepModeLoad(
        strategy=strategy,
        shape=shape.label,
        layers=layers,
        max_split_size_mb=max_split_size_mb,
        weights_reserved_bytes=weights_reserved,
        peak_reserved_bytes=peak_reserved,
        peak_allocated_bytes=peak_allocated,
        oom_layer=oom_layer,
        oom_message=oom_message,
    )
