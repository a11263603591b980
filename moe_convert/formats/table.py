"""The format axis: every format's layers through one table, so that measurement, replay, the
command line and the suite never ask which type a layer or a shape is.

A layer is a format plus named tensors, ``dict[str, Tensor]`` in load order: BF16's holds
``w13`` bf16 ``[E, M13, H]`` and ``w2`` bf16 ``[E, H, I]``; a quantized format's its weights,
block scales and biases (``quant_layer.QuantLayer``'s fields, ``None`` ones left out). A shape
names its format (``LayerShape.format``, whose record, ``records.FORMATS``, gives its tensors);
``layer_format(shape)`` is its entry in ``LAYER_FORMATS``, which says how to make a fresh layer
of it, how to convert one, its strategies (``strategies()``: the registry of the format, read
at call time) and its catalog. ``convert_quant`` converts a quantized ``QuantLayer``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..checks import check_bf16_layer, check_disjoint
from .bf16 import reference
from .bf16.inputs import layer_weights
from .bf16.shapes import CATALOG, catalog_shapes, shape_from_label
from .quant.catalog import QUANT_CATALOG, quant_catalog_shapes, quant_shape_from_label
from .quant.layer import QuantLayer, check_quant_layer, quant_layer_tensors
from .records import FORMATS, format_record
from .registry import (
    QUANT_STRATEGIES,
    QUANT_UNAVAILABLE,
    REGISTRY,
    STRATEGIES,
    UNAVAILABLE,
    Strategy,
    convert,
)
from .shape import LayerShape

__all__ = [
    "LAYER_FORMATS",
    "Layer",
    "StrategyRecord",
    "LayerFormat",
    "any_shape_from_label",
    "convert_layer",
    "convert_quant",
    "every_catalog_shape",
    "layer_call",
    "layer_format",
    "layer_tensors",
    "reference_conversion",
    "strategy_input",
    "strategy_record",
    "taken_shape",
    "warm_layer_strategy",
]

#: A strategy's record of any format (``formats.registry.Strategy``).
StrategyRecord = Strategy
#: One layer's tensors by name, in the order a checkpoint loader allocates them.
Layer = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LayerFormat:
    """What the library does with one format's layers; every function takes that format's
    shapes and strategies only."""

    name: str  # a key of records.FORMATS: the record of what its layers hold
    strategies: Callable[[], dict[str, StrategyRecord]]  # name -> record, registered here
    # (shape, device, seed) -> a fresh layer of the shape: random bytes of the seed (meta: empty)
    tensors: Callable[[LayerShape, torch.device | str, int], Layer]
    convert: Callable[[Layer, str, bool], Layer]  # (layer, strategy, gated) -> converted layer
    catalog: Callable[[], list[LayerShape]]  # the catalog's shapes of this format
    catalog_names: tuple[str, ...]  # the catalog's model names of this format
    upstream: str  # the strategy every other must match byte for byte: the engines' own path
    # name -> record of a strategy documented but not registered here (what it ``needs`` is
    # missing: FlashInfer, Triton, an engine)
    unavailable: Callable[[], dict[str, StrategyRecord]] = dict

    @property
    def title(self) -> str:
        """How reports name it: ``BF16``, ``NVFP4``, ... (its record's)."""
        return format_record(self.name).title


def _bf16_tensors(shape: LayerShape, device: torch.device | str, seed: int) -> Layer:
    w13, w2 = layer_weights(shape, device, seed=seed)
    return {"w13": w13, "w2": w2}


def _bf16_convert(layer: Layer, strategy: str, gated: bool) -> Layer:
    record = REGISTRY[strategy]
    if record.format != "bf16":  # a quantized format's strategy that takes a BF16 layer
        check_bf16_layer(layer["w13"], layer["w2"], gated=gated)
        return record.function(layer["w13"], layer["w2"], gated).tensors()
    w13, w2 = convert(layer["w13"], layer["w2"], strategy=strategy, gated=gated)
    return {"w13": w13, "w2": w2}


def _quant_tensors(shape: LayerShape, device: torch.device | str, seed: int) -> Layer:
    return quant_layer_tensors(shape, device, seed=seed).tensors()


def _quant_convert(layer: Layer, strategy: str, gated: bool) -> Layer:
    return convert_quant(QuantLayer(**layer), strategy=strategy, gated=gated).tensors()


def _quant_format(name: str) -> LayerFormat:
    return LayerFormat(
        name,
        lambda: {k: r for k, r in QUANT_STRATEGIES.items() if r.format == name},
        _quant_tensors,
        _quant_convert,
        lambda: [s for s in quant_catalog_shapes() if s.format == name],
        tuple(model for model, spec in QUANT_CATALOG.items() if spec.format == name),
        f"{name}-legacy",
        lambda: {k: r for k, r in QUANT_UNAVAILABLE.items() if r.format == name},
    )


#: Every format of ``records.FORMATS``, in its order: BF16's layers, then the quantized
#: formats' (weights, block scales, biases), one entry each.
LAYER_FORMATS: dict[str, LayerFormat] = {
    "bf16": LayerFormat(
        "bf16",
        lambda: STRATEGIES,
        _bf16_tensors,
        _bf16_convert,
        catalog_shapes,
        tuple(CATALOG),
        "legacy",
        lambda: UNAVAILABLE,
    ),
    **{name: _quant_format(name) for name in FORMATS if name != "bf16"},
}


def layer_format(shape: LayerShape) -> LayerFormat:
    """The entry of ``shape.format``."""
    return LAYER_FORMATS[shape.format]


def layer_tensors(shape: LayerShape, device: torch.device | str, *, seed: int = 0) -> Layer:
    """A fresh layer of ``shape`` on ``device``: random bytes of ``seed``, ``torch.empty`` on
    meta (``inputs.layer_weights``, ``quant_layer.quant_layer_tensors``). New tensors."""
    return layer_format(shape).tensors(shape, device, seed)


def strategy_record(shape: LayerShape, strategy: str) -> StrategyRecord:
    """The record of ``strategy`` among ``shape``'s format's; ``ValueError`` naming the
    format's strategies otherwise."""
    fmt = layer_format(shape)
    records = fmt.strategies()
    if strategy not in records:
        raise ValueError(
            f"unknown {fmt.title} strategy {strategy!r} for {shape.label}; valid: "
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
    return {
        name: torch.randn(dims, generator=gen, device=device).to(torch.bfloat16)
        for name, dims in (("w13", taken.w13_shape), ("w2", taken.w2_shape))
    }


def convert_layer(layer: Layer, *, strategy: str, gated: bool = True) -> Layer:
    """``layer`` (one layer's tensors by name, ``layer_tensors``' form) converted with
    ``strategy`` of any format: the record says which (``REGISTRY[strategy].format``), and the
    checks of the format of the layer it takes (``takes``) run first (``TypeError``/
    ``ValueError`` before any byte is written). Returns the converted tensors by the names of
    the strategy's format: a copy or views of the input as the record says.
    """
    record = REGISTRY.get(strategy)
    if record is None:
        raise ValueError(
            f"unknown strategy {strategy!r}; valid strategies: {', '.join(sorted(REGISTRY))}"
        )
    if record.takes not in LAYER_FORMATS:  # registered by a module whose record is not listed
        raise ValueError(
            f"strategy {strategy!r} takes format {record.takes!r}, which has no record; "
            f"formats: {', '.join(LAYER_FORMATS)} (add its record to formats/records.py)"
        )
    return LAYER_FORMATS[record.takes].convert(layer, strategy, gated)


def convert_quant(layer: QuantLayer, *, strategy: str, gated: bool = True) -> QuantLayer:
    """Convert one quantized layer with strategy ``strategy``, after ``check_quant_layer`` of its
    format's record (``REGISTRY[strategy].format``).

    Bad input raises ``TypeError``/``ValueError`` before any byte is written. Every strategy
    of a format returns the same bytes (``QuantLayer``'s docstring gives the shapes).
    """
    try:
        record = QUANT_STRATEGIES[strategy]
    except KeyError:
        raise ValueError(
            f"unknown strategy {strategy!r}; quantized strategies: "
            f"{', '.join(sorted(QUANT_STRATEGIES))}"
        ) from None
    if record.takes != record.format:
        raise ValueError(
            f"strategy {strategy!r} takes a {record.takes} layer, not a {record.format} one: "
            "convert it with formats.table.convert_layer"
        )
    check_quant_layer(layer, format_record(record.format), gated=gated)
    if record.inplace:  # out-of-place strategies only read their input: overlap is harmless
        check_disjoint(layer.w13, layer.w2)
    return record.function(layer, gated)


def warm_layer_strategy(shape: LayerShape, strategy: str, device: torch.device) -> None:
    """Fill the index caches ``strategy`` keeps per row count and device: one call on a
    1-expert layer of ``shape``'s per-expert geometry (``device``: the tensors'
    ``tensor.device``, ``cuda:0`` not ``cuda``, part of the cache key)."""
    record = strategy_record(shape, strategy)
    if record.not_on_meta and torch.device(device).type == "meta":
        raise ValueError(
            f"{strategy} cannot run on meta tensors ({record.not_on_meta}): its figures are its "
            "record's formulas, checked on CPU (python -m moe_convert strategies)"
        )
    small = shape.with_experts(1)
    layer = strategy_input(small, strategy, device)
    convert_layer(layer, strategy=strategy, gated=small.gated)


def layer_call(shape: LayerShape, strategy: str, device: torch.device | str) -> Callable[[], Layer]:
    """A fresh layer of what ``strategy`` takes (``strategy_input``) on ``device``, the
    strategy's index caches warmed, and one conversion of it to a ``shape`` layer to call: what
    every measurement of a (shape, strategy) takes."""
    layer = strategy_input(shape, strategy, device)
    warm_layer_strategy(shape, strategy, next(iter(layer.values())).device)
    return lambda: convert_layer(layer, strategy=strategy, gated=shape.gated)


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
    fmt = layer_format(shape)
    record = None if strategy is None else strategy_record(shape, strategy)
    if record is not None and record.takes != fmt.name:

        def upstream_of_stored(layer: Layer) -> Layer:
            stored = record.stored(layer["w13"], layer["w2"], shape.gated)
            return convert_layer(stored.tensors(), strategy=fmt.upstream, gated=shape.gated)

        return f"{fmt.upstream} of {record.name}'s own quantizer's layer", upstream_of_stored
    if fmt.name == "bf16" and reference.AVAILABLE:

        def flashinfer(layer: Layer) -> Layer:
            w13, w2 = reference.flashinfer_reference(layer["w13"], layer["w2"], gated=shape.gated)
            return {"w13": w13, "w2": w2}

        return "FlashInfer's helpers", flashinfer
    missing = " (flashinfer-python is not installed)" if fmt.name == "bf16" else ""
    return f"{fmt.upstream}{missing}", lambda layer: convert_layer(
        {name: t.clone() for name, t in layer.items()}, strategy=fmt.upstream, gated=shape.gated
    )


def every_catalog_shape() -> list[LayerShape]:
    """Every catalog shape of every format: BF16's at the usual TPs, then each quantized
    format's at its listed TPs."""
    return [shape for fmt in LAYER_FORMATS.values() for shape in fmt.catalog()]


def any_shape_from_label(label: str) -> LayerShape:
    """The full-size shape of ``label`` (``model/tpN``) of any format's catalog."""
    model = label.rpartition("/tp")[0]
    return quant_shape_from_label(label) if model in QUANT_CATALOG else shape_from_label(label)
