"""Human units for asv values: seconds as ns/µs/ms/s, bytes as B/KiB/MiB/GiB/TiB (binary).

Values are stored in asv's units (``seconds``, ``bytes``, ``ratio``, ...); these only choose
how to print them (reports, the gate's tables, the dashboard: ``moe_bench.dashboard`` formats
bytes with ``SCALES["bytes"]`` too) or scale an axis (plots). The display unit of each figure is
``moe_suite.metrics``' ``Metric.display``.
"""

from __future__ import annotations

import math

__all__ = ["SCALES", "scale", "human"]

#: ``(divisor, label)`` steps per scaled unit, largest first.
SCALES = {
    "seconds": ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")),
    "bytes": ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")),
}


def scale(value: float, unit: str) -> tuple[float, str]:
    """``(divisor, label)`` of the largest human unit not above ``value`` (in asv ``unit``).

    ``seconds`` and ``bytes`` are scaled; any other unit is returned as is (``(1.0, unit)``),
    ``ratio`` with an empty label.
    """
    steps = SCALES.get(unit)
    if steps is None:
        return 1.0, "" if unit == "ratio" else unit
    magnitude = abs(value) if math.isfinite(value) else 0.0
    for divisor, label in steps:
        if magnitude >= divisor:
            return divisor, label
    return steps[-1]


def human(value: float, unit: str) -> str:
    """``value`` (in ``unit``) with three significant digits and a human unit; NaN is n/a.

    Counts (a unit that is neither scaled nor ``ratio``: launches, experts, retries) that are
    whole numbers print as integers.

    >>> human(0.048, "seconds"), human(1811939328, "bytes")
    ('48.0 ms', '1.69 GiB')
    >>> human(1.6, "ratio"), human(3, "launches")
    ('1.60', '3 launches')
    """
    if value is None or math.isnan(value):
        return "n/a"
    divisor, label = scale(value, unit)
    scaled = value / divisor
    if (
        unit not in SCALES
        and unit != "ratio"
        and math.isfinite(value)
        and float(value).is_integer()
    ):
        return f"{value:,.0f} {label}"
    digits = (
        0
        if scaled == 0 or not math.isfinite(scaled)
        else max(0, 2 - math.floor(math.log10(abs(scaled))))
    )
    return f"{scaled:.{digits}f} {label}".rstrip()
