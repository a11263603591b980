"""The format axis: a layer of any format converted through one function, ``convert``, and the
fresh layers every measurement takes, so that measurement, replay, the command line and the
suite never ask which format a layer or a shape is.

A layer is a ``layer.Layer``: a format's named tensors (BF16's ``w13`` bf16 ``[E, M13, H]`` and
``w2`` bf16 ``[E, H, I]``; a quantized format's weights, block scales and biases). A shape names
its format (``LayerShape.format``), whose record (``records.FORMATS``) gives its tensors, its
check, its fresh layers and the strategy every other is held to (``Format.upstream``); a
strategy's record (``registry.REGISTRY``) gives the format of the layer it takes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping

import torch

from ..checks import check_disjoint
from ..nvtx import nvtx_range
from .bf16 import reference
from .layer import TENSOR_NAMES, Layer
from .records import FORMATS, format_record
from .registry import REGISTRY, UNAVAILABLE, Strategy, strategies
from .shape import LayerShape

__all__ = [
    "convert",
    "layer_call",
    "layer_tensors",
    "random_layer",
    "range_name",
    "reference_conversion",
    "strategy_input",
    "strategy_record",
    "taken_shape",
    "warm_layer_strategy",
]


def _record(strategy: str) -> Strategy:
    """``REGISTRY[strategy]``; ``ValueError`` naming what it needs where it cannot run here, or
    the registered strategies where this library has no such strategy."""
    record = REGISTRY.get(strategy)
    if record is not None:
        return record
    missing = UNAVAILABLE.get(strategy)
    if missing is not None:
        raise ValueError(f"strategy {strategy!r} cannot run here: it needs {missing.needs}")
    raise ValueError(
        f"unknown strategy {strategy!r}; valid strategies: {', '.join(sorted(REGISTRY))}"
    )


def convert(
    layer: Layer | Mapping[str, torch.Tensor], *, strategy: str, gated: bool = True
) -> Layer:
    """Convert one layer of any format with the strategy registered as ``strategy``.

    ``layer``: a ``Layer`` (or its tensors by name) of the format the strategy takes
    (``REGISTRY[strategy].takes``: its own, or BF16 for FlashInfer's helpers), in checkpoint
    row order: BF16's ``w13`` bf16 ``[E, 2I, H]`` (``[E, I, H]`` not gated) in ``[w1; w3]``
    order and ``w2`` bf16 ``[E, H, I]``; a quantized format's as ``Layer`` says. Returns a
    ``Layer`` of the strategy's format (BF16's ``[E, 2H/128, 2I, 64]`` and
    ``[E, 2I/128, H, 64]``), byte-identical for every strategy of the format. Whether it holds
    new tensors or views of the input's storage is the strategy's contract
    (``REGISTRY[strategy].inplace``). Bad input raises ``TypeError``/``ValueError`` (the
    format's check) before any byte is written, and so do a ``w13`` and ``w2`` that share
    bytes, for an in-place strategy.

    On CUDA the call is the NVTX range ``moe_convert/<strategy>/<shape>`` (``range_name``).
    """
    record = _record(strategy)
    if record.takes not in FORMATS:
        raise ValueError(
            f"strategy {strategy!r} takes format {record.takes!r}, which has no record; "
            f"formats: {', '.join(FORMATS)} (add its record to formats/records.py)"
        )
    if not isinstance(layer, Layer):
        if not isinstance(layer, Mapping):
            raise TypeError(
                f"layer must be a Layer or its tensors by name, got {type(layer).__name__}"
            )
        unknown = [name for name in layer if name not in TENSOR_NAMES]
        if unknown or "w13" not in layer or "w2" not in layer:
            raise ValueError(
                f"layer holds {', '.join(map(repr, layer))}: a layer's tensors are named "
                f"{', '.join(TENSOR_NAMES)}, w13 and w2 always"
            )
        layer = Layer(**layer)
    fmt = format_record(record.takes)
    check = fmt.check if record.takes == record.format else fmt.quantized_by_check or fmt.check
    check(layer, fmt, gated)
    if record.inplace:  # out-of-place strategies only read their input: overlap is harmless
        check_disjoint(layer.w13, layer.w2)
    with nvtx_range(range_name(strategy, layer), layer.w13.device):
        return record.function(layer, gated)


def range_name(strategy: str, layer: Layer) -> str:
    """``moe_convert/<strategy>/E<E>xH<H>xI<I>``: the NVTX range of one conversion, named by its
    sizes (``convert`` sees tensors, not the catalog's ``model/tpN`` label), from w2
    ``[E, H, I/epi]``: ``moe_convert/legacy/E128xH4096xI384`` for a Qwen3-235B-A22B TP4 layer."""
    experts, hidden, packed = layer.w2.shape
    elements = packed * format_record(REGISTRY[strategy].takes).elements_per_item
    return f"moe_convert/{strategy}/E{experts}xH{hidden}xI{elements}"


def random_layer(shape: LayerShape, device: torch.device | str, *, seed: int = 0) -> Layer:
    """A fresh layer of ``shape`` (``LayerShape.tensor_specs``) on ``device``: random bytes of
    ``seed``, ``torch.empty`` on meta.

    Every byte value occurs (FP8 and e4m3 scales included: conversions move bytes and never
    read them as numbers). New tensors.
    """
    device = torch.device(device)
    gen = None if device.type == "meta" else torch.Generator(device=device).manual_seed(seed)

    def make(dims: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if gen is None:
            return torch.empty(dims, dtype=dtype, device=device)
        itemsize = torch.empty((), dtype=dtype).element_size()
        raw = torch.randint(0, 256, (*dims[:-1], dims[-1] * itemsize), dtype=torch.uint8,
                            device=device, generator=gen)  # fmt: skip
        return raw.view(dtype)

    return Layer(**{name: make(dims, dtype) for name, (dims, dtype) in shape.tensor_specs.items()})


def layer_tensors(shape: LayerShape, device: torch.device | str, *, seed: int = 0) -> Layer:
    """A fresh layer of ``shape`` on ``device``: random bytes of ``seed`` (its format's
    ``inputs``, else ``random_layer``), ``torch.empty`` on meta. New tensors."""
    inputs = shape.fmt.inputs
    if inputs is None:
        return random_layer(shape, device, seed=seed)
    return inputs(shape, device, seed)


def strategy_record(shape: LayerShape, strategy: str) -> Strategy:
    """The record of ``strategy`` among ``shape``'s format's; ``ValueError`` naming the
    format's strategies otherwise."""
    records = strategies(shape.format)
    if strategy not in records:
        raise ValueError(
            f"unknown {shape.fmt.title} strategy {strategy!r} for {shape.label}; valid: "
            f"{', '.join(sorted(records))}"
        )
    return records[strategy]


def taken_shape(shape: LayerShape, strategy: str) -> LayerShape:
    """The shape of the layer ``strategy`` (of ``shape``'s format) takes to make a layer of
    ``shape``: ``shape`` itself, or for a strategy that takes a BF16 layer
    (``Strategy.takes``: FlashInfer's helpers) the BF16 ``LayerShape`` of its E, H, I and
    gating (``w13`` ``[E, M13, H]`` in the checkpoint's ``[w1; w3]`` order, ``w2`` ``[E, H, I]``).
    """
    takes = strategy_record(shape, strategy).takes
    return shape if takes == shape.format else dataclasses.replace(shape, format=takes)


def strategy_input(
    shape: LayerShape, strategy: str, device: torch.device | str, *, seed: int = 0
) -> Layer:
    """A fresh layer of what ``strategy`` takes to make a ``shape`` layer (``taken_shape``):
    ``layer_tensors``' of ``shape`` for a strategy of the format's own layer; for one that
    quantizes a BF16 layer itself, bf16 normal values of ``seed`` (finite: FlashInfer's FP8
    quantizer refuses NaN and inf, which ``layer_tensors``' random bit patterns hold; on meta
    ``torch.empty``). New tensors."""
    taken = taken_shape(shape, strategy)
    device = torch.device(device)
    if taken is shape or device.type == "meta":
        return layer_tensors(taken, device, seed=seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    return Layer(
        *(
            torch.randn(dims, generator=gen, device=device).to(torch.bfloat16)
            for dims in (taken.w13_shape, taken.w2_shape)
        )
    )


# Each CUDA device's private pool, which the strategies' index caches are warmed in.
_CACHES_POOL: dict[torch.device, torch.cuda.MemPool] = {}


def warm_layer_strategy(shape: LayerShape, strategy: str, device: torch.device) -> None:
    """Fill the index caches ``strategy`` keeps per row count and device: one call on a
    1-expert layer of ``shape``'s per-expert geometry (``device``: the tensors'
    ``tensor.device``, ``cuda:0`` not ``cuda``, part of the cache key).

    On CUDA in a pool of the device's own (``torch.cuda.MemPool``): the caches' blocks then
    serve no later request in the default pool, so a conversion or a load allocates as its
    replay does, which is warmed on meta (the H200 run at 7f04b26: caches warmed in the default
    pool served 94 of a load's ``cudaMalloc`` calls; at 5add180, 15 of 54 conversions reserved
    one segment less than their replay; in a pool of their own since, all 54 reserve as
    replayed: docs/gpu.md, runs 3-5)."""
    device = torch.device(device)
    record = strategy_record(shape, strategy)
    if record.not_on_meta and device.type == "meta":
        raise ValueError(
            f"{strategy} cannot run on meta tensors ({record.not_on_meta}): its figures are its "
            "record's formulas, checked on CPU (python -m moe_convert strategies)"
        )
    small = shape.with_experts(1)
    if device.type == "cuda" and device not in _CACHES_POOL:
        _CACHES_POOL[device] = torch.cuda.MemPool()
    pool = _CACHES_POOL.get(device)
    context = contextlib.nullcontext() if pool is None else torch.cuda.use_mem_pool(pool, device)
    with context:
        convert(strategy_input(small, strategy, device), strategy=strategy, gated=small.gated)


def layer_call(shape: LayerShape, strategy: str, device: torch.device | str) -> Callable[[], Layer]:
    """A fresh layer of what ``strategy`` takes (``strategy_input``) on ``device``, the
    strategy's index caches warmed, and one conversion of it to a ``shape`` layer to call: what
    every measurement of a (shape, strategy) takes.

    On CUDA the allocator's cache is emptied before the layer is made, so the layer takes
    segments of its own, as a load's tensors do: none that an earlier measurement freed, whose
    free rest would serve the conversion (the H200 run at 7f04b26: a quantized conversion's peak
    reserved read 0 where its replay reserves 1,134 MiB).
    """
    device = torch.empty(0, device=device).device  # "cuda" -> cuda:0, the caches' key
    warm_layer_strategy(shape, strategy, device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    layer = strategy_input(shape, strategy, device)
    return lambda: convert(layer, strategy=strategy, gated=shape.gated)


def reference_conversion(
    shape: LayerShape, strategy: str | None = None
) -> tuple[str, Callable[[Layer], Layer]]:
    """What every strategy of ``shape``'s format is checked against: its name, and a function of
    a layer (left unchanged) to the bytes every strategy must return. BF16: FlashInfer's helpers
    as vLLM's legacy pipeline called them, where flashinfer-python is installed; otherwise, and
    for every quantized format, the format's ``upstream`` strategy (the engine's path
    transcribed) on a clone. For ``strategy``, one that takes another format's layer
    (``Strategy.takes``): the upstream strategy of what its own quantizer makes of that layer,
    stored as the checkpoint stores it (``Strategy.stored``), a function of the layer it takes.
    """
    fmt = shape.fmt
    record = None if strategy is None else strategy_record(shape, strategy)
    if record is not None and record.takes != fmt.name:

        def upstream_of_stored(layer: Layer) -> Layer:
            stored = record.stored(layer.w13, layer.w2, shape.gated)
            return convert(stored, strategy=fmt.upstream, gated=shape.gated)

        return f"{fmt.upstream} of {record.name}'s own quantizer's layer", upstream_of_stored
    if fmt.name == "bf16" and reference.AVAILABLE:

        def flashinfer(layer: Layer) -> Layer:
            return Layer(*reference.flashinfer_reference(layer.w13, layer.w2, gated=shape.gated))

        return "FlashInfer's helpers", flashinfer
    missing = " (flashinfer-python is not installed)" if fmt.name == "bf16" else ""
    return f"{fmt.upstream}{missing}", lambda layer: convert(
        {name: t.clone() for name, t in layer.items()}, strategy=fmt.upstream, gated=shape.gated
    )
