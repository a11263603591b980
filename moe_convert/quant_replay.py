"""The load of a quantized model, replayed through the allocator model.

``replay.replay_load`` for a ``QuantLayerShape`` and a quantized strategy, on the same machinery
(``replay.load_rank_weights``, ``replay.replay_conversions``): every layer's tensors (weights,
scales, bf16 biases) loaded, then each layer converted in turn with its trace (recorded on
``meta`` at full size, indices warmed), and the tensors the result replaces freed: those whose
storage the result does not keep (all of them for an out-of-place strategy; the biases alone for
an in-place one, as a float32 bias cannot live in a bf16 one's storage; all but w2's scales for
``fp8block-legacy``, which vLLM clamps in place and returns). The result is a
``wholemodel.RankLoad``, as for BF16. ``quant_rank_load`` is the load as vLLM makes it (the
default pool at ``max_split_size_mb`` 20) on a given device.
"""

from __future__ import annotations

import functools

from .allocator import Pool
from .memory import AllocationTracker
from .quant_formats import QuantLayerShape
from .quant_layer import quant_layer_tensors
from .quant_registry import convert_quant, quant_strategy_call
from .replay import LayerTrace, load_rank_weights, replay_conversions
from .wholemodel import VLLM_LOAD_MAX_SPLIT_MB, RankLoad

__all__ = ["quant_layer_trace", "quant_rank_load", "replay_quant_load"]


@functools.cache
def _meta_conversion(shape: QuantLayerShape, strategy: str) -> tuple[LayerTrace, frozenset[str]]:
    """One full-size conversion on ``meta``: its trace, and the names of the input tensors whose
    storage the result keeps (``QuantLayer`` fields). Cached per (shape, strategy)."""
    quant_strategy_call(shape, strategy, "meta")  # warms the index caches for meta
    layer = quant_layer_tensors(shape, "meta")
    with AllocationTracker() as tracker:
        result = convert_quant(layer, strategy=strategy, gated=shape.gated)
        events = tuple(tracker.events)
    # Meta tensors have no addresses; a storage's C++ object tells whether two tensors share it.
    results = {t.untyped_storage()._cdata for t in result.tensors().values()}
    kept = frozenset(
        name for name, t in layer.tensors().items() if t.untyped_storage()._cdata in results
    )
    del result
    return LayerTrace(shape, strategy, events), kept


def quant_layer_trace(shape: QuantLayerShape, strategy: str) -> LayerTrace:
    """One steady-state conversion of a ``shape`` layer with ``strategy`` on ``meta``: its
    allocations and frees in order, outputs never freed. Cached per (shape, strategy)."""
    return _meta_conversion(shape, strategy)[0]


def _tensor_bytes(shape: QuantLayerShape) -> dict[str, int]:
    """Bytes of each tensor of one loaded layer in ``QuantLayer``'s field order, biases bf16 as
    the checkpoint holds them: ``quant_layer_tensors``' on ``meta``, the tensors
    ``wholemodel.run_load`` allocates when it runs this load on CUDA."""
    return {name: t.nbytes for name, t in quant_layer_tensors(shape, "meta").tensors().items()}


def replay_quant_load(
    shape: QuantLayerShape,
    strategy: str,
    *,
    max_split_size_mb: int | None,
    pool: Pool,
    device_bytes: int | None,
) -> RankLoad:
    """Replay the load of ``shape.moe_layers`` quantized layers, each then converted.

    The arguments mean what they do for ``replay.replay_load`` (the model's other weights are
    left out). ``oom_layer`` is the first layer whose conversion the device cannot serve.
    Raises ``WeightsDoNotFit`` when the weights alone do not fit.
    """
    allocator, params = load_rank_weights(
        _tensor_bytes(shape),
        shape.moe_layers,
        max_split_size_mb=max_split_size_mb,
        pool=pool,
        device_bytes=device_bytes,
        other_weights_bytes=0,
    )
    trace, kept = _meta_conversion(shape, strategy)
    return replay_conversions(
        allocator,
        trace,
        [[b for name, b in blocks.items() if name not in kept] for blocks in params],
        max_split_size_mb=max_split_size_mb,
        other_weights_bytes=0,
    )


def quant_rank_load(shape: QuantLayerShape, strategy: str, device_bytes: int) -> RankLoad:
    """The rank's load as vLLM makes it without sleep mode (the default pool at
    ``VLLM_LOAD_MAX_SPLIT_MB``) on a device lending ``device_bytes`` (``wholemodel.LOAD_DEVICES``),
    replayed: its driver calls, refused ``cudaMalloc`` calls and the layer, if any, that runs out
    of memory. The model's non-MoE weights are left out, so a real rank has less room."""
    return replay_quant_load(
        shape,
        strategy,
        max_split_size_mb=VLLM_LOAD_MAX_SPLIT_MB,
        pool="default",
        device_bytes=device_bytes,
    )
