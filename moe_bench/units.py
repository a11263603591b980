"""Human units for asv values: seconds as ns/µs/ms/s, bytes as B/KiB/MiB/GiB/TiB.

Values are stored in asv's units (``seconds``, ``bytes``, ``ratio``, ...); these only choose
how to print them (reports) or scale an axis (plots).
"""

from __future__ import annotations

import math

__all__ = ["scale", "human"]

_SCALES = {
    "seconds": ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")),
    "bytes": ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")),
}


def scale(value: float, unit: str) -> tuple[float, str]:
    """``(divisor, label)`` of the largest human unit not above ``value`` (in asv ``unit``).

    ``seconds`` and ``bytes`` are scaled; any other unit is returned as is (``(1.0, unit)``),
    ``ratio`` with an empty label.
    """
    steps = _SCALES.get(unit)
    if steps is None:
        return 1.0, "" if unit == "ratio" else unit
    magnitude = abs(value) if math.isfinite(value) else 0.0
    for divisor, label in steps:
        if magnitude >= divisor:
            return divisor, label
    return steps[-1]


def human(value: float, unit: str) -> str:
    """``value`` (in asv ``unit``) with three significant digits and a human unit; NaN is n/a.

    >>> human(0.048, "seconds"), human(1811939328, "bytes"), human(1.6, "ratio")
    ('48.0 ms', '1.69 GiB', '1.60')
    """
    if value is None or math.isnan(value):
        return "n/a"
    divisor, label = scale(value, unit)
    scaled = value / divisor
    digits = 0 if scaled == 0 else max(0, 2 - math.floor(math.log10(abs(scaled))))
    return f"{scaled:.{digits}f} {label}".rstrip()
