"""The quantized formats' strategy registry: one record per strategy, and ``convert_quant``.

The BF16 registry (``moe_convert.formats.bf16.registry``) in the same shape, for functions
``(layer: QuantLayer, gated) -> QuantLayer``. A name is ``<format>-<kind>`` (``nvfp4-legacy``);
every strategy of a format gives the bytes of its ``-legacy`` one, the upstream path transcribed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...checks import check_disjoint
from ...formulas import Formula
from .formats import FORMATS, QuantFormat
from .layer import QuantLayer, check_quant_layer

__all__ = [
    "QUANT_STRATEGIES",
    "QuantStrategy",
    "convert_quant",
    "register_quant",
]

#: ``(layer, gated) -> converted layer``, the layer already checked by ``check_quant_layer``.
QuantFunction = Callable[[QuantLayer, bool], QuantLayer]


@dataclass(frozen=True)
class QuantStrategy:
    """One registered strategy of one quantized format, and the facts about it.

    ``peak``, ``traffic`` and ``launches`` are exact at full size on ``meta``
    (tests/test_quant_memory.py), in the letters of ``moe_convert.formulas`` evaluated on a
    ``QuantLayerShape``; ``None`` only for an installed engine's adapter whose figures are
    measured, not stated (``moe_convert.formats.quant.engines``).
    """

    name: str
    format: str  # a key of quant_formats.FORMATS
    function: QuantFunction
    inplace: bool  # weights and scales come back as views of the input's storage
    origin: str
    peak: Formula | None  # peak transient bytes, dispatch level, row indices cached
    traffic: Formula | None  # bytes read + written (moe_convert.measuring.traffic's rule)
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
