"""Replay the rank load (a whole rank's load and conversion) through the allocator model.

Legend: L MoE layers, T13/T2 bytes of one layer's w13/w2 on this rank.

The trace of one layer's conversion (``layer_trace``) is recorded by ``memory.AllocationTracker``
on ``meta`` at full size, after a warm-up call that fills the strategy's index caches, so it is
the trace of a steady-state layer. It depends only on the layer shape and the strategy.

The whole-rank sequence (``replay_load``) is the way vLLM loads with a post-load conversion:

1. the model's other weights (one allocation of ``other_weights_bytes``), then every layer's w13
   and w2 (``T13``, ``T2``, layer by layer), all alive from then on;
2. each layer converted in turn: its trace replayed with fresh block ids; what the trace leaves
   allocated (an out-of-place strategy's outputs) stays allocated; then, for an out-of-place
   strategy (its record not ``inplace``), the layer's old w13 and w2 are freed, since the result
   replaces the parameters. In-place results live in the parameters' own storage.

Nothing else allocates (no activations, no CUDA context, no NCCL buffers): ``device_bytes`` is
what the device can lend to PyTorch's allocator during the load. The result is a
``wholemodel.RankLoad``, the same type ``wholemodel.run_load`` gives for the load run on a CUDA
device: the replay predicts the run field by field, its allocator events count by count.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .allocator import Allocator, Block, MiB, OutOfMemory, Pool
from .inputs import layer_weights, warm_strategy
from .memory import AllocationTracker, MemoryEvent
from .registry import STRATEGIES, convert
from .shapes import LayerShape, shape_from_label
from .wholemodel import (
    DEVICE_141GB_BYTES,
    DEVICE_EVENTS,
    PR45589_BALLAST_BYTES,
    PR45589_SHAPE,
    VLLM_LOAD_MAX_SPLIT_MB,
    RankLoad,
)

__all__ = [
    "LayerTrace",
    "LoadStep",
    "WeightsDoNotFit",
    "layer_trace",
    "load_rank_weights",
    "load_steps",
    "pr45589_replay",
    "replay_conversions",
    "replay_load",
]


@dataclass(frozen=True)
class LayerTrace:
    """The ordered allocations and frees of one layer's conversion, at full size.

    ``events`` are the tracker's, in call order: ``alloc`` (a new storage of ``nbytes``; a second
    ``alloc`` of a live block is a resize through ``out=`` that grew it by ``nbytes``) and
    ``free``. Blocks allocated and never freed are the strategy's outputs.
    """

    shape: LayerShape
    strategy: str
    events: tuple[MemoryEvent, ...]

    @property
    def output_bytes(self) -> int:
        """Bytes still allocated at the end of the trace: an out-of-place strategy's outputs."""
        live: dict[int, int] = {}
        for event in self.events:
            if event.kind == "alloc":
                live[event.block] = live.get(event.block, 0) + event.nbytes
            else:
                del live[event.block]
        return sum(live.values())


class WeightsDoNotFit(ValueError):
    """The device cannot hold the model's weights before any conversion (a user error)."""


@functools.cache
def layer_trace(shape: LayerShape, strategy: str) -> LayerTrace:
    """Record one steady-state conversion of a ``shape`` layer with ``strategy`` on ``meta``.

    Cached per (shape, strategy): the trace does not depend on the allocator's settings. The
    events are taken before the call's result is released, so outputs are never freed in it.
    """
    w13, w2 = layer_weights(shape, "meta")
    warm_strategy(shape, strategy, w13.device)
    with AllocationTracker() as tracker:
        result = convert(w13, w2, strategy=strategy, gated=shape.gated)
        events = tuple(tracker.events)
    del result
    return LayerTrace(shape, strategy, events)


def _replay_trace(allocator: Allocator, trace: LayerTrace) -> None:
    """Replay one layer's events; blocks left allocated (the outputs) stay allocated."""
    blocks = {}
    requested = {}
    for event in trace.events:
        if event.nbytes == 0:  # an empty storage: PyTorch does not call the allocator
            continue
        if event.kind == "alloc":
            old = blocks.get(event.block)
            if old is None:
                blocks[event.block] = allocator.malloc(event.nbytes)
                requested[event.block] = event.nbytes
            else:  # a storage grown through out=: a new buffer of the whole size, the old freed
                requested[event.block] += event.nbytes
                blocks[event.block] = allocator.malloc(requested[event.block])
                allocator.free(old)
        else:
            allocator.free(blocks.pop(event.block))


#: One allocator call of a load: ``(kind, key, nbytes, layer_done)``; ``kind`` is ``"alloc"`` or
#: ``"free"``, ``key`` names the block, ``nbytes`` is 0 for a free, ``layer_done`` marks the last
#: step of a layer's conversion.
LoadStep = tuple[str, object, int, bool]


def load_steps(shape: LayerShape, strategy: str) -> list[LoadStep]:
    """The allocator calls of ``replay_load``'s load as a flat list, to replay elsewhere.

    Every weight of ``shape.moe_layers`` layers, then each layer's trace (keys ``(layer,
    block)``) followed, out of place, by the free of its old w13 and w2. ``gpu-check`` replays
    the same list in the model and in PyTorch's caching allocator, step by step. Zero-byte
    allocations are kept (PyTorch makes no allocator call for them: skip them when replaying).
    """
    trace = layer_trace(shape, strategy)
    steps: list[LoadStep] = []
    for layer in range(shape.moe_layers):
        steps += [
            ("alloc", ("w13", layer), shape.w13_bytes, False),
            ("alloc", ("w2", layer), shape.w2_bytes, False),
        ]
    for layer in range(shape.moe_layers):
        steps += [(event.kind, (layer, event.block), event.nbytes, False) for event in trace.events]
        if not STRATEGIES[strategy].inplace:
            steps += [("free", ("w13", layer), 0, False), ("free", ("w2", layer), 0, False)]
        kind, key, nbytes, _ = steps[-1]
        steps[-1] = (kind, key, nbytes, True)
    return steps


def replay_load(
    shape: LayerShape,
    strategy: str,
    *,
    max_split_size_mb: int | None,
    pool: Pool,
    device_bytes: int | None,
    other_weights_bytes: int = 0,
) -> RankLoad:
    """Replay the rank load in the model: all ``shape.moe_layers`` layers loaded, then each
    converted with ``strategy``.

    Parameters
    ----------
    shape
        The per-rank layer shape (``layer_shape(model, tp)``); ``shape.moe_layers`` layers.
    strategy
        A registered strategy name.
    max_split_size_mb
        The allocator's setting (vLLM sets 20 while loading), or ``None`` for unlimited.
    pool
        ``"default"`` (vLLM's load without sleep mode: both release steps apply),
        ``"mempool"`` (a ``torch.cuda.MemPool``: only the pool's own oversize blocks are
        released) or ``"sleep"`` (vLLM's sleep-mode pool: the first failed raw allocation is an
        OOM).
    device_bytes
        What the device can lend to the allocator; ``None`` for an unbounded device.
    other_weights_bytes
        The model's non-MoE weights on this rank, allocated first as one tensor.

    Raises ``WeightsDoNotFit`` (a ``ValueError``) when the weights alone do not fit on the
    device, before any conversion is replayed. ``reserved_after_layer`` are the raw samples the
    growth per layer is derived from; every field but the run's seconds is known here.
    """
    allocator, params = load_rank_weights(
        {"w13": shape.w13_bytes, "w2": shape.w2_bytes},
        shape.moe_layers,
        max_split_size_mb=max_split_size_mb,
        pool=pool,
        device_bytes=device_bytes,
        other_weights_bytes=other_weights_bytes,
    )
    # the outputs replace the parameters; in place, the results live in their storage
    freed = [] if STRATEGIES[strategy].inplace else [list(blocks.values()) for blocks in params]
    return replay_conversions(
        allocator,
        layer_trace(shape, strategy),
        freed,
        max_split_size_mb=max_split_size_mb,
        other_weights_bytes=other_weights_bytes,
    )


def load_rank_weights(
    tensor_bytes: dict[str, int],
    layers: int,
    *,
    max_split_size_mb: int | None,
    pool: Pool,
    device_bytes: int | None,
    other_weights_bytes: int,
) -> tuple[Allocator, list[dict[str, Block]]]:
    """A fresh allocator holding a rank's weights: the ballast of ``other_weights_bytes`` (one
    allocation, first, when non-zero), then ``layers`` layers of ``tensor_bytes`` (name -> bytes,
    each tensor its own allocation, in the dict's order), as vLLM's parameters are.

    Returns the allocator and, per layer, ``{name: block}``. The arguments mean what they do for
    ``replay_load``; shared by it and ``quant_replay.replay_quant_load``. Raises
    ``WeightsDoNotFit`` when the weights do not fit ``device_bytes``.
    """
    if other_weights_bytes < 0:
        raise ValueError(f"other_weights_bytes ({other_weights_bytes}) must be >= 0")
    allocator = Allocator(
        capacity_bytes=device_bytes,
        max_split_size=None if max_split_size_mb is None else max_split_size_mb * MiB,
        pool=pool,
    )
    try:
        if other_weights_bytes:
            allocator.malloc(other_weights_bytes)
        params = [
            {name: allocator.malloc(nbytes) for name, nbytes in tensor_bytes.items()}
            for _ in range(layers)
        ]
    except OutOfMemory as error:
        raise WeightsDoNotFit(
            f"device_bytes ({device_bytes}) cannot hold the weights: {layers} layers x "
            f"{sum(tensor_bytes.values())} bytes + other_weights_bytes ({other_weights_bytes}) "
            f"({error}); give a larger device or a larger TP"
        ) from None
    return allocator, params


def replay_conversions(
    allocator: Allocator,
    trace: LayerTrace,
    freed: list,
    *,
    max_split_size_mb: int | None,
    other_weights_bytes: int,
) -> RankLoad:
    """Convert every loaded layer in turn on ``allocator`` (the weights already allocated):
    ``trace`` replayed per layer, then layer ``i``'s blocks in ``freed[i]`` (what the result
    replaces; empty for an in-place strategy) freed, until the first layer that runs out of
    memory. Shared by ``replay_load`` and ``quant_replay.replay_quant_load``.
    """
    shape = trace.shape
    loaded = allocator.stats()  # the events below count from here: the conversions' own
    reserved_after: list[int] = []
    oom_layer = oom_message = None
    for layer in range(shape.moe_layers):
        try:
            _replay_trace(allocator, trace)
        except OutOfMemory as error:
            oom_layer, oom_message = layer, str(error)
            break
        for block in freed[layer] if freed else ():
            allocator.free(block)
        reserved_after.append(allocator.reserved_bytes)
    stats = allocator.stats()
    counted = (*DEVICE_EVENTS, "num_ooms", "num_device_alloc_failed")
    return RankLoad(
        shape=shape.label,
        strategy=trace.strategy,
        max_split_size_mb=max_split_size_mb,
        pool=allocator.pool,
        device_bytes=allocator.capacity_bytes,
        other_weights_bytes=other_weights_bytes,
        layers=shape.moe_layers,
        oom_layer=oom_layer,
        oom_message=oom_message,
        loaded_reserved_bytes=loaded.reserved_bytes,
        reserved_after_layer=tuple(reserved_after),
        peak_reserved_bytes=stats.peak_reserved_bytes,
        peak_allocated_bytes=stats.peak_allocated_bytes,
        final_reserved_bytes=stats.reserved_bytes,
        **{key: getattr(stats, key) - getattr(loaded, key) for key in counted},
        stranded_segments=stats.stranded_segments,
        seconds=None,
        layer_seconds=None,
    )


def pr45589_replay(
    strategy: str,
    *,
    max_split_size_mb: int | None = VLLM_LOAD_MAX_SPLIT_MB,
    pool: Pool = "default",
    device_bytes: int | None = DEVICE_141GB_BYTES,
) -> RankLoad:
    """vLLM PR #45589's load replayed: ``PR45589_SHAPE``'s 94 layers after a ballast that brings
    the rank to its 109.61 GiB, by default without sleep mode under vLLM's setting on a 141 GB
    device (``DEVICE_141GB_BYTES``); give the ``device_bytes`` a run found to predict that run."""
    return replay_load(
        shape_from_label(PR45589_SHAPE),
        strategy,
        max_split_size_mb=max_split_size_mb,
        pool=pool,
        device_bytes=device_bytes,
        other_weights_bytes=PR45589_BALLAST_BYTES,
    )
