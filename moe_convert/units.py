"""Human units for the figures the library prints: bytes in binary units, seconds as s/ms/us;
and the byte sizes the formats and the load share (``MiB``, PyTorch's ``kMinLargeAlloc``).

Figures are kept in bytes and seconds; these only format them (``python -m moe_convert``'s
tables and messages, gpu-check's report ``moe_bench.gpucheck.report``). ``moe_bench`` formats
asv results with its own ``moe_bench.units.human``: ``moe_convert`` never imports ``moe_bench``,
and ``moe_bench`` reads results without importing torch; the two agree on binary units.
"""

from __future__ import annotations

__all__ = ["K_MIN_LARGE_ALLOC", "MiB", "format_bytes", "format_seconds"]

MiB = 1 << 20
# CUDACachingAllocator.cpp's kMinLargeAlloc: from here a request gets its own segment
# (``load.allocator`` models it; the formats' strategies size their scratches by it).
K_MIN_LARGE_ALLOC = 10 * MiB

#: ``(label, divisor)`` of the scaled byte units, largest first.
BYTE_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(n: float | None, *, unit: str | None = None, digits: int = 2) -> str:
    """``n`` bytes as ``"1.50 GiB"``; ``"n/a"`` for None.

    ``unit`` None picks the largest of ``BYTE_UNITS`` not above ``n`` (plain ``B`` below 1 KiB);
    a ``unit`` of ``BYTE_UNITS`` fixes it, so that a table column compares like with like.
    ``digits`` decimals.

    >>> format_bytes(3 * 2**29), format_bytes(512), format_bytes(2**30, unit="MiB")
    ('1.50 GiB', '512 B', '1024.00 MiB')
    """
    if n is None:
        return "n/a"
    if unit is None:
        unit = next((label for label, size in BYTE_UNITS if abs(n) >= size), "B")
        if unit == "B":
            return f"{n} B"
    return f"{n / dict(BYTE_UNITS)[unit]:.{digits}f} {unit}"


def format_seconds(s: float) -> str:
    """``s`` seconds in s, ms or us, to 4 significant digits (3 would print 999.6 ms as 1e+03 ms).

    >>> format_seconds(0.0123), format_seconds(2.5e-5)
    ('12.3 ms', '25 us')
    """
    for label, size in (("s", 1.0), ("ms", 1e-3)):
        if s >= size:
            return f"{s / size:.4g} {label}"
    return f"{s / 1e-6:.4g} us"
