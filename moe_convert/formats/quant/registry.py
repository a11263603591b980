"""The quantized formats' side of the one strategy registry (``formats.registry``):
``register_quant``, which reads the format from the name, and ``convert_quant``.

For functions ``(layer: QuantLayer, gated) -> QuantLayer``. A name is ``<format>-<kind>``
(``nvfp4-legacy``); every strategy of a format gives the bytes of its ``-legacy`` one, the
upstream path transcribed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...checks import check_disjoint
from ...formulas import Formula
from ..registry import QUANT_STRATEGIES, Strategy, StrategyFunction, register
from .formats import FORMATS
from .layer import QuantLayer, check_quant_layer

__all__ = [
    "QUANT_STRATEGIES",
    "QuantStrategy",
    "convert_quant",
    "register_quant",
]

#: The one record (``formats.registry.Strategy``), by the name callers of the quantized side use.
QuantStrategy = Strategy


def register_quant(
    name: str,
    *,
    inplace: bool,
    origin: str,
    peak: Formula | None,
    traffic: Formula | None,
    launches: Formula | None,
    **facts: Any,
) -> Callable[[StrategyFunction], StrategyFunction]:
    """Decorator: register the function as strategy ``name`` (``<format>-<kind>``) of that
    format (``formats.registry.register``, which ``facts`` go to: ``needs``, ``available``,
    ``takes``, ...)."""
    fmt = name.split("-", 1)[0]
    if fmt not in FORMATS:
        raise ValueError(f"strategy {name!r} must start with a format: {', '.join(FORMATS)}")
    return register(
        name,
        format=fmt,
        inplace=inplace,
        origin=origin,
        peak=peak,
        traffic=traffic,
        launches=launches,
        **facts,
    )


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
    if record.takes != record.format:
        raise ValueError(
            f"strategy {strategy!r} takes a {record.takes} layer, not a {record.format} one: "
            "convert it with formats.table.convert_layer"
        )
    check_quant_layer(layer, FORMATS[record.format], gated=gated)
    if record.inplace:  # out-of-place strategies only read their input: overlap is harmless
        check_disjoint(layer.w13, layer.w2)
    return record.function(layer, gated)
