"""The formats' titles, in the order the reports show them: ``moe_convert.FORMATS``' names and
``Format.title``s, written again here so that ``moe_bench`` titles and orders a summary's
per-format tables where the library (torch) is not installed. tests/test_metrics.py holds it
equal to the library's records: a format added there is added here.
"""

from __future__ import annotations

__all__ = ["FORMAT_TITLES"]

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
