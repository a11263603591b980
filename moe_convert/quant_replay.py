"""The sleep-mode load of a quantized model, replayed through the allocator model.

``replay.replay_load`` for a ``QuantLayerShape`` and a quantized strategy: every layer's tensors
(weights, scales, bf16 biases) loaded, then each layer converted in turn with its trace
(recorded on ``meta`` at full size, indices warmed), and the tensors the result replaces freed:
all of them for an out-of-place strategy, the biases alone for an in-place one (a float32 bias
cannot live in a bf16 one's storage). The result is a ``wholemodel.RankLoad``, as for BF16.
"""

from __future__ import annotations

import functools

from .allocator import Allocator, MiB, OutOfMemory, Pool
from .memory import AllocationTracker
from .quant_formats import QuantLayerShape
from .quant_layer import quant_layer_tensors
from .quant_registry import QUANT_STRATEGIES, convert_quant, quant_strategy_call
from .replay import LayerTrace, WeightsDoNotFit, replay_conversions
from .wholemodel import RankLoad

__all__ = ["quant_layer_trace", "replay_quant_load"]


@functools.cache
def quant_layer_trace(shape: QuantLayerShape, strategy: str) -> LayerTrace:
    """One steady-state conversion of a ``shape`` layer with ``strategy`` on ``meta``: its
    allocations and frees in order, outputs never freed. Cached per (shape, strategy)."""
    quant_strategy_call(shape, strategy, "meta")  # warms the index caches for meta
    layer = quant_layer_tensors(shape, "meta")
    with AllocationTracker() as tracker:
        result = convert_quant(layer, strategy=strategy, gated=shape.gated)
        events = tuple(tracker.events)
    del result
    return LayerTrace(shape, strategy, events)


def _tensor_bytes(shape: QuantLayerShape) -> dict[str, int]:
    """Bytes of each tensor of one loaded layer, biases bf16 as the checkpoint holds them."""
    sizes = {
        "w13": shape.w13_bytes,
        "w2": shape.w2_bytes,
        "w13_scale": shape.w13_scale_bytes,
        "w2_scale": shape.w2_scale_bytes,
        "w13_bias": shape.w13_bias_bytes // 2,
        "w2_bias": shape.w2_bias_bytes // 2,
    }
    return {name: nbytes for name, nbytes in sizes.items() if nbytes}


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
    record = QUANT_STRATEGIES[strategy]
    allocator = Allocator(
        capacity_bytes=device_bytes,
        max_split_size=None if max_split_size_mb is None else max_split_size_mb * MiB,
        pool=pool,
    )
    sizes = _tensor_bytes(shape)
    try:
        params = [
            {name: allocator.malloc(nbytes) for name, nbytes in sizes.items()}
            for _ in range(shape.moe_layers)
        ]
    except OutOfMemory as error:
        raise WeightsDoNotFit(
            f"device_bytes ({device_bytes}) cannot hold the weights: {shape.moe_layers} layers x "
            f"{sum(sizes.values())} bytes ({error}); give a larger device or a larger TP"
        ) from None
    replaced = [n for n in sizes if not record.inplace or n.endswith("bias")]
    return replay_conversions(
        allocator,
        quant_layer_trace(shape, strategy),
        [[blocks[name] for name in replaced] for blocks in params],
        max_split_size_mb=max_split_size_mb,
        other_weights_bytes=0,
    )
