"""Whole-model figures: one layer's conversion times the MoE layers, and the sleep-mode load.

A model load converts every MoE layer of a rank one after another, so its conversion time is the
per-layer time times ``moe_layers`` (``whole_model_seconds``; ``timing.LayerTiming`` derives it
from its measurement). Its memory is another matter: under
vLLM's sleep mode every layer's weights are resident in one ``torch.cuda.MemPool`` and freed
blocks stay reserved in it, while loading sets ``max_split_size_mb:20`` (vLLM #41268); whether
the load fits is decided by the caching allocator, not by peak live bytes.

Vocabulary: that load is **the sleep-mode load**, and its result a ``SleepModeLoad``. It is either
**replayed** through the caching-allocator model (``replay.replay_load``, any machine; the CLI's
``replay`` command, formerly ``simulate``) or **run** on a CUDA device (``run_load``), and the two
results compare field by field (docs/allocator.md has the allocator's rules).
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, fields

import torch

from .allocator import MiB, Pool
from .inputs import warm_strategy
from .memory import require_cuda
from .registry import convert
from .shapes import LayerShape

__all__ = [
    "REPLAY_ONLY",
    "VLLM_LOAD_MAX_SPLIT_MB",
    "SleepModeLoad",
    "allocator_max_split_size",
    "run_load",
    "whole_model_seconds",
]

#: The allocator's ``max_split_size_mb`` while vLLM loads a model (vLLM #41268): the setting under
#: which the sleep-mode load is replayed and run unless told otherwise.
VLLM_LOAD_MAX_SPLIT_MB = 20

# PyTorch's default max_split_size is SIZE_MAX (no limit); vLLM restores it as this many MiB.
_UNLIMITED_SPLIT_MB = (2**64 - 1) // MiB


def whole_model_seconds(shape: LayerShape, per_layer_seconds: float) -> float:
    """Seconds to convert every MoE layer of ``shape``'s model on one rank (layers in sequence).

    ``shape.moe_layers`` layers of ``shape`` (with its expert count: a shape limited by
    ``with_experts`` gives the figure for a model with that many experts per layer).
    """
    return per_layer_seconds * shape.moe_layers


@contextlib.contextmanager
def allocator_max_split_size(max_split_size_mb: int | None) -> Iterator[None]:
    """Set the CUDA caching allocator's ``max_split_size_mb`` for the block, as vLLM's load does.

    ``None``: unlimited (PyTorch's default).

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
    limit = _UNLIMITED_SPLIT_MB if max_split_size_mb is None else max_split_size_mb
    setter(f"max_split_size_mb:{limit}")
    try:
        yield
    finally:
        setter(f"max_split_size_mb:{restore}")


#: Fields of a ``SleepModeLoad`` only a replay knows (None in a CUDA run's).
REPLAY_ONLY = ("pool", "device_bytes", "stranded_segments")


@dataclass(frozen=True)
class SleepModeLoad:
    """One sleep-mode load: every layer's weights resident, then each layer converted in turn.

    The one result type of the concept, whichever way the load was made: **replayed** through
    the caching-allocator model on any machine (``replay.replay_load``: full size, seconds, no
    GPU) or **run** on a CUDA device (``run_load``). Fields mean the same on both sides (bytes
    above the start of the load; ``REPLAY_ONLY`` fields are None in a run), so the two are
    compared field by field (``differences``).
    """

    strategy: str
    shape: str  # LayerShape.label, ``model/tpN``
    layers: int  # layers held and converted in turn
    max_split_size_mb: int | None  # the allocator's setting; None: unlimited (PyTorch's default)
    pool: Pool | None  # replay: the model's pool ("sleep", "default"); run: None (a MemPool)
    device_bytes: int | None  # replay: what the device lends (None: unbounded); run: None
    other_weights_bytes: int  # non-MoE weights allocated first, as one block (run: 0)
    oom_layer: int | None  # 0-based layer whose conversion ran out of memory; None: it loaded
    oom_message: str | None  # the allocator's message (first line); None without an OOM
    loaded_reserved_bytes: int  # once every weight is allocated, before any conversion
    reserved_after_layer: tuple[int, ...]  # after each converted layer (fewer after an OOM)
    peak_reserved_bytes: int  # weights included
    peak_allocated_bytes: int  # weights included
    final_reserved_bytes: int  # at the end, or at the OOM
    num_alloc_retries: int  # failed raw allocations answered by releasing cached segments
    num_ooms: int
    stranded_segments: int | None  # replay: free whole segments >= max_split_size at the end

    @property
    def oom(self) -> bool:
        """Whether a layer's conversion ran out of memory."""
        return self.oom_layer is not None

    @property
    def transient_reserved_bytes(self) -> int:
        """What conversion added to reserved memory on top of the resident weights."""
        return self.peak_reserved_bytes - self.loaded_reserved_bytes

    @property
    def reserved_growth_per_layer_bytes(self) -> int | None:
        """Steady-state growth: the median (lower median, so whole bytes) over k of reserved
        after layer k+1 minus reserved after layer k, for the converted layers. The first
        layer's own rise (the transients it leaves cached) is left out. ``None`` when fewer than
        two layers were converted."""
        samples = self.reserved_after_layer
        if len(samples) < 2:
            return None
        return statistics.median_low(b - a for a, b in itertools.pairwise(samples))

    def differences(self, other: SleepModeLoad) -> dict[str, tuple[object, object]]:
        """``{field: (self's, other's)}`` for every field that differs, leaving out a replay-only
        field (``REPLAY_ONLY``) where one side does not know it (None): empty when a replay
        predicted a run exactly. The OOM message's wording differs between the two allocators."""
        found = {}
        for field in fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            unknown = field.name in REPLAY_ONLY and (mine is None or theirs is None)
            if mine != theirs and not unknown:
                found[field.name] = (mine, theirs)
        return found


def run_load(
    shape: LayerShape,
    strategy: str,
    *,
    layers: int | None = None,
    max_split_size_mb: int | None = VLLM_LOAD_MAX_SPLIT_MB,
) -> SleepModeLoad:
    """Run the sleep-mode load on the current CUDA device: ``layers`` layers of ``shape`` held in
    a ``MemPool``, then converted one after another, as vLLM's sleep mode loads.

    All weights (bf16, uninitialised: the bytes do not matter) are allocated in a fresh
    ``torch.cuda.MemPool`` with ``max_split_size_mb`` set (``None``: unlimited); then each layer
    is converted in turn, inside the pool: an out-of-place result replaces the layer's weights
    (the old tensors are freed, their blocks stay in the pool), an in-place result stays where it
    is. The strategy's index caches are warmed beforehand, outside the pool. A
    ``torch.OutOfMemoryError`` during a conversion stops the load and is reported with its layer.
    Figures are device-wide, above the start (everything else is released first); the result is
    the one ``replay.replay_load`` predicts (``SleepModeLoad.differences``).

    ``layers`` is the number of layers to hold (default ``shape.moe_layers``, a whole rank:
    Qwen3-235B TP4 is 94 layers, 105.75 GiB, which fits a GB200; fewer elsewhere). One difference
    from vLLM: a plain ``MemPool`` on a failed raw allocation may free its own stranded oversize
    segments and retry (allocator rule 6b, the replay's ``default`` pool), while vLLM's CuMem
    allocator reports the first failed allocation as an OOM (the ``sleep`` pool). So
    ``peak_reserved_bytes`` is the figure to compare with the memory a rank has; an OOM here
    implies one there, not conversely. ``RuntimeError`` without CUDA.
    """
    layers = shape.moe_layers if layers is None else layers
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    device = require_cuda("run_load")
    warm_strategy(shape, strategy, device)
    oom_layer, oom_message, reserved_after = None, None, []
    with allocator_max_split_size(max_split_size_mb):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_stats(device)
        base_reserved = torch.cuda.memory_reserved(device)
        base_allocated = torch.cuda.memory_allocated(device)
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool, device=device):
            try:
                weights = [
                    (
                        torch.empty(shape.w13_shape, dtype=torch.bfloat16, device=device),
                        torch.empty(shape.w2_shape, dtype=torch.bfloat16, device=device),
                    )
                    for _ in range(layers)
                ]
            except torch.OutOfMemoryError as exc:
                raise RuntimeError(
                    f"layers ({layers}) x {shape.layer_bytes / 2**30:.2f} GiB of {shape.label} "
                    f"weights do not fit on {device}; hold fewer layers"
                ) from exc
            loaded_reserved = torch.cuda.memory_reserved(device) - base_reserved
            for index in range(layers):
                w13, w2 = weights[index]
                try:
                    weights[index] = convert(w13, w2, strategy=strategy, gated=shape.gated)
                except torch.OutOfMemoryError as exc:
                    oom_layer, oom_message = index, str(exc).splitlines()[0]
                    break
                finally:
                    del w13, w2
                reserved_after.append(torch.cuda.memory_reserved(device) - base_reserved)
            torch.cuda.synchronize(device)
            final_reserved = torch.cuda.memory_reserved(device) - base_reserved
            del weights
        peak_reserved = torch.cuda.max_memory_reserved(device) - base_reserved
        peak_allocated = torch.cuda.max_memory_allocated(device) - base_allocated
        after = torch.cuda.memory_stats(device)
        del pool
        torch.cuda.empty_cache()
    return SleepModeLoad(
        strategy=strategy,
        shape=shape.label,
        layers=layers,
        max_split_size_mb=max_split_size_mb,
        pool=None,
        device_bytes=None,
        other_weights_bytes=0,
        oom_layer=oom_layer,
        oom_message=oom_message,
        loaded_reserved_bytes=loaded_reserved,
        reserved_after_layer=tuple(reserved_after),
        peak_reserved_bytes=peak_reserved,
        peak_allocated_bytes=peak_allocated,
        final_reserved_bytes=final_reserved,
        num_alloc_retries=after["num_alloc_retries"] - before["num_alloc_retries"],
        num_ooms=after["num_ooms"] - before["num_ooms"],
        stranded_segments=None,
    )
