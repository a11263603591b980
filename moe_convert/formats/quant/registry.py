"""The quantized formats' side of the one strategy registry (``formats.registry``):
``register_quant``, which reads the format from the name.

For functions ``(layer: QuantLayer, gated) -> QuantLayer``. A name is ``<format>-<kind>``
(``nvfp4-legacy``); every strategy of a format gives the bytes of its ``-legacy`` one, the
upstream path transcribed. The format's record is read when a layer is converted
(``formats.table.convert_quant``): the format modules that define the records register here
first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...formulas import Formula
from ..registry import QUANT_STRATEGIES, Strategy, StrategyFunction, register

__all__ = [
    "QUANT_STRATEGIES",
    "QuantStrategy",
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
    fmt, dash, kind = name.partition("-")
    if not (fmt and dash and kind):
        raise ValueError(f"strategy {name!r} must be named <format>-<kind> (nvfp4-fast)")
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
