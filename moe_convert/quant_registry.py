"""The quantized formats' strategy registry: one record per strategy, and ``convert_quant``.

The BF16 registry (``moe_convert.registry``) in the same shape, for functions
``(layer: QuantLayer, gated) -> QuantLayer``. A name is ``<format>-<kind>`` (``nvfp4-legacy``);
every strategy of a format gives the bytes of its ``-legacy`` one, the upstream path transcribed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .checks import check_disjoint
from .formulas import Formula
from .quant_formats import FORMATS, QuantFormat, QuantLayerShape
from .quant_layer import QuantLayer, check_quant_layer, quant_layer_tensors

__all__ = [
    "QUANT_STRATEGIES",
    "QuantStrategy",
    "convert_quant",
    "quant_strategy_call",
    "register_quant",
    "warm_quant_strategy",
]

#: ``(layer, gated) -> converted layer``, the layer already checked by ``check_quant_layer``.
QuantFunction = Callable[[QuantLayer, bool], QuantLayer]


@dataclass(frozen=True)
class QuantStrategy:
    """One registered strategy of one quantized format, and the facts about it.

    ``peak``, ``traffic`` and ``launches`` are exact at full size on ``meta``
    (tests/test_quant_memory.py), in the letters of ``moe_convert.formulas`` evaluated on a
    ``QuantLayerShape``; ``None`` only for an installed engine's adapter whose figures are
    measured, not stated (``moe_convert.engines_quant``).
    """

    name: str
    format: str  # a key of quant_formats.FORMATS
    function: QuantFunction
    inplace: bool  # weights and scales come back as views of the input's storage
    origin: str
    peak: Formula | None  # peak transient bytes, dispatch level, row indices cached
    traffic: Formula | None  # bytes read + written (moe_convert.traffic's rule)
    launches: Formula | None  # data-moving ops of one call

    @property
    def fmt(self) -> QuantFormat:
        return FORMATS[self.format]


#: name -> record; looked up by ``convert_quant`` at call time.
QUANT_STRATEGIES: dict[str, QuantStrategy] = {}


def register_quant(
    name: str,
    *,
    inplace: bool,
    origin: str,
    peak: Formula | None,
    traffic: Formula | None,
    launches: Formula | None,
) -> Callable[[QuantFunction], QuantFunction]:
    """Decorator: register the function as strategy ``name`` (``<format>-<kind>``)."""
    fmt = name.split("-", 1)[0]
    if fmt not in FORMATS:
        raise ValueError(f"strategy {name!r} must start with a format: {', '.join(FORMATS)}")

    def decorate(function: QuantFunction) -> QuantFunction:
        QUANT_STRATEGIES[name] = QuantStrategy(
            name, fmt, function, inplace, origin, peak, traffic, launches
        )
        return function

    return decorate


def convert_quant(layer: QuantLayer, *, strategy: str, gated: bool = True) -> QuantLayer:
    """Convert one quantized layer with strategy ``strategy``, after ``check_quant_layer``.

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
    check_quant_layer(layer, record.fmt, gated=gated)
    if record.inplace:  # out-of-place strategies only read their input: overlap is harmless
        check_disjoint(layer.w13, layer.w2)
    return record.function(layer, gated)


def warm_quant_strategy(shape: QuantLayerShape, strategy: str, device: torch.device) -> None:
    """Fill the index caches ``strategy`` keeps per row count and device: one call on a
    1-expert layer of ``shape``'s per-expert shape (``inputs.warm_strategy``'s rule; ``device``
    the tensors' ``tensor.device``, part of the cache key)."""
    convert_quant(
        quant_layer_tensors(shape.with_experts(1), device), strategy=strategy, gated=shape.gated
    )


def quant_strategy_call(
    shape: QuantLayerShape, strategy: str, device: torch.device | str
) -> Callable[[], QuantLayer]:
    """Fresh tensors of ``shape`` on ``device``, the strategy's index caches warmed
    (``warm_quant_strategy``), and one conversion to call."""
    layer = quant_layer_tensors(shape, device)
    warm_quant_strategy(shape, strategy, layer.w13.device)
    return lambda: convert_quant(layer, strategy=strategy, gated=shape.gated)
