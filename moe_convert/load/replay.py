"""Replay the rank load (a whole rank's load and conversion) through the allocator model.

Legend: L MoE layers, T13/T2 bytes of one layer's w13/w2 on this rank.

Every format's layer replays alike (``moe_convert.formats.table``): a layer is its named tensors,
BF16's w13 and w2, a quantized format's weights, scale factors and bf16 biases.

The trace of one layer's conversion (``layer_trace``) is recorded by ``memory.AllocationTracker``
on ``meta`` at full size, after a warm-up call that fills the strategy's index caches, so it is
the trace of a steady-state layer. It depends only on the layer shape and the strategy.

The whole-rank sequence (``replay_load``) is the way vLLM loads with a post-load conversion:

1. the model's other weights (one allocation of ``other_weights_bytes``), then every layer's
   tensors (BF16: w13 and w2, ``T13``, ``T2``; layer by layer, each its own allocation), all
   alive from then on;
2. each layer converted in turn: its trace replayed with fresh block ids; what the trace leaves
   allocated (an out-of-place strategy's outputs) stays allocated; then the layer's tensors
   whose storage the result does not keep are freed, since the result replaces the parameters
   (out of place: all of them; in place, BF16's results live in the parameters' own storage,
   and a quantized layer's bf16 biases come back float32 in new storage, ``fp8block-legacy``
   keeping w2's scales, which vLLM clamps in place).

Nothing else allocates (no activations, no CUDA context, no NCCL buffers): ``device_bytes`` is
what the device can lend to PyTorch's allocator during the load. The result is a
``wholemodel.RankLoad``, the same type ``wholemodel.run_load`` gives for the load run on a CUDA
device: the replay predicts the run field by field, its allocator events count by count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..formats.catalog import shape_from_label
from ..formats.layer import Layer
from ..formats.shape import LayerShape
from ..formats.table import convert, strategy_input, warm_layer_strategy
from ..measuring.memory import AllocationTracker, MemoryEvent
from .allocator import Allocator, Block, MiB, OutOfMemory, Pool
from .refit import held_refit_call
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
    "load_steps",
    "pr45589_replay",
    "rank_load",
    "refit_trace",
    "replay_load",
    "replay_rank",
    "replay_step",
    "tensor_bytes",
    "trace_call",
]


@dataclass(frozen=True)
class LayerTrace:
    """The ordered allocations and frees of one layer's conversion (or refit), at full size.

    ``events`` are the tracker's, in call order: ``alloc`` (a new storage of ``nbytes``; a second
    ``alloc`` of a live block is a resize through ``out=`` that grew it by ``nbytes``) and
    ``free``. Blocks allocated and never freed are the strategy's outputs. ``outputs`` says
    where each tensor of the result lives: ``(name, block)``, a block of ``events``, or
    ``(name, given)``, the storage of the tensor named ``given`` of the layer the call was
    given (kept: in place); a tensor of the given layer no output names is replaced (freed
    after the call, ``replay_step``). Empty for a synthetic trace (``_replay_trace`` only).
    """

    shape: LayerShape
    strategy: str
    events: tuple[MemoryEvent, ...]
    outputs: tuple[tuple[str, int | str], ...] = ()

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


def trace_call(
    shape: LayerShape, strategy: str, call: Callable[[], Layer], given: Layer
) -> LayerTrace:
    """Record ``call`` (a layer's conversion or refit, on ``meta`` at full size) on ``given``,
    the layer it works on: its events, taken before its result is released, and where each
    tensor of the result lives (``LayerTrace.outputs``). A result tensor in storage neither
    new nor ``given``'s (a cache made before the call) is no allocation of the layer and is
    left out of ``outputs``."""
    # Meta tensors have no addresses; a storage's C++ object tells whether two tensors share it.
    given_names = {t.untyped_storage()._cdata: name for name, t in given.items()}
    with AllocationTracker() as tracker:
        result = call()
        events = tuple(tracker.events)
        outputs = []
        for name, tensor in result.items():
            # the given layer's storage first: one grown through out= is still that tensor's
            block = given_names.get(tensor.untyped_storage()._cdata, tracker.block_of(tensor))
            if block is not None:
                outputs.append((name, block))
        del result
    return LayerTrace(shape, strategy, events, tuple(outputs))


@functools.cache
def _meta_conversion(shape: LayerShape, strategy: str) -> tuple[LayerTrace, frozenset[str]]:
    """One steady-state conversion of a full-size ``shape`` layer on ``meta``: its trace, and the
    names of the layer's tensors whose storage the result keeps (all of them in place; a
    quantized in-place strategy's bf16 biases come back float32 in new storage; ``fp8block``'s
    upstream path keeps w2's scales, clamped in place). Cached per (shape, strategy)."""
    layer = strategy_input(shape, strategy, "meta")
    warm_layer_strategy(shape, strategy, torch.device("meta"))
    trace = trace_call(
        shape, strategy, lambda: convert(layer, strategy=strategy, gated=shape.gated), layer
    )
    kept = frozenset(given for _, given in trace.outputs if isinstance(given, str))
    return trace, kept


@functools.cache
def refit_trace(shape: LayerShape, strategy: str, way: str) -> LayerTrace:
    """One steady-state refit (``refit.held_refit_call``: ``way`` one of ``refit.REFITS``) of a
    full-size ``shape`` layer converted by ``strategy``, on ``meta``, after a warm-up refit:
    its events and where each output lives in the held layer's storage or new storage. Cached
    per (shape, strategy, way). ``ValueError`` for a refit that cannot run (``refit_call``)."""
    held, call = held_refit_call(shape, strategy, way, "meta")
    call()  # the warm-up: whatever a first refit caches is not a refit's allocation
    return trace_call(shape, strategy, call, held)


def layer_trace(shape: LayerShape, strategy: str) -> LayerTrace:
    """Record one steady-state conversion of a ``shape`` layer (any format) with ``strategy`` on
    ``meta``, after a warm-up call that fills its index caches.

    Cached per (shape, strategy): the trace does not depend on the allocator's settings. The
    events are taken before the call's result is released, so outputs are never freed in it.
    """
    return _meta_conversion(shape, strategy)[0]


def tensor_bytes(shape: LayerShape, strategy: str) -> dict[str, int]:
    """Bytes of each tensor of one loaded layer, in load order: the layer ``strategy`` takes
    (``formats.strategy_input``' on ``meta``: the checkpoint's, or a BF16 one for FlashInfer's
    helpers), what ``wholemodel.run_load`` allocates when it runs the load on CUDA (a test
    checks that it does)."""
    return {name: t.nbytes for name, t in strategy_input(shape, strategy, "meta").items()}


def _replay_trace(allocator: Allocator, trace: LayerTrace) -> dict[int, Block]:
    """Replay one layer's events; blocks left allocated (the outputs) stay allocated and are
    returned by their trace id."""
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
    return blocks


def replay_step(
    allocator: Allocator, trace: LayerTrace, held: dict[str, Block]
) -> dict[str, Block]:
    """One layer's call replayed on the blocks it ``held`` (name -> block): ``trace``'s events,
    then the held blocks no output keeps freed, in ``held``'s order, as the result replaces
    them (vLLM's ``replace_parameter``). Returns the layer's blocks after the call, by output
    name. ``OutOfMemory`` from the allocator leaves ``held`` as it was."""
    alive = _replay_trace(allocator, trace)
    after = {}
    for name, where in trace.outputs:
        block = held.get(where) if isinstance(where, str) else alive.get(where)
        if block is not None:  # None: an empty storage, which the allocator never saw
            after[name] = block
    kept = {id(block) for block in after.values()}
    for block in held.values():
        if id(block) not in kept:
            kept.add(id(block))  # a block two names share is freed once
            allocator.free(block)
    return after


#: One allocator call of a load: ``(kind, key, nbytes, layer_done)``; ``kind`` is ``"alloc"`` or
#: ``"free"``, ``key`` names the block, ``nbytes`` is 0 for a free, ``layer_done`` marks the last
#: step of a layer's conversion.
LoadStep = tuple[str, object, int, bool]


def load_steps(shape: LayerShape, strategy: str) -> list[LoadStep]:
    """The allocator calls of ``replay_load``'s load as a flat list, to replay elsewhere.

    Every tensor of ``shape.moe_layers`` layers (keys ``(name, layer)``), then each layer's
    trace (keys ``(layer, block)``) followed by the free of the tensors its result replaces
    (out of place: all of them). ``gpu-check`` replays the same list in the model and in
    PyTorch's caching allocator, step by step. Zero-byte allocations are kept (PyTorch makes no
    allocator call for them: skip them when replaying).
    """
    trace, kept = _meta_conversion(shape, strategy)
    sizes = tensor_bytes(shape, strategy)
    steps: list[LoadStep] = []
    for layer in range(shape.moe_layers):
        steps += [("alloc", (name, layer), nbytes, False) for name, nbytes in sizes.items()]
    for layer in range(shape.moe_layers):
        steps += [(event.kind, (layer, event.block), event.nbytes, False) for event in trace.events]
        steps += [("free", (name, layer), 0, False) for name in sizes if name not in kept]
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
    converted with ``strategy`` (``replay_rank``'s ``RankLoad``).

    Parameters
    ----------
    shape
        The per-rank layer shape of any format (``layer_shape(model, tp)``);
        ``shape.moe_layers`` layers.
    strategy
        A registered strategy of the shape's format.
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
    return replay_rank(
        shape,
        strategy,
        max_split_size_mb=max_split_size_mb,
        pool=pool,
        device_bytes=device_bytes,
        other_weights_bytes=other_weights_bytes,
    )[2]


def replay_rank(
    shape: LayerShape,
    strategy: str,
    *,
    max_split_size_mb: int | None,
    pool: Pool,
    device_bytes: int | None,
    other_weights_bytes: int = 0,
    padding: LayerTrace | None = None,
) -> tuple[Allocator, list[dict[str, Block]], RankLoad]:
    """``replay_load``'s load (the arguments mean the same), with what a caller replays on
    after it: the allocator and, per layer, the blocks the converted layer holds (name ->
    block), as ``_replay_conversions`` leaves them; then the ``RankLoad``.

    ``padding``: a trace replayed on each layer before its conversion, the layer loaded at its
    shape (vLLM 0.25.1's padding after loading: ``refit_replay.align_trace``); ``None``: loaded
    at ``shape``. ``WeightsDoNotFit`` when the weights alone do not fit.
    """
    loaded, before = (shape, ()) if padding is None else (padding.shape, (padding,))
    allocator, held = _load_rank_weights(
        tensor_bytes(loaded, strategy),
        shape.moe_layers,
        max_split_size_mb=max_split_size_mb,
        pool=pool,
        device_bytes=device_bytes,
        other_weights_bytes=other_weights_bytes,
    )
    load = _replay_conversions(
        allocator,
        (*before, layer_trace(shape, strategy)),
        held,
        max_split_size_mb=max_split_size_mb,
        other_weights_bytes=other_weights_bytes,
    )
    return allocator, held, load


def rank_load(shape: LayerShape, strategy: str, device_bytes: int) -> RankLoad:
    """The rank's load as vLLM makes it without sleep mode (the default pool at
    ``VLLM_LOAD_MAX_SPLIT_MB``) on a device lending ``device_bytes`` (``wholemodel.LOAD_DEVICES``),
    replayed: its driver calls, refused ``cudaMalloc`` calls and the layer, if any, that runs out
    of memory. The model's non-MoE weights are left out, so a real rank has less room."""
    return replay_load(
        shape,
        strategy,
        max_split_size_mb=VLLM_LOAD_MAX_SPLIT_MB,
        pool="default",
        device_bytes=device_bytes,
    )


def _load_rank_weights(
    sizes: dict[str, int],
    layers: int,
    *,
    max_split_size_mb: int | None,
    pool: Pool,
    device_bytes: int | None,
    other_weights_bytes: int,
) -> tuple[Allocator, list[dict[str, Block]]]:
    """A fresh allocator holding a rank's weights: the ballast of ``other_weights_bytes`` (one
    allocation, first, when non-zero), then ``layers`` layers of ``sizes`` (name -> bytes,
    each tensor its own allocation, in the dict's order), as vLLM's parameters are.

    Returns the allocator and, per layer, ``{name: block}``. The arguments mean what they do for
    ``replay_load``. Raises
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
            {name: allocator.malloc(nbytes) for name, nbytes in sizes.items()}
            for _ in range(layers)
        ]
    except OutOfMemory as error:
        raise WeightsDoNotFit(
            f"device_bytes ({device_bytes}) cannot hold the weights: {layers} layers x "
            f"{sum(sizes.values())} bytes + other_weights_bytes ({other_weights_bytes}) "
            f"({error}); give a larger device or a larger TP"
        ) from None
    return allocator, params


def _replay_conversions(
    allocator: Allocator,
    traces: tuple[LayerTrace, ...],
    held: list[dict[str, Block]],
    *,
    max_split_size_mb: int | None,
    other_weights_bytes: int,
) -> RankLoad:
    """Convert every loaded layer in turn on ``allocator`` (the weights already allocated,
    ``held[i]`` layer ``i``'s blocks by name): each of ``traces`` replayed on the layer in
    order (``replay_step``: the conversion; vLLM 0.25.1's padding before it), until the first
    layer that runs out of memory. ``held[i]`` becomes layer ``i``'s blocks after its
    conversion, what a refit starts from. The last trace names the strategy and shape.
    """
    trace = traces[-1]
    shape = trace.shape
    loaded = allocator.stats()  # the events below count from here: the conversions' own
    reserved_after: list[int] = []
    oom_layer = oom_message = None
    for layer in range(shape.moe_layers):
        try:
            for step in traces:
                held[layer] = replay_step(allocator, step, held[layer])
        except OutOfMemory as error:
            oom_layer, oom_message = layer, str(error)
            break
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
