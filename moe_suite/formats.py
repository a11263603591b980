"""The formats' titles, in the order the reports show them: ``moe_convert.FORMATS``' names and
``Format.title``s, written again here so that ``moe_bench`` titles and orders a summary's
per-format tables where the library (torch) is not installed. tests/test_metrics.py holds
every title here equal to the library's record. A format the library has and this table does
not yet (a new format's module, before anyone titles it here) is still reported, after these,
under its name (``titled``): the title is the only thing a new format may add here.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FORMAT_TITLES", "titled"]

#: Format name -> its title, BF16 first (``moe_convert.formats.records.FORMATS``' order).
FORMAT_TITLES = {
    "bf16": "BF16",
    "nvfp4": "NVFP4",
    "mxfp4": "MXFP4",
    "fp8": "FP8 per-tensor",
    "fp8block": "DeepSeek block-FP8",
    "mxfp8": "MXFP8",
    "mxint4": "MXINT4",
}


def titled(formats: Iterable[str]) -> list[tuple[str, str]]:
    """``(format, title)`` of each distinct format in ``formats`` (a results frame's column),
    ``FORMAT_TITLES``' order first, then any other in the order met, titled by its name."""
    present = dict.fromkeys(formats)
    known = [(name, title) for name, title in FORMAT_TITLES.items() if name in present]
    return known + [(name, name) for name in present if name not in FORMAT_TITLES]
