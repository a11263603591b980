"""Whole-rank figures: a rank's load, every MoE layer converted in turn, under vLLM's allocator.

The simplest whole-model figure is one layer's conversion time times ``moe_layers``
(``measuring.timing.whole_model_seconds``; ``LayerTiming`` derives it from its measurement). It
misses what made vLLM's legacy load slow: vLLM's ``Worker.load_model`` sets
``max_split_size_mb:20`` for every load (vLLM #41268), so each 1-10 MiB per-expert temporary
takes a 20 MiB segment that, once free, serves no smaller request again; a full device then
answers new segments only after a failed ``cudaMalloc`` and a release of cached segments
(synchronising ``cudaFree`` calls). Whether a load fits, and what it costs beyond the
conversions, is decided by the caching allocator.

Vocabulary: **the rank load** is every MoE layer's weights allocated (each parameter its own
allocation, after one ballast allocation standing for the rest of the model), then each layer
converted in order, an out-of-place result replacing the layer's parameters (vLLM's
``replace_parameter``). Its result is a ``RankLoad``, **replayed** through the caching-allocator
model (``replay.replay_load``, any machine, full size, in seconds; the CLI's ``replay``) or
**run** on a CUDA device (``run_load``, timed layer by layer); the two compare field by field and
event count by event count. Pools: ``default`` (vLLM's load without sleep mode, PR #45589's
10.7 s -> 2.4 s), ``mempool`` (a ``torch.cuda.MemPool``, what a CUDA box without vLLM can run)
and, replayed only, ``sleep`` (vLLM's sleep-mode CuMem pool). docs/allocator.md has the rules.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields

import torch

from ..formats.catalog import shape_from_label
from ..formats.shape import LayerShape
from ..formats.table import (
    Layer,
    convert,
    strategy_input,
    strategy_record,
    warm_layer_strategy,
)
from ..measuring.memory import require_cuda
from ..nvtx import nvtx_range
from .allocator import MiB, Pool

__all__ = [
    "DEVICE_141GB_BYTES",
    "DEVICE_EVENTS",
    "DEVICE_GB200_BYTES",
    "LOAD_DEVICES",
    "PR45589_BALLAST_BYTES",
    "PR45589_HEADROOM_BYTES",
    "PR45589_LOADED_BYTES",
    "PR45589_SHAPE",
    "REPLAY_ONLY",
    "RUN_ONLY",
    "RUN_POOLS",
    "VLLM_LOAD_MAX_SPLIT_MB",
    "RankLoad",
    "allocator_max_split_size",
    "run_load",
]

#: The allocator's ``max_split_size_mb`` while vLLM loads a model (vLLM #41268): the setting under
#: which the sleep-mode load is replayed and run unless told otherwise.
VLLM_LOAD_MAX_SPLIT_MB = 20

#: vLLM PR #45589's load (10.72 s legacy, 2.39 s preallocated, no sleep mode, on an H20-141GB):
#: a Qwen3-235B-A22B TP4 rank, 109.61 GiB once its weights are loaded; its MoE experts are
#: 105.75 GiB of it, the ballast of ``replay.pr45589_replay`` and of its run the other 3.86.
PR45589_SHAPE = "qwen3-235b-a22b/tp4"
PR45589_LOADED_BYTES = round(109.61 * 2**30)
PR45589_BALLAST_BYTES = PR45589_LOADED_BYTES - shape_from_label(PR45589_SHAPE).model_bytes

#: What a 141 GB device (PR #45589's H20-141GB, an H200) lends PyTorch's allocator while vLLM
#: loads: the H200's 143,771 MiB (docs/gpu.md) less about 0.9 GiB of CUDA context and driver.
#: An estimate for replays; a run measures what its device has free (``RankLoad.device_bytes``).
DEVICE_141GB_BYTES = round(139.5 * 2**30)

#: What a GB200 lends the allocator while vLLM loads, as issue 18 states it: 184 GiB (its HBM3e
#: less the context and driver). An estimate for replays, as ``DEVICE_141GB_BYTES`` is.
DEVICE_GB200_BYTES = 184 * 2**30

#: The two devices a quantized rank's load is replayed on (issue 18), by the name tables give.
LOAD_DEVICES = {"GB200": DEVICE_GB200_BYTES, "H200": DEVICE_141GB_BYTES}

#: What PR #45589's rank had to spare once its weights were loaded (29.89 GiB): the headroom the
#: suite gives every rank it replays, so that every model meets a device as full as that one.
PR45589_HEADROOM_BYTES = DEVICE_141GB_BYTES - PR45589_LOADED_BYTES

#: The pools a load can be run in on a CUDA device (``sleep``, vLLM's CuMem pool, needs vLLM).
RUN_POOLS: tuple[Pool, ...] = ("default", "mempool")

# PyTorch's default max_split_size is SIZE_MAX (no limit); vLLM restores it as this many MiB.
_UNLIMITED_SPLIT_MB = (2**64 - 1) // MiB


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


#: The allocator events a run and a replay both count, as ``torch.cuda.memory_stats()`` names
#: them: what the PR gate compares exactly and what the load-time model prices.
DEVICE_EVENTS = ("num_device_alloc", "num_device_free", "num_alloc_retries")

#: Fields of a ``RankLoad`` only a replay knows (None in a run's), and only a run knows.
REPLAY_ONLY = ("num_device_alloc_failed", "stranded_segments")
RUN_ONLY = ("seconds", "layer_seconds")


@dataclass(frozen=True)
class RankLoad:
    """One rank load: the ballast and every layer's weights allocated, then each layer converted.

    The one result type of the concept, whichever way the load was made: **replayed** through
    the caching-allocator model on any machine (``replay.replay_load``: full size, no GPU) or
    **run** on a CUDA device (``run_load``). Fields mean the same on both sides (bytes and counts
    from the start of the load, the ballast's allocation included; ``REPLAY_ONLY`` fields are
    None in a run, ``RUN_ONLY`` ones in a replay), so the two compare field by field
    (``differences``). The event counts carry ``torch.cuda.memory_stats()``'s names and count
    the conversions' events only (from the end of loading), so the weights' own allocations,
    the same for every strategy, are not in them.
    """

    strategy: str
    shape: str  # LayerShape.label, ``model/tpN``
    layers: int  # layers held and converted in turn
    max_split_size_mb: int | None  # the allocator's setting; None: unlimited (PyTorch's default)
    pool: Pool  # "default", "mempool" (run or replayed) or "sleep" (replayed only)
    device_bytes: int | None  # what the device lends: run: free at the start; None: unbounded
    other_weights_bytes: int  # the ballast: the model's other weights, one allocation, first
    oom_layer: int | None  # 0-based layer whose conversion ran out of memory; None: it loaded
    oom_message: str | None  # the allocator's message (first line); None without an OOM
    loaded_reserved_bytes: int  # once every weight is allocated, before any conversion
    reserved_after_layer: tuple[int, ...]  # after each converted layer (fewer after an OOM)
    peak_reserved_bytes: int  # weights included
    peak_allocated_bytes: int  # weights included
    final_reserved_bytes: int  # at the end, or at the OOM
    num_device_alloc: int  # segments allocated (cudaMalloc) by the conversions
    num_device_free: int  # segments given back (cudaFree, each synchronising the device)
    num_alloc_retries: int  # allocations retried after releasing every cached segment
    num_ooms: int  # 0 or 1: an OOM ends the load
    num_device_alloc_failed: int | None  # replay: cudaMalloc calls refused by the device
    stranded_segments: int | None  # replay: free whole segments >= max_split_size at the end
    seconds: float | None  # run: wall seconds from the first conversion to the last's end
    layer_seconds: tuple[float, ...] | None  # run: per converted layer (CUDA events)

    @property
    def oom(self) -> bool:
        """Whether a layer's conversion ran out of memory."""
        return self.oom_layer is not None

    @property
    def layers_converted(self) -> int:
        """Layers converted before the OOM (``layers`` when the load completed)."""
        return len(self.reserved_after_layer)

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

    def differences(self, other: RankLoad) -> dict[str, tuple[object, object]]:
        """``{field: (self's, other's)}`` for every field that differs, leaving out a field only
        one side can know (``REPLAY_ONLY``, ``RUN_ONLY``) where one side has None: empty when a
        replay predicted a run exactly. The OOM message's wording differs between the two
        allocators, so a replay and a run that both ran out of memory differ there."""
        found = {}
        for field in fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            one_sided = field.name in REPLAY_ONLY + RUN_ONLY
            if mine != theirs and not (one_sided and (mine is None or theirs is None)):
                found[field.name] = (mine, theirs)
        return found


def _loaded_layer(shape: LayerShape, strategy: str, device: torch.device) -> Layer:
    """One layer's tensors as the checkpoint loader leaves them on ``device`` for ``strategy``:
    uninitialised (the bytes do not matter to a layout conversion), each its own allocation, in
    the order and sizes its replay loads them (``formats.strategy_input``' on ``meta``: BF16's
    w13 and w2; a quantized format's weights, scale factors and bf16 biases; the BF16 layer a
    FlashInfer helper quantizes, zeros: its FP8 quantizer refuses NaN). Memory:
    ``shape.layer_bytes``, the BF16 layer's for a helper."""
    quantizes = strategy_record(shape, strategy).takes != shape.format
    make = torch.zeros_like if quantizes else torch.empty_like
    return {
        name: make(t, device=device) for name, t in strategy_input(shape, strategy, "meta").items()
    }


def run_load(
    shape: LayerShape,
    strategy: str,
    *,
    layers: int | None = None,
    max_split_size_mb: int | None = VLLM_LOAD_MAX_SPLIT_MB,
    pool: Pool = "default",
    other_weights_bytes: int = 0,
) -> RankLoad:
    """Run the rank load on the current CUDA device and time it layer by layer.

    Under ``max_split_size_mb`` (``None``: unlimited), in ``pool`` (``RUN_POOLS``: ``default``,
    as vLLM loads without sleep mode, or ``mempool``, a fresh ``torch.cuda.MemPool``): one
    ballast tensor of ``other_weights_bytes`` (the model's other weights), then every layer's
    tensors (``_loaded_layer``, any format's: BF16's w13 and w2, a quantized format's weights,
    scale factors and bf16 biases, converted by ``formats.table.convert`` with a strategy of its
    format), each its own allocation as vLLM's parameters are; then each layer converted in
    order, the result replacing the layer's tensors (the old ones it does not live in freed, as
    vLLM's ``replace_parameter`` does: all of them out of place, in place only a quantized
    layer's bf16 biases, which come back float32), each layer inside the NVTX range
    ``moe_load/<strategy>/<model/tpN>/layer<i>``. No synchronisation between layers: one CUDA
    event after each layer gives ``layer_seconds``, and ``seconds`` is host wall time from the
    first conversion to the end of the last (synchronised). The strategy's index caches are
    warmed beforehand. A ``torch.OutOfMemoryError`` stops the load and is reported with its
    layer.

    ``device_bytes`` is what the device had free at the start (``torch.cuda.mem_get_info``, after
    ``empty_cache``), so ``replay.replay_load`` with the same arguments predicts this run event
    by event (``RankLoad.differences``). ``layers`` defaults to ``shape.moe_layers``, the whole rank
    (Qwen3-235B TP4: 94 layers, 105.75 GiB). Memory: the ballast and ``layers x
    shape.layer_bytes`` of weights, then what the conversions reserve. ``RuntimeError`` without
    CUDA, or when the weights themselves do not fit.
    """
    layers = shape.moe_layers if layers is None else layers
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    if pool not in RUN_POOLS:
        raise ValueError(f"pool {pool!r} cannot be run here: one of {', '.join(RUN_POOLS)}")
    if other_weights_bytes < 0:
        raise ValueError(f"other_weights_bytes ({other_weights_bytes}) must be >= 0")
    device = require_cuda("run_load")
    # in a pool of their own: the load starts on an empty default pool, as its replay does
    warm_layer_strategy(shape, strategy, device)
    oom_layer, oom_message, reserved_after, ends = None, None, [], []
    with allocator_max_split_size(max_split_size_mb):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base_reserved = torch.cuda.memory_reserved(device)
        base_allocated = torch.cuda.memory_allocated(device)
        device_bytes = torch.cuda.mem_get_info(device)[0]
        mempool = torch.cuda.MemPool() if pool == "mempool" else None
        context = (
            torch.cuda.use_mem_pool(mempool, device=device) if mempool else contextlib.nullcontext()
        )
        with context:
            try:
                ballast = torch.empty(other_weights_bytes, dtype=torch.uint8, device=device)
                weights = [_loaded_layer(shape, strategy, device) for _ in range(layers)]
            except torch.OutOfMemoryError as exc:
                raise RuntimeError(
                    f"layers ({layers}) x {shape.layer_bytes / 2**30:.2f} GiB of {shape.label} "
                    f"weights + {other_weights_bytes / 2**30:.2f} GiB ballast do not fit on "
                    f"{device}; hold fewer layers"
                ) from exc
            loaded_reserved = torch.cuda.memory_reserved(device) - base_reserved
            before = torch.cuda.memory_stats(device)  # the events count from here
            start = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            started = time.perf_counter()
            start.record()
            for index in range(layers):
                layer = weights[index]
                try:
                    with nvtx_range(f"moe_load/{strategy}/{shape.label}/layer{index}", device):
                        weights[index] = convert(layer, strategy=strategy, gated=shape.gated)
                except torch.OutOfMemoryError as exc:
                    oom_layer, oom_message = index, str(exc).splitlines()[0]
                    break
                finally:
                    del layer  # the tensors the result replaced are freed here
                ends.append(torch.cuda.Event(enable_timing=True))
                ends[-1].record()
                reserved_after.append(torch.cuda.memory_reserved(device) - base_reserved)
            torch.cuda.synchronize(device)
            seconds = time.perf_counter() - started
            final_reserved = torch.cuda.memory_reserved(device) - base_reserved
            after = torch.cuda.memory_stats(device)  # before anything is freed or released
            del weights, ballast
        peak_reserved = torch.cuda.max_memory_reserved(device) - base_reserved
        peak_allocated = torch.cuda.max_memory_allocated(device) - base_allocated
        del mempool
        torch.cuda.empty_cache()
    marks = [start, *ends]
    return RankLoad(
        strategy=strategy,
        shape=shape.label,
        layers=layers,
        max_split_size_mb=max_split_size_mb,
        pool=pool,
        device_bytes=device_bytes,
        other_weights_bytes=other_weights_bytes,
        oom_layer=oom_layer,
        oom_message=oom_message,
        loaded_reserved_bytes=loaded_reserved,
        reserved_after_layer=tuple(reserved_after),
        peak_reserved_bytes=peak_reserved,
        peak_allocated_bytes=peak_allocated,
        final_reserved_bytes=final_reserved,
        **{key: after[key] - before[key] for key in (*DEVICE_EVENTS, "num_ooms")},
        num_device_alloc_failed=None,
        stranded_segments=None,
        seconds=seconds,
        layer_seconds=tuple(a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(marks)),
    )
