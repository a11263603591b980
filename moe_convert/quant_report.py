"""The quantized catalog's peak transient memory per strategy, as docs/formats.md shows it.

``python -m moe_convert.quant_report`` prints the markdown table: per catalog model and TP, the
layer's bytes and each strategy's peak (``QUANT_STRATEGIES[name].peak``, exact on ``meta``;
tests/test_quant_memory.py), upstream first. Nothing is allocated.
"""

from __future__ import annotations

from .quant_formats import quant_catalog_shapes
from .quant_registry import QUANT_STRATEGIES
from .units import format_bytes

__all__ = ["peaks_markdown"]

#: The column order: the upstream path, then this library's.
KINDS = ("legacy", "preallocated", "inplace", "fast")


def peaks_markdown() -> str:
    """One row per quantized catalog shape: its layer bytes and every kind's peak (MiB)."""
    lines = [
        "| model / TP | format | layer (weights + scales + biases) | "
        + " | ".join(f"`-{kind}` peak" for kind in KINDS)
        + " |",
        "|---|---|---|" + "---|" * len(KINDS),
    ]
    for shape in quant_catalog_shapes():
        peaks = [QUANT_STRATEGIES[f"{shape.format}-{kind}"].peak.evaluate(shape) for kind in KINDS]
        cells = [format_bytes(n, unit="MiB", digits=1) for n in (shape.layer_bytes, *peaks)]
        lines.append(f"| {shape.label} | {shape.format} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(peaks_markdown(), end="")
