"""Every format's record, collected from the format modules that define them: ``FORMATS``, in
the order reports show them (BF16, then the quantized formats), and ``format_record``.

A format module defines its record first and its strategies use it directly; this module only
gathers them, so that a record is read by name (``LayerShape.format``, ``Strategy.format``).
Importing a quantized format's module registers its strategies: ``nvfp4-legacy``,
``nvfp4-preallocated`` and ours; ``mxint4-legacy``, ``-preallocated`` and ours; the others'
``-legacy`` and this library's kinds (``quant.shared``).
"""

from __future__ import annotations

from .bf16.format import BF16
from .format import Format
from .quant.fp8 import FP8
from .quant.fp8block import FP8BLOCK
from .quant.mxfp4 import MXFP4
from .quant.mxfp8 import MXFP8
from .quant.mxint4 import MXINT4
from .quant.nvfp4 import NVFP4

__all__ = ["FORMATS", "format_record"]

#: name -> record of every format, in the order reports show them.
FORMATS: dict[str, Format] = {
    fmt.name: fmt for fmt in (BF16, NVFP4, MXFP4, FP8, FP8BLOCK, MXFP8, MXINT4)
}


def format_record(name: str) -> Format:
    """``FORMATS[name]``; ``ValueError`` naming the formats for a name without a record."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown format {name!r}; formats: {', '.join(FORMATS)}") from None
